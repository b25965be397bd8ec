"""The cell the speed benchmarks time (bench/speed/test_sim_speed.py, bench/speed/test_allocator_speed.py):
one Qwen2.5-7B full fine-tune step at 1 x 1024 in sim, written as a matrix file. Torch-free."""

STUDY = """
studies:
  speed:
    mode: sim
    models: [qwen2.5-7b]
    gpus: [h100-80gb]
    techniques: [baseline]
    batch_size: 1
    seq_len: 1024
    steps: 1
    warmup_steps: 1
"""
