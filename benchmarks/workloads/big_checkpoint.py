"""Planted problem: a periodic cost (`async_checkpoint`). A synchronous 0.9 GB torch.save every 20 steps.

An MLP of 8 layers of 3072 (75M parameters) trained with fused AdamW in bf16 autocast at batch 512, data
on the GPU: a step of a few milliseconds. Every 20 steps it saves {model, optimizer, step} with
`torch.save` (~0.9 GB with AdamW's two moments), the way most training scripts do: the loop stops while
every CUDA tensor is copied to pageable host memory, pickled and written. The saves take most of the run
(issue 41: GA304 priced such a save by its removal, "97% of the run ... 30x", where the asynchronous save
it recommends measured 2.10x).

--fix async_checkpoint: the state is copied into reused pinned host buffers (non_blocking, one
synchronize) and written by a background thread while training goes on; the next save waits for the
previous write if it has not finished (checkpoint_every_n.AsyncCheckpointer).
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from checkpoint_every_n import AsyncCheckpointer

SAVE_EVERY = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["async_checkpoint"], steps=400)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    device = pick_device(args.tiny)
    batch = args.batch_size or (4 if args.tiny else 512)
    width, layers = (64, 2) if args.tiny else (3072, 8)
    model = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.GELU())]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    n_batches = 4
    xs = [torch.randn(batch, width, device=device) for _ in range(n_batches)]
    path = os.path.join(tempfile.mkdtemp(prefix="ckpt-"), "ckpt.pt")
    checkpointer = AsyncCheckpointer() if "async_checkpoint" in fixes else None

    bench = StepBench("big_checkpoint", variant_name(args), device, batch, args.steps)
    try:
        for step in range(args.steps):
            x = xs[step % n_batches]
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                loss = F.mse_loss(model(x), x)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if (step + 1) % SAVE_EVERY == 0:
                state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step + 1}
                if checkpointer is None:
                    torch.save(state, path)
                else:
                    checkpointer.save(state, path)
            bench.step()
        bench.finish()
    finally:  # a harness may stop the loop after its measured region: the last write ends before it goes on
        if checkpointer is not None:
            checkpointer.close()


if __name__ == "__main__":
    main()
