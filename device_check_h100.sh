#!/usr/bin/env bash
# One GPU session (H100): FSDP2 cells run as their rank 0 alone on the GPU over the fake process
# group (matrix/cuda-h100.yaml), then the cuda-marked one-rank test. $1: pytest -k (default: every cuda cell).
set -u
K=${1:-__h100-80gb__}
export PYTHONPATH=$PWD/.whl/site:$PWD PYTHONUNBUFFERED=1 FT_MEMBENCH_CACHE=/tmp/ftc
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch,transformers,peft,accelerate,bitsandbytes as b;print(torch.__version__,torch.version.cuda,transformers.__version__,peft.__version__,accelerate.__version__,b.__version__)"
start=$(date +%s)
timeout 400 python3 -m pytest bench/test_cells.py --matrix matrix/cuda-h100.yaml -q -p no:cacheprovider \
  -k "$K" --worker-logs /tmp/run/logs --benchmark-json $OUT/cuda-h100.json 2>&1 | tail -30
echo "cells took $(( $(date +%s) - start )) s"
timeout 60 python3 -m pytest -q -m cuda -p no:cacheprovider -x tests/test_one_rank.py -k gpu 2>&1 | tee $OUT/cuda-tests.log | tail -8
tar czf $OUT/logs-traces.tgz -C /tmp/run logs traces 2>/dev/null
ls -la /tmp/run/traces | head -30
echo "all took $(( $(date +%s) - start )) s"
