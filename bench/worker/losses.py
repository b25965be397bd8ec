"""The loss a cell computes: transformers' own (``full``), chunked, or Liger's fused linear CE.

``install(model, kind)`` replaces the causal LM's ``forward`` on that instance, so every
wrapper (peft, DeepSpeed's engine, FSDP2) still calls through it:

- ``full``: transformers' forward unchanged: the LM head over every position, then
  ``ForCausalLMLoss``, which upcasts all logits to fp32 (batch x seq x vocab x 4 bytes, and
  as much again for their gradient).
- ``chunked``: torchtune's chunked output loss (``CEWithChunkedOutputLoss``, 8 chunks of the
  sequence): the LM head and the cross-entropy run per chunk. Each chunk's CE saves only its
  logits (in the compute dtype) and an fp32 logsumexp per row, and recomputes the fp32 softmax
  in backward one chunk at a time (``_ChunkCE``). The fp32 logits of the whole sequence never
  exist at once. With ``compile`` on, each chunk's CE is torchtune's ``compute_cross_entropy``
  (``F.cross_entropy`` over the upcast chunk) compiled with the layers' backend, as torchtune's
  ``compile_loss`` compiles it in place on its chunked loss: inductor's kernels then keep the
  fp32 softmax in registers (sim: bench/worker/sim/fusion.py).
- ``shift``: transformers' forward unchanged, its loss function that of transformers 4.46-4.48
  (``ForCausalLMLoss`` before PR #35646, released in 4.49): the fp32 upcast of the logits, then the
  shifted logits made contiguous, a second fp32 copy of batch x (seq - 1) x vocab, and the
  cross-entropy over it (``shift_loss``). 4.45 and earlier computed the same in the model's forward.
- ``liger``: Liger Kernel's ``LigerFusedLinearCrossEntropyLoss`` on CUDA. Sim mode runs
  ``_FusedLinearCE`` instead, a pure-PyTorch replica of its algorithm (liger_kernel/ops/
  fused_linear_cross_entropy.py): in forward, per chunk of rows (chunk = next power of 2 of
  rows / ceil(vocab / hidden)), logits in the input dtype, their gradient in place, then the
  chunk's input gradient (rows x hidden) and the weight gradient accumulated (vocab x hidden);
  backward only scales the saved gradients. Off CUDA and outside sim it is a skipped record.
"""
from __future__ import annotations

import functools
import types

import torch
import torch.nn.functional as F

CHUNKS = 8  # torchtune's num_output_chunks
IGNORE = -100


def install(model, kind: str, device, compile_backend=None) -> None:
    """Route ``model``'s loss through ``kind`` (knob ``loss``); ``full`` leaves it alone (and
    eager: torchtune's ``compile_loss`` returns a compiled plain loss its recipes discard).
    ``compile_backend``: the ``compile`` knob's backend, which compiles the chunked loss's CE."""
    if kind == "full":
        return
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if kind == "shift":
        base.loss_function = shift_loss
        base._bench_loss = kind
        return
    if kind == "liger" and torch.device(device).type == "cuda":
        from liger_kernel.transformers.fused_linear_cross_entropy import (
            LigerFusedLinearCrossEntropyLoss,
        )
        loss_fn = LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE)

        def head(h, lm_head, y):
            return loss_fn(lm_head.weight, h, y)
    elif kind == "liger":
        def head(h, lm_head, y):
            return _FusedLinearCE.apply(h, lm_head.weight, y)
    elif compile_backend is not None:
        head = functools.partial(chunked_head_loss, ce=torch.compile(compute_cross_entropy, backend=compile_backend))
        base._bench_loss_compiled = True
    else:
        head = chunked_head_loss
    base.forward = types.MethodType(_forward_with(head), base)
    base._bench_loss = kind


def _forward_with(head_loss):
    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        from transformers.modeling_outputs import CausalLMOutputWithPast
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state
        shifted = F.pad(labels, (0, 1), value=IGNORE)[..., 1:]  # as transformers' ForCausalLMLoss
        flat_h = hidden.reshape(-1, hidden.shape[-1])
        loss = head_loss(flat_h, self.lm_head, shifted.reshape(-1))
        return CausalLMOutputWithPast(loss=loss)
    return forward


def shift_loss(logits, labels, vocab_size: int, num_items_in_batch=None, ignore_index: int = IGNORE, **kwargs):
    """transformers 4.48.1's ``ForCausalLMLoss`` (src/transformers/loss/loss_utils.py), line for line."""
    logits = logits.float()
    labels = labels.to(logits.device)
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    shift_logits = shift_logits.view(-1, vocab_size)
    shift_labels = shift_labels.view(-1).to(shift_logits.device)
    reduction = "sum" if num_items_in_batch is not None else "mean"
    loss = F.cross_entropy(shift_logits, shift_labels, ignore_index=ignore_index, reduction=reduction)
    return loss / num_items_in_batch if reduction == "sum" else loss


def compute_cross_entropy(logits, labels):
    """torchtune's ``CEWithChunkedOutputLoss.compute_cross_entropy``: one chunk's summed CE."""
    return F.cross_entropy(logits.float(), labels, ignore_index=IGNORE, reduction="sum")


def chunked_head_loss(hidden, lm_head, labels, ce=None):
    """Mean CE over non-ignored tokens, the LM head and the CE (``ce``, default ``_ChunkCE``)
    computed chunk by chunk (the head called as a module, so ZeRO-3 gathers its weight)."""
    ce = ce or _ChunkCE.apply
    total = hidden.new_zeros((), dtype=torch.float32)
    for h, y in zip(hidden.chunk(CHUNKS), labels.chunk(CHUNKS)):
        total = total + ce(lm_head(h), y)
    return total / (labels != IGNORE).sum().clamp(min=1)


class _ChunkCE(torch.autograd.Function):
    """Summed CE of one chunk's logits: saves the logits (their own dtype) and an fp32
    logsumexp per row; the fp32 softmax exists only inside forward and inside backward."""

    @staticmethod
    def forward(ctx, logits, labels):
        x = logits.float()
        lse = torch.logsumexp(x, dim=-1)
        keep = labels != IGNORE
        picked = x.gather(1, labels.clamp(min=0).unsqueeze(1)).squeeze(1)
        ctx.save_for_backward(logits, lse, labels)
        return ((lse - picked) * keep).sum()

    @staticmethod
    def backward(ctx, grad):
        logits, lse, labels = ctx.saved_tensors
        g = torch.exp(logits.float() - lse.unsqueeze(1))
        g.scatter_add_(1, labels.clamp(min=0).unsqueeze(1), g.new_full((labels.numel(), 1), -1.0))
        g.mul_((labels != IGNORE).unsqueeze(1) * grad)
        return g.to(logits.dtype), None


class _FusedLinearCE(torch.autograd.Function):
    """Liger's fused linear CE, in PyTorch (sim mode's model of the Triton kernel)."""

    @staticmethod
    def forward(ctx, hidden, weight, labels):
        rows, h = hidden.shape
        v = weight.shape[0]
        inc = -(-v // h)
        chunk = 1 << max(0, (-(-rows // inc) - 1).bit_length())  # triton.next_power_of_2(cdiv(rows, inc))
        n_valid = (labels != IGNORE).sum().clamp(min=1)
        grad_in = torch.zeros_like(hidden)
        grad_w = torch.zeros_like(weight) if weight.requires_grad else None
        loss = hidden.new_zeros((), dtype=torch.float32)
        for start in range(0, rows, chunk):
            hc, yc = hidden[start:start + chunk], labels[start:start + chunk]
            logits = hc @ weight.t()  # the chunk's logits, input dtype; the kernel works in place
            x = logits.float()
            lse = torch.logsumexp(x, dim=-1)
            keep = yc != IGNORE
            loss = loss + ((lse - x.gather(1, yc.clamp(min=0).unsqueeze(1)).squeeze(1)) * keep).sum()
            g = torch.exp(x - lse.unsqueeze(1))
            g.scatter_add_(1, yc.clamp(min=0).unsqueeze(1), g.new_full((yc.numel(), 1), -1.0))
            g.mul_(keep.unsqueeze(1) / n_valid)
            logits.copy_(g)
            del x, g
            grad_in[start:start + chunk] = logits @ weight
            if grad_w is not None:
                grad_w.addmm_(logits.t(), hc)
        ctx.save_for_backward(grad_in, grad_w if grad_w is not None else weight.new_empty(0))
        ctx.has_w = grad_w is not None
        return loss / n_valid

    @staticmethod
    def backward(ctx, grad):
        grad_in, grad_w = ctx.saved_tensors
        return grad_in * grad, (grad_w * grad if ctx.has_w else None), None
