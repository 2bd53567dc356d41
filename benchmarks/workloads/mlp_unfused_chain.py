"""Planted problem: kernel_efficiency (`torch_compile`). Memory-bound elementwise chains between GEMMs.

A token-wise residual MLP stack (8 blocks, d_model 1024, hidden 4096, 16k tokens per step) in bf16
autocast with fused AdamW, written the way research code often is: LayerNorm by hand (mean, variance,
subtract, divide, scale, shift), the tanh GELU by its formula, a bias-add, dropout and a residual scale,
each a separate elementwise or reduction kernel reading and writing the whole activation. The GEMMs
are fast bf16 tensor-core kernels; the chains of memory-bound kernels around them move many times the
bytes a fused kernel would, and dominate a step in which the GPU is never idle.

--fix torch_compile: torch.compile(model) (default mode: Inductor fuses each chain into a few kernels).
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


class MLPBlock(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.ln_w = nn.Parameter(torch.ones(dim))
        self.ln_b = nn.Parameter(torch.zeros(dim))
        self.fc1 = nn.Linear(dim, hidden, bias=False)
        self.b1 = nn.Parameter(torch.zeros(hidden))
        self.fc2 = nn.Linear(hidden, dim)
        self.scale = nn.Parameter(torch.full((dim,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = layer_norm(x, self.ln_w, self.ln_b)
        h = gelu(self.fc1(h) + self.b1)
        h = F.dropout(h, p=0.1, training=self.training)
        return x + self.scale * self.fc2(h)


class Net(nn.Module):
    def __init__(self, dim: int, hidden: int, depth: int, classes: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[MLPBlock(dim, hidden) for _ in range(depth)])
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["torch_compile"], steps=60)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    torch.backends.cuda.matmul.allow_tf32 = True
    tokens = args.batch_size or (64 if args.tiny else 16384)
    dim, hidden, depth, classes = (32, 64, 2, 10) if args.tiny else (1024, 4096, 8, 1000)

    model = Net(dim, hidden, depth, classes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device.type == "cuda")
    step_model = model
    if "torch_compile" in fixes:
        step_model = torch.compile(model, backend="eager") if device.type != "cuda" else torch.compile(model)
    n_batches = 4
    xs = torch.randn(n_batches, tokens, dim, device=device)
    ys = torch.randint(0, classes, (n_batches, tokens), device=device)

    bench = StepBench("mlp_unfused_chain", variant_name(args), device, tokens, args.steps)
    for step in range(args.steps):
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(step_model(xs[step % n_batches]), ys[step % n_batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
