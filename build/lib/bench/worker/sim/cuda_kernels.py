"""CUDA kernel choices that change memory, for sim mode's fake-cpu step.

Sim runs the step on fake *cpu* tensors (fake cuda cannot run backward without a driver), so
by default the CPU kernels' choices would be simulated. Two differ from CUDA in memory:

1. Attention. On CPU, ``F.scaled_dot_product_attention`` runs the CPU flash kernel. On CUDA
   (sm80+: A100, H100/H200, L40S, RTX A6000/3090/4090) aten/src/ATen/native/transformers/
   cuda/sdp_utils.cpp picks, in order: cuDNN (sm90/sm100 with cuDNN > 9.15), flash
   (fp16/bf16, no mask, head dim <= 256), memory-efficient (fp32 too, masks), else math.
   ``cuda_sdpa`` routes the call through the CUDA flash op
   (``aten._scaled_dot_product_flash_attention``; its meta kernel gives the shapes). It is
   installed as ``torch.nn.functional.scaled_dot_product_attention`` for the sim run (not as a
   TorchFunctionMode: activation checkpointing recomputes in backward, where function modes
   are not active, and the recomputation must save the same tensors):

   - cuDNN and flash keep the same tensors for backward (output, fp32 logsumexp B x H x L, RNG
     state), measured equal under fake tensors to within the RNG state's bytes.
   - memory-efficient (fp32 inputs, or a mask) keeps the same tensors with the logsumexp
     padded to a multiple of 32 rows (identical for L % 32 == 0), plus the float mask. It takes
     equal head counts only: with a mask transformers repeats the key/value heads itself, and
     the flash op stands in for it; a float mask, when there is one, is converted as
     CUDA does and held until the attention's backward as a saved tensor of the step's graph
     (``hold_for_backward``): under activation checkpointing it is dropped with the layer's
     other saved tensors and recomputed, one layer's mask alive at a time, as on a GPU.
   - math (head dim > 256, grouped-query heads in fp32, or a dtype the fused kernels lack)
     materialises B x H x L x L.
   Not modelled: T4 (sm75) has no flash kernel and no bf16 memory-efficient kernel, so bf16
   attention there falls back to math; verdicts for T4 on bf16 cells say so (bench/estimate/verdicts.py).
   Autocast: CUDA autocast casts SDPA's inputs to the autocast dtype; the routing does the same
   cast, since the CPU autocast key does not cover the CUDA op.
   The CUDA flash op is also what ``torch.utils.flop_counter`` counts; the CPU one it does not.

2. Kernel workspaces. Some CUDA kernels allocate scratch through the caching allocator
   inside the op, invisible to a dispatch-level tracker (and to meta kernels).
   ``workspace_bytes`` gives them; the sim tracker holds them for the length of the op:

   - flash attention backward (PyTorch's vendored flash_api.cpp ``mha_bwd``): softmax_d
     fp32 B x H x round128(Lq), dq_accum fp32 B x round128(Lq) x H x round32(D), and under GQA
     dk/dv expanded to all query heads (B x Lk x H x D each, input dtype) before the sum.
   - bitsandbytes ``gemm_4bit`` (backends/cuda/ops.py ``_dequant_linear_fallback``, taken for
     M > 1536 tokens and by per-arch heuristics below that): the dequantized weight N x K in
     the input dtype and, under double quantization, the fp32 absmax twice (dequantized, then
     plus the offset). Counted always: an upper
     bound where the custom kernel would run instead.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten
F = torch.nn.functional
FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _round(x: int, m: int) -> int:
    return -(-x // m) * m


def cuda_backend(query, key, value, attn_mask, enable_gqa: bool = False) -> str:
    """The SDPA backend an sm80+ GPU would run: 'flash', 'efficient' or 'math'. Grouped-query
    inputs (``enable_gqa``, fewer key/value heads than query heads: transformers passes them so
    when there is no mask) reach flash and cuDNN only: the memory-efficient kernel requires equal
    head counts (sdp_utils.cpp ``check_batch_size_and_num_heads_dense<false>``), so fp32 GQA
    attention runs the math kernel on a GPU (measured on an H200: fp32 Qwen2.5-0.5B and
    Llama-3.2-1B at 2048 tokens hold each layer's B x H x L x L probabilities)."""
    d = query.shape[-1]
    same_d = d == key.shape[-1] == value.shape[-1]
    if attn_mask is None and query.dtype in (torch.float16, torch.bfloat16) and same_d and d <= 256:
        return "flash"  # or cuDNN on sm90+: same saved tensors
    grouped = enable_gqa and query.shape[-3] != key.shape[-3]
    align = 8 if query.dtype in (torch.float16, torch.bfloat16) else 4
    if query.dtype in FUSED_DTYPES and same_d and d % align == 0 and not grouped:
        return "efficient"
    return "math"


def cuda_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):
    """``F.scaled_dot_product_attention`` as CUDA would run it (see module docstring)."""
    if torch.is_autocast_enabled("cpu"):  # stands for CUDA autocast in sim
        dtype = torch.get_autocast_dtype("cpu")
        query, key, value = (t.to(dtype) if t.is_floating_point() else t for t in (query, key, value))
        if attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.to(dtype)
    backend = cuda_backend(query, key, value, attn_mask, enable_gqa)
    with torch.autocast("cpu", enabled=False):
        if backend == "math":
            return aten._scaled_dot_product_attention_math(
                query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]
        held = None
        if attn_mask is not None:
            # convert_boolean_attn_mask: a bool mask becomes a float mask in the query's dtype;
            # memory-efficient attention keeps it for backward
            held = attn_mask
            if attn_mask.dtype == torch.bool:
                held = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill_(attn_mask.logical_not(), float("-inf"))
        if held is not None:
            query, key, value = hold_for_backward(held, query, key, value)
        return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False, scale=scale)[0]


class _Held(torch.autograd.Function):
    """Identity on the attention's inputs whose node saves the float mask as a saved tensor:
    held from the forward until the attention's backward has run (this node's backward comes
    right after it), and seen by ``saved_tensors_hooks``, so activation checkpointing drops it
    with the layer's other saved tensors and recomputes it for backward, as CUDA's
    memory-efficient kernel's saved bias is."""

    @staticmethod
    def forward(ctx, bias, *inputs):
        ctx.save_for_backward(bias)
        return tuple(t.view_as(t) for t in inputs)

    @staticmethod
    def backward(ctx, *grads):
        ctx.saved_tensors  # unpacked, so checkpointing's recomputed copy is released here  # noqa: B018
        return (None, *grads)


def hold_for_backward(bias, *inputs) -> tuple:
    """``inputs`` (query, key, value) as the attention takes them, with ``bias`` kept for its
    backward as a saved tensor (see ``_Held``); unchanged where no graph is recorded."""
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in inputs)):
        return inputs
    return _Held.apply(bias, *inputs)


def _flash_bwd(args, kwargs) -> int:
    q, k = args[1], args[2]  # args[0] is the output's gradient
    b, h, lq, d = q.shape
    lk, hk = k.shape[2], k.shape[1]
    lq_r = _round(lq, 128)
    ws = b * h * lq_r * 4 + b * lq_r * h * _round(d, 32) * 4  # softmax_d, dq_accum
    if hk != h:
        ws += 2 * b * lk * h * d * q.element_size()  # dk, dv expanded to all query heads
    return ws


def _gemm_4bit(args, kwargs) -> int:
    a, shape_b = args[0], args[2]
    nested = kwargs.get("absmax_8bit")  # double quantization: uint8 absmax, dequantized to fp32
    return shape_b[0] * shape_b[1] * a.element_size() + (2 * nested.numel() * 4 if nested is not None else 0)


WORKSPACES = {
    "aten._scaled_dot_product_flash_attention_backward.default": _flash_bwd,
    "bitsandbytes.gemm_4bit.default": _gemm_4bit,
}


_BY_OP: dict = {}  # op overload -> WORKSPACES entry or None: str(op) once per op, not per call


def workspace_bytes(func, args, kwargs) -> int:
    """Scratch bytes the CUDA kernel of ``func`` allocates inside the op (0 if none known)."""
    fn = _BY_OP.get(func, 0)
    if fn == 0:
        fn = _BY_OP[func] = WORKSPACES.get(str(func))
    return fn(args, kwargs or {}) if fn else 0
