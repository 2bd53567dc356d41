"""Where a per-step `.item()` costs a host-bound loop: tutorial_cnn's step timed by region, plain python.

A diagnostic for docs/model.md ("What the replay does not see"). benchmarks/measure.py measured
removing tutorial_cnn's per-step `loss.item()` at 1.12x (and 8-13% on two other host-bound loops)
where the replay predicts 1-5%: the read itself waits only for the few microseconds of GPU work left.
This times the tutorial's loop (benchmarks/workloads/tutorial_cnn.py: batch 4, SGD with momentum) on
the host with time.perf_counter, no added synchronization, per region: `next` (the DataLoader),
`model` (copies, zero_grad, forward, loss, backward, step), `read` (the step's end) and `py` (a fixed
pure-Python loop after it), for each kind of step end: `item` (the tutorial), `none` (the loss
accumulated on the GPU: the fix) and `sync` (torch.cuda.synchronize() instead of the read). Two rounds
of every kind; the median microseconds of each region.

    python3 benchmarks/read_regions.py [--kinds item,none,sync] [--workers 2] [--sched 4]

`--sched`: cudaSetDeviceFlags before CUDA starts (1: spin, 4: blocking sync; default: the driver's
choice). Prints one JSON list, one object per round and kind.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent / "workloads"))

import tutorial_cnn as tut

REGIONS = ("next", "model", "read", "py", "total")


def set_schedule(flag: int) -> str:
    """cudaSetDeviceFlags(flag) through the CUDA runtime torch loaded; must run before CUDA starts."""
    site = Path(torch.__file__).resolve().parents[1]
    libs = sorted(glob.glob(str(site / "nvidia" / "*" / "lib" / "libcudart.so*")))
    libs += sorted(glob.glob("/usr/local/cuda*/lib64/libcudart.so*"))
    if not libs:
        return "no libcudart found"
    rc = ctypes.CDLL(libs[0]).cudaSetDeviceFlags(flag)
    return f"cudaSetDeviceFlags({flag}) = {rc} ({libs[0]})"


def pure_python() -> int:
    s = 0
    for k in range(300):
        s += k * k
    return s


def run(kind: str, workers: int, steps: int = 2500, warm: int = 300) -> dict[str, float]:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    loader = DataLoader(
        tut.NormalizedCifar(10_000, 4 * (steps + warm)), batch_size=4, shuffle=True, num_workers=workers
    )
    net = tut.Net().to(dev)
    criterion = nn.CrossEntropyLoss()
    opt = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    on_gpu = torch.zeros((), device=dev)
    on_host = 0.0
    times: dict[str, list[float]] = {k: [] for k in REGIONS}
    batches = iter(loader)
    for i in range(steps + warm):
        t0 = time.perf_counter()
        data = next(batches)
        t1 = time.perf_counter()
        x, y = data[0].to(dev), data[1].to(dev)
        opt.zero_grad()
        loss = criterion(net(x), y)
        loss.backward()
        opt.step()
        t2 = time.perf_counter()
        if kind == "item":
            on_host += loss.item()
        elif kind == "sync":
            torch.cuda.synchronize()
        else:
            on_gpu += loss.detach()
        t3 = time.perf_counter()
        pure_python()
        t4 = time.perf_counter()
        if i >= warm:
            for name, a, b in (("next", t0, t1), ("model", t1, t2), ("read", t2, t3), ("py", t3, t4), ("total", t0, t4)):
                times[name].append((b - a) * 1e6)
    torch.cuda.synchronize()
    return {k: round(statistics.median(v), 1) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default="item,none,sync")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sched", type=int, default=None)
    args = parser.parse_args()
    if args.sched is not None:
        print(set_schedule(args.sched), file=sys.stderr)
    out = []
    for rnd in range(2):
        for kind in args.kinds.split(","):
            out.append({"kind": kind, "round": rnd, "workers": args.workers, "sched": args.sched,
                        **run(kind, args.workers)})
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": out}))


if __name__ == "__main__":
    main()
