"""Generation: a prefill of the prompt, then decoding with the KV cache, memory by category.

    generate(spec, device, tracker)            # cpu / cuda: transformers' model.generate, real
    generate(spec, "cpu", tracker, sim=fake)   # sim: the same steps on fake tensors (decode_loop)

The prompt is batch x seq_len random token ids (all real tokens, no padding); ``new_tokens``
(``new<N>``, default 32) are decoded greedily, exactly that many (no end-of-sequence stop).

Why sim runs its own loop: ``model.generate`` decides whether to stop by reading token values
(``unfinished_sequences.max() == 0``), which fake tensors do not have. ``decode_loop`` does what
greedy ``generate`` does step by step, with the model's own forward and a ``DynamicCache``:
prefill with ``logits_to_keep=1``, the last logits copied to fp32, an argmax (a fake one in
sim: a fake tensor of the right shape), the new token appended to the ids, the next forward
on that token alone. tests/test_generate.py checks on cpu that it counts the same bytes as
``model.generate``.

Categories (bench/records/record.py): ``parameters`` (weights), ``kv_cache`` (the cache's K/V
tensors, marked after every forward), ``activations`` (born inside a forward),
``temporaries`` (born between forwards: logits copies, argmax, the growing ids), ``other``
(the prompt). Prefill's peak and decode's peak are each forward's own peak (the tracker's
step peak from one forward's start to the next's).
"""
from __future__ import annotations

import statistics
import time

import torch

from bench.worker import cpuload, models, train
from bench.worker.memtrack import MemTracker
from bench.worker.progress import say
from bench.cells.workloads import DEFAULT_NEW_TOKENS, kv_bytes_per_token


class InferenceTracker(MemTracker):
    """The tracker with a ``kv_cache`` category, and the phases of generation: storages born
    in ``prefill``/``decode`` (inside a forward) are activations, in ``sampling`` temporaries."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.known["kv_cache"] = set()

    def _category(self, serial: int, born: str) -> str:
        for cat in ("kv_cache", "parameters"):
            if serial in self.known[cat]:
                return cat
        return {"prefill": "activations", "decode": "activations", "sampling": "temporaries"}.get(
            born, super()._category(serial, born))


def cache_tensors(cache) -> list:
    return [t for layer in getattr(cache, "layers", []) for t in (getattr(layer, "keys", None),
                                                                  getattr(layer, "values", None))
            if isinstance(t, torch.Tensor)]


class Steps:
    """Forward hooks on the causal LM: phase, timing, KV marking and per-forward peaks."""

    def __init__(self, model, tracker):
        self.tracker, self.peaks, self.times, self._t0 = tracker, [], [], None
        self.kv_bytes = 0  # the cache's K/V bytes after the latest forward
        self.handles = [model.register_forward_pre_hook(self.before, with_kwargs=True),
                        model.register_forward_hook(self.after, with_kwargs=True)]

    def before(self, module, args, kwargs):
        self.close()
        self.tracker.start_step()
        self.tracker.phase = "prefill" if not self.peaks and self._t0 is None else "decode"
        self._t0 = time.perf_counter()

    def after(self, module, args, kwargs, out):
        kv = cache_tensors(getattr(out, "past_key_values", None))
        self.tracker.mark("kv_cache", kv)
        self.kv_bytes = sum(t.untyped_storage().nbytes() for t in kv)
        self.times.append(time.perf_counter() - self._t0)
        self.tracker.phase = "sampling"

    def close(self):
        """End the current forward's span (its peak includes the sampling after it)."""
        if self._t0 is not None and len(self.peaks) < len(self.times):
            self.peaks.append(self.tracker.step_peak)

    def remove(self):
        self.close()
        for h in self.handles:
            h.remove()


def decode_loop(model, ids, new_tokens: int):
    """Greedy decoding as ``generate`` does it, step by step (see the module docstring)."""
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    for i in range(new_tokens):
        logits = out.logits[:, -1, :].to(copy=True, dtype=torch.float32)
        nxt = logits.argmax(-1)
        ids = torch.cat([ids, nxt[:, None]], dim=-1)
        del out, logits
        if i == new_tokens - 1:
            break
        out = model(input_ids=nxt[:, None], past_key_values=cache, use_cache=True)  # noqa: F841 - read next turn
    return ids


def causal_lm(model):
    """The transformers causal LM under a peft wrapper (whose forward hooks see every step)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def generate(spec: dict, device, tracker: InferenceTracker, sim=None, own_loop: bool | None = None) -> dict:
    """Record fields of one generation. ``own_loop`` (default: in sim only) runs ``decode_loop``
    instead of ``model.generate`` (tests compare the two on real tensors)."""
    knobs = spec["knobs"]
    own_loop = bool(sim) if own_loop is None else own_loop
    new = knobs["new_tokens"] or DEFAULT_NEW_TOKENS
    batch, seq = spec["batch_size"], spec["seq_len"]
    with tracker, torch.no_grad():
        say("building the model")
        model = models.build(spec, device, qlora_base=sim.qlora_base if sim else None)
        model.eval()
        tracker.mark("parameters", list(model.parameters()) + list(model.buffers()))
        params = list(model.parameters())
        out = {"load_host_peak_rss_bytes": train.host_peak_rss(),
               "params_total": sum(p.numel() for p in params),
               "params_trainable": sum(p.numel() for p in params if p.requires_grad)}
        build_peak = tracker.reset_peak()
        torch.manual_seed(spec["seed"])
        ids = torch.randint(3, model.config.vocab_size, (batch, seq), device=device)
        steps = Steps(causal_lm(model), tracker)
        say(f"generating {new} tokens after a {batch} x {seq} prompt")
        window = cpuload.Window()  # other load on the machine while generation is timed
        window.__enter__()
        t0 = time.perf_counter()
        if own_loop:
            result = decode_loop(model, ids, new)
        else:
            result = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                                    min_new_tokens=new, do_sample=False, use_cache=True, pad_token_id=0)
        train.synchronize(device)
        wall = time.perf_counter() - t0
        window.__exit__(None, None, None)
        steps.remove()
        assert result.shape == (batch, seq + new), result.shape
        del result, ids
    cached_tokens = batch * (seq + new - 1)  # the last token's K/V is never computed
    kv_final = steps.kv_bytes
    decode_s = steps.times[1:]
    limits = {"layers": model.config.num_hidden_layers, "kv_heads": model.config.num_key_value_heads,
              "head_dim": getattr(model.config, "head_dim", None)
              or model.config.hidden_size // model.config.num_attention_heads}
    dtype_bytes = next(p for p in params if p.is_floating_point()).element_size()
    out.update(
        peak_bytes=tracker.peak, breakdown_bytes=tracker.breakdown(),
        phase_peak_bytes={"prefill": steps.peaks[0], "decode": max(steps.peaks[1:], default=None)},
        step_peak_bytes=steps.peaks, step_s_median=statistics.median(decode_s) if decode_s else None,
        tokens_per_s=batch * new / wall, host_peak_rss_bytes=train.host_peak_rss(),
        details={"workload": "generate", "new_tokens": new, "prompt_tokens": seq, "forwards": len(steps.peaks),
                 "method": "decode_loop (greedy, DynamicCache)" + (" on fake tensors" if sim else "") if own_loop
                 else "transformers model.generate (greedy, DynamicCache)",
                 "kv_cache_final_bytes": kv_final, "kv_cached_tokens": cached_tokens,
                 "kv_bytes_per_token": kv_final / cached_tokens,
                 "kv_bytes_per_token_formula": kv_bytes_per_token(limits, dtype_bytes),
                 "build_peak_bytes": build_peak, "timing_load": window.facts(),
                 "prefill_s": steps.times[0], "decode_s": sum(decode_s), "generate_s": wall,
                 "decode_tokens_per_s": batch * (new - 1) / sum(decode_s) if decode_s else None,
                 "weights_dtype": str(next(p for p in params if p.is_floating_point()).dtype).replace("torch.", "")},
    )
    return out
