"""Following in-place storage resizes for ``MemTracker`` (bench/worker/memtrack.py), a mixin: FSDP2
frees and refills its all-gather buffers with ``UntypedStorage.resize_``, which no dispatch mode
sees, so that method is wrapped while the tracker is active and each resize of a counted storage
is counted (reads and writes the tracker's ``live``, ``host``, totals and events)."""
from __future__ import annotations

import torch


class FollowsResize:
    def __enter__(self):
        if self._resize_saved is None:
            cls, tracker = torch.UntypedStorage, self
            self._resize_saved = vars(cls).get("resize_")
            inherited = cls.resize_

            def resize_(storage, size):
                out = inherited(storage, size)
                tracker._resized(storage)
                return out
            cls.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc):
        if self._resize_saved is not None or "resize_" in vars(torch.UntypedStorage):
            if self._resize_saved is None:
                del torch.UntypedStorage.resize_
            else:
                torch.UntypedStorage.resize_ = self._resize_saved
            self._resize_saved = None
        return super().__exit__(*exc)

    def _resized(self, storage) -> None:
        key = storage._cdata  # memtrack._key
        table = self.live if key in self.live else self.host if key in self.host else None
        if table is None:
            return
        serial, old, born = table[key]
        new = self.rounding(storage.nbytes())
        if table is self.live:
            if old:  # a storage resized to 0 before was freed then: nothing of it is allocated now
                self._event((0, serial, self.step, self._phase_index.get(self.phase, 0)))
            self._alloc_event(serial, storage.nbytes())
        if table is self.host:
            self.host_total += new - old
            self.host_peak = max(self.host_peak, self.host_total)
        elif new < old:
            self._snapshot_if_peak()
            self.total -= old - new
        else:
            self._grow(new - old)
        table[key] = (serial, new, born)
