"""Fixture (synthetic): a CPU training loop fed by a DataLoader that writes what a real script keeps:
a checkpoint every 5 steps (torch.save, a path relative to its working directory), a line per step
appended to train.log, and with --also PATH a line per step appended to that absolute path."""

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--also", default=None)
args = p.parse_args()

torch.manual_seed(0)
data = TensorDataset(torch.randn(4096, 8), torch.randn(4096, 1))
loader = DataLoader(data, batch_size=16, shuffle=True)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while step < args.steps:
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        with open("train.log", "a") as log:
            log.write(f"step {step} loss {loss.item():.4f}\n")
        if args.also:
            with open(args.also, "a") as fh:
                fh.write(f"step {step}\n")
        if step % 5 == 0:
            torch.save({"step": step, "model": model.state_dict()}, "ckpt.pt")
        if step >= args.steps:
            break
