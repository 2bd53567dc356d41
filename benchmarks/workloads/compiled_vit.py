"""Planted problem: fp32_math (fix `tf32`). A torch.compile'd vision transformer.

A ViT (224x224 images, 16x16 patches: 196 tokens + a class token, width 384, 6 heads, 6 pre-norm
blocks, MLP 1536, 1000 classes; 11.4M parameters) compiled with `torch.compile(model)` and trained at
batch 128 with fused AdamW on images resident on the GPU (uint8, normalized per step). The script
leaves `torch.get_float32_matmul_precision()` at PyTorch's default, "highest": every matmul, inside
Inductor's graph too, runs in strict FP32 on CUDA cores (Inductor warns about exactly this).

Why it is slow on an H200: a step is ~1.7 TFLOP of GEMMs (6 x 11.4M parameters x 25k tokens plus
attention); strict FP32 runs them at ~50-60 TFLOP/s (~30 ms) where TF32 tensor cores need ~5-7 ms;
compilation has already fused the elementwise work (~2-3 ms), so the GEMMs are most of the step.

--fix tf32: `torch.set_float32_matmul_precision("high")` before compiling: the same FP32 model and
weights, GEMMs on TF32 tensor cores (the one-line fix Inductor suggests; no autocast).

On a CPU (`--tiny`) the model is compiled with `backend="eager"` (Dynamo traces it, no C++ compiler
needed), so the smoke test still checks that the model compiles without graph breaks.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, image: int, patch: int, dim: int, depth: int, heads: int, classes: int) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["tf32"], steps=300)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    if "tf32" in fixes:
        torch.set_float32_matmul_precision("high")
    device = pick_device(args.tiny)
    batch = args.batch_size or (4 if args.tiny else 128)
    image, patch, dim, depth, heads = (32, 8, 32, 2, 4) if args.tiny else (224, 16, 384, 6, 6)

    model = VisionTransformer(image, patch, dim, depth, heads, 1000).to(device)
    compiled = torch.compile(model) if device.type == "cuda" else torch.compile(model, backend="eager")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device.type == "cuda")
    n_batches = 4
    images = torch.randint(0, 256, (n_batches, batch, 3, image, image), dtype=torch.uint8, device=device)
    labels = torch.randint(0, 1000, (n_batches, batch), device=device)

    bench = StepBench("compiled_vit", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        x = images[step % n_batches].float().div_(127.5).sub_(1.0)
        loss = F.cross_entropy(compiled(x), labels[step % n_batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
