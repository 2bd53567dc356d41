"""Test fixture (synthetic): nanoGPT's shape on the CPU. The optimizer is built first, then an
evaluation of `--eval-calls` quick model calls under no_grad (nanoGPT's `estimate_loss()` at iter 0),
then `--steps` training steps, each with `--step-ms` of sleep (the device's share of a step) and one
optimizer step; with `--eval-every K`, a model call under no_grad on a batch of `--eval-batch` after
every K-th step (an evaluation inside the loop). Writes the host time of every optimizer step to
`--times`."""

import argparse
import json
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--eval-calls", type=int, default=300)
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--step-ms", type=float, default=20.0)
ap.add_argument("--eval-every", type=int, default=0)
ap.add_argument("--eval-batch", type=int, default=7)
ap.add_argument("--times", default=None)
a = ap.parse_args()

torch.set_num_threads(1)
model = torch.nn.Linear(16, 1)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.ones(4, 16), torch.zeros(4, 1)
with torch.no_grad():
    for _ in range(a.eval_calls):
        model(x)
stamps = []
for _ in range(a.steps):
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    time.sleep(a.step_ms / 1000.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    stamps.append(time.perf_counter())
    if a.eval_every and len(stamps) % a.eval_every == 0:
        with torch.no_grad():
            model(torch.ones(a.eval_batch, 16))
if a.times:
    with open(a.times, "w") as f:
        json.dump(stamps, f)
