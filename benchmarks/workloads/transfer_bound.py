"""Planted problem: host_device_transfer, two remedies (`uint8_inputs`, `prefetch_copies`). Small convnet.

Every step moves a 256x3x224x224 float32 batch (154 MB) from pageable host memory with a blocking
`.to(device)`. Pageable copies go through a driver staging buffer at ~12 GB/s (~13 ms) and block the
host, while the small 3-conv net needs only a few ms of GPU time: the copy dominates the step.

--fix uint8_inputs: the batches stay uint8 (38.5 MB, 4x fewer bytes: ~3 ms pageable) and are converted
and normalized on the GPU.
--fix prefetch_copies: the batches live in pinned memory and are copied with non_blocking=True on a
side CUDA stream one step ahead (the next batch's copy, ~3 ms at ~50 GB/s, overlaps this step's compute).
--fixed: both.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class SmallConvNet(nn.Module):
    def __init__(self, num_classes: int = 100) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 32, kernel_size=4, stride=4)
        self.conv1 = nn.Conv2d(32, 64, kernel_size=3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(64, 128, kernel_size=3, stride=2, padding=1)
        self.head = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem(x))
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["uint8_inputs", "prefetch_copies"], steps=1200)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (4 if args.tiny else 256)
    size = 32 if args.tiny else 224
    n_batches = 2  # a small in-memory "dataset" of ready batches, cycled

    model = SmallConvNet().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    labels = [torch.randint(0, 100, (batch,)) for _ in range(n_batches)]
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    raw = [torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8) for _ in range(n_batches)]
    if "uint8_inputs" in fixes:
        images = raw  # 4x fewer bytes; converted and normalized on the GPU
    else:
        # Decoded and normalized on the CPU as float32, in ordinary (pageable) memory.
        mean_c, std_c = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
        images = [((r.float() / 255.0) - mean_c) / std_c for r in raw]
    del raw
    pin = "prefetch_copies" in fixes and device.type == "cuda"
    if pin:  # page-locked memory: DMA at full bandwidth, asynchronous
        images = [im.pin_memory() for im in images]
        labels = [y.pin_memory() for y in labels]
    copy_stream = torch.cuda.Stream() if pin else None

    def fetch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Start copying batch i to the device (on the side stream when there is one)."""
        if copy_stream is None:
            return images[i].to(device), labels[i].to(device)
        with torch.cuda.stream(copy_stream):
            return images[i].to(device, non_blocking=True), labels[i].to(device, non_blocking=True)

    upcoming = fetch(0) if copy_stream is not None else None
    bench = StepBench("transfer_bound", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        i = step % n_batches
        if copy_stream is not None and upcoming is not None:
            torch.cuda.current_stream().wait_stream(copy_stream)
            x, y = upcoming
            # The tensors were made on the side stream: tell the allocator they are used on this one.
            x.record_stream(torch.cuda.current_stream())
            y.record_stream(torch.cuda.current_stream())
            upcoming = fetch((step + 1) % n_batches)  # overlaps with this step's compute
        else:
            x = images[i].to(device)
            y = labels[i].to(device)
        if x.dtype == torch.uint8:
            x = (x.float().div_(255.0) - mean) / std
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
