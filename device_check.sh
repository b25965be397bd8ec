#!/usr/bin/env bash
# One GPU session: the cuda cells of matrix/cuda-h200.yaml, then the @pytest.mark.cuda tests.
set -u
export PYTHONPATH=$PWD/.whl/site:$PWD PYTHONUNBUFFERED=1 FT_MEMBENCH_CACHE=/tmp/ftc
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch,transformers,peft,accelerate,bitsandbytes as b;print(torch.__version__,torch.version.cuda,transformers.__version__,peft.__version__,accelerate.__version__,b.__version__)"
start=$(date +%s)
timeout 330 python3 -m pytest bench/test_cells.py --matrix matrix/cuda-h200.yaml -q -p no:cacheprovider \
  --worker-logs /tmp/logs --benchmark-json $OUT/cuda-h200.json 2>&1 | tail -40
echo "cells took $(( $(date +%s) - start )) s"
timeout 170 python3 -m pytest -q -m cuda -p no:cacheprovider -x --timeout 120 tests/test_cuda.py tests/test_memory_viz.py \
  tests/test_techniques_runs.py tests/test_vllm_sim.py 2>&1 | tee $OUT/cuda-tests.log | tail -60
tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null
echo "all took $(( $(date +%s) - start )) s"
