#!/usr/bin/env bash
# Second GPU call (H200): four FSDP1 rank-0 cells of matrix/cuda-h200-fsdp1.yaml again with the allocator's
# whole history (FT_MEMBENCH_CUDA_HISTORY), reduced to its events (bench/records/cuda_events.py), so the
# allocator model can replay the real allocator's own events. Needs .whl/site carried.
set -u
export PYTHONPATH=$PWD/.whl/site:$PWD PYTHONUNBUFFERED=1 FT_MEMBENCH_CACHE=/tmp/ftc FT_MEMBENCH_CUDA_HISTORY=1500000
start=$(date +%s)
timeout 220 python3 -m pytest bench/test_cells.py --matrix matrix/cuda-h200-fsdp1.yaml -q -p no:cacheprovider \
  -k "h200 and fsdp1 and not b4" --worker-logs /tmp/run/logs --benchmark-json $OUT/cuda-h200-fsdp1-events.json 2>&1 | tail -12
echo "cells took $(( $(date +%s) - start )) s"
python3 -m bench.records.cuda_events /tmp/run/events /tmp/run/traces/*.snapshot.pickle
tar czf $OUT/events.tgz -C /tmp/run events
ls -la $OUT; echo "all took $(( $(date +%s) - start )) s"
