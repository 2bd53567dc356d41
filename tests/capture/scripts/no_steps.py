"""Fixture (synthetic): no optimizer, no DataLoader, no nn.Module call: steps by time.

The loop is counted in iterations (about 6 s idle), not in wall time: the profiler's first start,
which may take seconds on a busy machine, must not eat the loop."""

import time

import torch

weight = torch.randn(8, 8)
for _ in range(600):
    torch.relu(torch.randn(4, 8) @ weight)
    time.sleep(0.01)
print("loop done")
