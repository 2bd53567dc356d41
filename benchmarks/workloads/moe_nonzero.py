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

--fix static_shapes: the same per-expert loop without host waits: tokens are sorted by expert once
(`argsort`, a one-hot count and `cumsum` on the GPU), and each expert takes a fixed-size slice of
capacity 1.25x the mean load (a padded index; tokens beyond it are dropped and their residual passes
through), so every shape is known without reading a count on the host. Same launches per expert.
--dispatch batched (a probe, not a fix): capacity-based dispatch as GShard/Switch do it: each token's
slot in its expert's buffer from a cumulative sum, the 8 experts as one batched matmul over a
[experts, capacity, d_model] buffer. No host waits and far fewer launches (it also changes the
launch structure, which the static-shapes remedy alone does not).
--compile (a probe, with --dispatch static): the static-shape model under torch.compile as GA501 advises
(`--compile-mode`, default reduce-overhead), what GA501 predicts for "static shapes, then compiled".
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import (
    StepBench,
    add_compile_probe,
    add_workload_args,
    chosen_fixes,
    compiled,
    pick_device,
    variant_name,
)

CAPACITY_FACTOR = 1.25


class MoEFeedForward(nn.Module):
    """Top-1 routed experts with stacked weights ([experts, out, in]); two dispatch implementations."""

    def __init__(self, d_model: int, hidden: int, experts: int, dispatch: str) -> None:
        super().__init__()
        self.router = nn.Linear(d_model, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, hidden, d_model) * d_model**-0.5)
        self.w2 = nn.Parameter(torch.randn(experts, d_model, hidden) * hidden**-0.5)
        self.dispatch = dispatch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        gate, expert = self.router(tokens).softmax(dim=-1).max(dim=-1)
        if self.dispatch == "batched":
            out = self.dispatch_batched(tokens, gate, expert)
        elif self.dispatch == "static":
            out = self.dispatch_static_loop(tokens, gate, expert)
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

    def dispatch_static_loop(self, tokens: torch.Tensor, gate: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[0]
        experts = self.w1.shape[0]
        capacity = int(CAPACITY_FACTOR * n / experts)
        order = torch.argsort(expert, stable=True)  # token indices grouped by expert
        counts = F.one_hot(expert, experts).sum(dim=0)  # (bincount would read its max on the host)
        starts = torch.cumsum(counts, dim=0) - counts
        slots = torch.arange(capacity, device=tokens.device)
        out = torch.zeros_like(tokens)
        for e in range(experts):
            valid = slots < counts[e]  # stays on the GPU: no host wait
            idx = order[torch.clamp(starts[e] + slots, max=n - 1)]
            h = F.gelu(tokens[idx] @ self.w1[e].t()) @ self.w2[e].t()
            out.index_add_(0, idx, (h * (gate[idx] * valid)[:, None]).to(out.dtype))
        return out

    def dispatch_batched(self, tokens: torch.Tensor, gate: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
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
    def __init__(self, d_model: int, heads: int, experts: int, dispatch: str) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.moe = MoEFeedForward(d_model, 4 * d_model, experts, dispatch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c))
        return x + self.moe(self.ln2(x))


class MoELM(nn.Module):
    def __init__(self, vocab: int, seq: int, d_model: int, layers: int, heads: int, experts: int,
                 dispatch: str) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList([Block(d_model, heads, experts, dispatch) for _ in range(layers)])
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
    parser.add_argument("--dispatch", choices=["nonzero", "static", "batched"], default=None,
                        help="expert dispatch (default: nonzero as planted, static with --fix static_shapes)")
    add_compile_probe(parser)
    args = parser.parse_args()
    dispatch = args.dispatch or ("static" if "static_shapes" in chosen_fixes(args) else "nonzero")

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = pick_device(args.tiny)
    batch = args.batch_size or (2 if args.tiny else 16)
    vocab, seq, d_model, layers, heads, experts = (128, 16, 32, 2, 4, 4) if args.tiny else (8192, 256, 512, 4, 8, 8)

    model = MoELM(vocab, seq, d_model, layers, heads, experts, dispatch).to(device)
    forward = compiled(model, args, device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device.type == "cuda")
    n_batches = 4
    data = torch.randint(0, vocab, (n_batches, batch, seq + 1), device=device)

    bench = StepBench("moe_nonzero", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        chunk = data[step % n_batches]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = forward(chunk[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, vocab).float(), chunk[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
