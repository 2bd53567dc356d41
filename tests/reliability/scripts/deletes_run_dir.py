"""SYNTHETIC fixture: a training loop that deletes gpuadvisor's run directory (given as --run-dir)
after step 6 and trains on (a script that cleans its output folder, or a careless `rm -rf`)."""

import argparse
import shutil

import torch

p = argparse.ArgumentParser()
p.add_argument("--run-dir", required=True)
p.add_argument("--steps", type=int, default=12)
args = p.parse_args()
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 6:
        shutil.rmtree(args.run_dir)
print("finished", flush=True)
