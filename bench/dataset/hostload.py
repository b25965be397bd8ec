"""Host memory of loading a dataset, measured for real on this machine: the load paths people use.

    python -m bench.dataset.hostload --out results/dataset/hostload.json [--scales 4,16,64]

The dataset is tests/data/c4-demo.jsonl repeated ``scale`` times (0.75 MB each), tokenized with
Mistral-7B-v0.1's tokenizer (matrix/tokenizers/). Each path runs in a fresh Python process:

- ``json-lists``: every line ``json.loads``-ed into a list of dicts and tokenized into lists of
  ids, as a hand-written loader does;
- ``datasets-map``: ``datasets.load_dataset("json")`` (written to Arrow, memory-mapped) and
  tokenized with ``.map(batched=True)``, one process;
- ``datasets-map-num-proc-2``: the same with ``num_proc=2``;
- ``dataloader-workers-0`` / ``dataloader-workers-2``: the tokenized Arrow dataset (saved once,
  beforehand) through a torch DataLoader, batch 4 padded by the tokenizer, with no worker processes
  and with two (``prefetch_factor`` 2). ``pin_memory`` is off: it pins host pages for a GPU's
  copies, and this machine has none.

What is measured: the proportional set size (PSS: shared pages divided among the processes that
map them) summed over the process and its children, sampled every 20 ms by this process through
psutil, from when the child has imported its libraries (its ``baseline``) to its exit; the figure
is the peak above that baseline, so the imports (torch, transformers, datasets: several hundred
MiB) are not the data's. Each path's growth is the slope of that peak over the dataset's size
(least squares over the scales). cpu-measured: this machine, this Python, these library versions.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "c4-demo.jsonl"
TOKENIZER = ROOT / "matrix" / "tokenizers" / "mistral-7b-v0.1"
PATHS = ("json-lists", "datasets-map", "datasets-map-num-proc-2", "dataloader-workers-0", "dataloader-workers-2")
SAMPLE_S = 0.02
MiB = 2 ** 20


# -- the child: one load path ------------------------------------------------------------------

def _child(path: str, file: str, work: str) -> dict:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import datasets
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    datasets.disable_progress_bars()
    if path.startswith("dataloader"):
        import torch  # noqa: F401
    print("ready", flush=True)
    sys.stdin.readline()   # the parent has taken the baseline
    t0 = time.monotonic()
    tokens = 0
    if path == "json-lists":
        with open(file) as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        ids = [tok(r["text"])["input_ids"] for r in rows]
        tokens = sum(len(x) for x in ids)
    elif path.startswith("datasets-map"):
        ds = datasets.load_dataset("json", data_files=file, cache_dir=str(Path(work) / "hf-cache"))["train"]
        ds = ds.map(lambda b: tok(b["text"]), batched=True, remove_columns=["text"],
                    num_proc=2 if path.endswith("num-proc-2") else None)
        tokens = sum(len(x) for x in ds["input_ids"])
    else:
        import torch
        from transformers import DataCollatorWithPadding
        tok.pad_token = tok.unk_token
        ds = datasets.load_from_disk(str(Path(work) / "tokenized"))
        workers = int(path.rsplit("-", 1)[1])
        loader = torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=DataCollatorWithPadding(tok),
                                             num_workers=workers, prefetch_factor=2 if workers else None)
        for batch in loader:
            tokens += int(batch["attention_mask"].sum())
    return {"wall_s": round(time.monotonic() - t0, 2), "tokens": tokens}


def _prepare(file: str, work: str) -> None:
    """The tokenized Arrow dataset the DataLoader paths read (not measured)."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import datasets
    from transformers import AutoTokenizer
    datasets.disable_progress_bars()
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER), local_files_only=True)
    ds = datasets.load_dataset("json", data_files=file, cache_dir=str(Path(work) / "hf-cache"))["train"]
    ds.map(lambda b: tok(b["text"]), batched=True, remove_columns=["text"]).save_to_disk(str(Path(work) / "tokenized"))


# -- the parent: run and sample --------------------------------------------------------------

def _tree_pss(proc) -> int:
    import psutil
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return total


def measure(path: str, file: str, work: str) -> dict:
    import psutil
    child = subprocess.Popen([sys.executable, "-m", "bench.dataset.hostload", "--run", path, "--file", file,
                              "--work", work], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    proc = psutil.Process(child.pid)
    line = child.stdout.readline()
    if line.strip() != "ready":
        child.kill()
        raise RuntimeError(f"{path}: the child did not start: {line!r}")
    base = _tree_pss(proc)
    peak = base
    child.stdin.write("go\n")
    child.stdin.flush()
    while child.poll() is None:
        try:
            peak = max(peak, _tree_pss(proc))
        except psutil.NoSuchProcess:
            break
        time.sleep(SAMPLE_S)
    out = child.stdout.read()
    if child.returncode != 0:
        raise RuntimeError(f"{path}: exit {child.returncode}")
    result = json.loads(out.strip().splitlines()[-1])
    return {"path": path, "baseline_pss_bytes": base, "peak_pss_bytes": peak, "peak_above_baseline_bytes": peak - base,
            **result}


def run(scales: list[int], paths=PATHS, say=print) -> dict:
    rows = []
    text = DATA.read_text()
    with tempfile.TemporaryDirectory(prefix="ftmb-hostload-") as tmp:
        for k in scales:
            work = Path(tmp) / f"x{k}"
            work.mkdir()
            file = work / "data.jsonl"
            file.write_text(text * k)
            size = file.stat().st_size
            if any(p.startswith("dataloader") for p in paths):
                subprocess.run([sys.executable, "-m", "bench.dataset.hostload", "--prepare", "--file", str(file),
                                "--work", str(work)], check=True, cwd=ROOT, capture_output=True)
            for path in paths:
                if path.startswith("datasets-map"):
                    shutil.rmtree(work / "hf-cache", ignore_errors=True)   # each map from the JSON, not a cache
                r = measure(path, str(file), str(work))
                r.update(scale=k, dataset_bytes=size)
                say(f"{path} x{k} ({size / MiB:.1f} MiB): peak +{r['peak_above_baseline_bytes'] / MiB:.0f} MiB "
                    f"above {r['baseline_pss_bytes'] / MiB:.0f} MiB after imports, {r['wall_s']} s")
                rows.append(r)
    import hashlib
    return {"format": 1, "dataset": str(DATA.relative_to(ROOT)), "tokenizer": str(TOKENIZER.relative_to(ROOT)),
            "dataset_sha256": hashlib.sha256(DATA.read_bytes()).hexdigest(), "sample_s": SAMPLE_S,
            "code_sha256": code_digest(),
            "scales": scales, "rows": rows, "growth": growth(rows), "versions": _versions(),
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}


def code_digest() -> str:
    """sha256 of this file: what it measures and how."""
    import hashlib
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def growth(rows: list[dict]) -> dict:
    """{path: bytes of peak per byte of dataset}: least squares over the scales."""
    out = {}
    for path in dict.fromkeys(r["path"] for r in rows):
        pts = [(r["dataset_bytes"], r["peak_above_baseline_bytes"]) for r in rows if r["path"] == path]
        if len(pts) < 2:
            continue
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        out[path] = round(sum((x - mx) * (y - my) for x, y in pts) / sxx, 2) if sxx else None
    return out


def _versions() -> dict:
    from importlib import metadata
    return {p: metadata.version(p) for p in ("datasets", "pyarrow", "transformers", "tokenizers", "torch")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.dataset.hostload", description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--scales", default="4,16,64")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--run", choices=PATHS, help=argparse.SUPPRESS)
    ap.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run:
        print(json.dumps(_child(args.run, args.file, args.work)), flush=True)
        return 0
    if args.prepare:
        _prepare(args.file, args.work)
        return 0
    if not args.out:
        ap.error("--out is required")
    from bench.records import atomic
    doc = run([int(s) for s in args.scales.split(",")], [p for p in args.paths.split(",") if p],
              say=lambda m: print(m, file=sys.stderr, flush=True))
    atomic.write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
