"""The epoch's batches in the order the trainer draws them, drawn by the trainer itself.

    batches = order.batches(lengths, batch_size=4, seed=42, sampling="random")  # [[i, ...], ...]

transformers' ``Trainer`` (which TRL's SFTTrainer is) builds its training DataLoader from the
sampling strategy (``random``: accelerate's seedable random sampler, seeded from ``seed``;
``group_by_length``: transformers' LengthGroupedSampler, mega-batches of 50 batches sorted by length,
the longest first; ``sequential``) and its seed. Rather than re-derive that order, this builds a
real ``Trainer`` over a dataset of the lengths alone (each row's ``input_ids`` a ``range`` of its
length: nothing is materialised) with a stand-in one-parameter model, and reads the sample
indices of every batch from the DataLoader it makes. The order is the installed library's.

On several processes (``rank_batches``), each rank's share is what accelerate's
``prepare_data_loader`` gives that rank of the trainer's DataLoader (the Trainer's own accelerator
settings: even batches, the seedable sampler, its data seed), called here once per rank with
that rank's ``num_processes`` and ``process_index``: accelerate's BatchSamplerShard hands rank r
the batches r, r + N, r + 2N, ... of the one order every rank draws, cycling back to the start so
that every rank gets as many.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import tempfile

SAMPLINGS = ("random", "group_by_length", "sequential")


def batches(lengths: list[int], batch_size: int, seed: int = 42, sampling: str = "random",
            drop_last: bool = False) -> list[list[int]]:
    """The sample indices of each batch of one process's epoch."""
    return rank_batches(lengths, batch_size, 1, seed, sampling, drop_last)[0]


def rank_batches(lengths: list[int], batch_size: int, world_size: int = 1, seed: int = 42, sampling: str = "random",
                 drop_last: bool = False, accum: int = 1) -> list[list[list[int]]]:
    """Each rank's batches (``per_device_train_batch_size`` each) of one epoch over ``world_size`` processes,
    with ``gradient_accumulation_steps`` ``accum`` (group_by_length's mega-batches count it); the
    micro-batches, which the trainer takes ``accum`` at a time for each optimizer step."""
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling {sampling!r}: one of {', '.join(SAMPLINGS)}")
    os.environ.setdefault("ACCELERATE_USE_CPU", "true")
    with contextlib.redirect_stdout(sys.stderr):   # DeepSpeed's logger, made on import, writes to stdout (--json's)
        import torch
        from accelerate.data_loader import prepare_data_loader
        from transformers import Trainer, TrainingArguments
        from transformers.utils import logging

    class Lengths(torch.utils.data.Dataset):
        def __len__(self):
            return len(lengths)

        def __getitem__(self, i):
            return {"input_ids": range(lengths[i]), "idx": i}

    class Stand(torch.nn.Module):   # the trainer needs a model; the order does not depend on it
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    how = ({"train_sampling_strategy": sampling} if "train_sampling_strategy" in fields
           else {"group_by_length": sampling == "group_by_length"})   # transformers before 5.x
    if sampling == "sequential" and "train_sampling_strategy" not in fields:
        raise ValueError("sequential sampling needs transformers' train_sampling_strategy (5.x)")
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        with tempfile.TemporaryDirectory(prefix="ftmb-order-") as out, contextlib.redirect_stdout(sys.stderr):
            args = TrainingArguments(output_dir=out, per_device_train_batch_size=batch_size, seed=seed,
                                     remove_unused_columns=False, report_to=[], use_cpu=True,
                                     dataloader_num_workers=0, dataloader_drop_last=drop_last,
                                     gradient_accumulation_steps=accum, **how)
            trainer = Trainer(model=Stand(), args=args, train_dataset=Lengths(),
                              data_collator=lambda rows: [r["idx"] for r in rows])
            acc, made = trainer.accelerator, []
            real_prepare = acc.prepare
            acc.prepare = lambda loader: made.append(loader) or loader   # the trainer's DataLoader, as it made it
            try:
                trainer.get_train_dataloader()
            finally:
                acc.prepare = real_prepare
            (loader,) = made
            # every process seeds alike and draws its order from its own generators (LengthGroupedSampler from
            # torch's global one): each rank starts from the state this process has here
            state = torch.random.get_rng_state()
            return [[list(b) for b in _seeded(torch, state, prepare_data_loader(
                loader, None, num_processes=world_size, process_index=rank, split_batches=acc.split_batches,
                put_on_device=False, rng_types=acc.rng_types.copy(), dispatch_batches=acc.dispatch_batches,
                even_batches=acc.even_batches, use_seedable_sampler=acc.use_seedable_sampler,
                data_seed=acc.dataloader_config.data_seed, non_blocking=acc.non_blocking,
                use_stateful_dataloader=acc.use_stateful_dataloader))]
                for rank in range(world_size)]
    finally:
        logging.set_verbosity(verbosity)


def _seeded(torch, state, loader):
    torch.random.set_rng_state(state)
    yield from loader
