"""Synthetic stand-in for lightning.pytorch.trainer.trainer (tests only)."""


class Trainer:
    def __init__(self, max_steps=-1, precision="32-true"):
        self.max_steps = max_steps
        self.precision = precision
