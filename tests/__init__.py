"""The test suite (an importable package: shared helpers live in tests/helpers.py)."""
