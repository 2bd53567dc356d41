"""Planted problem: data_loading (`persistent_workers`). DataLoader workers restarted at every short epoch.

Fine-tuning a small convnet on a small image set: 8 batches of 32 an epoch, many epochs. The DataLoader
is configured the way most tutorials write it, 8 workers and pin_memory=True, but without
`persistent_workers=True`, so PyTorch shuts the 8 worker processes down at the end of every epoch and
starts 8 new ones at the next: process start-up, the pin-memory thread, and an empty prefetch queue
(the first batch waits for a worker to make it from scratch) recur every 8 steps. Each sample's
augmentation costs ~1-2 ms of numpy, so 8 warm workers keep well ahead of the ~10 ms GPU step; cold ones
do not. Over a short epoch the restart is most of the time, and a median over 10 consecutive steps
hides it.

--fix persistent_workers: DataLoader(..., persistent_workers=True): the workers live across epochs and
prefetch the next epoch's first batches while the current one finishes.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from torch.utils.data import DataLoader, Dataset


class AugmentedImages(Dataset[tuple[torch.Tensor, int]]):
    """Deterministic synthetic images with a numpy augmentation (module level: workers unpickle it)."""

    def __init__(self, length: int, size: int, passes: int) -> None:
        self.length = length
        self.size = size
        self.passes = passes

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(index)
        img = rng.random((3, self.size, self.size), dtype=np.float32)
        if rng.random() < 0.5:
            img = img[:, :, ::-1]
        for _ in range(self.passes):  # a separable box blur: the CPU-heavy part
            img = (img + np.roll(img, 1, axis=1) + np.roll(img, -1, axis=1)) / 3.0
            img = (img + np.roll(img, 1, axis=2) + np.roll(img, -1, axis=2)) / 3.0
        img = (img - img.mean()) / (img.std() + 1e-6)
        return torch.from_numpy(np.ascontiguousarray(img, dtype=np.float32)), index % 10


class SmallNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(128, 256, 3, padding=1), nn.BatchNorm2d(256), nn.ReLU(inplace=True))
        self.head = nn.Linear(256, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["persistent_workers"], steps=200)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (4 if args.tiny else 32)
    size, passes, workers = (16, 1, 2) if args.tiny else (128, 4, 8)
    batches_per_epoch = 8
    dataset = AugmentedImages(batches_per_epoch * batch, size, passes)
    loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                        pin_memory=device.type == "cuda", drop_last=True,
                        persistent_workers="persistent_workers" in fixes)

    model = SmallNet().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    bench = StepBench("epoch_restart_workers", variant_name(args), device, batch, args.steps)
    step = 0
    while step < args.steps:
        for x, y in loader:  # a new epoch: without persistent workers, 8 fresh worker processes
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            bench.step()
            step += 1
            if step >= args.steps:
                break
    bench.finish()


if __name__ == "__main__":
    main()
