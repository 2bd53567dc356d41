"""Planted problem: fp32_math, two remedies (`tf32`, `bf16_autocast`). A GPT-style LM.

A GPT-style decoder LM (12 layers, d_model 768, 12 heads, seq 512, batch 16, vocab 32k) trained in
full FP32 with TF32 explicitly disabled for matmuls and cuDNN. Every GEMM then runs on the FP32
CUDA-core path (~60 TFLOP/s peak) instead of tensor cores: ~1.5 TFLOP per step (6 x 124M params x 8k
tokens + attention) is ~25-30 ms of FP32 GEMMs, most of the step.

--fix tf32: TF32 allowed for matmuls and cuDNN (tensor cores with FP32 storage, ~400 TFLOP/s dense).
--fix bf16_autocast: bf16 autocast around forward + loss (master weights and optimizer stay FP32).
--fixed: both (TF32 then covers whatever autocast leaves in FP32).
"""

from __future__ import annotations

import argparse
import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, d_model: int, n_layers: int, n_heads: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, n_heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.tok.weight  # weight tying
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02 / math.sqrt(1 if isinstance(m, nn.Embedding) else 2))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.lm_head(self.ln_f(self.blocks(self.tok(idx) + self.pos(pos))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["tf32", "bf16_autocast"], steps=200)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 16)
    vocab, seq, d_model, n_layers, n_heads = (128, 16, 32, 2, 4) if args.tiny else (32000, 512, 768, 12, 12)

    # Strict IEEE FP32 everywhere (the matmul setting is already PyTorch's default) unless fixed.
    torch.backends.cuda.matmul.allow_tf32 = "tf32" in fixes
    torch.backends.cudnn.allow_tf32 = "tf32" in fixes

    model = GPT(vocab, seq, d_model, n_layers, n_heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    n_batches = 4
    data = torch.randint(0, vocab, (n_batches, batch, seq + 1), device=device)

    bench = StepBench("fp32_transformer", variant_name(args), device, batch, args.steps)
    losses = []
    for step in range(args.steps):
        chunk = data[step % n_batches]
        x, y = chunk[:, :-1], chunk[:, 1:]
        amp = (torch.autocast(device_type=device.type, dtype=torch.bfloat16) if "bf16_autocast" in fixes
               else contextlib.nullcontext())
        with amp:
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())  # kept on the device: no per-step sync in either variant
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
