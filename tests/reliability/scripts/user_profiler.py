"""SYNTHETIC fixture: the script runs torch.profiler itself in the middle of training and exports
its own trace to argv[1]."""

import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function

model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step():
    loss = model(torch.randn(4, 16)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()


for _ in range(2):
    step()
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(3):
        with record_function("users_own_step"):
            step()
prof.export_chrome_trace(sys.argv[1])
print("user profile rows", len(prof.key_averages()) > 0, flush=True)
for _ in range(20):
    step()
print("done", flush=True)
