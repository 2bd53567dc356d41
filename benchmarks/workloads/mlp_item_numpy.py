"""Planted problems: host_sync (fix `remove_host_syncs`) and data_loading (fix `dataloader_workers`). An MLP.

A tabular classifier (an MLP 560 -> 2048 -> 2048 -> 2048 -> 100, batch 4096, AdamW, TF32 on) whose
loop prepares every batch on the host with numpy (sample rows of a float64 feature table, standardize
and clip 48 numeric columns, add noise, one-hot 16 categorical columns into 512 floats, concatenate,
cast to float32: ~5-10 ms for 4096 rows) and reads two scalars per step (`loss.item()` and an accuracy
`.item()`) for its running statistics.

Why it is slow on an H200: the GPU's work is ~1.5-2 ms per step (~230 GFLOP of TF32 GEMMs), but the
host spends ~5-10 ms preparing the next batch, and the `.item()` reads make it wait for the GPU to
finish the step before it starts that preparation: the GPU idles during the whole preparation and the
host idles while the GPU runs (step ~ preparation + GPU time).

--fix remove_host_syncs: loss and accuracy are accumulated on the GPU and read every 100 steps; the
next batch's preparation then overlaps the GPU's work (step ~ preparation, still host-bound).
--fix dataloader_workers: the same numpy preparation runs in 6 DataLoader worker processes
(an IterableDataset of whole batches, pin_memory=True, persistent workers, prefetch_factor=4) and the
batch is copied with non_blocking=True; the syncs then wait only for the GPU.
--fixed: both (the GPU's time sets the pace).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

N_NUMERIC, N_CATEGORICAL, CARDINALITY, CLASSES = 48, 16, 32, 100
LOG_EVERY = 100


class FeatureTable:
    """A synthetic float64 feature table (numeric columns then categorical codes) with targets."""

    def __init__(self, rows: int) -> None:
        rng = np.random.default_rng(0)
        numeric = rng.normal(3.0, 2.0, size=(rows, N_NUMERIC))
        codes = rng.integers(0, CARDINALITY, size=(rows, N_CATEGORICAL)).astype(np.float64)
        self.table = np.concatenate([numeric, codes], axis=1)
        self.targets = rng.integers(0, CLASSES, size=rows)
        self.mu = numeric.mean(axis=0)
        self.sigma = numeric.std(axis=0)
        self.offsets = np.arange(N_CATEGORICAL) * CARDINALITY

    def prepare_batch(self, rng: np.random.Generator, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = rng.integers(0, len(self.table), size=batch)
        rows = self.table[idx]
        numeric = np.clip((rows[:, :N_NUMERIC] - self.mu) / self.sigma, -5.0, 5.0)
        numeric += rng.normal(0.0, 0.01, size=numeric.shape)  # feature-noise augmentation
        onehot = np.zeros((batch, N_CATEGORICAL * CARDINALITY), dtype=np.float32)
        cols = rows[:, N_NUMERIC:].astype(np.int64) + self.offsets
        onehot[np.arange(batch)[:, None], cols] = 1.0
        x = np.concatenate([numeric, onehot], axis=1).astype(np.float32)
        return torch.from_numpy(x), torch.from_numpy(self.targets[idx])


class PreparedBatches(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """Endless prepared batches; each DataLoader worker draws from its own random stream."""

    def __init__(self, table: FeatureTable, batch: int) -> None:
        self.table = table
        self.batch = batch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        rng = np.random.default_rng(1 + (info.id if info is not None else 0))
        while True:
            yield self.table.prepare_batch(rng, self.batch)


def make_mlp(in_dim: int, width: int, depth: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(depth):
        layers += [nn.Linear(in_dim if i == 0 else width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, CLASSES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["remove_host_syncs", "dataloader_workers"], steps=2000)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = pick_device(args.tiny)
    batch = args.batch_size or (16 if args.tiny else 4096)
    width = 64 if args.tiny else 2048
    table = FeatureTable(2_000 if args.tiny else 200_000)

    model = make_mlp(N_NUMERIC + N_CATEGORICAL * CARDINALITY, width, 3).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    if "dataloader_workers" in fixes:
        loader = DataLoader(PreparedBatches(table, batch), batch_size=None, num_workers=2 if args.tiny else 6,
                            pin_memory=device.type == "cuda", persistent_workers=True, prefetch_factor=4)
        batches: Iterator[tuple[torch.Tensor, torch.Tensor]] = iter(loader)
    else:
        rng = np.random.default_rng(1)
        batches = (table.prepare_batch(rng, batch) for _ in iter(int, 1))

    loss_sum = torch.zeros((), device=device)
    correct_sum = torch.zeros((), device=device)
    running_loss, running_acc = 0.0, 0.0
    bench = StepBench("mlp_item_numpy", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        x_cpu, y_cpu = next(batches)
        non_blocking = "dataloader_workers" in fixes
        x, y = x_cpu.to(device, non_blocking=non_blocking), y_cpu.to(device, non_blocking=non_blocking)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if "remove_host_syncs" in fixes:
            loss_sum += loss.detach()
            correct_sum += (logits.argmax(dim=1) == y).sum()
            if (step + 1) % LOG_EVERY == 0:
                running_loss = loss_sum.item() / LOG_EVERY
                running_acc = correct_sum.item() / (LOG_EVERY * batch)
                loss_sum.zero_()
                correct_sum.zero_()
        else:
            running_loss = 0.9 * running_loss + 0.1 * loss.item()
            running_acc = 0.9 * running_acc + 0.1 * (logits.argmax(dim=1) == y).float().mean().item()
        if (step + 1) % 500 == 0:
            print(f"step {step + 1} loss {running_loss:.4f} acc {running_acc:.3f}", flush=True)
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
