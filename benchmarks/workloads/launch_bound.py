"""Planted problem: launch_overhead.

48 small residual MLP blocks of width 256 written with separate elementwise ops (bias-free linears,
explicit scale/shift, GELU, dropout-free residual add), batch 64, and AdamW with foreach=False. Each
kernel runs for a few microseconds but costs ~5 us of Python + launch on the host: thousands of
launches per step (a per-parameter optimizer loop alone is ~10 launches per tensor), so the GPU waits
on the CPU.

--fixed: `torch.compile(model, mode="reduce-overhead")` (Inductor fuses the elementwise chains and
replays forward and backward as CUDA graphs, one launch each; compilation and graph capture happen
during the first steps, which gpuadvisor and the BENCH measurement both skip) and `AdamW(fused=True)`
(one multi-tensor kernel instead of a per-parameter loop). Plain `torch.compile(model)` fuses but still
launches ~700 kernels per step, each shorter than its launch: measured still launch-bound on an H200.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, pick_device


class TinyBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, width, bias=False)
        self.fc2 = nn.Linear(width, width, bias=False)
        self.scale = nn.Parameter(torch.ones(width))
        self.shift = nn.Parameter(torch.zeros(width))
        self.gate = nn.Parameter(torch.full((width,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * self.scale
        h = h + self.shift
        h = self.fc1(h)
        h = F.gelu(h)
        h = self.fc2(h)
        h = h * self.gate
        return x + h


class ManyTinyOps(nn.Module):
    def __init__(self, width: int, depth: int, num_classes: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([TinyBlock(width) for _ in range(depth)])
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (8 if args.tiny else 64)
    width, depth, classes = (32, 4, 10) if args.tiny else (256, 48, 100)

    model = ManyTinyOps(width, depth, classes).to(device)
    if args.fixed:
        # Fused AdamW needs floating-point params on a supported device (CUDA, or CPU in recent torch).
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        # The --tiny CPU smoke test must not need a C++ compiler: compile only on CUDA.
        step_model = torch.compile(model, mode="reduce-overhead") if device.type == "cuda" else model
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
        step_model = model

    n_batches = 8
    xs = torch.randn(n_batches, batch, width, device=device)
    ys = torch.randint(0, classes, (n_batches, batch), device=device)
    bench = StepBench("launch_bound", "fixed" if args.fixed else "planted", device, batch, args.steps)
    for step in range(args.steps):
        loss = F.cross_entropy(step_model(xs[step % n_batches]), ys[step % n_batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
