"""Fixture (synthetic): fine-tuning on a small set, written the way such loops ship: a short epoch
(8 batches), 2 DataLoader workers with the default persistent_workers=False (restarted every epoch), a
validation pass after every epoch. Small enough for the CPU."""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=12)
p.add_argument("--persistent", action="store_true")
p.add_argument("--load-ms", type=float, default=2.0)
args = p.parse_args()


class SmallSet(Dataset):
    def __init__(self, n):
        self.x = torch.randn(n, 64)
        self.y = torch.randint(0, 4, (n,))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(args.load_ms / 1000)  # reading and decoding one sample
        return self.x[i], self.y[i]


def main():
    train = DataLoader(SmallSet(64), batch_size=8, shuffle=True, num_workers=2,
                       persistent_workers=args.persistent)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        model.train()
        for x, y in train:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
