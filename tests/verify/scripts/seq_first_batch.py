"""Test fixture (synthetic workload, CPU): a sequence-first LSTM, as in PyTorch's word-language-model
example: the model's input is (seq, batch, features), so its first dimension counts time steps, not
samples. Batches are sliced in the script's own code (no DataLoader); `--batch-size` comes from the
helper module sliced_args.py; a fixed per-step sleep stands in for per-step host work, so that a larger
batch raises samples/s."""

from __future__ import annotations

import time

import torch
from sliced_args import parse

SEQ = 12


def main(batch_default: int | None = 4) -> None:
    args = parse(batch_default)
    torch.manual_seed(0)
    data = torch.randn(SEQ, 4096, 8)  # (seq, batch, features): the batch is axis 1
    target = torch.randn(SEQ, 4096, 16)
    model = torch.nn.LSTM(8, 16)  # batch_first=False, the default
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    b = args.batch_size or 4  # a parser without a default: the script's own fallback, as in lstm_lm
    for step in range(args.steps):
        start = (step * b) % (data.shape[1] - b)
        x, y = data[:, start : start + b], target[:, start : start + b]
        out, _ = model(x)
        loss = torch.nn.functional.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_ms / 1000.0)
    print("done", b)


if __name__ == "__main__":
    main()
