"""Planted problem: host_sync (fix `remove_host_syncs`). A residual MLP, batch 256, data on the GPU.

A residual MLP (8 blocks of width 1024, 34 parameter tensors) whose training loop logs, every step,
the gradient norm of every parameter with `p.grad.norm().item()`, `loss.item()`, and an accuracy counted
sample by sample (`preds[i].item() == y[i].item()`). Each `.item()` waits for the GPU to drain and
then copies a few bytes back: the GPU idles while the host round-trips ~550 times per step and then
refills an empty queue (optimizer, next forward). ~550 x ~30 us of round trips per step against ~1 ms of GPU work.

--fix remove_host_syncs (= --fixed): the same statistics are computed on the GPU (torch._foreach_norm +
torch.stack), accumulated there, and read with a single transfer every 50 steps.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name

LOG_EVERY = 50


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.fc(self.norm(x)))


class ResidualMLP(nn.Module):
    def __init__(self, in_dim: int, width: int, depth: int, num_classes: int) -> None:
        super().__init__()
        self.inp = nn.Linear(in_dim, width)
        self.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.inp(x)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["remove_host_syncs"], steps=3000)
    args = parser.parse_args()
    # The one remedy of this workload: statistics kept on the GPU, read every LOG_EVERY steps.
    fixed = "remove_host_syncs" in chosen_fixes(args)


    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (8 if args.tiny else 256)
    width, depth, in_dim, classes = (32, 4, 16, 10) if args.tiny else (1024, 8, 512, 100)

    model = ResidualMLP(in_dim, width, depth, classes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    params = [p for p in model.parameters()]
    # Synthetic data set already on the device, so only the logging differs between variants.
    n_batches = 8
    xs = torch.randn(n_batches, batch, in_dim, device=device)
    ys = torch.randint(0, classes, (n_batches, batch), device=device)

    history: list[dict[str, float]] = []
    grad_norm_sum = torch.zeros(len(params), device=device)
    loss_sum = torch.zeros((), device=device)
    correct_sum = torch.zeros((), device=device)

    bench = StepBench("sync_bound", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        x, y = xs[step % n_batches], ys[step % n_batches]
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if fixed:
            norms = torch.stack(torch._foreach_norm([p.grad for p in params]))
            grad_norm_sum += norms
            loss_sum += loss.detach()
            correct_sum += (logits.argmax(dim=1) == y).sum()
        else:
            grad_norms = {name: p.grad.norm().item() for name, p in model.named_parameters()}
            preds = logits.argmax(dim=1)
            correct = 0
            for i in range(len(y)):  # per-sample bookkeeping: two host round-trips per sample
                correct += int(preds[i].item() == y[i].item())
            history.append({"loss": loss.item(), "acc": correct / len(y),
                            "max_grad_norm": max(grad_norms.values())})
        opt.step()
        if fixed and (step + 1) % LOG_EVERY == 0:
            stats = torch.cat([grad_norm_sum, loss_sum.view(1), correct_sum.view(1)]).tolist()  # one sync
            history.append({"loss": stats[-2] / LOG_EVERY, "acc": stats[-1] / (LOG_EVERY * batch),
                            "max_grad_norm": max(stats[:-2]) / LOG_EVERY})
            grad_norm_sum.zero_()
            loss_sum.zero_()
            correct_sum.zero_()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
