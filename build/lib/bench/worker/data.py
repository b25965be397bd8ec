"""Training batches from a seeded generator: random token ids, no data set download.

- fixed: every row is ``seq_len`` tokens (the default).
- padding: variable-length samples, each batch padded to its longest sample, pads masked
  out of attention and loss. Lengths are drawn from one fixed, seeded distribution, so the
  step-wise climb of the peak as longer batches arrive is reproducible.
- padding-growing: padded batches whose longest sample grows step by step to ``seq_len``
  (step k of n is ceil(seq_len * k / n) wide), as a length-sorted sampler or a curriculum
  serves them: each step is longer than the last, the case where the CUDA allocator's
  reserved memory climbs in stairs (bench/estimate/allocator.py).
- packing: the same samples concatenated into full rows of ``seq_len``: no pad tokens.

Each batch is a dict of input_ids, labels, attention_mask plus ``real_tokens`` (tokens that
are not padding), which throughput counts.
"""
from __future__ import annotations

import torch

MIN_LEN = 16


def sample_lengths(gen: torch.Generator, count: int, seq_len: int) -> list[int]:
    """Lengths of ``count`` samples: log-uniform between MIN_LEN and ``seq_len`` (many short, a few long)."""
    lo, hi = torch.log(torch.tensor(float(min(MIN_LEN, seq_len)))), torch.log(torch.tensor(float(seq_len)))
    u = torch.rand(count, generator=gen)
    return [int(x) for x in torch.exp(lo + u * (hi - lo)).round().clamp(1, seq_len)]


def batches(kind: str, batch_size: int, seq_len: int, vocab: int, steps: int, seed: int, device):
    gen = torch.Generator().manual_seed(seed)
    if kind == "fixed":
        for _ in range(steps):
            ids = torch.randint(0, vocab, (batch_size, seq_len), generator=gen)
            yield _to(dict(input_ids=ids, labels=ids.clone(), attention_mask=torch.ones_like(ids)),
                      device, ids.numel())
    elif kind == "padding":
        for _ in range(steps):
            yield _padded(sample_lengths(gen, batch_size, seq_len), vocab, gen, device)
    elif kind == "padding-growing":
        for k in range(1, steps + 1):
            width = -(-seq_len * k // steps)
            lengths = sample_lengths(gen, batch_size, width)
            lengths[0] = width  # the longest sample sets this step's width
            yield _padded(lengths, vocab, gen, device)
    elif kind == "packing":
        stream: list[int] = []
        for _ in range(steps):
            while len(stream) < batch_size * seq_len:
                (n,) = sample_lengths(gen, 1, seq_len)
                stream.extend(torch.randint(1, vocab, (n,), generator=gen).tolist())
            ids = torch.tensor(stream[: batch_size * seq_len]).view(batch_size, seq_len)
            del stream[: batch_size * seq_len]
            yield _to(dict(input_ids=ids, labels=ids.clone(), attention_mask=torch.ones_like(ids)),
                      device, ids.numel())
    else:
        raise ValueError(f"unknown batching {kind!r}")


def _padded(lengths: list[int], vocab: int, gen: torch.Generator, device) -> dict:
    """One batch of samples of these lengths, padded to the longest, pads masked out."""
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(1, vocab, (n,), generator=gen)
        mask[row, :n] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return _to(dict(input_ids=ids, labels=labels, attention_mask=mask), device, sum(lengths))


def _to(batch: dict, device, real_tokens: int) -> dict:
    out = {k: v.to(device) for k, v in batch.items()}
    out["real_tokens"] = real_tokens
    return out


def split(batch: dict, parts: int) -> list[dict]:
    """``parts`` micro-batches of one batch (gradient accumulation)."""
    if parts == 1:
        return [batch]
    tensors = {k: v.chunk(parts) for k, v in batch.items() if k != "real_tokens"}
    return [{k: v[i] for k, v in tensors.items()} for i in range(parts)]
