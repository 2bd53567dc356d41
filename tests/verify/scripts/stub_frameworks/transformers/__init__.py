"""Synthetic stand-in for transformers (tests only): see ../README.md."""

from .training_args import TrainingArguments

__all__ = ["TrainingArguments"]
