"""Whether an ok sim record agrees with itself: its verdicts and the need it prints, re-derived
from its own fields by the functions that made them (bench/estimate/verdicts.py, loadplan.py,
bench/cells/workloads.py), never restated here. ``disagreements(rec)`` names each field that
contradicts the others; empty when the record agrees with itself. Part of the record gate
(bench/records/checks.problems): a record whose verdict says "fits" while its own modelled
reserved peak exceeds the card's capacity is not an answer. Never raises. Torch-free.

What is re-derived, per kind of ok sim record:

- a single-process step (training or generation): ``modelled_reserved_peak_bytes`` is the
  replay's (``allocator_model.reserved_peak_bytes``); the replay's capacities are
  ``verdicts.capacity`` of ``verdict_gpu_memory_bytes``; a GPU whose capacity holds the
  replay's reserved peak has no failing allocation (bench/estimate/replay.model); ``verdicts``
  are ``verdicts.from_replay``, the load phase's ``verdicts.load_phase``, the paging
  ``verdicts.paging``; the load's ``largest_shard_bytes`` (the host need's load,
  bench/estimate/hostmem.py) is ``loadplan.largest_shard`` of its ``checkpoint_bytes``;
- a sharded step run as one rank runs it (``details.rank_program``: FSDP2 per rank): the replay
  is the rank's, so as for a single-process step, but the verdicts are ``verdicts.from_replay``
  overruled by the load plan's (``verdicts.after_load``), as for any sharded step;
- a sharded step (ZeRO/FSDP, no per-rank trace): the reserved estimate is the partitioned peak
  plus the replay's fragmentation at its peak; ``verdicts`` are ``verdicts.from_estimate``
  overruled by the load plan's (``loadplan.placements`` at the record's world size,
  ``verdicts.after_load``);
- a vLLM plan: each GPU's plan is ``workloads.plan`` of its own figures on that card, and the
  verdict ``workloads.verdict`` of it;
- a sharded step of either kind: each GPU's NCCL buffers (``details.nccl``) are what
  bench/estimate/nccl.py gives for the record's world size and that GPU's interconnect, and the
  verdicts above are judged with them off the capacity;
- every kind: ``details.verdict_reserve_bytes`` is ``verdicts.RESERVE_BYTES`` (the need printed,
  bench/estimate/measures.need_bytes, is the modelled peak plus it, and a rank's NCCL buffers);
- every kind but a vLLM plan: ``details.blas_workspaces`` names every verdict GPU with one of the
  rule's sizes (``verdicts.BLAS_SIZES``), and the capacities above are taken less them.
"""
from __future__ import annotations

from bench.estimate import loadplan, nccl, verdicts
from bench.cells import workloads


def disagreements(rec: dict) -> list[str]:
    """What in an ok sim record contradicts its own numbers (see the module docstring)."""
    if not isinstance(rec, dict) or rec.get("mode") != "sim" or rec.get("status") != "ok":
        return []
    try:
        caps = rec["verdict_gpu_memory_bytes"]
        profiles = {g: {"memory_bytes": b} for g, b in caps.items()}
        details = rec["details"]
        if (rec["knobs"] or {}).get("workload") == "vllm":
            return _vllm(rec, details, caps)
        out = []
        blas = (details.get("blas_workspaces") or {}).get("by_gpu")
        if not isinstance(blas, dict) or set(blas) != set(caps) or any(v not in verdicts.BLAS_SIZES for v in blas.values()):
            return [f"details.blas_workspaces.by_gpu is {blas!r}: not one of {verdicts.BLAS_SIZES} for each of "
                    f"{sorted(caps)}, so the capacities the verdicts were judged on are unknown"]
        profiles = {g: dict(p, blas_workspace_bytes=blas[g]) for g, p in profiles.items()}
        if details.get("verdict_reserve_bytes") != verdicts.RESERVE_BYTES:
            out.append(f"details.verdict_reserve_bytes is {details.get('verdict_reserve_bytes')!r}, the verdicts' "
                       f"reserve is {verdicts.RESERVE_BYTES}: the need printed would not be the one judged")
        model = rec["allocator_model"]
        if not isinstance(model, dict):
            return out + ["allocator_model missing: the replay the verdicts come from is not in the record"]
        if rec["knobs"].get("dist"):
            out += nccl.disagreements(details, rec["world_size"])
            outside = nccl.recorded(details)
            if details.get("rank_program"):
                return out + _replayed(rec, details, model, profiles, per_rank=True, outside=outside)
            return out + _sharded(rec, details, model, profiles, outside)
        return out + _replayed(rec, details, model, profiles)
    except (KeyError, TypeError, AttributeError, ValueError, ZeroDivisionError) as exc:
        return [f"the verdicts cannot be re-derived from the record's own fields ({type(exc).__name__}: {exc})"]


def _differ(name: str, stored, derived) -> list[str]:
    """One line per GPU where a stored {gpu: value} differs from the derived one."""
    if not isinstance(stored, dict):
        return [f"{name} is {stored!r}, its own numbers give {derived!r}"]
    return [f"{name}.{g} is {stored.get(g)!r}, its own numbers give {derived.get(g)!r}"
            for g in sorted(set(stored) | set(derived)) if stored.get(g) != derived.get(g)]


def _replayed(rec: dict, details: dict, model: dict, profiles: dict, per_rank: bool = False,
              outside: dict | None = None) -> list[str]:
    out, outside = [], outside or {}
    reserved = model["reserved_peak_bytes"]
    if rec["modelled_reserved_peak_bytes"] != reserved:
        out.append(f"modelled_reserved_peak_bytes is {rec['modelled_reserved_peak_bytes']!r}, its replay's "
                   f"(allocator_model.reserved_peak_bytes) is {reserved!r}")
    out += _differ("allocator_model.capacity_bytes_by_gpu", model.get("capacity_bytes_by_gpu"),
                   {g: verdicts.capacity(p, outside.get(g, 0)) for g, p in profiles.items()})
    first_oom = model["first_oom"]
    for gpu, prof in profiles.items():
        if gpu not in first_oom:
            out.append(f"allocator_model.first_oom has no entry for {gpu}")
        elif first_oom[gpu] is not None and reserved <= verdicts.capacity(prof, outside.get(gpu, 0)):
            out.append(f"allocator_model.first_oom.{gpu} is a failed allocation, yet the replay's reserved peak "
                       f"{reserved} fits its capacity {verdicts.capacity(prof, outside.get(gpu, 0))}")
    if out:
        return out
    if per_rank:
        out, load_verdicts = _load_plan(rec, details, profiles)
        return out + _differ("verdicts", rec["verdicts"], verdicts.after_load(
            verdicts.from_replay(model, profiles, outside), load_verdicts))
    out += _differ("verdicts", rec["verdicts"], verdicts.from_replay(model, profiles))
    load = details.get("load_phase")
    if isinstance(load, dict):
        out += _differ("details.load_phase.verdicts", load.get("verdicts"),
                       verdicts.load_phase(model, profiles, None)["verdicts"])
        shard = load.get("largest_shard_bytes")
        if shard is not None and shard != loadplan.largest_shard(load["checkpoint_bytes"]):
            out.append(f"details.load_phase.largest_shard_bytes is {shard!r}, its checkpoint_bytes give "
                       f"{loadplan.largest_shard(load['checkpoint_bytes'])!r} (loadplan.largest_shard)")
    out += _differ("details.paging", details.get("paging") or {}, verdicts.paging(model, profiles))
    return out


def _sharded(rec: dict, details: dict, model: dict, profiles: dict, outside: dict) -> list[str]:
    reserved = rec["peak_bytes"] + model["fragmentation_at_peak_bytes"]
    if rec["modelled_reserved_peak_bytes"] != reserved:
        return [f"modelled_reserved_peak_bytes is {rec['modelled_reserved_peak_bytes']!r}, its own peak_bytes plus "
                f"the replay's fragmentation at its peak (allocator_model.fragmentation_at_peak_bytes) is {reserved}"]
    out, load_verdicts = _load_plan(rec, details, profiles)
    derived = verdicts.after_load(verdicts.from_estimate(reserved, rec["peak_bytes"], profiles, outside), load_verdicts)
    return out + _differ("verdicts", rec["verdicts"], derived)


def _load_plan(rec: dict, details: dict, profiles: dict) -> tuple[list[str], dict]:
    """(disagreements, {gpu: load verdict}) of a sharded record's load plan at its world size."""
    out, load_verdicts = [], {}
    load = details.get("load_phase")
    if isinstance(load, dict):
        if load["world_size"] != rec["world_size"]:
            out.append(f"details.load_phase.world_size is {load['world_size']!r}, the record ran {rec['world_size']}")
        plans = loadplan.placements(load["weights_bytes"], load["largest_param_bytes"], load["unit_bytes"],
                                    rec["world_size"], profiles, load.get("checkpoint_bytes"),
                                    load.get("replicated_bytes", 0))
        load_verdicts = plans[load["placement"]]["verdicts"]
        out += _differ("details.load_phase.verdicts", load["verdicts"], load_verdicts)
    return out, load_verdicts


def _vllm(rec: dict, details: dict, caps: dict) -> list[str]:
    plans = details["vllm"]["plans"]
    out = []
    derived = {}
    for gpu, total in caps.items():
        p = plans[gpu]
        again = workloads.plan(total, p["gpu_memory_utilization"], p["weights_bytes"], p["activation_peak_bytes"],
                               p["kv_bytes_per_token"], p["max_model_len"], coresident=p["coresident_bytes"],
                               cuda_graph=p["cuda_graph_bytes"], non_torch=p["non_torch_bytes"],
                               context=p["context_bytes"])
        if again["starts"] != p["starts"] or p["total_bytes"] != total:
            out.append(f"details.vllm.plans.{gpu} says starts={p['starts']!r} on {p['total_bytes']!r} bytes; "
                       f"its own figures on the card's {total} bytes give starts={again['starts']!r}")
        derived[gpu] = workloads.verdict(again)
    return out + _differ("verdicts", rec["verdicts"], derived)
