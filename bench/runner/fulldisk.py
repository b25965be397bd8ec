"""What a failed workflow run says when its disk is full; the Snakefile's ``onerror``.

    from bench.runner import fulldisk
    fulldisk.explain("results")    # lines on stderr; [] when no log names ENOSPC and the disk has room

A rule's log lives on the disk that filled, so Snakemake alone says only "returned non-zero
exit status 1" and the log is empty or ends in the job's last words. This reads each rule log
under ``<results>/logs``: the last line of one that names ENOSPC ("No space left on device")
is said, naming the log (the jobs' own lines name the file they could not write), and when the
disk has almost no room left, one line says so and that a log may be empty. Nothing is written.
Torch-free: it runs in Snakemake's process.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ENOSPC_TEXT = os.strerror(28)   # "No space left on device"
LOW = 64 * 1024                 # bytes free below which a log may have been lost


def explain(results="results", say=None) -> list[str]:
    say = say or (lambda line: print(line, file=sys.stderr))
    lines = []
    logs = Path(results) / "logs"
    for log in sorted(logs.rglob("*.log")) if logs.is_dir() else ():
        last = last_line(log)
        if ENOSPC_TEXT in last:
            lines.append(f"{log}: {last}")
    try:
        free = shutil.disk_usage(results).free
    except OSError:
        free = None
    if free is not None and free < LOW:
        lines.append(f"{results}: {free} bytes free on its disk ({ENOSPC_TEXT}?): a rule log there may be "
                     "empty or cut short; free space and run again")
    for line in lines:
        say(line)
    return lines


def last_line(path: Path, tail: int = 4096) -> str:
    """The last non-blank line of ``path`` (its last ``tail`` bytes), "" if it cannot be read."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - tail))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    rows = [r.strip() for r in text.splitlines() if r.strip()]
    return rows[-1] if rows else ""
