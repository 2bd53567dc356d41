"""Synthetic stand-in for transformers.training_args (tests only)."""

from dataclasses import dataclass


@dataclass
class TrainingArguments:
    output_dir: str = "out"
    bf16: bool = False
    fp16: bool = False
    tf32: bool | None = None

    def __post_init__(self):
        self.validated = True
