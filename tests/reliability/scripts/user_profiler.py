"""SYNTHETIC fixture: the script runs torch.profiler itself in the middle of training and exports
its own trace to argv[1]; argv[2] (default cpu) is the device (cuda: the profiler records CUDA too)."""

import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function

device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
model = torch.nn.Linear(16, 16).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step():
    loss = model(torch.randn(4, 16, device=device)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()


for _ in range(2):
    step()
with profile(activities=activities) as prof:
    for _ in range(3):
        with record_function("users_own_step"):
            step()
prof.export_chrome_trace(sys.argv[1])
print("user profile rows", len(prof.key_averages()) > 0, flush=True)
for _ in range(20):
    step()
print("done", flush=True)
