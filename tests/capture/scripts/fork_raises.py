"""Forks at step 13 (inside the test's capture window); the forked child raises, the parent waits
for it and carries on. Under plain python the child exits 1 and the parent prints its status."""

import os

import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(30):
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    if i == 13:
        pid = os.fork()
        if pid == 0:
            raise RuntimeError("child fails")
        _, status = os.waitpid(pid, 0)
        print("child status", os.waitstatus_to_exitcode(status), flush=True)
print("done")
