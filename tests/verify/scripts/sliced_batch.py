"""Test fixture (synthetic workload, CPU): batches sliced from a tensor in the script's own code (no
DataLoader), the batch size from the script's own `--batch-size` argument (declared in a helper
module, sliced_args.py), and a fixed per-step cost (a sleep standing in for per-step host work) so that
a larger batch raises samples/s."""

from __future__ import annotations

import time

import torch
from sliced_args import parse

args = parse()

torch.manual_seed(0)
data = torch.randn(4096, 16)
target = torch.randn(4096, 1)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
b = args.batch_size
for step in range(args.steps):
    start = (step * b) % (len(data) - b)
    x, y = data[start : start + b], target[start : start + b]
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(args.step_ms / 1000.0)
print("done", b)
