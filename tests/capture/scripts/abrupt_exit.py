"""Calls os._exit(7) at step 5, inside the capture window of the test (skip 2, warm-up 1, active 5)."""

import os

import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(30):
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    if i == 4:
        os._exit(7)
