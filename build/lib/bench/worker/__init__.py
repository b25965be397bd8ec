"""What runs inside a worker process: the training step, the tracker, the models. Imports torch.

Nothing on the parent side (bench/*.py, report/) imports this package; the parent starts
``python -m bench.worker SPEC.json RECORD.json`` (bench/runner/launch.py) and reads back one JSON
record. ``bench.worker.sim`` holds sim mode: the same step under fake tensors.
"""
