"""Planted problem: low_occupancy (fix `fix_kernel_grid`). An MLP over token sequences.

A model whose blocks use a custom fused RMSNorm written in Triton (wrapped in a
torch.autograd.Function, backward in plain torch). The kernel is launched with grid=(4,): four programs
each loop over thousands of rows, so 4 of the H200's 132 SMs do all the work while the rest idle, and
this one kernel dominates the step.

--fix fix_kernel_grid (= --fixed): the same kernel launched with one program per row (grid=(n_rows,)), which fills the GPU.
Without Triton/CUDA (the `--tiny` CPU smoke test) an equivalent torch implementation is used.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only machines: the torch fallback below is used instead
    triton = None

if triton is not None:

    @triton.jit
    def _rmsnorm_fwd(
        x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols, eps, ROWS_PER_PROG: tl.constexpr, BLOCK: tl.constexpr
    ):
        pid = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        col_mask = cols < n_cols
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        # Each program normalizes a contiguous chunk of ROWS_PER_PROG rows, one after the other:
        # correct for any grid size, fast only when the grid is large enough to fill the GPU.
        for i in range(0, ROWS_PER_PROG):
            row = pid * ROWS_PER_PROG + i
            in_range = row < n_rows
            mask = col_mask & in_range
            x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
            rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
            tl.store(y_ptr + row * n_cols + cols, x * rstd * w, mask=mask)
            tl.store(rstd_ptr + row, rstd, mask=in_range)


PROGRAMS = {"planted": 4}  # the planted launch configuration: a fixed, tiny grid


def rmsnorm_forward(
    x2d: torch.Tensor, weight: torch.Tensor, eps: float, fixed: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    n_rows, n_cols = x2d.shape
    if triton is None or not x2d.is_cuda:
        xf = x2d.to(torch.promote_types(x2d.dtype, torch.float32))
        rstd = torch.rsqrt(xf.pow(2).mean(dim=1) + eps)
        return (xf * rstd[:, None] * weight.to(xf.dtype)).to(x2d.dtype), rstd
    y = torch.empty_like(x2d)
    rstd = torch.empty(n_rows, device=x2d.device, dtype=torch.float32)
    programs = n_rows if fixed else PROGRAMS["planted"]
    rows_per_prog = triton.cdiv(n_rows, programs)
    _rmsnorm_fwd[(programs,)](
        x2d,
        weight,
        y,
        rstd,
        n_rows,
        n_cols,
        eps,
        ROWS_PER_PROG=rows_per_prog,
        BLOCK=triton.next_power_of_2(n_cols),
        num_warps=4,
    )
    return y, rstd


class TritonRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float, fixed: bool) -> torch.Tensor:
        x2d = x.reshape(-1, x.shape[-1]).contiguous()
        y, rstd = rmsnorm_forward(x2d, weight, eps, fixed)
        ctx.save_for_backward(x2d, weight, rstd)
        return y.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None]:
        x2d, weight, rstd = ctx.saved_tensors
        g = grad_out.reshape(-1, x2d.shape[1])
        xhat = x2d * rstd[:, None]
        gw = g * weight
        grad_x = rstd[:, None] * (gw - xhat * (gw * xhat).mean(dim=1, keepdim=True))
        grad_w = (g * xhat).sum(dim=0)
        return grad_x.view_as(grad_out), grad_w, None, None


class RMSNorm(nn.Module):
    def __init__(self, width: int, fixed: bool, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps
        self.fixed = fixed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return TritonRMSNorm.apply(x, self.weight, self.eps, self.fixed)


class Block(nn.Module):
    def __init__(self, width: int, fixed: bool) -> None:
        super().__init__()
        self.norm = RMSNorm(width, fixed)
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.fc(self.norm(x)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["fix_kernel_grid"], steps=600)
    args = parser.parse_args()
    fixed = "fix_kernel_grid" in chosen_fixes(args)

    torch.manual_seed(0)
    # Everything else is well tuned: TF32 matmuls, data on the device, no per-step syncs.
    torch.backends.cuda.matmul.allow_tf32 = True
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 32)
    seq, width, depth, classes = (8, 32, 2, 10) if args.tiny else (512, 1024, 4, 100)

    model = nn.Sequential(*[Block(width, fixed) for _ in range(depth)]).to(device)
    head = nn.Linear(width, classes).to(device)
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-4)
    n_batches = 4
    xs = torch.randn(n_batches, batch, seq, width, device=device)
    ys = torch.randint(0, classes, (n_batches, batch), device=device)

    bench = StepBench("low_occupancy", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        h = model(xs[step % n_batches])
        loss = F.cross_entropy(head(h.mean(dim=1)), ys[step % n_batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
