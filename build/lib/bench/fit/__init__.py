"""The fit command (bench/cli.py is its command line): its question (question.py: MODEL, Hub id,
--config) as matrix cells (cells.py), the stored answers that stand (stored.py), the answer per
technique, simulated and searched where none stands (answer.py), its table (table.py), the launch
guard's exit status and JSON object (guard.py) and what to change to fit (tofit.py)."""
