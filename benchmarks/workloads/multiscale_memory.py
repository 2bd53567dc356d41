"""Planted problem: memory, allocator churn (fix `expandable_segments`). A CNN trained at varying resolutions.

Multi-scale training as detection codebases do it: a ResNet-style convnet (stem + 4 stages of
residual blocks, 64-128-256-512 channels; bf16 autocast, channels_last, SGD with momentum) whose
input resolution is drawn anew for every batch from 128-320 px in steps of 32 (batch 32; images made
on the GPU, resized with `F.interpolate`). cudnn.benchmark is off (new shapes would each be
autotuned). The job runs beside another process on the same GPU and caps itself with
`torch.cuda.set_per_process_memory_fraction` at 1.3x the peak of a trial step at 320 px.

Why it is slow on an H200: activations change size every step (a 320 px batch needs 6x the memory of a
128 px one); the caching allocator's segments fragment, and under the cap it repeatedly frees all
cached memory (`cudaFree`, synchronizing the device) and allocates again (`cudaMalloc`), stalling
host and GPU for milliseconds every few steps.

--fix expandable_segments: `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` set by the script before
its first CUDA allocation (both variants run in fresh processes).
--compile (a probe, not a fix): the model under torch.compile as GA501 advises (`--compile-mode`, default
reduce-overhead): a new input shape every step means recompiling (then dynamic shapes) and a CUDA graph
recorded per shape, under the same memory cap.
"""

from __future__ import annotations

import argparse
import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import (
    StepBench,
    add_compile_probe,
    add_workload_args,
    chosen_fixes,
    compiled,
    pick_device,
    variant_name,
)


class Bottleneck(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, widths: tuple[int, ...], classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        stages, cin = [], widths[0]
        for i, w in enumerate(widths):
            stages += [Bottleneck(cin, w, 1 if i == 0 else 2), Bottleneck(w, w, 1)]
            cin = w
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["expandable_segments"], steps=1000)
    add_compile_probe(parser)
    args = parser.parse_args()
    if "expandable_segments" in chosen_fixes(args):
        # Read when the CUDA caching allocator starts (the first CUDA allocation, below). A torch that
        # parsed its allocator configuration at import gets the same setting at run time as well.
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        if torch.cuda.is_available() and hasattr(torch.cuda.memory, "_set_allocator_settings"):
            torch.cuda.memory._set_allocator_settings("expandable_segments:True")

    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 32)
    widths, sizes = ((8, 16), list(range(32, 65, 16))) if args.tiny else ((64, 128, 256, 512), list(range(128, 321, 32)))
    sampler = random.Random(0)

    model = ResNet(widths, 80).to(device, memory_format=torch.channels_last)
    forward = compiled(model, args, device)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)
    base = torch.rand(batch, 3, max(sizes), max(sizes), device=device)  # a batch at full size, resized per step
    labels = torch.randint(0, 80, (batch,), device=device)

    def train_step(size: int) -> None:
        x = F.interpolate(base, size=(size, size), mode="bilinear", align_corners=False)
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(forward(x), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    if device.type == "cuda":
        train_step(max(sizes))  # trial step at the largest resolution: how much memory does the job need?
        torch.cuda.synchronize()
        need = torch.cuda.max_memory_allocated(device)
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, 1.3 * need / total), torch.cuda.current_device())
        print(f"memory cap {1.3 * need / 2**30:.2f} GiB (trial peak {need / 2**30:.2f} GiB)", flush=True)

    bench = StepBench("multiscale_memory", variant_name(args), device, batch, args.steps)
    for _ in range(args.steps):
        train_step(sampler.choice(sizes))
        bench.step()
    bench.finish()
    if device.type == "cuda":
        stats = torch.cuda.memory_stats(device)
        print(f"allocator: {stats.get('num_alloc_retries', 0)} retries, {stats.get('num_device_alloc', 0)} "
              f"cudaMalloc, {stats.get('num_device_free', 0)} cudaFree", flush=True)


if __name__ == "__main__":
    main()
