"""ft-membench harness: matrix loader, isolated cell runs, memory tracker, training step."""
