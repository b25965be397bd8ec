"""python -m bench.worker SPEC.json RECORD.json: run one cell in this process (bench/worker/main.py)."""
import sys

from bench.worker.main import main

sys.exit(main(*sys.argv[1:3]))
