"""Progress lines on the worker's stdout, flushed at once: when a worker is killed or times
out, the launcher puts the last of them in the record's ``log_tail``, so it says where the
cell was (which phase of which step). Plain Python: no torch."""
from __future__ import annotations

import sys
import time

_T0 = time.monotonic()


def say(message: str) -> None:
    print(f"[ftmb {time.monotonic() - _T0:7.1f}s] {message}", file=sys.stdout, flush=True)
