"""Trains a few steps and leaves files named like the temporaries a killed run leaves in OUT (argv[1])."""

import sys
from pathlib import Path

import torch

out = Path(sys.argv[1])
(out / ".stderr.99999.tmp").write_text("native stderr of a killed child")
(out / "trace" / ".rank0.json.gz.json.tmp").write_text("half a trace")
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(12):
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
