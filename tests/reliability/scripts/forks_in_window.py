"""SYNTHETIC fixture: the script forks inside the capture window; the fork trains one step (our hooks
are still installed there) and exits normally."""

import os
import sys

import torch

model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 13):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    if step == 3:
        pid = os.fork()
        if pid == 0:
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            print("fork", os.getpid(), "trained", flush=True)
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        print("fork exit status", os.waitstatus_to_exitcode(status), flush=True)
print("parent done", flush=True)
