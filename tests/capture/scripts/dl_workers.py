"""Fixture (synthetic): DataLoader with 4 workers and a Dataset class defined in this script."""

import sys

import torch
from torch.utils.data import DataLoader, Dataset


class ScriptDataset(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((4,), float(i))


def main():
    ctx = sys.argv[1]
    loader = DataLoader(ScriptDataset(), batch_size=4, num_workers=4, multiprocessing_context=ctx)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    n = 0
    for x in loader:
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        n += 1
    print("batches", n)


if __name__ == "__main__":
    main()
