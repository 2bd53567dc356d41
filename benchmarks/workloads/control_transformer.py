"""Control (must stay quiet): a well-tuned GPT-style LM training loop.

Same architecture as fp32_transformer.py (12 layers, d_model 768, seq 512, vocab 32k) with batch 32,
bf16 autocast, TF32 on, flash attention via scaled_dot_product_attention, fused AdamW, token batches
already resident on the GPU, and exactly one host read (the loss) every 50 steps.

--fixed is accepted for symmetry with the planted workloads and changes nothing.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, pick_device, variant_name

LOG_EVERY = 50


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
    add_workload_args(parser, fixes=[], steps=600)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 32)
    vocab, seq, d_model, n_layers, n_heads = (128, 16, 32, 2, 4) if args.tiny else (32000, 512, 768, 12, 12)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    model = GPT(vocab, seq, d_model, n_layers, n_heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    n_batches = 4
    data = torch.randint(0, vocab, (n_batches, batch, seq + 1), device=device)

    bench = StepBench("control_transformer", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        chunk = data[step % n_batches]
        x, y = chunk[:, :-1], chunk[:, 1:]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % LOG_EVERY == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)  # the only sync: every 50 steps
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
