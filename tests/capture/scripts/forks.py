"""Fixture (synthetic): the script forks; the fork exits normally through the runner."""

import os
import sys

import torch

model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
pid = os.fork()
if pid == 0:
    print("in fork", flush=True)
    sys.exit(0)
os.waitpid(pid, 0)
print("parent done", flush=True)
