"""A REAL 2-process DDP recording on the CPU (gloo backend), used by test_real_gloo.py.

Usage: python record_gloo_ddp.py OUT_FOLDER PORT [ACCUM]
Each rank runs a tiny DDP model under torch.profiler and exports OUT_FOLDER/rank{N}.json.gz.
ACCUM > 1: gradient accumulation over ACCUM micro-batches per optimizer step, without no_sync().
Processes are forked (not spawned) after torch is imported: torch loads once, the test stays fast.
"""

from __future__ import annotations

import os
import sys


def worker(rank: int, world: int, out: str, port: int, accum: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 32), torch.randn(16, 4)

    def export(p: profile) -> None:
        p.export_chrome_trace(os.path.join(out, f"rank{rank}.json.gz"))

    sched = schedule(wait=1, warmup=1, active=4, repeat=1)
    with profile(
        activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=export, record_shapes=True
    ) as prof:
        for _ in range(6):
            opt.zero_grad()
            for _ in range(accum):
                torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            prof.step()
    dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    out, port = sys.argv[1], int(sys.argv[2])
    accum = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    os.makedirs(out, exist_ok=True)
    mp.start_processes(worker, args=(2, out, port, accum), nprocs=2, start_method="fork")


if __name__ == "__main__":
    main()
