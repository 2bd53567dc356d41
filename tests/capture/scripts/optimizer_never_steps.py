"""Fixture (synthetic): a script that builds an optimizer (to load a checkpoint's state, say) but only
runs the model under torch.no_grad: it never steps the optimizer."""

import time

import torch
from torch import nn

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
deadline = time.monotonic() + 3.0
calls = 0
with torch.no_grad():
    while time.monotonic() < deadline or calls < 40:
        model(torch.randn(8, 16))
        calls += 1
        time.sleep(0.01)
print("calls", calls, flush=True)
