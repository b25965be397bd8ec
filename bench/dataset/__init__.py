"""The user's own dataset: its token lengths (lengths.py), the batches in the order the trainer
draws them (order.py), and the allocator replayed over that epoch (stairs.py), answered for
``ft-membench fit --dataset`` (answer.py)."""
