"""Sim mode: full-size models' training steps under fake tensors, counted as a CUDA device
would allocate them (bench/worker/sim/simulate.py is the entry point)."""
