"""Planted problem: host_sync (`remove_host_syncs`). Per-step reads that hold up the next batch's preparation.

A small bf16 convnet (4 conv blocks, 64-256 channels) on 64x64 images at batch 256, fused AdamW. Batches
are prepared on the host by a background thread (a prefetcher, as many scripts write one instead of a
DataLoader): per-sample random crop and flip in numpy, then normalization with torch CPU ops and pinning, one
batch ahead. Every step the loop logs `loss.item()` and the batch accuracy `.item()`: each read waits for the
GPU to finish the step, and while the main thread waits the prefetcher makes no progress on the next
batch, so preparation and GPU work take turns instead of overlapping (issue 41: GA201 was not raised,
3% predicted, where removing the reads measured 31%).

--fix remove_host_syncs: loss and accuracy summed on the GPU, read every 50 steps.
"""

from __future__ import annotations

import argparse
import queue
import threading

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name

LOG_EVERY = 50
MEAN, STD = 0.45, 0.25


class Prefetcher:
    """Prepares batches in a background thread, `depth` ahead; `close()` stops it (a harness may run the
    script again in the same process)."""

    def __init__(self, batch: int, size: int, classes: int, pin: bool, depth: int = 2) -> None:
        self.batch, self.size, self.classes, self.pin = batch, size, classes, pin
        self.rng = np.random.default_rng(0)
        self.pool = self.rng.integers(0, 256, (8, batch, 3, size + 8, size + 8), dtype=np.uint8)
        self.q: queue.Queue[tuple[torch.Tensor, torch.Tensor]] = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _make(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        src = self.pool[k % len(self.pool)]
        out = np.empty((self.batch, 3, self.size, self.size), dtype=np.uint8)
        for i in range(self.batch):  # per-sample augmentation, the way a Dataset's __getitem__ does it
            dy, dx = self.rng.integers(0, 9, 2)
            crop = src[i, :, dy : dy + self.size, dx : dx + self.size]
            out[i] = crop[:, :, ::-1] if self.rng.random() < 0.5 else crop
        x = torch.from_numpy(out).float().div_(255.0).sub_(MEAN).div_(STD)
        y = torch.from_numpy(self.rng.integers(0, self.classes, self.batch))
        if self.pin:  # pinned here, in the prefetcher's thread: the loop's copies are asynchronous
            x, y = x.pin_memory(), y.pin_memory()
        return x, y

    def _run(self) -> None:
        k = 0
        while not self.stop.is_set():
            batch = self._make(k)
            while not self.stop.is_set():
                try:
                    self.q.put(batch, timeout=0.1)
                    break
                except queue.Full:
                    continue
            k += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5.0)

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.q.get()


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["remove_host_syncs"], steps=200)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (4 if args.tiny else 256)
    size, width, classes = (16, 8, 10) if args.tiny else (64, 64, 100)
    torch.backends.cudnn.benchmark = True
    model = nn.Sequential(block(3, width), block(width, width), nn.MaxPool2d(2), block(width, 2 * width),
                          block(2 * width, 4 * width), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(4 * width, classes)).to(device, memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device.type == "cuda")
    loader = Prefetcher(batch, size, classes, pin=device.type == "cuda")

    bench = StepBench("item_blocks_prep", variant_name(args), device, batch, args.steps)
    try:
        train(args, fixes, device, model, opt, loader, bench)
    finally:
        loader.close()


def train(args: argparse.Namespace, fixes: frozenset[str], device: torch.device, model: nn.Module,
          opt: torch.optim.Optimizer, loader: Prefetcher, bench: StepBench) -> None:
    total_loss = torch.zeros((), device=device)
    total_correct = torch.zeros((), device=device)
    for step in range(args.steps):
        x, y = next(loader)
        x = x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        y = y.to(device, non_blocking=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        correct = (logits.argmax(1) == y).float().mean()
        if "remove_host_syncs" in fixes:
            total_loss += loss.detach()
            total_correct += correct
            if (step + 1) % LOG_EVERY == 0:
                print(f"step {step + 1} loss {total_loss.item() / LOG_EVERY:.4f} "
                      f"acc {total_correct.item() / LOG_EVERY:.3f}", flush=True)
                total_loss.zero_()
                total_correct.zero_()
        else:
            running = (loss.item(), correct.item())  # logged every step: each read waits for the GPU
            if (step + 1) % LOG_EVERY == 0:
                print(f"step {step + 1} loss {running[0]:.4f} acc {running[1]:.3f}", flush=True)
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
