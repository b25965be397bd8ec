"""The fit command's answer beyond the table: its question (question.py: MODEL, Hub id, --config),
the launch guard's exit status and JSON object (guard.py) and what to change to fit (tofit.py)."""
