"""The published corpus of GPU memory measurements: its loader, its sim matrix, the peers, and
the scoreboard. Torch-free."""
