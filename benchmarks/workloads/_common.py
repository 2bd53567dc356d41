"""Tiny shared helper for the benchmark workloads: the common options, step timing and the BENCH line.

Kept deliberately small so every workload still reads like a plain user script. Nothing here
synchronizes the GPU per step: CUDA events are recorded (asynchronous) at each step boundary and read
once, after the single `torch.cuda.synchronize()` that closes the measured region.

Common options (`add_workload_args`): `--steps N`, `--batch-size B`, `--tiny` (CPU, tiny sizes),
`--fix NAME` (repeatable: apply the remedy of one planted problem, nothing else) and `--fixed` (every
fix). `chosen_fixes(args)` is the set of fixes to apply; `variant_name` names it in the BENCH line.

Measurement harness hook (benchmarks/measure.py): when GPUADVISOR_BENCH_SECONDS is set, the measured
region ends at the first step boundary after that many seconds (and at least
GPUADVISOR_BENCH_MIN_STEPS measured steps, default 3): the BENCH line is printed and the script stops
with `BenchComplete` (a SystemExit with status 0), so every variant is timed over about the same
wall time whatever its speed. GPUADVISOR_BENCH_WARMUP_STEPS overrides the 10 warm-up steps. Without
these variables, `--steps` alone decides, as for any user script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch

WARMUP_STEPS = 10


class BenchComplete(SystemExit):
    """Raised by `StepBench.step()` when the harness's time budget for the measured region is spent."""

    def __init__(self) -> None:
        super().__init__(0)


def add_workload_args(parser: argparse.ArgumentParser, fixes: Sequence[str], steps: int) -> None:
    """The options every workload takes; `fixes` are the names of its planted problems' remedies."""
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--tiny", action="store_true", help="CPU, tiny sizes: a smoke test in seconds")
    if fixes:
        parser.add_argument("--fix", action="append", default=[], choices=list(fixes),
                            help="apply one planted problem's remedy (repeatable)")
    else:  # a control: accepted for symmetry, changes nothing
        parser.add_argument("--fix", action="append", default=[], choices=[], help=argparse.SUPPRESS)
    parser.add_argument("--fixed", action="store_true", help="apply every fix" if fixes else
                        "accepted; changes nothing (control)")
    parser.set_defaults(all_fixes=tuple(fixes))


def add_compile_probe(parser: argparse.ArgumentParser) -> None:
    """`--compile` (a probe, not a fix) and `--compile-mode`: torch.compile the model as the advice says
    (GA501: `mode="reduce-overhead"`, fusion and CUDA graphs), or in another mode to compare."""
    parser.add_argument("--compile", action="store_true", help="probe: torch.compile the model")
    parser.add_argument("--compile-mode", default="reduce-overhead",
                        choices=["default", "reduce-overhead", "max-autotune-no-cudagraphs"],
                        help="torch.compile mode of the --compile probe (default: reduce-overhead)")


def compiled(model: Any, args: argparse.Namespace, device: torch.device) -> Any:
    """The model under torch.compile when `--compile` (Dynamo with the eager backend on the CPU: no C++
    compiler needed, graph breaks still show), else the model itself."""
    if not args.compile:
        return model
    if device.type != "cuda":
        return torch.compile(model, backend="eager")
    mode = None if args.compile_mode == "default" else args.compile_mode
    return torch.compile(model, mode=mode)


def chosen_fixes(args: argparse.Namespace) -> frozenset[str]:
    """The fixes to apply: every one with --fixed, else those named by --fix."""
    return frozenset(args.all_fixes) if args.fixed else frozenset(args.fix)


def variant_name(args: argparse.Namespace) -> str:
    """`planted`, `fixed` (every fix applied) or the applied fixes joined by `+`."""
    fixes = chosen_fixes(args)
    if not fixes:
        return "planted"
    if fixes == frozenset(args.all_fixes):
        return "fixed"
    return "+".join(sorted(fixes))


def pick_device(tiny: bool) -> torch.device:
    """`--tiny` (CI smoke test) always runs on the CPU; otherwise CUDA when present."""
    if not tiny and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


class StepBench:
    """Call `step()` once after every optimizer step and `finish()` at the end of the run.

    The first `min(10, steps // 2)` steps are warm-up (compilation, cudnn autotuning, allocator, worker
    start-up) and are excluded. The measured region is bracketed by exactly two synchronizations.
    If GPUADVISOR_BENCH_STEP_TIMES names a file, one JSON line per step is appended to it with host
    timestamps (`time.perf_counter()` and `time.time()`); writing it never touches the GPU.
    """

    def __init__(self, workload: str, variant: str, device: torch.device, batch_size: int, steps: int):
        self.workload = workload
        self.variant = variant
        self.device = device
        self.batch_size = batch_size
        self.total_steps = steps
        warmup = int(os.environ.get("GPUADVISOR_BENCH_WARMUP_STEPS", WARMUP_STEPS))
        self.warmup = min(warmup, steps // 2)
        self.step_count = 0
        self.cuda = device.type == "cuda"
        self.t_start = 0.0
        self.host_marks: list[float] = []
        self.events: list[Any] = []
        self.finished: dict[str, Any] | None = None
        path = os.environ.get("GPUADVISOR_BENCH_STEP_TIMES")
        # Line-buffered append: each step's line reaches the file even if the run is stopped early.
        self.times_file = open(path, "a", buffering=1) if path else None  # noqa: SIM115
        budget = os.environ.get("GPUADVISOR_BENCH_SECONDS")
        self.budget_s = float(budget) if budget else None
        self.min_steps = int(os.environ.get("GPUADVISOR_BENCH_MIN_STEPS", "3"))
        if self.warmup == 0:
            self._start_region()

    def _start_region(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.events.append(ev)
        self.t_start = time.perf_counter()
        self.host_marks.append(self.t_start)

    def step(self) -> None:
        self.step_count += 1
        now = time.perf_counter()
        if self.times_file is not None:
            self.times_file.write(
                json.dumps(
                    {
                        "pid": os.getpid(),
                        "step": self.step_count,
                        "t": now,
                        "unix_s": time.time(),
                        "workload": self.workload,
                        "variant": self.variant,
                    }
                )
                + "\n"
            )
        if self.step_count == self.warmup:
            self._start_region()
        elif self.step_count > self.warmup:
            self.host_marks.append(now)
            if self.cuda:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                self.events.append(ev)
            if (
                self.budget_s is not None
                and self.step_count - self.warmup >= self.min_steps
                and now - self.t_start >= self.budget_s
            ):
                self.finish()
                raise BenchComplete()

    def finish(self) -> dict[str, Any]:
        if self.finished is not None:  # a framework's end-of-training hook after the time budget stop
            return self.finished
        if self.cuda:
            torch.cuda.synchronize(self.device)
        t_end = time.perf_counter()
        measured = self.step_count - self.warmup
        if self.cuda and len(self.events) > 1:
            durs = [a.elapsed_time(b) for a, b in zip(self.events, self.events[1:], strict=False)]
        else:
            durs = [(b - a) * 1000.0 for a, b in zip(self.host_marks, self.host_marks[1:], strict=False)]
        elapsed = t_end - self.t_start
        result = {
            "workload": self.workload,
            "variant": self.variant,
            "samples_per_s": round(measured * self.batch_size / elapsed, 3)
            if measured > 0 and elapsed > 0
            else 0.0,
            "step_ms_median": round(statistics.median(durs), 4) if durs else 0.0,
            # Mean over the region: differs from the median when steps arrive in bursts (DataLoader workers).
            "step_ms_mean": round(elapsed * 1000.0 / measured, 4) if measured > 0 else 0.0,
            "steps": measured,
            "warmup_steps": self.warmup,
            "batch_size": self.batch_size,
            "device": torch.cuda.get_device_name(self.device) if self.cuda else "cpu",
        }
        if self.times_file is not None:
            self.times_file.close()
        print("BENCH " + json.dumps(result, sort_keys=True), flush=True)
        self.finished = result
        return result
