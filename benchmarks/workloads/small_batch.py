"""Planted problem: small_batch (fix `larger_batch`). A CIFAR-sized CNN.

A CIFAR-sized convnet (32x32 images, 10 classes) trained with batch_size=8. Every kernel touches a
few kilobytes and finishes in microseconds; the step is paced by the ~100 kernel launches of forward,
backward and optimizer, so the H200 is mostly idle and samples/s is tiny.

--fix larger_batch (= --fixed): batch 1024 with the learning rate scaled linearly (x128); the same number of launches now
carries 128x more samples, enough that the GPU, not the per-step host work, sets the pace (batch 256
was measured still host-bound on an H200: GPU busy 38% of the step).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name

BASE_BATCH, BASE_LR = 8, 0.002


class CifarNet(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                                 nn.ReLU(inplace=True))

        self.features = nn.Sequential(block(3, 32), block(32, 32), nn.MaxPool2d(2),
                                      block(32, 64), block(64, 64), nn.MaxPool2d(2),
                                      block(64, 128), nn.MaxPool2d(2))
        self.head = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["larger_batch"], steps=8000)
    args = parser.parse_args()
    fixed = "larger_batch" in chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (1024 if fixed else BASE_BATCH)
    if args.tiny and args.batch_size is None:
        batch = 32 if fixed else 2
    lr = BASE_LR * batch / BASE_BATCH  # linear scaling rule

    model = CifarNet().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    # A synthetic CIFAR-like data set resident on the device (50k uint8 images is 150 MB).
    n = 4096 if args.tiny else 50_000
    images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, device=device)
    targets = torch.randint(0, 10, (n,), device=device)

    bench = StepBench("small_batch", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        start = (step * batch) % (n - batch)
        x = images[start:start + batch].float().div_(255.0)
        y = targets[start:start + batch]
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
