"""A REAL multi-GPU DDP recording (NCCL) to check the communication rules on a GPU machine.

Usage (not run by the CPU test suite):
    torchrun --nproc-per-node 2 tests/multirank/record_nccl_ddp.py OUT [--accum N] [--straggler-ms MS]
    gpuadvisor analyze OUT
Each rank exports OUT/rank{N}.json.gz. `--straggler-ms` makes rank 1 sleep before each step's forward
(a data-wait straggler: GA1002 should name rank 1); `--accum N` accumulates N micro-batches without
no_sync() (GA1004 should fire).
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--straggler-ms", type=float, default=0.0)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, local = dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    os.makedirs(args.out, exist_ok=True)
    layers = [torch.nn.Linear(2048, 2048) for _ in range(16)]
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers).cuda(), device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(64, 2048, device="cuda")

    def export(p: profile) -> None:
        p.export_chrome_trace(os.path.join(args.out, f"rank{rank}.json.gz"))

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    sched = schedule(wait=2, warmup=2, active=5, repeat=1)
    with profile(activities=acts, schedule=sched, on_trace_ready=export, record_shapes=True) as prof:
        for _ in range(10):
            if rank == 1 and args.straggler_ms:
                time.sleep(args.straggler_ms / 1000)
            opt.zero_grad(set_to_none=True)
            for _ in range(args.accum):
                model(x).square().mean().backward()
            opt.step()
            prof.step()
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
