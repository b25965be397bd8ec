"""Half-precision matrix products on a CPU that has no half-precision GEMM.

Where oneDNN cannot take bf16 (or fp16) matrix products (no AVX-512 BF16 / FP16: a plain AVX2 CPU),
torch runs them through a scalar fallback that accumulates in fp32 and rounds once at the end, about
a hundred times slower than an fp32 product of the same shape. A cpu cell in bf16 then spends nearly
all its time there (``aten::mm``: 98% of a tiny model's bf16 step).

``install`` registers CPU kernels for ``aten::mm``, ``aten::addmm`` and ``aten::bmm`` that compute
such a product in fp32 and round the result once to the inputs' dtype: the same arithmetic as the
fallback (fp32 accumulation, one rounding), summed in another order. The tensors the memory
tracker sees are unchanged: it records each op's inputs and outputs at the dispatch level, above
the kernel, and the output is a new tensor of the native kernel's shape and dtype; the fp32 copies
live inside the kernel, where a GPU's GEMM keeps its own workspace. Every other dtype runs torch's
own ``.out`` kernel. Nothing is registered where oneDNN takes half precision, nor on a GPU run.
"""
from __future__ import annotations

NOTE = ("bf16/fp16 matrix products (mm, addmm, bmm) computed in fp32 inside the kernel and rounded once "
        "(this CPU has no half-precision GEMM); the tensors tracked are those of torch's own kernel")

_registered: list = []  # the Library object: kernels stay registered while it lives


def slow_dtypes(torch) -> set:
    """The half-precision dtypes whose CPU matrix products take torch's scalar fallback here."""
    ops = torch.ops.mkldnn
    return {dtype for dtype, fast in ((torch.bfloat16, ops._is_mkldnn_bf16_supported()),
                                      (torch.float16, ops._is_mkldnn_fp16_supported())) if not fast}


def install(torch) -> str | None:
    """Register the kernels once in this process; the note for the record, or None when this CPU
    multiplies half precision natively."""
    slow = slow_dtypes(torch)
    if not slow:
        return None
    if _registered:
        return NOTE
    aten = torch.ops.aten
    f32 = torch.float32

    def half(*tensors) -> bool:
        return tensors[0].dtype in slow and all(t.dtype == tensors[0].dtype for t in tensors)

    def mm(a, b):
        if half(a, b):
            out = a.new_empty((a.shape[0], b.shape[1]), dtype=f32)
            return aten.mm.out(a.to(f32), b.to(f32), out=out).to(a.dtype)
        return aten.mm.out(a, b, out=a.new_empty((a.shape[0], b.shape[1])))

    def bmm(a, b):
        if half(a, b):
            out = a.new_empty((a.shape[0], a.shape[1], b.shape[2]), dtype=f32)
            return aten.bmm.out(a.to(f32), b.to(f32), out=out).to(a.dtype)
        return aten.bmm.out(a, b, out=a.new_empty((a.shape[0], a.shape[1], b.shape[2])))

    def addmm(bias, a, b, *, beta=1, alpha=1):
        shape = (a.shape[0], b.shape[1])
        if half(bias, a, b):
            out = a.new_empty(shape, dtype=f32)
            return aten.addmm.out(bias.to(f32), a.to(f32), b.to(f32), beta=beta, alpha=alpha, out=out).to(a.dtype)
        return aten.addmm.out(bias, a, b, beta=beta, alpha=alpha, out=bias.new_empty(shape))

    import warnings
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # "overriding a previously registered kernel": that is the point
        warnings.simplefilter("ignore")
        for name, fn in (("mm", mm), ("bmm", bmm), ("addmm", addmm)):
            lib.impl(name, fn, "CPU")
    _registered.append(lib)
    return NOTE
