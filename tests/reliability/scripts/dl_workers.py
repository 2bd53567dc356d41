"""SYNTHETIC fixture: DataLoader with num_workers=4 under the start method argv[1], with a Dataset
class defined in this script (spawn/forkserver workers must import it from here)."""

import sys

import torch
from torch.utils.data import DataLoader, Dataset


class ScriptDataset(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return torch.full((4,), float(i))


def main():
    loader = DataLoader(ScriptDataset(), batch_size=4, num_workers=4, multiprocessing_context=sys.argv[1])
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    total = 0.0
    for x in loader:
        total += float(x.sum())
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("batches", len(loader), "sum", total)


if __name__ == "__main__":
    main()
