"""Control (must stay quiet): a well-tuned convnet training loop.

A ResNet-style convnet on 3x128x128 images, batch 256, channels_last memory format, bf16 autocast,
cudnn.benchmark, a DataLoader with 6 workers + pin_memory + persistent workers feeding uint8 batches
(4x fewer bytes) that are copied with non_blocking=True and normalized on the GPU, SGD with foreach
updates, and the loss read once every 50 steps.

--fixed is accepted for symmetry with the planted workloads and changes nothing.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, pick_device, variant_name
from torch.utils.data import DataLoader, Dataset

LOG_EVERY = 50


class SyntheticImages(Dataset[tuple[torch.Tensor, int]]):
    """Cheap deterministic uint8 samples sliced from a small pre-generated pool (no heavy transform)."""

    def __init__(self, length: int, size: int) -> None:
        self.length = length
        self.pool = np.random.default_rng(0).integers(0, 256, size=(64, 3, size, size), dtype=np.uint8)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        img = self.pool[index % len(self.pool)]
        if index % 2:
            img = img[:, :, ::-1]  # horizontal flip: the only (cheap) augmentation
        return torch.from_numpy(np.ascontiguousarray(img)), index % 100


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.a = conv_bn(cin, cout, stride)
        self.b = nn.Sequential(nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout))
        self.skip = (nn.Identity() if stride == 1 and cin == cout else
                     nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.b(self.a(x)) + self.skip(x))


class ResNetSmall(nn.Module):
    def __init__(self, num_classes: int = 100) -> None:
        super().__init__()
        self.stem = conv_bn(3, 64, stride=2)
        self.layers = nn.Sequential(ResBlock(64, 64, 1), ResBlock(64, 128, 2), ResBlock(128, 128, 1),
                                    ResBlock(128, 256, 2), ResBlock(256, 256, 1), ResBlock(256, 512, 2))
        self.head = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=[], steps=1200)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (4 if args.tiny else 256)
    size = 16 if args.tiny else 128
    torch.backends.cudnn.benchmark = True
    loader = DataLoader(SyntheticImages(batch * args.steps, size), batch_size=batch, shuffle=True,
                        num_workers=2 if args.tiny else 6, pin_memory=device.type == "cuda",
                        persistent_workers=True, prefetch_factor=4, drop_last=True)

    model = ResNetSmall().to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, foreach=True)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255.0
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255.0

    bench = StepBench("control_convnet", variant_name(args), device, batch, args.steps)
    for step, (x, y) in enumerate(loader):
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        x = ((x.float() - mean) / std).contiguous(memory_format=torch.channels_last)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % LOG_EVERY == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)  # the only sync: every 50 steps
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
