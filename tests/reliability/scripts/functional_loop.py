"""SYNTHETIC fixture: plain tensor math, no nn.Module, no optimizer, no DataLoader: only time can mark
its steps. Counted in iterations (about 4 s idle), not wall time: the profiler's first start may take
seconds on a busy machine."""

import time

import torch

w = torch.randn(64, 64)
for _ in range(400):
    torch.relu(torch.randn(32, 64) @ w).sum()
    time.sleep(0.01)
print("loop done", flush=True)
