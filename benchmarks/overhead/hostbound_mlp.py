"""Host-bound MLP training loop: the workload of issue 15, for benchmarks/overhead.py and the CPU test
that guards the steps after the capture window (tests/capture/test_after_window.py).

Every step: a DataLoader hands out sample indices, the batch is prepared on the host with numpy and
copied from pageable memory (`torch.from_numpy(...).to(device)`), a residual MLP runs forward and
backward, AdamW steps, `--tiny-ops` elementwise ops run on a small tensor, and `--items` scalars are
read back with `.item()` (the loss and the accuracy). The GPU is idle most of the step: the host sets
the pace, so any per-call cost the capture leaves behind shows in the step time.

Step times: with GPUADVISOR_BENCH_STEP_TIMES=FILE, one JSON line per step ({"step", "t", "unix_s"},
as benchmarks/workloads/_common.StepBench writes them, and "cpu_s": the main thread's CPU time, which
other processes on a loaded machine do not inflate) is written at exit (nothing is written while the
loop runs). Prints `done STEPS` at the end, and with --report-wrappers the torch attributes that
are wrapped at that point (gpuadvisor's wrappers carry `__wrapped__`); --report-wrappers-at 3,9 prints
them after those steps too.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

# Attributes gpuadvisor may wrap: none may be wrapped after the window (issue 15).
WATCHED = [
    (torch.Tensor, "item"),
    (torch.Tensor, "cpu"),
    (torch.Tensor, "to"),
    (torch.Tensor, "copy_"),
    (torch.Tensor, "__bool__"),
    (torch.Tensor, "__format__"),
    (torch.nn.Module, "__call__"),
    (torch.optim.Optimizer, "__init__"),
    (torch.utils.data.DataLoader, "__init__"),
    (torch.utils.data.DataLoader, "__iter__"),
    (torch.autograd, "backward"),
    (torch, "compile"),
]


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.fc(self.norm(x)))


def wrapped_attributes() -> list[str]:
    out = []
    for owner, attr in WATCHED:
        value = getattr(owner, attr, None)
        if hasattr(value, "__wrapped__"):
            out.append(f"{getattr(owner, '__name__', owner)}.{attr}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--tiny-ops", type=int, default=100, help="extra elementwise ops on a small tensor per step")
    p.add_argument("--items", type=int, default=2, help=".item() reads per step")
    p.add_argument("--report-wrappers", action="store_true")
    p.add_argument(
        "--report-wrappers-at", default="", help="comma-separated steps after which to print the wrapped attributes"
    )
    args = p.parse_args()

    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu")
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    n_samples, in_dim, classes = 4096, args.width, 10
    features = rng.standard_normal((n_samples, in_dim)).astype(np.float32)
    labels = rng.integers(0, classes, n_samples)
    loader = DataLoader(TensorDataset(torch.arange(n_samples)), batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = nn.Sequential(*[Block(args.width) for _ in range(args.depth)], nn.Linear(args.width, classes)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    small = torch.ones(16, device=device)

    times: list[tuple[int, float, float, float]] = []
    path = os.environ.get("GPUADVISOR_BENCH_STEP_TIMES")

    def write_times() -> None:
        if path:
            with open(path, "a") as fh:
                for k, t, u, c in times:
                    fh.write(json.dumps({"step": k, "t": t, "unix_s": u, "cpu_s": c}) + "\n")

    atexit.register(write_times)
    step = 0
    while step < args.steps:
        for (idx,) in loader:
            ids = idx.numpy()
            x_np = features[ids] * 0.5 + 0.01  # host-side batch preparation
            x = torch.from_numpy(x_np).to(device)  # pageable host -> device copy
            y = torch.from_numpy(labels[ids]).to(device)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            h = small
            for _ in range(args.tiny_ops):
                h = h * 1.0001 + 0.0001
            stats = [loss, (logits.argmax(1) == y).float().mean(), h.sum()]
            for i in range(args.items):
                stats[i % len(stats)].item()
            step += 1
            times.append((step, time.perf_counter(), time.time(), time.thread_time()))
            if str(step) in args.report_wrappers_at.split(","):
                print(f"wrapped at step {step}:", ",".join(wrapped_attributes()) or "none", flush=True)
            if step >= args.steps:
                break
    if args.report_wrappers:
        print("wrapped after the run:", ",".join(wrapped_attributes()) or "none", flush=True)
    print("done", step, flush=True)


if __name__ == "__main__":
    main()
