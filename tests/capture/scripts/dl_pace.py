"""Fixture (synthetic): a DataLoader with 2 workers whose samples take `sys.argv[1]` seconds each to
make, feeding a loop that spends 5 ms per step: with 0 the workers always have the next batch ready,
with 0.02 (4 samples: 80 ms a batch, 40 ms per batch from two workers) the loop waits for them
(past the two batches prefetched while the first is awaited)."""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __len__(self) -> int:
        return 400

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.seconds:
            time.sleep(self.seconds)
        return torch.full((8,), float(i))


def main() -> None:
    loader = DataLoader(Slow(float(sys.argv[1])), batch_size=4, num_workers=2, prefetch_factor=1)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in loader:
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.005)


if __name__ == "__main__":
    main()
