"""Test fixture (synthetic workload, CPU): seq_first_batch.py with a `--batch-size` that the parser
leaves None (the script falls back to 4 itself, as PyTorch's word-language-model LSTM port in
benchmarks/workloads/lstm_lm.py does): verify has no parsed value to multiply and counts the batch."""

from __future__ import annotations

from seq_first_batch import main

if __name__ == "__main__":
    main(batch_default=None)
