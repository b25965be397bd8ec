"""The epoch's batches in the order the trainer draws them, drawn by the trainer itself.

    batches = order.batches(lengths, batch_size=4, seed=42, sampling="random")  # [[i, ...], ...]

transformers' ``Trainer`` (which TRL's SFTTrainer is) builds its training DataLoader from the
sampling strategy (``random``: accelerate's seedable random sampler, seeded from ``seed``;
``group_by_length``: transformers' LengthGroupedSampler, mega-batches of 50 batches sorted by length,
the longest first; ``sequential``) and its seed. Rather than re-derive that order, this builds a
real ``Trainer`` over a dataset of the lengths alone (each row's ``input_ids`` a ``range`` of its
length: nothing is materialised) with a stand-in one-parameter model, and reads the sample
indices of every batch from the DataLoader it returns. The order is the installed library's;
one process (world size 1).
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
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling {sampling!r}: one of {', '.join(SAMPLINGS)}")
    os.environ.setdefault("ACCELERATE_USE_CPU", "true")
    with contextlib.redirect_stdout(sys.stderr):   # DeepSpeed's logger, made on import, writes to stdout (--json's)
        import torch
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
                                     dataloader_num_workers=0, dataloader_drop_last=drop_last, **how)
            trainer = Trainer(model=Stand(), args=args, train_dataset=Lengths(),
                              data_collator=lambda rows: [r["idx"] for r in rows])
            return [list(b) for b in trainer.get_train_dataloader()]
    finally:
        logging.set_verbosity(verbosity)
