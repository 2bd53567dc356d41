"""Test fixture helper (synthetic): the argument parser of sliced_batch.py, built in a module of its
own as benchmark and training repositories often do (`--batch-size` is not in the script's source)."""

from __future__ import annotations

import argparse


def parse(batch_default: int | None = 4) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=batch_default)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--step-ms", type=float, default=4.0)
    return parser.parse_args()
