"""Fixture (synthetic, shaped like karpathy/nanoGPT's train.py as shipped): `estimate_loss()` at
iteration 0 and every `eval_interval` iterations (2 x eval_iters forward calls under torch.no_grad,
`model.eval()`), gradient accumulation, `scaler.step(optimizer)` with a GradScaler, a checkpoint
saved after each evaluation. Small enough for the CPU."""

import argparse
import os
import time

import torch
from torch import nn
from torch.nn import functional as F

p = argparse.ArgumentParser()
p.add_argument("--max-iters", type=int, default=60)
p.add_argument("--eval-interval", type=int, default=25)
p.add_argument("--eval-iters", type=int, default=20)
p.add_argument("--out-dir", default="out")
p.add_argument("--compile", action="store_true")
# stands in for torch.compile's first call, which compiles for tens of seconds on a GPU
p.add_argument("--first-call-seconds", type=float, default=0.0)
args = p.parse_args()

gradient_accumulation_steps = 2
batch_size, block_size, vocab, n_embd = 8, 32, 64, 64
data = torch.randint(0, vocab, (20_000,))


def get_batch(split):
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i : i + block_size] for i in ix])
    y = torch.stack([data[i + 1 : i + 1 + block_size] for i in ix])
    return x, y


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        return x + self.mlp(self.ln(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.blocks = nn.Sequential(*[Block() for _ in range(2)])
        self.head = nn.Linear(n_embd, vocab)

    def forward(self, idx, targets=None):
        global first_call_pending
        if first_call_pending:
            first_call_pending = False
            time.sleep(args.first_call_seconds)
        logits = self.head(self.blocks(self.wte(idx)))
        loss = F.cross_entropy(logits.view(-1, vocab), targets.view(-1)) if targets is not None else None
        return logits, loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


first_call_pending = args.first_call_seconds > 0
model = GPT()
scaler = torch.amp.GradScaler("cpu", enabled=False)  # nanoGPT: enabled=(dtype == 'float16')
optimizer = model.configure_optimizers()
if args.compile:
    model = torch.compile(model)


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(args.eval_iters)
        for k in range(args.eval_iters):
            X, Y = get_batch(split)
            logits, loss = model(X, Y)  # noqa: RUF059 (as nanoGPT writes it)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


X, Y = get_batch("train")
t0 = time.time()
iter_num = 0
best_val_loss = 1e9
while True:
    if iter_num % args.eval_interval == 0:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
        if iter_num > 0:
            os.makedirs(args.out_dir, exist_ok=True)
            checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": iter_num}
            torch.save(checkpoint, os.path.join(args.out_dir, "ckpt.pt"))
    for micro_step in range(gradient_accumulation_steps):  # noqa: B007 (as nanoGPT writes it)
        logits, loss = model(X, Y)
        loss = loss / gradient_accumulation_steps
        X, Y = get_batch("train")
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    iter_num += 1
    if iter_num > args.max_iters:
        break
print("trained", iter_num, flush=True)
