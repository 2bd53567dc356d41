"""Planted problem: straggler rank (DDP, launch with torchrun or `gpuadvisor profile --nproc-per-node`).

A DDP-wrapped residual MLP (8 blocks of width 2048) trained on random data, one process per GPU
(NCCL; gloo on the CPU with --tiny). Rank 1 prepares every batch with a slow per-sample host
transform (a Python loop that also sleeps --straggle-ms per step in total, standing in for a slow
decode/augmentation), so it reaches the gradient all-reduce late every step and every other rank
waits inside the NCCL kernel: the whole job runs at the straggler's pace.

--fixed: rank 1 prepares its batches like the other ranks (no per-sample transform, no sleep).
Rank 0 prints the BENCH line; samples_per_s counts the samples of all ranks.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench


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


def slow_transform(batch: torch.Tensor, total_ms: float) -> torch.Tensor:
    """Per-sample host preprocessing, as a slow image decode/augmentation would be."""
    per_sample = total_ms / 1000.0 / max(1, batch.shape[0])
    out = []
    for sample in batch:
        time.sleep(per_sample)
        out.append((sample - sample.mean()) / (sample.std() + 1e-6))
    return torch.stack(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=None, help="per rank")
    parser.add_argument("--straggle-ms", type=float, default=None)
    parser.add_argument("--straggler-rank", type=int, default=1)
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and not args.tiny
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    batch = args.batch_size or (8 if args.tiny else 512)
    width, depth, in_dim, classes = (32, 2, 16, 10) if args.tiny else (2048, 8, 1024, 1000)
    straggle_ms = args.straggle_ms if args.straggle_ms is not None else (5.0 if args.tiny else 20.0)
    model = nn.parallel.DistributedDataParallel(
        ResidualMLP(in_dim, width, depth, classes).to(device),
        device_ids=[local_rank] if use_cuda else None,
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(1234 + rank)
    bench = StepBench(
        "ddp_straggler", "fixed" if args.fixed else "planted", device, batch * world, args.steps
    )

    straggler = rank == args.straggler_rank and not args.fixed
    for _ in range(args.steps):
        x = torch.randn(batch, in_dim, generator=gen)
        y = torch.randint(0, classes, (batch,), generator=gen)
        if straggler:
            x = slow_transform(x, straggle_ms)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        bench.step()
    if rank == 0:
        bench.finish()
    elif use_cuda:
        torch.cuda.synchronize(device)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
