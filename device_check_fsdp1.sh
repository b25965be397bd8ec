#!/usr/bin/env bash
# One GPU session (H200): FSDP1 cells run as their rank 0 alone on the GPU over the fake process group
# (matrix/cuda-h200-fsdp1.yaml), the real allocator's events reduced (bench/records/cuda_events.py),
# then the cuda-marked tests. Needs .whl/site (bitsandbytes, jsonschema) carried.
set -u
export PYTHONPATH=$PWD/.whl/site:$PWD PYTHONUNBUFFERED=1 FT_MEMBENCH_CACHE=/tmp/ftc
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch,transformers,peft,accelerate,bitsandbytes as b;print(torch.__version__,torch.version.cuda,transformers.__version__,peft.__version__,accelerate.__version__,b.__version__)"
start=$(date +%s)
timeout 330 python3 -m pytest bench/test_cells.py --matrix matrix/cuda-h200-fsdp1.yaml -q -p no:cacheprovider \
  -k __h200__ --worker-logs /tmp/run/logs --benchmark-json $OUT/cuda-h200-fsdp1.json 2>&1 | tail -30
echo "cells took $(( $(date +%s) - start )) s"
ls -la /tmp/run/traces
python3 -m bench.records.cuda_events /tmp/run/events /tmp/run/traces/*.snapshot.pickle
tar czf $OUT/events.tgz -C /tmp/run events 2>/dev/null
tar czf $OUT/logs-traces.tgz -C /tmp/run logs $(cd /tmp/run && ls traces/*.json.gz) 2>/dev/null
ls -la $OUT
timeout 170 python3 -m pytest -q -m cuda -p no:cacheprovider --timeout 120 tests/test_one_rank.py tests/test_cuda.py \
  tests/test_memory_viz.py tests/test_techniques_runs.py tests/test_vllm_sim.py 2>&1 | tee $OUT/cuda-tests.log | tail -25
echo "all took $(( $(date +%s) - start )) s"
