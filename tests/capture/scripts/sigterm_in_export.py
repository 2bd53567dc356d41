"""Fixture (synthetic): a CPU training loop that raises at step --fail-at (inside the window), and
sends its own process SIGTERM the moment torch.profiler starts writing the trace: what torchrun does to
a surviving rank whose collective raised when its peer died, while that rank exports its partial trace."""

import argparse
import os
import signal

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--fail-at", type=int, default=5)
args = p.parse_args()

_export = torch.profiler.profile.export_chrome_trace


def _export_after_sigterm(self, path):  # type: ignore[no-untyped-def]
    os.kill(os.getpid(), signal.SIGTERM)
    return _export(self, path)


torch.profiler.profile.export_chrome_trace = _export_after_sigterm

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    if step == args.fail_at:
        raise ValueError(f"planted failure at step {step}")
    loss = model(torch.randn(16, 32)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
