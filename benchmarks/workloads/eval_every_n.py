"""Planted problem: a periodic cost (`evaluate_less_often`). A nanoGPT-shaped training script.

The structure of karpathy/nanoGPT's train.py with its shakespeare-char model (6 layers, 6 heads,
d_model 384, block 256, batch 64, dropout 0.2): bf16 autocast, a GradScaler (disabled for bf16, as
nanoGPT does, but `scaler.step(optimizer)` still steps), gradient accumulation over 2 micro-batches,
batches sampled from a uint16 token array and copied pinned + non_blocking, `estimate_loss()` under
`torch.no_grad()` at iteration 0 and every `eval_interval` iterations (`eval_iters` forward passes on
each of the train and val splits, each read with `.item()`), and a `.item()` of the loss every
`log_interval` iterations. Here the evaluation runs every 50 iterations with 40 batches per split: the
80 forward passes (and their reads) cost a large share of the run, but no 10-step window in the middle
of training sees them.

--fix evaluate_less_often: eval_interval 500 (nanoGPT's own default is 2000 with 200 batches).
"""

from __future__ import annotations

import argparse
import contextlib
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.n_head = n_head
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd, bias=False), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd, bias=False), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, block: int, n_layer: int, n_head: int, n_embd: int, dropout: float) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block(n_embd, n_head, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["evaluate_less_often"], steps=400)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(1337)
    device = pick_device(args.tiny)
    device_type = device.type
    batch_size = args.batch_size or (4 if args.tiny else 64)
    block_size, n_layer, n_head, n_embd = (32, 2, 2, 32) if args.tiny else (256, 6, 6, 384)
    vocab_size, dropout = 65, 0.2
    gradient_accumulation_steps = 2
    eval_interval = 500 if "evaluate_less_often" in fixes else 50
    eval_iters = 4 if args.tiny else 40
    log_interval = 10
    learning_rate, warmup_iters, lr_decay_iters, min_lr = 1e-3, 100, 5000, 1e-4

    rng = np.random.default_rng(0)
    data = {"train": rng.integers(0, vocab_size, size=1_000_000, dtype=np.uint16),
            "val": rng.integers(0, vocab_size, size=100_000, dtype=np.uint16)}

    def get_batch(split: str) -> tuple[torch.Tensor, torch.Tensor]:
        d = data[split]
        ix = torch.randint(len(d) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy(d[i:i + block_size].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(d[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
        if device_type == "cuda":
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x.to(device), y.to(device)

    model = GPT(vocab_size, block_size, n_layer, n_head, n_embd, dropout).to(device)
    scaler = torch.amp.GradScaler(device_type, enabled=False)  # nanoGPT: enabled only for float16
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.99), weight_decay=0.1,
                                  fused=device_type == "cuda")
    ctx = (contextlib.nullcontext() if device_type == "cpu"
           else torch.autocast(device_type=device_type, dtype=torch.bfloat16))

    @torch.no_grad()
    def estimate_loss() -> dict[str, float]:
        out = {}
        model.eval()
        for split in ("train", "val"):
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                xb, yb = get_batch(split)
                with ctx:
                    _, loss = model(xb, yb)
                losses[k] = loss.item()
            out[split] = float(losses.mean())
        model.train()
        return out

    def get_lr(it: int) -> float:
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        ratio = min(1.0, (it - warmup_iters) / (lr_decay_iters - warmup_iters))
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)

    bench = StepBench("eval_every_n", variant_name(args), device, batch_size * gradient_accumulation_steps,
                      args.steps)
    X, Y = get_batch("train")
    for iter_num in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(iter_num)
        if iter_num % eval_interval == 0:
            losses = estimate_loss()
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
        for _ in range(gradient_accumulation_steps):
            with ctx:
                _, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps
            X, Y = get_batch("train")
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if iter_num % log_interval == 0:
            lossf = loss.item() * gradient_accumulation_steps
            if iter_num % (10 * log_interval) == 0:
                print(f"iter {iter_num}: loss {lossf:.4f}", flush=True)
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
