"""Distinct data pointers for fake tensors, while one FSDP1 rank runs under them.

A fake tensor has no memory: its ``data_ptr()`` and its storage's are 0 (plus the view's offset),
so every fake storage seems to be every other. FSDP1 decides by data pointer whether a unit is
already resharded (``_runtime_utils._catch_all_reshard``: the flat parameter's pointer against its
local shard's) and whether two tensors share a storage (``_flat_param._same_storage``). With all
pointers 0 the end of backward takes a unit whose weights no gradient reached (a frozen root: the
embedding and head under LoRA) as resharded already and keeps its gathered weights alive into the
optimizer step, which a real rank frees (tiny-llama LoRA at world size 2: 65.5 MB more in sim's
optimizer phase than in the real gloo rank's). ``distinct()`` gives each fake storage its own
pointer, its storage object's address (``_cdata``, the key the tracker counts storages by), and a
view its offset from it, as real memory would; tensors that are not fake are not touched.
"""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def distinct():
    from torch._subclasses.fake_tensor import FakeTensor
    tensor_saved = FakeTensor.__dict__.get("data_ptr")
    storage_saved = torch.UntypedStorage.__dict__.get("data_ptr")
    storage_ptr = torch.UntypedStorage.data_ptr

    def fake_tensor_ptr(self):
        return self.untyped_storage()._cdata + self.storage_offset() * self.element_size()

    def storage_data_ptr(self):
        return self._cdata if self.device.type == "meta" else storage_ptr(self)

    FakeTensor.data_ptr = fake_tensor_ptr
    torch.UntypedStorage.data_ptr = storage_data_ptr
    try:
        yield
    finally:
        for cls, saved in ((FakeTensor, tensor_saved), (torch.UntypedStorage, storage_saved)):
            if saved is None:
                del cls.data_ptr
            else:
                cls.data_ptr = saved
