"""What a cell is: the matrix loader and what it reads (the technique catalogue, workloads,
model references, input digests). Torch-free."""
