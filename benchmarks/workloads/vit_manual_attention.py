"""Planted problems: kernel_efficiency (`sdpa`) and fp32_math (`bf16_autocast`). A ViT at 384 px in TF32.

A ViT-B/16 (12 layers, d_model 768, 12 heads) on 384x384 images (577 tokens), batch 32, trained in FP32
with TF32 allowed for matmuls (`torch.set_float32_matmul_precision("high")`, what many scripts set) and
hand-written attention (q @ k^T * scale, softmax, @ v) materializing [32, 12, 577, 577] FP32 tensors in
every layer. Two different wastes of busy time: the attention's memory-bound score tensors, and TF32
GEMMs where bf16 has twice the peak.

--fix sdpa: F.scaled_dot_product_attention (the FP32 inputs take the memory-efficient kernel).
--fix bf16_autocast: bf16 autocast around forward + loss (the hand-written attention stays).
--fixed: both (flash attention in bf16).
"""

from __future__ import annotations

import argparse
import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, sdpa: bool) -> None:
        super().__init__()
        self.heads = heads
        self.sdpa = sdpa
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v)
        else:
            attn = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
            attn = attn.softmax(dim=-1)
            y = attn @ v
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, sdpa: bool) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, sdpa)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, image: int, patch: int, dim: int, depth: int, heads: int, classes: int, sdpa: bool) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[EncoderBlock(dim, heads, sdpa) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["sdpa", "bf16_autocast"], steps=60)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    torch.set_float32_matmul_precision("high")
    batch = args.batch_size or (2 if args.tiny else 32)
    image, patch, dim, depth, heads = (32, 8, 32, 2, 4) if args.tiny else (384, 16, 768, 12, 12)

    model = ViT(image, patch, dim, depth, heads, 1000, sdpa="sdpa" in fixes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device.type == "cuda")
    n_batches = 4
    images = torch.randn(n_batches, batch, 3, image, image, device=device)
    labels = torch.randint(0, 1000, (n_batches, batch), device=device)

    bench = StepBench("vit_manual_attention", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        amp = (torch.autocast(device_type=device.type, dtype=torch.bfloat16) if "bf16_autocast" in fixes
               else contextlib.nullcontext())
        with amp:
            loss = F.cross_entropy(model(images[step % n_batches]), labels[step % n_batches])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
