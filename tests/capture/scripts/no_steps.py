"""Fixture (synthetic): neither optimizer nor DataLoader: steps by time."""

import time

import torch

m = torch.nn.Linear(8, 8)
t_end = time.time() + 6.0
while time.time() < t_end:
    m(torch.randn(4, 8))
    time.sleep(0.01)
print("loop done")
