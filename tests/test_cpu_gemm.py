"""bf16 matrix products on a CPU without a bf16 GEMM (bench/worker/cpu_gemm.py): the same values as
torch's own kernel to its rounding, and the same tensors in the memory tracker's eyes.

Torch's kernel is compared in a fresh process (the suite's own processes have the kernels installed,
tests/conftest.py); on a CPU that multiplies bf16 natively nothing is installed."""
import json
import subprocess
import sys

import torch

from bench.worker import cpu_gemm

SCRIPT = r"""
import json, sys, torch
from bench.worker import cpu_gemm
from bench.worker.memtrack import MemTracker
torch.manual_seed(0)
bf = torch.bfloat16
a, w, bias = torch.randn(64, 256, dtype=bf), torch.randn(300, 256, dtype=bf), torch.randn(300, dtype=bf)
x, y = torch.randn(4, 16, 256, dtype=bf), torch.randn(4, 256, 16, dtype=bf)
def products():
    return [a @ w.t(), torch.addmm(bias, a, w.t(), beta=0.5, alpha=2.0), torch.bmm(x, y), a.float() @ w.float().t()]
def tracked():
    lin = torch.nn.Linear(256, 300, dtype=bf)
    inp = a.clone().requires_grad_()
    with MemTracker() as t:
        lin(inp).float().pow(2).sum().backward()
    return [e[:3] for e in t.events], t.peak
before, events_before = products(), tracked()
note = cpu_gemm.install(torch) if sys.argv[1] == "install" else None
after, events_after = products(), tracked()
print(json.dumps({"note": note, "same_events": events_before == events_after,
                  "max_ulps": [((p - q).float().abs() / q.float().abs().clamp_min(1e-3) * 128).max().item()
                               for p, q in zip(after, before)],
                  "dtypes": [str(p.dtype) for p in after] == [str(q.dtype) for q in before],
                  "shapes": [list(p.shape) for p in after] == [list(q.shape) for q in before]}))
"""


def run(arg: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, arg], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_products_and_tracked_tensors_are_torch_kernels_own():
    got = run("install")
    assert got["note"] == (cpu_gemm.NOTE if cpu_gemm.slow_dtypes(torch) else None)
    assert got["same_events"], "the tracker saw other storages once the kernels were installed"
    assert got["dtypes"] and got["shapes"]
    # one rounding of the same fp32 sum, in another order: at most one bf16 step apart (1/128 relative)
    assert max(got["max_ulps"]) <= 1.0, got["max_ulps"]
    assert got["max_ulps"][3] == 0  # fp32 runs torch's own kernel

