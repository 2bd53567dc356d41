"""Fixture (synthetic): a training loop whose DataLoader is built by library code (fakelib).

--dump FILE  at step 3, the loader's settings as JSON
"""

import argparse
import json

import torch
from fakelib import make_loader  # the script's folder is sys.path[0], as under plain python

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--workers", type=int, default=1)
p.add_argument("--dump", default=None)
args = p.parse_args()
loader = make_loader(args.workers)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while step < args.steps:
    for x, y in loader:
        loss = ((model(x).squeeze(1) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if args.dump and step == 3:
            with open(args.dump, "w") as fh:
                json.dump(
                    {"persistent_workers": loader.persistent_workers, "prefetch_factor": loader.prefetch_factor},
                    fh,
                )
        if step >= args.steps:
            break
