"""Fixture (synthetic): a training loop that saves model + optimizer every N steps with torch.save,
the way many training scripts checkpoint. Small enough for the CPU."""

import argparse
import os

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--save-every", type=int, default=10)
p.add_argument("--out-dir", default="ckpt")
args = p.parse_args()

model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
os.makedirs(args.out_dir, exist_ok=True)
for step in range(1, args.steps + 1):
    x = torch.randn(16, 512)
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % args.save_every == 0:
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
        torch.save(state, os.path.join(args.out_dir, f"step{step}.pt"))
print("trained", flush=True)
