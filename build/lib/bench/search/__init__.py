"""How far a fine-tune goes on a card: the fits search, its CSV, and the warm sim worker pool
it runs in. Torch-free parent side."""
