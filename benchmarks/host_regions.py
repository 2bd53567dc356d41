"""Where the host time of dlrm's step goes, with and without torch.profiler, eager and compiled.

A diagnostic for the step model's profiler correction (docs/model.md, "The profiler's own cost"): the
replay multiplies all host work of a window by one factor so that its step matches the steps timed
outside the window. That is right only if the profiler inflates every region of the step alike. This
script times, on the host (time.perf_counter, no added synchronization), each region of the planted
dlrm step (benchmarks/workloads/dlrm.py): the blocking input copies, the forward, the backward, the
optimizer and the AUC read, in plain steps, in steps under `torch.profiler.profile(record_shapes=True)`
with CPU and CUDA activities (what `gpuadvisor profile` records), and with the model under
`torch.compile(mode="reduce-overhead")`; and plain steps with dlrm's fixes (prefetch, no syncs, both).

    python3 benchmarks/host_regions.py --steps 40 --out host_regions.json

Prints one JSON object: per variant the median milliseconds per region and per step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent / "workloads"))

import dlrm as w

REGIONS = ("copies", "forward", "backward", "optimizer", "auc", "step")


def run(model: torch.nn.Module, opt: torch.optim.Optimizer, batches: list[w.Batch], steps: int,
        device: torch.device, profiled: bool, fixes: frozenset[str] = frozenset()) -> dict[str, float]:
    """`fixes`: dlrm's planted fixes applied as its `--fix` does (prefetch_copies: pinned batches
    copied one step ahead on a side stream; remove_host_syncs: the AUC stays on the GPU, read every
    100 steps)."""
    times: dict[str, list[float]] = {r: [] for r in REGIONS}
    prof = None
    if profiled:
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        prof = torch.profiler.profile(activities=acts, record_shapes=True)
        prof.__enter__()
    side = torch.cuda.Stream() if "prefetch_copies" in fixes else None
    if side is not None:
        batches = [([i.pin_memory() for i in ix], [o.pin_memory() for o in ox], d.pin_memory(), y.pin_memory())
                   for ix, ox, d, y in batches]

    def fetch(step: int) -> w.Batch:
        ix, ox, d, y = batches[step % len(batches)]
        nb = side is not None
        with torch.cuda.stream(side) if side is not None else torch.cuda.stream(torch.cuda.current_stream()):
            return ([i.to(device, non_blocking=nb) for i in ix], [o.to(device, non_blocking=nb) for o in ox],
                    d.to(device, non_blocking=nb), y.to(device, non_blocking=nb))

    upcoming = fetch(0) if side is not None else None
    scores: list[torch.Tensor] = []
    targets: list[torch.Tensor] = []
    try:
        for step in range(steps):
            t0 = time.perf_counter()
            if side is not None and upcoming is not None:
                torch.cuda.current_stream().wait_stream(side)
                indices, offsets, dense, labels = upcoming
                for t in [*indices, *offsets, dense, labels]:
                    t.record_stream(torch.cuda.current_stream())
                upcoming = fetch(step + 1)
            else:
                indices, offsets, dense, labels = fetch(step)
            t1 = time.perf_counter()
            logits = model(indices, offsets, dense)
            t2 = time.perf_counter()
            loss = F.binary_cross_entropy_with_logits(logits, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            t3 = time.perf_counter()
            opt.step()
            t4 = time.perf_counter()
            if "remove_host_syncs" in fixes:
                scores.append(torch.sigmoid(logits.detach()))
                targets.append(labels)
                if (step + 1) % w.LOG_EVERY == 0:
                    w.auc_torch(torch.cat(targets), torch.cat(scores)).item()
                    scores.clear()
                    targets.clear()
            else:
                w.auc_numpy(labels.cpu().numpy(), torch.sigmoid(logits).detach().cpu().numpy())
            t5 = time.perf_counter()
            for r, v in zip(REGIONS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0), strict=True):
                times[r].append(v * 1e3)
    finally:
        if prof is not None:
            prof.__exit__(None, None, None)
    skip = min(3, steps // 4)  # first steps: allocator / graph warm-up
    return {r: round(statistics.median(v[skip:]), 3) for r, v in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--no-compile", action="store_true", help="skip the compiled runs")
    args = p.parse_args()
    device = torch.device("cuda")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = w.DLRM(100_000, 64).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = w.make_batches(4, 4096, 100_000)
    out: dict[str, object] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    run(model, opt, batches, 10, device, profiled=False)  # warm-up
    out["eager"] = run(model, opt, batches, args.steps, device, profiled=False)
    out["eager_profiled"] = run(model, opt, batches, args.steps // 2, device, profiled=True)
    out["eager_after"] = run(model, opt, batches, args.steps, device, profiled=False)
    for name, fixes in (("prefetch", {"prefetch_copies"}), ("no_syncs", {"remove_host_syncs"}),
                        ("fixed", {"prefetch_copies", "remove_host_syncs"})):
        run(model, opt, batches, 5, device, profiled=False, fixes=frozenset(fixes))
        out[name] = run(model, opt, batches, args.steps, device, profiled=False, fixes=frozenset(fixes))
    if args.no_compile:
        print(json.dumps(out, indent=1))
        if args.out:
            args.out.write_text(json.dumps(out, indent=1) + "\n")
        return
    compiled = torch.compile(model, mode="reduce-overhead")
    run(compiled, opt, batches, 15, device, profiled=False)  # compile + cudagraph warm-up
    out["compiled"] = run(compiled, opt, batches, args.steps, device, profiled=False)
    out["compiled_profiled"] = run(compiled, opt, batches, args.steps // 2, device, profiled=True)
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
