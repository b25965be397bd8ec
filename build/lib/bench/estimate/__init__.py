"""The modelled layer over sim traces: the caching-allocator model and its replay, the
verdicts, the load plan, the speed model, trace interpolation across shapes. Torch-free."""
