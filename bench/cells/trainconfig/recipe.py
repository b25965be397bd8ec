"""What a training config asks for, in the catalogue's terms (bench/cells/techniques.py).

Each format's reader (axolotl, llamafactory, torchtune, hf) fills one ``Recipe``: the model id
as written, the technique slots (adapter, precision, optimizer, checkpointing, batching,
sharding, world size), the shape (batch, sequence length), and two lists: ``mapped`` (every
setting understood: key, value, what it became) and ``ignored`` (every other setting, and every
understood one with no technique here, each with its reason). ``techniques()`` composes the
slots into one ``+``-joined recipe the matrix loader validates. Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from bench.cells.techniques import lookup

class Invalid(ValueError):
    """A memory-relevant setting whose value cannot be what the config means (a batch "four", a
    DeepSpeed file that cannot be read, ZeRO stage 7 or '3'): answering with a default would
    answer another recipe, so the config is refused (exit 2) naming the key."""

    def __init__(self, key: str, value, reason: str, beyond: str | None = None):
        shown = repr(value) if isinstance(value, (str, int, float, bool)) else f"({type(value).__name__})"
        super().__init__(f"{key}: {shown[:80]}: {reason}")
        self.key, self.shown, self.reason = key, shown[:80], reason
        # what the config asks for that ft-membench does not simulate (a stage: dpo, grpo, ...; a parallelism:
        # tensor, context, ...), in the published corpus's words (bench/corpus/row.py Beyond); None for a bad value
        self.beyond = beyond


# transformers' OptimizerNames / axolotl / LLaMA-Factory spellings -> the catalogue's optimizers
OPTIMIZERS = {
    "adamw_torch": "adamw", "adamw_hf": "adamw", "adamw": "adamw", "torch.optim.adamw": "adamw",
    "adamw_torch_fused": "adamw-fused",
    "adamw_bnb_8bit": "adamw8bit", "adamw_8bit": "adamw8bit", "bnb.optim.adamw8bit": "adamw8bit",
    "paged_adamw_8bit": "paged-adamw8bit", "bnb.optim.pagedadamw8bit": "paged-adamw8bit",
    "paged_adamw_32bit": "paged-adamw32bit", "paged_adamw": "paged-adamw32bit",
    "bnb.optim.pagedadamw": "paged-adamw32bit", "bnb.optim.pagedadamw32bit": "paged-adamw32bit",
    "adafactor": "adafactor", "lion_8bit": "lion8bit", "paged_lion_8bit": None, "sgd": "sgd",
    "torch.optim.sgd": "sgd",
}


@dataclass
class Recipe:
    file: str
    format: str
    model: str | None = None
    adapter: str | None = None          # lora | qlora | qlora-fp32 (fp32 embeddings, norms, LM head)
    lora_all: bool = False              # adapters on every linear layer
    precision: str | None = None        # bf16 | amp-bf16 | amp-fp16 | fp32
    optimizer: str | None = None        # a catalogue optimizer
    gc: bool = False
    gc_reentrant: bool = False  # torch's reentrant checkpoint (use_reentrant: true): gc-reentrant
    packing: bool = False
    dist: str | None = None             # zero1/2/3(-offload) | fsdp (FSDP2) | fsdp1
    world: int | None = None            # processes, where the config states them
    batch: int | None = None
    seq: int | None = None
    extra: list[str] = field(default_factory=list)  # other catalogue names: eager, chunked-ce, act-offload, compile
    micro_batches: int = 1              # a step's micro-batches as simulated (no-sync+ga<N>; see accumulation())
    # the engine the config's recipe shards with when launched on several GPUs, where the launch command and
    # not the config chooses it (torchtune's *_distributed recipes: FSDP2), and why it cannot be answered
    several: str | None = None
    several_refused: str | None = None
    lora: dict = field(default_factory=dict)   # technique_options.lora: r, alpha, dropout, target_modules
    # how the trainer draws batches (fit --dataset): seed, sampling, padding_free, pad_to_multiple_of
    epoch: dict = field(default_factory=dict)
    mapped: list[dict] = field(default_factory=list)
    ignored: list[dict] = field(default_factory=list)

    def took(self, key: str, value, became: str) -> None:
        self.mapped.append({"key": key, "value": bounded(value), "as": became})

    def skip(self, key: str, value, reason: str) -> None:
        item = {"key": key, "value": bounded(value), "reason": reason}
        if item not in self.ignored:  # techniques() may be asked again: one entry per setting
            self.ignored.append(item)

    def set_optimizer(self, key: str, value) -> None:
        name = OPTIMIZERS.get(str(value).strip().lower())
        if name:
            self.optimizer = name
            self.took(key, value, name)
        else:
            self.skip(key, value, "no such optimizer in the catalogue (bench/cells/techniques.py): answered with "
                                  "the recipe's default optimizer")

    def techniques(self) -> list[str]:
        """The recipe as catalogue names; a slot the combination rules refuse is dropped into
        ``ignored`` with the rules' reason, so the answer is always a valid recipe."""
        names: list[str] = []
        if self.adapter:
            names.append(self.adapter)
            if self.lora_all:
                names.append("lora-all")
        if self.gc:
            names.append("gc-reentrant" if self.gc_reentrant else "gc")
        if self.precision and not (self.adapter in ("qlora", "qlora-fp32") and self.precision == "fp32"):
            names.append(self.precision)
        # every trainer read here defaults to torch AdamW (transformers' adamw_torch), also under QLoRA,
        # whose catalogue default is the paged 8-bit AdamW of the QLoRA paper
        opt_default = lookup(self.adapter).defaults.get("optimizer") if self.adapter else None
        if (self.optimizer or "adamw") != (opt_default or "adamw"):
            names.append(self.optimizer or "adamw")
        if self.packing:
            names.append("packing")
        names += [n for n in self.extra if n not in names]
        if self.micro_batches > 1:
            names += ["no-sync", f"ga{self.micro_batches}"]
        if self.dist:
            names.append(self.dist)
            if self.world and self.world > 1:
                names.append(f"w{self.world}")
        elif self.world and self.world > 1:
            self.skip("processes", self.world, "data parallel without ZeRO or FSDP replicates the model: each rank "
                                                "holds what one process does (DDP's gradient buckets not modelled); "
                                                "answered per rank as one process")
        from bench.cells.techniques import knobs
        try:
            knobs(names)
        except ValueError as exc:
            if self.dist:  # the sharding engine is the setting the rules most often refuse
                self.skip("distributed", self.dist, f"not combined: {exc}")
                names = [n for n in names if n != self.dist and not n.startswith("w")]
            else:
                raise
        if self.adapter is None and self.precision is None and names == []:
            return ["baseline"]
        return names or ["baseline"]

    def on_gpus(self, n: int) -> None:
        """The recipe launched on ``n`` GPUs: where the config names no engine but its library runs one there
        (``several``), that engine at world size ``n``. Invalid where it cannot be answered."""
        if n <= 1 or self.dist or not self.several:
            return
        if self.several_refused:
            raise Invalid("--gpus", n, self.several_refused)
        self.dist, self.world = self.several, n
        self.took("--gpus", n, f"{self.several}+w{n}: torchtune's distributed recipes (tune run --nproc_per_node {n} "
                               "..._distributed) shard every decoder layer and the model with FSDP2 (fully_shard)")

    def options(self) -> dict:
        """The study's technique_options the config sets (LoRA's rank, alpha, dropout, targets)."""
        if not self.adapter or not self.lora:
            return {}
        from bench.cells.matrix import DEFAULT_MATRIX
        from bench.cells.matrixfile import SAFE_LOADER
        import yaml
        base = yaml.load(DEFAULT_MATRIX.read_text(), Loader=SAFE_LOADER).get("technique_options", {}).get("lora", {})
        return {"lora": {**base, **self.lora}}

    def attention(self, key: str, value, kind: str | None = None) -> None:
        """``value`` as written (echoed so); ``kind``: the implementation it names, where the key is
        a switch (axolotl's ``flash_attention: true`` is flash_attention_2)."""
        text = str(kind or value).strip().lower()
        if text in ("eager",):
            self.extra.append("eager")
            self.took(key, value, "eager")
        elif text in ("sdpa", "false", "none"):
            self.took(key, value, "sdpa (the default)")
        else:
            self.skip(key, value, "flash-attention kernels are not simulated (fa2 runs in cuda mode only): answered "
                                  "with sdpa, whose memory-efficient kernel also holds no seq x seq scores")

    def lora_setting(self, key: str, value, option: str) -> None:
        if option == "target_modules":
            if isinstance(value, str) and value.strip().lower() in ("all", "all-linear", "all_linear"):
                self.lora_all = True
                self.took(key, value, "lora-all")
                return
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
                raise Invalid(key, value, "not a list of module names")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
                or value in (float("inf"), float("-inf")):
            raise Invalid(key, value, "not a number")
        self.lora[option] = value
        self.took(key, value, f"technique_options.lora.{option}")

    def echo_options(self) -> dict:
        """``options()`` as the answer echoes them: with ``lora-all`` the adapters are on every linear
        layer (the options' target_modules are not used), so that is what the echo says."""
        opts = self.options()
        if self.lora_all and opts:
            opts = {**opts, "lora": {**opts["lora"], "target_modules": "all-linear (lora-all)"}}
        return opts

    def as_dict(self) -> dict:
        return {"file": self.file, "format": self.format, "model": self.model, "techniques": self.techniques(),
                "options": self.echo_options(), "batch": self.batch, "seq": self.seq, "world": self.world,
                "mapped": self.mapped, "ignored": self.ignored}


# A step's micro-batches after the third add only their token tensors under no_sync: the first allocates the
# unsharded gradients, the second accumulates into them, the last reduces them (tests/test_sim_nosync.py)
NO_SYNC_MICRO_BATCHES = 3


def accumulation(recipe: Recipe, key: str, value, sync_each_batch=None) -> None:
    """``gradient_accumulation_steps`` as the HF Trainer runs it (axolotl, TRL and LLaMA-Factory too):
    accelerate's ``accumulate()`` runs every micro-batch but a step's last without the gradient sync
    (``Accelerator.no_sync``: FSDP1's ``no_sync``, FSDP2's ``set_requires_gradient_sync(False)``), unless
    ``accelerator_config.gradient_accumulation_kwargs.sync_each_batch`` is true. Under DeepSpeed, or one
    process, accumulation repeats the micro-batch's step. Call it once the sharding engine is read."""
    steps = positive_int(recipe, key, value)
    if not steps or steps == 1 or recipe.dist not in ("fsdp1", "fsdp") or _true(sync_each_batch):
        why = ("each micro-batch's gradients are reduced (sync_each_batch): the peak is the per-device batch's"
               if steps and steps > 1 and recipe.dist in ("fsdp1", "fsdp") else
               "accumulation repeats the micro-batch's step: the peak is the stated per-device batch's (the "
               "gradients it sums are held either way)")
        recipe.skip(key, value, why)
        return
    recipe.micro_batches = min(steps, NO_SYNC_MICRO_BATCHES)
    how = "FSDP1's no_sync" if recipe.dist == "fsdp1" else "FSDP2's set_requires_gradient_sync(False)"
    recipe.took(key, value, f"no-sync+ga{recipe.micro_batches}: accelerate's accumulate() runs every micro-batch but a "
                f"step's last under {how}, which keeps the unsharded gradients; "
                + (f"{steps} micro-batches answered as {recipe.micro_batches} (the others add only their tokens); "
                   if steps > recipe.micro_batches else "")
                + "the batch is the per-device batch times the micro-batches")


def sync_each_batch(doc: dict):
    """transformers' ``accelerator_config.gradient_accumulation_kwargs.sync_each_batch`` (a dict, or its JSON)."""
    import json
    cfg = doc.get("accelerator_config")
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except ValueError:
            return None
    kwargs = cfg.get("gradient_accumulation_kwargs") if isinstance(cfg, dict) else None
    return kwargs.get("sync_each_batch") if isinstance(kwargs, dict) else None


def autocast_for_sharded_qlora(recipe: Recipe, key: str) -> None:
    """``bf16: true`` autocasts in the HF Trainer (``mixed_precision="bf16"``); the recipes read it as
    16-bit weights where the model loads in 16 bits. QLoRA on FSDP1 runs only under that autocast (peft's
    adapters stay fp32 while FSDP1's mixed precision hands them bf16 weights), so there it is amp-bf16."""
    if recipe.dist == "fsdp1" and recipe.adapter == "qlora" and recipe.precision == "bf16":
        recipe.precision = "amp-bf16"
        recipe.mapped.append({"key": key, "value": True, "as": "amp-bf16: the Trainer's autocast, which QLoRA "
                              "on FSDP1 runs under (its adapters fp32, its shards bf16)"})


def deepspeed_fp16(recipe: Recipe) -> None:
    """fp16 under DeepSpeed is DeepSpeed's fp16 mode, not autocast: the engine holds the weights in fp16 (the
    bytes of bf16) and its ZeRO optimizer fp32 master partitions, as in its bf16 mode (the HF Trainer writes
    ``fp16.enabled`` into the DeepSpeed config from ``fp16``/``mixed_precision``). The catalogue has no
    autocast fp16 under ZeRO (no gradient scaler), so read as ``amp-fp16`` the sharding would be dropped."""
    if (recipe.dist or "").startswith("zero") and recipe.precision == "amp-fp16":
        recipe.precision = "bf16"
        recipe.mapped.append({"key": "fp16", "value": True, "as": "bf16: DeepSpeed's fp16 mode holds 16-bit weights "
                              "(fp16, the bytes of bf16) and fp32 master partitions, as its bf16 mode does"})


def ds_dist(doc, key: str, recipe: Recipe) -> None:
    """A DeepSpeed config (a dict, or a path to its JSON, read as --config is: bounded, a regular
    file) -> zero<stage>[-offload]. A file that cannot be read, a config that is no object, or a
    stage that is not the integer 0-3 is ``Invalid``: the answer would be another recipe's."""
    import json
    from pathlib import Path
    cfg = doc
    if isinstance(doc, str):
        path = Path(doc).expanduser()
        if not path.is_absolute():
            path = Path(recipe.file).parent / path
        from bench.cells.trainconfig.reading import ReadError, read_text
        try:
            cfg = json.loads(read_text(path, "DeepSpeed config"))
        except ReadError as exc:
            raise Invalid(key, doc, str(exc)) from None
        except ValueError as exc:
            raise Invalid(key, doc, f"the DeepSpeed config {path} is not valid JSON: {' '.join(str(exc).split())}") \
                from None
    if not isinstance(cfg, dict):
        raise Invalid(key, doc, "not a DeepSpeed config (a JSON object, or the path to one)")
    zero = cfg.get("zero_optimization", {})
    if zero is None:
        zero = {}
    if not isinstance(zero, dict):
        raise Invalid(f"{key}.zero_optimization", zero, "not an object")
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3) or not isinstance(stage, int):
        raise Invalid(f"{key}.zero_optimization.stage", stage, "ZeRO's stage is the integer 0, 1, 2 or 3")
    if stage == 0:
        recipe.skip(key, doc, "ZeRO stage 0: nothing sharded")
        return
    moved = {k for k in ("offload_optimizer", "offload_param")
             if isinstance(zero.get(k), dict) and zero[k].get("device") in ("cpu", "nvme")}
    offload = bool(moved) if stage == 3 else "offload_optimizer" in moved   # stages 1-2 move no parameters
    if stage == 1 and offload:
        raise Invalid(f"{key}.zero_optimization", "(offload)", "ZeRO-1 with its optimizer offloaded is not simulated "
                                                               "(zero2-offload is)")
    if stage == 3 and len(moved) == 1:
        only = next(iter(moved))
        raise Invalid(f"{key}.zero_optimization", "(offload)", f"ZeRO-3 with only {only} on {zero[only]['device']} is "
                      "not simulated: zero3-offload moves both the optimizer and the parameters, and answered so the "
                      "figure would be low; zero3 moves neither")
    name = f"zero{stage}" + ("-offload" if offload else "")
    recipe.dist = name
    recipe.took(key, doc if isinstance(doc, str) else "(inline)", name)
    if "offload_param" in moved and stage < 3:
        recipe.skip(f"{key}.zero_optimization.offload_param", zero["offload_param"].get("device"),
                    f"ZeRO-{stage} shards no parameters: DeepSpeed offloads parameters under stage 3 only")


def bounded(value, limit: int = 200):
    """``value`` as the answer echoes it: whole where short, else a short stand-in (a value that
    aliases expand is never printed or dumped whole)."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value if len(value) <= limit else value[: limit - 3] + "..."
    import json
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):
        text = None
    if text is not None and len(text) <= limit:
        return value
    return f"({type(value).__name__} of {len(value) if hasattr(value, '__len__') else '?'} items)"


def reentrant(r: "Recipe", key: str, kwargs) -> None:
    """The Trainer's ``gradient_checkpointing_kwargs``: ``use_reentrant`` chooses torch's checkpoint; left out,
    the installed transformers' default (non-reentrant since 5.0; 4.35 to 4.5x passed True)."""
    if not isinstance(kwargs, dict) or "use_reentrant" not in kwargs:
        return
    r.gc_reentrant = _true(kwargs["use_reentrant"])
    r.took(key, kwargs, "gc-reentrant: torch's reentrant checkpoint" if r.gc_reentrant
           else "gc: torch's non-reentrant checkpoint")


def _true(value) -> bool:
    return value is True or str(value).strip().lower() in ("true", "auto", "1", "yes")


def positive_int(recipe: Recipe, key: str, value) -> int | None:
    """``value`` where it is a positive integer, None where unset; anything else is ``Invalid``
    (a batch "four" is not batch 1, a sequence 256.5 is not the default 2048)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Invalid(key, value, "not a positive integer")
    return value
