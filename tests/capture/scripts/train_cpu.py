"""Fixture (synthetic): tiny CPU training loop with knobs for the fault tests."""

import argparse
import os
import sys
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--fail-at", type=int, default=-1)
p.add_argument("--exit-code", default=None)
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--ready-file", default=None)
args, _unknown = p.parse_known_args()  # other arguments (e.g. credentials in a redaction test) are ignored

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    if step == args.fail_at:
        raise ValueError(f"planted failure at step {step}")
    x = torch.randn(16, 32)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if args.ready_file and step == 6:
        open(args.ready_file, "w").close()
    if args.sleep:
        time.sleep(args.sleep)
if args.exit_code is not None:
    code = args.exit_code
    sys.exit(None if code == "none" else int(code) if code.isdigit() else code)
print("finished", args.steps, flush=True)
os.environ.get("X")
