"""Planted problem: small_batch (fix `larger_batch`). A two-tower retrieval model (embedding-heavy).

A two-tower recommender trained with in-batch negatives: the user tower pools the embeddings of the
user's last 50 items (`F.embedding_bag(..., mode="mean")` over a 100k-item x 64 table) with a user-id
embedding (200k x 64) through an MLP (128 -> 512 -> 64); the item tower embeds the candidate item
(the shared item table) and its category (1,000 x 64) through an MLP (128 -> 512 -> 64); the loss is
softmax cross-entropy over the batch's user x item similarity matrix (temperature 0.05). Adam
(`foreach=True`), TF32 on, interaction ids resident on the GPU; 19.5M parameters, nearly all in the
embedding tables. Batch 64, as in a tutorial that trains on a laptop.

Why it is slow on an H200: a step is ~80 kernels (embedding gathers, 4 small GEMMs, the 64x64 score
matrix, their backward, the optimizer's multi-tensor launches and its ~0.1 ms pass over the tables),
each a few microseconds of work, paced by ~1.5 ms of host work: the GPU idles most of the step.

--fix larger_batch: batch 4096 (learning rate unchanged; in-batch negatives grow with the batch, as
retrieval models want): the same launches carry 64x the samples.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name

HISTORY = 50


def tower(dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(2 * dim, 512), nn.ReLU(), nn.Linear(512, dim))


class TwoTower(nn.Module):
    def __init__(self, users: int, items: int, categories: int, dim: int) -> None:
        super().__init__()
        self.item_table = nn.Embedding(items, dim)
        self.user_table = nn.Embedding(users, dim)
        self.category_table = nn.Embedding(categories, dim)
        self.user_mlp = tower(dim)
        self.item_mlp = tower(dim)

    def user_vectors(self, user: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        pooled = F.embedding_bag(history, self.item_table.weight, mode="mean")
        return F.normalize(self.user_mlp(torch.cat([self.user_table(user), pooled], dim=1)), dim=1)

    def item_vectors(self, item: torch.Tensor, category: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.item_table(item), self.category_table(category)], dim=1)
        return F.normalize(self.item_mlp(x), dim=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["larger_batch"], steps=5000)
    args = parser.parse_args()
    larger = "larger_batch" in chosen_fixes(args)

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = pick_device(args.tiny)
    batch = args.batch_size or ((4096 if not args.tiny else 64) if larger else (64 if not args.tiny else 4))
    users, items, categories, dim = (1000, 2000, 10, 16) if args.tiny else (200_000, 100_000, 1_000, 64)

    model = TwoTower(users, items, categories, dim).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    # Interaction log resident on the GPU: (user, last HISTORY items, clicked item, its category).
    n = 1 << (12 if args.tiny else 20)
    log_user = torch.randint(0, users, (n,), device=device)
    log_history = torch.randint(0, items, (n, HISTORY), device=device)
    log_item = torch.randint(0, items, (n,), device=device)
    log_category = torch.randint(0, categories, (n,), device=device)
    targets = torch.arange(batch, device=device)

    bench = StepBench("two_tower", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        start = (step * batch) % (n - batch)
        rows = slice(start, start + batch)
        u = model.user_vectors(log_user[rows], log_history[rows])
        v = model.item_vectors(log_item[rows], log_category[rows])
        loss = F.cross_entropy(u @ v.t() / 0.05, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
