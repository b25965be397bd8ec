"""Run one cell in this (fresh) process and write its record.

    python -m bench.worker SPEC.json RECORD.json

SPEC.json is one cell spec from bench.cells.matrix. The JSON files the cell is built from (model
config, DeepSpeed config) are read once into a private folder and digested there
(bench/cells/inputs.pin): a digest that is not the spec's ``inputs_sha256`` is an ``error`` record,
and ``details.inputs_read_sha256`` says what was read. RECORD.json receives the run record
(bench/records/record.py), written atomically; the same JSON is the last line of stdout. Failures
inside the step are data: an out-of-memory error gives status ``oom``, any other exception
``error`` with its last line. The worker exits 0 whenever it wrote a record.

Environment set here, before torch starts: PYTORCH_CUDA_ALLOC_CONF (expandable-segments),
and the rank variables for a single-process DeepSpeed/FSDP run.

Under torchrun (a cell with world size N > 1, started by bench/runner/launch.py) each rank runs
this same code on its own micro-batches and writes ``RECORD.json.rank<k>`` (and its pid
beside it) instead; the launcher merges them (bench/runner/ranks.py). A rank whose record is not
``ok`` exits 1 so that torchrun stops the others, which would otherwise wait in a
collective for ever.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.estimate import verdicts
from bench.records import atomic, record
from bench.runner import lifeline, ranks
from bench.cells import inputs
from bench.worker import alloctrace
from bench.worker.outcome import Skip, is_oom
from bench.worker.progress import say


def main(spec_path: str, out_path: str) -> int:
    started = time.time()
    lifeline.die_with_parent()  # under torchrun the parent is its agent; alone, the launcher
    spec = json.loads(open(spec_path).read())
    say(f"cell {spec['cell']} ({spec['mode']})")
    rank = int(os.environ["RANK"]) if ranks.multirank(spec) and "RANK" in os.environ else None
    if rank is not None:
        ranks.pid_path(out_path, rank).write_text(str(os.getpid()))
        out_path = ranks.rank_path(out_path, rank)
    if spec["knobs"]["alloc_conf"]:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = spec["knobs"]["alloc_conf"]
    rec = record.blank(spec)
    rec["started_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    read = {}
    try:
        with tempfile.TemporaryDirectory(prefix="ftmb-inputs-") as pinned:
            run_spec = inputs.pin(spec, pinned)  # what is built is what is digested, or InputsChanged
            read = run_spec.pop("_read_sha256")
            rec.update(run(run_spec))
        rec["details"]["inputs_read_sha256"] = read
        write_trace(rec, out_path)  # the allocation trace beside the record, not in it
        rec["status"], rec["reason"] = "ok", ""
    except Skip as exc:
        rec["status"], rec["reason"] = "skipped", str(exc)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a record
        beyond_sim = sim_cannot_run(exc) if spec["mode"] == "sim" else ""
        rec["status"] = "skipped" if beyond_sim else "oom" if is_oom(exc) else "error"
        rec["reason"] = record.one_line(f"{beyond_sim}{type(exc).__name__}: {exc}")
        rec["log_tail"] = log_tail(traceback.format_exc())
        rec["details"].update(getattr(exc, "details", {}))  # facts gathered before it failed
        if read:
            rec["details"]["inputs_read_sha256"] = read
    if rank is not None:
        rec["details"]["rank"] = rank
    rec["versions"] = versions()
    rec["machine"] = machine(spec)
    rec["wall_s"] = round(time.time() - started, 3)
    if rec["status"] != "ok":
        rec["host_peak_rss_bytes"] = host_rss_or_none()
    say(f"record: {rec['status']} {rec['reason']}".rstrip())
    try:
        atomic.write_json(out_path, rec)
    except OSError as exc:  # a full disk: one line naming the path; the launcher's record says so
        rec = dict(rec, status="error", reason=record.one_line(f"the record could not be written: {exc}"))
        print(json.dumps(rec, sort_keys=True))
        print(f"bench.worker: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(rec, sort_keys=True))
    return 1 if rank is not None and rec["status"] != "ok" else 0


def log_tail(text: str, limit: int = 4000) -> str:
    """A traceback within ``limit`` characters: its header line kept, then its last frames and the
    error (the middle frames dropped and counted)."""
    if len(text) <= limit:
        return text
    head, rest = text.split("\n", 1) if "\n" in text else ("", text)
    tail = rest[-(limit - len(head) - 60):]
    tail = tail[tail.find("\n") + 1:] if "\n" in tail else tail  # whole lines only
    return f"{head}\n  ... ({len(rest) - len(tail)} characters of earlier frames left out)\n{tail}"


def write_trace(rec: dict, out_path) -> None:
    """The allocation trace (and cuda snapshot) beside the record; a failed write (a full disk)
    leaves no partial file and raises one line naming the path."""
    try:
        alloctrace.write(rec, out_path)
    except OSError as exc:
        rec.pop("_trace", None)
        rec.pop("_cuda_snapshot", None)
        made = [Path(f"{out_path}{suffix}") for suffix in (alloctrace.TRACE_SUFFIX, alloctrace.SNAPSHOT_SUFFIX)]
        for path in made:
            path.unlink(missing_ok=True)
        raise OSError(exc.errno, f"cannot write the allocation trace {made[0]}: {exc.strerror or exc}") from exc


def sim_cannot_run(exc: BaseException) -> str:
    """Why sim cannot run what raised ``exc`` ('' when it is an ordinary failure): FakeTensorMode
    refusing an op it cannot run without real values, or a fake (meta) kernel refusing inputs
    its real kernel may take (grouped_mm's meta kernel takes bf16 only)."""
    from torch._subclasses import fake_tensor as ft
    kinds = (ft.DynamicOutputShapeException, ft.DataDependentOutputException, ft.UnsupportedOperatorException)
    chain = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    if any(isinstance(e, kinds) for e in chain):
        return ("sim cannot run this architecture under fake tensors (an op whose output shape depends on "
                "tensor values, or with no fake kernel): ")
    frames = {f.name for e in chain for f in traceback.extract_tb(e.__traceback__)}
    if "_meta_grouped_mm_common" in frames:
        return ("sim cannot run this: torch's fake (meta) kernel for grouped_mm, which transformers' MoE experts "
                "use, takes bf16 inputs only (whether the CUDA kernel falls back for other dtypes is not "
                "checked here): ")
    return ""


def run(spec: dict) -> dict:
    """Measurements for ``spec`` in its mode. Whether the combination can run in this mode
    was decided when the matrix loaded (``spec["skip_reason"]``; the launcher starts no
    worker for a skipped cell); what is checked here is this machine: flash-attn installed,
    a CUDA device present."""
    if ranks.multirank(spec) and os.environ.get("WORLD_SIZE") != str(spec["world_size"]):
        raise RuntimeError(f"world size {spec['world_size']} needs that many ranks: run the cell through "
                           "bench.runner.launch (torchrun), not the worker alone")
    if spec["knobs"]["attn"] == "fa2":
        import importlib.util
        if importlib.util.find_spec("flash_attn") is None:
            raise Skip("flash-attn is not installed (pip install 'ft-membench[gpu]' on a CUDA machine)")
    if spec["knobs"].get("workload", "train") != "train":  # generation, vLLM
        from bench.worker import inference
        return inference.run(spec)
    import torch
    from bench.worker import train
    from bench.worker.memtrack import MemTracker
    say("torch imported")
    if spec["mode"] == "cpu":
        from bench.worker import cpu_gemm
        gemm = cpu_gemm.install(torch)  # bf16 products in fp32 where this CPU has no bf16 GEMM
        tracker = MemTracker(budget_bytes=spec["gpu_memory_bytes"])
        with one_rank(spec, "cpu") as mesh:
            out = train.train(spec, "cpu", tracker, mesh=mesh)
        if gemm:
            out["details"]["cpu_matmul"] = gemm
        rank_program(spec, out)
        model = alloctrace.attach(out, tracker, spec, {})  # what a CUDA allocator would reserve for this trace
        out["details"]["load_phase"] = verdicts.load_phase(model, {}, out.get("load_host_peak_rss_bytes"))
        return out
    if spec["mode"] == "cuda":
        return run_cuda(spec, torch, train, MemTracker)
    from bench.worker.sim import simulate
    return simulate.run(spec)


def run_cuda(spec, torch, train, MemTracker) -> dict:
    """Real GPU run on this rank's device, capped to the cell's GPU profile when the card is
    bigger: torch.cuda's peak statistics over the measured steps are the measurement, always
    (``gpumem.split_peak``); the tracker only splits that peak into categories (allocator rounding
    and workspaces go to ``other``); an NVML
    sampler thread watches the card from before the model loads (bench/worker/gpumem.py)."""
    if not torch.cuda.is_available():
        raise Skip("cuda mode needs a CUDA device; none is visible")
    from bench.worker import cuda_alloc, gpumem
    index = int(os.environ.get("LOCAL_RANK", "0"))
    nvml, note = gpumem.open_nvml(index)
    facts = gpumem.cap_to_profile(spec, torch, index, nvml)
    facts["nvml_note"] = note
    sampler = gpumem.Sampler(nvml.read) if nvml else None
    if sampler:
        sampler.start()
    torch.cuda.reset_peak_memory_stats(index)
    alloctrace.start_cuda_history(torch)
    from bench.worker.streams import cuda_stream
    tracker = MemTracker(rounding=cuda_alloc.round_size, stream_of=cuda_stream)
    try:
        with one_rank(spec, "cuda") as mesh:
            out = train.train(spec, "cuda", tracker, mesh=mesh)
    except Exception as exc:
        exc.details = {"cuda": gpumem.finish(torch, index, sampler, facts)}  # kept in the oom/error record
        raise
    facts = gpumem.finish(torch, index, sampler, facts)
    facts.update({f"{k}_peak_bytes": v for k, v in out["details"].pop("cuda_tracked_peaks").items()})  # the tracked span's
    split = gpumem.split_peak(out["breakdown_bytes"], out["peak_bytes"], facts["allocated_peak_bytes"])
    out.update(peak_bytes=split["peak_bytes"], breakdown_bytes=split["breakdown_bytes"])
    out["details"].update(split["details"])
    out["reserved_peak_bytes"] = facts["reserved_peak_bytes"]
    gpu = {spec["gpu"]: {"memory_bytes": spec["gpu_memory_bytes"]}}
    model = alloctrace.attach(out, tracker, spec, gpu)
    out["details"]["load_phase"] = verdicts.load_phase(model, gpu, out.get("load_host_peak_rss_bytes"))
    out["_cuda_snapshot"] = alloctrace.cuda_snapshot(torch)  # the real allocator's history, beside the model's
    out["details"]["device_name"] = facts["physical_device"]
    out["details"]["cuda"] = facts
    rank_program(spec, out)
    return out


def one_rank(spec: dict, device_type: str):
    """Rank 0's program alone over the fake process group, for a cell that asks for it (its
    study's ``ranks: rank0``); else nothing (None: no mesh)."""
    import contextlib
    if not spec.get("one_rank"):
        return contextlib.nullcontext()
    from bench.worker import onerank
    return onerank.fake_ranks(spec["world_size"], device_type)


def rank_program(spec: dict, out: dict) -> None:
    if spec.get("one_rank"):
        from bench.worker import onerank
        out["details"]["rank_program"] = {"how": onerank.MEASURED_HOW, "rank": 0, "world_size": spec["world_size"],
                                          "engine": spec["knobs"]["dist"], "process_group": "fake", "loss": onerank.LOSS}


def versions() -> dict:
    from importlib import metadata
    out = {"python": platform.python_version(), "ft_membench_engine": inputs.engine_digest()}
    for pkg in ("torch", "transformers", "peft", "bitsandbytes", "deepspeed", "accelerate"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def machine(spec: dict) -> dict:
    out = {"hostname": platform.node(), "platform": platform.platform(), "processor": platform.machine(),
           "cpu_count": os.cpu_count()}
    try:
        out["memory_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        out["memory_bytes"] = None
    if spec["mode"] == "cuda" and "torch" in sys.modules:
        torch = sys.modules["torch"]
        out["gpu_name"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return out


def host_rss_or_none():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

