"""Fixture (synthetic): a CPU-only training loop whose Dataset does heavy per-sample work, loaded with
the DataLoader's default num_workers=0: the step waits for data nearly all the time."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
args = p.parse_args()


class Augmented(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        img = torch.rand(3, 64, 64)
        for _ in range(6):  # per-sample augmentation done in Python, sample by sample
            img = torch.nn.functional.avg_pool2d(img.unsqueeze(0), 3, 1, 1).squeeze(0)
            img = img.flip(-1).roll(3, -2)
        return img.mean(0).flatten()[:256], i % 10


loader = DataLoader(Augmented(), batch_size=32, shuffle=True)
model = nn.Linear(256, 10)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (x, y) in enumerate(loader):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step + 1 >= args.steps:
        break
print("trained", flush=True)
