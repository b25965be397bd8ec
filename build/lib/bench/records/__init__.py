"""The record and the results: one record per cell, reading a results folder, atomic writes,
what counts as the same result, run-to-run noise, the rules a record keeps, the package lock.
Torch-free."""
