"""Ignores SIGTERM and trains slowly; writes argv[1] (a ready file) at step 6."""

import signal
import sys
import time
from pathlib import Path

import torch

signal.signal(signal.SIGTERM, signal.SIG_IGN)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2000):
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    if step == 6:
        Path(sys.argv[1]).write_text("ready")
    time.sleep(0.02)
