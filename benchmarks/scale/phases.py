"""Where the seconds of one `gpuadvisor analyze` go, phase by phase (issue 43's time budget).

    python benchmarks/scale/phases.py TRACE [--format json] [--repeat 3] [--split] [--cprofile OUT]

Runs `gpuadvisor analyze TRACE --format FORMAT -o /dev/null` inside this process (imports counted
from the interpreter's start), with a timer wrapped around each phase's function: every module
attribute that names the function is replaced for the run, so `from x import f` callers are timed
too. A phase's time is its own (exclusive): time spent in a timed function it calls is counted in
that function's phase. "other" is what no phase claims (option parsing, run information, notes,
the result object). The split read is off unless `--split` (its worker process is not timed here,
only this process's wait). `--repeat` runs fresh processes and prints the median of each phase.
A phase whose function this version of the code does not have is left out, so that the same script
times the code before a change (`PYTHONPATH=OLD_CHECKOUT python benchmarks/scale/phases.py ...`).
`--cprofile OUT` writes a cProfile of one run instead (open it with `python -m pstats OUT`). Each
phase's "(peak MB)" is the process's peak RSS when that phase last ended, its "(cpu s)" the process's
CPU seconds in it (exclusive, as its wall time); "cpu" is the process's CPU seconds in all (on shared
cores the wall times stretch, CPU time much less).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

_START = time.perf_counter()

# (phase, module, attribute): the attribute is a function of the module, or "Class.method"
PHASES: tuple[tuple[str, str, str], ...] = (
    ("rule loading", "gpuadvisor.engine", "load_rules"),
    ("read + decode + columns", "gpuadvisor.trace.load", "_collect_streaming"),
    ("read + decode + columns", "gpuadvisor.trace.salvage", "collect_whole"),
    ("read + decode + columns", "gpuadvisor.trace.load", "_collect_whole"),  # before the loader's split
    ("event tables", "gpuadvisor.trace.tables", "build_tables"),
    ("event tables", "gpuadvisor.trace.load", "_build_tables"),  # before the loader's split
    ("trace checks + steps + kind", "gpuadvisor.trace.load", "load_trace"),
    ("step model", "gpuadvisor.stepmodel.model", "build_step_model"),
    ("kernel table", "gpuadvisor.stepmodel.kernels", "build_kernel_table"),
    ("metrics", "gpuadvisor.metrics", "compute_metrics"),
    ("rules", "gpuadvisor.engine", "run_rules"),
    ("findings grouping + prediction", "gpuadvisor.stepmodel.predict", "group_findings"),
    ("findings grouping + prediction", "gpuadvisor.stepmodel.predict", "combine_findings"),
)
_RENDER = "render"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Timer:
    def __init__(self) -> None:
        self.own: dict[str, float] = {}
        self.own_cpu: dict[str, float] = {}  # the same in this process's CPU seconds
        self.peak: dict[str, float] = {}  # the process's peak RSS (MB) when the phase last ended
        self._stack: list[list[float]] = []  # [start, time of timed children, cpu start, cpu of children]

    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            frame = [time.perf_counter(), 0.0, time.process_time(), 0.0]
            self._stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                self._stack.pop()
                spent = time.perf_counter() - frame[0]
                spent_cpu = time.process_time() - frame[2]
                self.own[phase] = self.own.get(phase, 0.0) + spent - frame[1]
                self.own_cpu[phase] = self.own_cpu.get(phase, 0.0) + spent_cpu - frame[3]
                self.peak[phase] = _peak_rss_mb()
                if self._stack:
                    self._stack[-1][1] += spent
                    self._stack[-1][3] += spent_cpu

        return timed


def _install(timer: Timer, phase: str, module_name: str, attr: str) -> None:
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError:  # another version of the code: a phase it does not have
        return
    owner: Any = module
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    fn = getattr(owner, name, None)
    if fn is None:
        return
    timed = timer.wrap(phase, fn)
    if owner is not module:
        setattr(owner, name, timed)
        return
    for other in list(sys.modules.values()):
        namespace = getattr(other, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            if value is fn:
                setattr(other, key, timed)


def run_once(trace: str, fmt: str) -> dict[str, float]:
    from gpuadvisor import cli
    from gpuadvisor.commands import analyze as analyze_command

    imports_done = time.perf_counter()
    timer = Timer()
    for phase, module, attr in PHASES:
        _install(timer, phase, module, attr)
    renderer_module = analyze_command._RENDERERS[fmt]
    _install(timer, _RENDER, renderer_module, "render")
    began = time.perf_counter()
    try:
        cli.main(["analyze", trace, "--format", fmt, "-o", os.devnull, "--no-progress"])
    except SystemExit as done:
        if done.code not in (0, 1, None):
            raise
    total = time.perf_counter() - began
    out = {"start-up + imports": imports_done - _START}
    out.update({phase: round(v, 4) for phase, v in timer.own.items()})
    out["other"] = total - sum(timer.own.values())
    out["total"] = time.perf_counter() - _START
    result = {k: round(v, 3) for k, v in out.items()}
    result.update({f"{k} (cpu s)": round(v, 3) for k, v in timer.own_cpu.items()})
    result.update({f"{k} (peak MB)": round(v, 1) for k, v in timer.peak.items()})
    result["cpu"] = round(time.process_time(), 3)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--format", default="json")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--split", action="store_true", help="keep the two-process read of a large trace")
    ap.add_argument("--cprofile", default=None, help="write a cProfile of one run to this file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if not a.split:
        os.environ["GPUADVISOR_LOAD_SPLIT"] = "0"
    if a.cprofile:
        import cProfile

        from gpuadvisor import cli

        prof = cProfile.Profile()
        prof.enable()
        with contextlib.suppress(SystemExit):
            cli.main(["analyze", a.trace, "--format", a.format, "-o", os.devnull, "--no-progress"])
        prof.disable()
        prof.dump_stats(a.cprofile)
        return 0
    if a.child:
        print(json.dumps(run_once(a.trace, a.format)))
        return 0
    runs = []
    for _ in range(a.repeat):
        cmd = [sys.executable, __file__, a.trace, "--format", a.format, "--child"] + (["--split"] if a.split else [])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            return 1
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    phases = list(dict.fromkeys(k for r in runs for k in r))
    width = max(len(p) for p in phases)
    for p in phases:
        vals = [r.get(p, 0.0) for r in runs]
        unit = "MB" if p.endswith("(peak MB)") else "" if p.endswith("(cpu s)") else "s"
        spread = f"  ({min(vals):.3f}-{max(vals):.3f})" if len(vals) > 1 else ""
        print(f"{p:<{width}}  {statistics.median(vals):9.3f} {unit}{spread}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
