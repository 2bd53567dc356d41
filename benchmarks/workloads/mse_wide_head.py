"""Planted problem: kernel_efficiency (`compiled_loss`). A squared error written by hand over a wide output.

A regression MLP in bf16 autocast (4 layers of 4096, 4096 rows per step) predicts a 65536-wide output
(a 256x256 map per row) through a bf16 head [4096, 1024] x [1024, 65536]; the loss is written by hand
"for stability" in FP32: `((pred.float() - target) ** 2).mean()`. Upcast, subtract, square and mean in
the forward, and their backward, are separate memory-bound passes over [4096, 65536] FP32 tensors (1 GiB
each): a row-wise loss over a wide output that is not a cross-entropy (issue 41: GA1105 called it a
"65536-word vocabulary", 169% of the step, and priced a fused cross-entropy).

--fix compiled_loss: the same loss function under `torch.compile` (Inductor fuses the passes; on a CPU
`backend="eager"`).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name


def squared_error(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((pred.float() - target) ** 2).mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["compiled_loss"], steps=60)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    rows = args.batch_size or (8 if args.tiny else 4096)
    d_in, hidden, wide = (32, 64, 1024) if args.tiny else (1024, 4096, 65536)
    torch.backends.cuda.matmul.allow_tf32 = True

    trunk = [nn.Linear(d_in, hidden), nn.GELU()]
    for _ in range(3):
        trunk += [nn.Linear(hidden, hidden), nn.GELU()]
    model = nn.Sequential(*trunk, nn.Linear(hidden, d_in), nn.GELU(), nn.Linear(d_in, wide)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    loss_fn = squared_error
    if "compiled_loss" in fixes:
        loss_fn = torch.compile(squared_error, backend="inductor" if device.type == "cuda" else "eager")
    n_batches = 2
    xs = [torch.randn(rows, d_in, device=device) for _ in range(n_batches)]
    ys = [torch.randn(rows, wide, device=device) for _ in range(n_batches)]

    bench = StepBench("mse_wide_head", variant_name(args), device, rows, args.steps)
    for step in range(args.steps):
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            pred = model(xs[step % n_batches])
        loss = loss_fn(pred, ys[step % n_batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
