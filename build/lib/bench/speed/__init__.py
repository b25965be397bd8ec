"""pytest-benchmark speed benchmarks of the engine (sim, allocator replay, fits, matrix
expansion) and the cell they time."""
