"""Training: one readable loop, schedules, losses, optimiser, checkpoints, distributed, metrics."""
