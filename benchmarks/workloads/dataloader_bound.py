"""Planted problem: data_loading (fix `dataloader_workers`). A ResNet-18-sized CNN.

A Dataset whose per-sample transform is CPU-heavy numpy augmentation (random resized crop, flip,
brightness/contrast jitter, a separable blur, about a millisecond per sample), loaded with
`DataLoader(num_workers=0)`: the training process itself prepares every batch (~70 ms for 64 samples)
while the GPU, which needs ~15 ms for the ResNet-18-sized convnet, waits.

--fix dataloader_workers (= --fixed): num_workers=8, pin_memory=True, persistent_workers=True, prefetch_factor=4 and non_blocking
copies (the target machine has 16 cores): 8 workers prepare a batch in ~9 ms, faster than the GPU
consumes it, so the fixed run is bound by the GPU.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from torch.utils.data import DataLoader, Dataset


class SyntheticAugmentedImages(Dataset[tuple[torch.Tensor, int]]):
    """Deterministic synthetic images (generated from the index) with a numpy augmentation pipeline.

    Defined at module level so spawn/forkserver DataLoader workers can unpickle it.
    """

    def __init__(self, length: int, out_size: int, src_size: int, blur_passes: int) -> None:
        self.length = length
        self.out_size = out_size
        self.src_size = src_size
        self.blur_passes = blur_passes

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(index)
        img = rng.random((self.src_size, self.src_size, 3), dtype=np.float32)
        # random crop + nearest resize
        crop = int(self.src_size * rng.uniform(0.6, 1.0))
        top, left = rng.integers(0, self.src_size - crop + 1, size=2)
        img = img[top:top + crop, left:left + crop]
        idx = (np.arange(self.out_size) * crop / self.out_size).astype(np.int64)
        img = img[idx][:, idx]
        if rng.random() < 0.5:
            img = img[:, ::-1]
        # brightness / contrast jitter
        img = img * rng.uniform(0.8, 1.2) + rng.uniform(-0.1, 0.1)
        img = (img - img.mean()) * rng.uniform(0.8, 1.2) + img.mean()
        # separable [1 4 6 4 1]/16 blur, repeated: the CPU-heavy part
        k = np.array([1.0, 4.0, 6.0, 4.0, 1.0], dtype=np.float32) / 16.0
        for _ in range(self.blur_passes):
            p = np.pad(img, ((2, 2), (2, 2), (0, 0)), mode="reflect")
            img = sum(k[i] * p[i:i + self.out_size, 2:-2] for i in range(5))
            p = np.pad(img, ((0, 0), (2, 2), (0, 0)), mode="reflect")
            img = sum(k[i] * p[:, i:i + self.out_size] for i in range(5))
        img = np.clip(img, 0.0, 1.0)
        chw = np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32)
        return torch.from_numpy(chw), int(rng.integers(0, 100))


class ConvNet(nn.Module):
    """ResNet-18-sized plain convnet (2 convs per stage, 64-128-256-512 channels) for 128 px inputs."""

    def __init__(self, num_classes: int = 100, width: int = 64) -> None:
        super().__init__()

        def stage(cin: int, cout: int, stride: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout),
                    nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                    nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        w = width
        self.features = nn.Sequential(*stage(3, w, 1), *stage(w, 2 * w, 2), *stage(2 * w, 4 * w, 2),
                                      *stage(4 * w, 8 * w, 2))
        self.head = nn.Linear(8 * w, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["dataloader_workers"], steps=150)
    args = parser.parse_args()
    fixed = "dataloader_workers" in chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (4 if args.tiny else 64)
    out_size, src_size, passes = (16, 24, 1) if args.tiny else (128, 160, 2)
    dataset = SyntheticAugmentedImages(batch * args.steps, out_size, src_size, passes)
    if fixed:
        workers = 2 if args.tiny else 8
        loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                            pin_memory=device.type == "cuda", persistent_workers=True, prefetch_factor=4,
                            drop_last=True)
    else:
        loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=0, drop_last=True)

    model = ConvNet(width=8 if args.tiny else 64).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    bench = StepBench("dataloader_bound", variant_name(args), device, batch, args.steps)
    for x, y in loader:
        x = x.to(device, non_blocking=fixed)
        y = y.to(device, non_blocking=fixed)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
