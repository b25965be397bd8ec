"""The ``--dataset`` answer in words, as ``ft-membench fit`` prints it (bench/dataset/command.py makes the
answer; ``--json`` prints it whole)."""
from __future__ import annotations

from bench.dataset import epoch

GiB = 2 ** 30


def _g(b) -> str:
    return f"{b / GiB:.2f} GiB"


def _m(b) -> str:
    mib = b / 2 ** 20
    return f"{mib:.1f} MiB" if mib < 10 else f"{mib:.0f} MiB"


def text(doc: dict) -> str:
    info, ep, cap = doc["dataset"], doc["epoch"], doc["epoch"]["capacity_bytes"]
    world = doc.get("world_size", 1)
    where = (f"on {world} x {doc['gpu']} ({_g(cap)} a rank for the allocator, after {_g(ep['outside_allocator_bytes'])} "
             f"of NCCL buffers), per-device batch" if world > 1 else f"on {doc['gpu']} ({_g(cap)} for the allocator), batch")
    accum = doc.get("accum", 1)
    micro = f" ({accum} micro-batches of {doc['batch'] // accum})" if accum > 1 else ""
    lines = [f"{doc['model']} {doc['technique']} {where} {doc['batch']}{micro}, max_length {doc['max_length']}",
             f"dataset {info['source']}: {info['samples']} samples"
             + (f" ({info['dataset_type']}, tokenized with {info['tokenizer']})" if "tokenizer" in info else "")
             + f"; longest {info['longest']} tokens; {info['truncated_samples']} truncated at {info['max_length']} "
             f"({info['tokens_cut']} tokens cut)",
             f"epoch: {ep['steps']} steps{' a rank' if world > 1 else ''}, {doc['sampling']} sampling"
             + ("" if doc["sampling"] == "packing" else f" (seed {doc['seed']}), "
                + ("each batch's samples in one row, no pads (padding-free)" if doc.get("padding_free")
                   else "each padded to its longest sample"))
             + (f"; {ep['replayed_steps']} of them replayed (the first {epoch.HEAD}, and each step that is the "
                f"longest so far with {epoch.AROUND} on either side; the others are no longer than one before them)"
                if ep["replayed_steps"] < ep["steps"] else "; every step replayed")]
    if world > 1:
        lines.append("ranks: " + "; ".join(
            f"rank {r['rank']} {r['verdict']}" + (f" at step {r['first_oom_step']}" if r["first_oom_step"] is not None
                                                 else f", {_g(r['reserved_peak_bytes'])}") for r in ep["ranks"])
            + f"; rank {ep['rank']} shown (each rank draws its own batches: its own widths, its own allocator)")
    oom = ep["first_oom"]
    if ep["verdict"] == "fits":
        lines.append(f"survives the epoch: reserved climbs to {_g(ep['reserved_peak_bytes'])} of {_g(cap)}")
    elif ep["verdict"] == "tight":
        over = next(s for s in ep["staircase"] if s["reserved_bytes"] > cap)
        lines.append(f"tight: survives the epoch only by releasing the allocator's cache (cudaFree and a synchronize) "
                     f"from step {over['step']} (width {over['width']}) on; on a card big enough it would reserve "
                     f"{_g(ep['reserved_peak_bytes'])}, beyond {_g(cap)}")
    elif oom:
        where = "while the model builds" if oom["during"] else \
            f"at step {oom['step']} (width {oom['width']}; lengths {', '.join(map(str, oom['lengths']))})"
        lines.append(f"oom {where}: {oom['op']} asks {_g(oom['bytes'])} beyond {_g(cap)}")
    else:
        lines.append(f"does not fit: reserved reaches {_g(ep['reserved_peak_bytes'])} of {_g(cap)}")
    p = ep["per_step_allocated"]
    lines.append(f"allocated peak per step: p50 {_g(p['p50'])}, p99 {_g(p['p99'])}, max {_g(p['max'])}")
    lines.append("reserved staircase: " + ", ".join(f"step {s['step']} (width {s['width']}) {_g(s['reserved_bytes'])}"
                                                    for s in epoch.rises(ep["staircase"])))
    if doc["to_change"]:
        lines.append("what to change:")
        for f in doc["to_change"]:
            figure = f" -> {_g(f['reserved_peak_bytes'])}" if f.get("reserved_peak_bytes") else ""
            cut = (f" (cuts {f['samples_cut']} samples, {f['tokens_cut']} tokens, {f['tokens_share']:.1%})"
                   if "samples_cut" in f else "")
            lines.append(f"  {f['change']}{cut}{figure}: {'fits' if f.get('survives') else 'does not fit'}"
                         + (f" ({f['why']})" if f.get("why") else ""))
    host = doc.get("host_data_share")
    if host and "missing" in host:
        lines.append(f"the data's host memory: not modelled ({host['missing']})")
    elif host:
        ph, n = host["phases"], host["ranks_per_node"]
        per = "; ".join(f"{name} {_m(v['rank_bytes'])} a rank" + (f", at most {_m(v['node_bytes'])} on the node's {n}"
                                                                 if n > 1 else "") for name, v in ph.items())
        lines.append(f"the data's host memory ({_m(host['dataset_bytes'])} of JSON lines; modelled from this CPU's "
                     f"measurements of the load paths"
                     + ("" if host["within_measured"] else ", beyond the sizes measured") + f"): {per}")
    need = doc.get("host_need")
    if need:
        data = f" + the data's {_m(need['data_bytes'])} at its larger phase" if need.get("data_bytes") is not None else ""
        judged = ("" if need["given_bytes"] is None else
                  f"; {_g(need['given_bytes'])} given: {'fits' if need['verdict'] == 'fits' else 'does not fit'}")
        lines.append(f"host memory on the node (modelled, an upper bound): {_g(need['need_bytes'])} = the recipe's "
                     f"{_g(need['recipe_bytes'])} (its runtime, and its load or its step's offloaded state){data}{judged}")
    lines.append(f"how: {doc['how']}")
    return "\n".join(lines)
