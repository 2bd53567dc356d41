"""Planted problem: fp32_math.

A GPT-style decoder LM (12 layers, d_model 768, 12 heads, seq 512, batch 16, vocab 32k) trained in
full FP32 with TF32 explicitly disabled for matmuls and cuDNN. Every GEMM then runs on the H100's FP32
CUDA-core path (~60 TFLOPS peak) instead of its tensor cores (~990 TFLOPS dense BF16): the step is
several times slower than it needs to be.

--fixed: bf16 autocast around forward + loss (master weights and optimizer stay FP32), and TF32
enabled for whatever remains in FP32.
"""

from __future__ import annotations

import argparse
import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, pick_device


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
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 16)
    vocab, seq, d_model, n_layers, n_heads = (128, 16, 32, 2, 4) if args.tiny else (32000, 512, 768, 12, 12)

    if args.fixed:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        # Strict IEEE FP32 everywhere (the matmul setting is already PyTorch's default).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    model = GPT(vocab, seq, d_model, n_layers, n_heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    n_batches = 4
    data = torch.randint(0, vocab, (n_batches, batch, seq + 1), device=device)

    bench = StepBench("fp32_transformer", "fixed" if args.fixed else "planted", device, batch, args.steps)
    losses = []
    for step in range(args.steps):
        chunk = data[step % n_batches]
        x, y = chunk[:, :-1], chunk[:, 1:]
        amp = (torch.autocast(device_type=device.type, dtype=torch.bfloat16) if args.fixed
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
