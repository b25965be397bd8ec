"""Running a cell: the launcher of the worker process, its lifeline, multi-rank merging, the
loopback port, each cell's job resources. Torch-free."""
