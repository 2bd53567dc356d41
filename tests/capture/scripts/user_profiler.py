"""Fixture (synthetic): the script runs torch.profiler itself, in the middle of training."""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step():
    loss = model(torch.randn(4, 16)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()


for _ in range(5):
    step()
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(3):
        step()
events = prof.key_averages()
print("user profile ok", len(events) > 0)
prof.export_chrome_trace(sys.argv[1])
for _ in range(20):
    step()
print("done")
