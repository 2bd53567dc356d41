"""Planted problem: launch_overhead, two remedies (`torch_compile`, `fused_optimizer`). A 48-block MLP.

48 small residual MLP blocks of width 256 written with separate elementwise ops (bias-free linears,
explicit scale/shift, GELU, dropout-free residual add), batch 64, and AdamW with foreach=False. Each
kernel runs for a few microseconds but costs ~5-10 us of Python + launch on the host: ~1,500 launches
in forward+backward and ~10 per parameter tensor (240 tensors: ~2,400) in the per-tensor optimizer
loop, so the GPU waits on the CPU (~20-30 ms of host work per step against ~3 ms of GPU work).

--fix torch_compile: `torch.compile(model, mode="reduce-overhead")` (Inductor fuses the elementwise
chains and replays forward and backward as CUDA graphs, one launch each; compilation and graph capture
happen during the warm-up steps). Plain `torch.compile(model)` fuses but still launches ~700 kernels
per step, each shorter than its launch: measured still launch-bound on an H200.
--fix fused_optimizer: `AdamW(fused=True)` (one multi-tensor kernel instead of a per-parameter loop).
--fixed: both.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name


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
    add_workload_args(parser, fixes=["torch_compile", "fused_optimizer"], steps=2000)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (8 if args.tiny else 64)
    width, depth, classes = (32, 4, 10) if args.tiny else (256, 48, 100)

    model = ManyTinyOps(width, depth, classes).to(device)
    if "fused_optimizer" in fixes:
        # Fused AdamW: one multi-tensor kernel per step (CUDA; CPU in recent torch).
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    # The --tiny CPU smoke test must not need a C++ compiler: compile only on CUDA.
    compile_it = "torch_compile" in fixes and device.type == "cuda"
    step_model = torch.compile(model, mode="reduce-overhead") if compile_it else model

    n_batches = 8
    xs = torch.randn(n_batches, batch, width, device=device)
    ys = torch.randint(0, classes, (n_batches, batch), device=device)
    bench = StepBench("launch_bound", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        loss = F.cross_entropy(step_model(xs[step % n_batches]), ys[step % n_batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
