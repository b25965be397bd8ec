"""What became of a cell that did not finish: the exception that says it cannot run here, and
the test that tells an out-of-memory failure from any other. The runners of every mode raise
``Skip``; the worker's entry point (bench/worker/main.py) turns it into a ``skipped`` record
and an exception for which ``is_oom`` holds into an ``oom`` one.
"""
from __future__ import annotations


class Skip(Exception):
    """The cell cannot run here; the reason becomes a ``skipped`` record."""


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is running out of memory: torch's OutOfMemoryError, Python's MemoryError,
    or an error whose message says so (a CUDA or host allocation that failed)."""
    try:
        import torch
        if isinstance(exc, torch.OutOfMemoryError):
            return True
    except ImportError:
        pass
    text = str(exc)
    return isinstance(exc, MemoryError) or "out of memory" in text.lower() or "can't allocate memory" in text
