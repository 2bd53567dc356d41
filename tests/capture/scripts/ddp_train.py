"""Tiny DDP training script for the distributed capture tests (gloo on the CPU, NCCL on GPUs).

Run under torchrun (RANK/WORLD_SIZE/MASTER_* set by the launcher). Options:
  --steps N                  optimizer steps (default 30)
  --fail-rank R --fail-step S   rank R raises RuntimeError at the start of step S (S steps done)
  --slow-rank R --slow-ms M [--slow-when always|profiled]
                             rank R sleeps M ms before each forward: always, or only while a
                             torch.profiler is recording in its process (a lateness the profiler makes)
  --work-ms M                 every rank spins M ms of host work per step (a step with compute of its
                             own, not only the collective's latency)
  --slow-export-rank R --slow-export-s S
                             rank R's torch.profiler trace export waits S s before it starts (an export on
                             a loaded machine: the launcher's SIGTERM to the survivors lands during it)
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--fail-step", type=int, default=-1)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--slow-when", choices=("always", "profiled"), default="always")
    p.add_argument("--work-ms", type=float, default=0.0)
    p.add_argument("--slow-export-rank", type=int, default=-1)
    p.add_argument("--slow-export-s", type=float, default=0.0)
    args = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == args.slow_export_rank:
        export = torch.profiler.profile.export_chrome_trace

        def slow_export(self: torch.profiler.profile, path: str) -> None:
            time.sleep(args.slow_export_s)
            export(self, path)

        torch.profiler.profile.export_chrome_trace = slow_export  # type: ignore[method-assign]
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32), torch.randn(16, 4)
    for step in range(args.steps):
        if rank == args.fail_rank and step == args.fail_step:
            raise RuntimeError(f"planted failure on rank {rank} at step {step}")
        if rank == args.slow_rank and (args.slow_when == "always" or torch.autograd._profiler_enabled()):
            time.sleep(args.slow_ms / 1000)
        if args.work_ms > 0:
            until = time.perf_counter() + args.work_ms / 1000
            while time.perf_counter() < until:
                pass
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
