"""Planted problem: host_sync through data-dependent shapes (fix `static_shapes`). A mixture-of-experts LM.

A causal transformer LM with mixture-of-experts feed-forward layers (4 layers, d_model 512, 8 heads,
8 experts of 512 -> 2048 -> 512 per layer with top-1 routing, seq 256, batch 16, vocab 8,192; bf16
autocast, TF32, fused AdamW, tokens on the GPU). The expert dispatch is written the obvious way: for
each expert, `idx = torch.nonzero(expert == e)`, gather those tokens, run the expert, `index_add_` the
result back. `nonzero` has a data-dependent output size, so each call copies the count to the host and
waits for the GPU: 32 waits per forward (8 experts x 4 layers), and the backward of the gathers and
index_adds needs no more.

Why it is slow on an H200: the model is small (~0.5 TFLOP per step, ~2-3 ms of GPU work) and its
eager forward issues ~500 ops. Without syncs the host runs ahead and the GPU stays fed; with a sync in
every expert of every layer, the host waits for the GPU 32 times per step and the GPU waits for the
host after each wait: host time and GPU time add up instead of overlapping.

--fix static_shapes: capacity-based dispatch with static shapes (as GShard/Switch do): each token's
slot in its expert's buffer is computed with a cumulative sum, tokens beyond a capacity of 1.25x the
mean load are dropped (their residual passes through), the 8 experts run as one batched matmul over a
[experts, capacity, d_model] buffer, and the outputs are gathered back. No host waits, fewer launches.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name

CAPACITY_FACTOR = 1.25


class MoEFeedForward(nn.Module):
    """Top-1 routed experts with stacked weights ([experts, out, in]); two dispatch implementations."""

    def __init__(self, d_model: int, hidden: int, experts: int, static_shapes: bool) -> None:
        super().__init__()
        self.router = nn.Linear(d_model, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, hidden, d_model) * d_model**-0.5)
        self.w2 = nn.Parameter(torch.randn(experts, d_model, hidden) * hidden**-0.5)
        self.static_shapes = static_shapes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        gate, expert = self.router(tokens).softmax(dim=-1).max(dim=-1)
        if self.static_shapes:
            out = self.dispatch_static(tokens, gate, expert)
        else:
            out = self.dispatch_nonzero(tokens, gate, expert)
        return out.reshape(shape)

    def dispatch_nonzero(self, tokens: torch.Tensor, gate: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(tokens)
        for e in range(self.w1.shape[0]):
            idx = torch.nonzero(expert == e).squeeze(1)  # data-dependent size: waits for the GPU
            if idx.numel() == 0:
                continue
            h = F.gelu(tokens[idx] @ self.w1[e].t()) @ self.w2[e].t()
            out.index_add_(0, idx, (h * gate[idx, None]).to(out.dtype))
        return out

    def dispatch_static(self, tokens: torch.Tensor, gate: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
        n, d = tokens.shape
        experts = self.w1.shape[0]
        capacity = int(CAPACITY_FACTOR * n / experts)
        onehot = F.one_hot(expert, experts)
        position = ((onehot.cumsum(dim=0) - 1) * onehot).sum(dim=1)  # slot within the token's expert
        kept = position < capacity
        slot = torch.where(kept, expert * capacity + position, experts * capacity)  # overflow: spare row
        buffer = tokens.new_zeros(experts * capacity + 1, d).index_copy(0, slot, tokens)
        h = buffer[:-1].view(experts, capacity, d)
        h = torch.bmm(F.gelu(torch.bmm(h, self.w1.transpose(1, 2))), self.w2.transpose(1, 2))
        h = torch.cat([h.reshape(experts * capacity, d), h.new_zeros(1, d)])
        return h[slot] * (gate * kept).to(h.dtype)[:, None]


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, experts: int, static_shapes: bool) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.moe = MoEFeedForward(d_model, 4 * d_model, experts, static_shapes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c))
        return x + self.moe(self.ln2(x))


class MoELM(nn.Module):
    def __init__(self, vocab: int, seq: int, d_model: int, layers: int, heads: int, experts: int,
                 static_shapes: bool) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList([Block(d_model, heads, experts, static_shapes) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["static_shapes"], steps=1000)
    args = parser.parse_args()
    static_shapes = "static_shapes" in chosen_fixes(args)

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 16)
    vocab, seq, d_model, layers, heads, experts = (128, 16, 32, 2, 4, 4) if args.tiny else (8192, 256, 512, 4, 8, 8)

    model = MoELM(vocab, seq, d_model, layers, heads, experts, static_shapes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device.type == "cuda")
    n_batches = 4
    data = torch.randint(0, vocab, (n_batches, batch, seq + 1), device=device)

    bench = StepBench("moe_nonzero", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        chunk = data[step % n_batches]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(chunk[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, vocab).float(), chunk[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
