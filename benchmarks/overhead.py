"""Measure gpuadvisor's capture overhead on a steady training script (run on the GPU machine).

    python3 benchmarks/overhead.py [--repeats 3] [--steps 200] [--margin 5] [-o overhead.json]
                                   [--script benchmarks/workloads/control_transformer.py] [-- SCRIPT_ARGS...]

Runs SCRIPT plainly (`python SCRIPT`) and under `python -m gpuadvisor profile --full -o RUN --force SCRIPT`,
interleaved (the order alternates per repeat to cancel drift), with GPUADVISOR_BENCH_STEP_TIMES set so
the script appends one host timestamp per optimizer step (no extra GPU syncs). From the profiled run's
manifest.json (capture.window_start_unix_s / window_end_unix_s / skip_steps / export_seconds) it derives:

- before: median step time for steps 4..skip (after allocator/cudnn warm-up, before the profiler starts)
- window: median step time of the steps recorded by the profiler
- after:  median step time from `margin` steps after the window to the end (CUPTI left attached would
          show here; goal: profiled/plain <= 1.02)
- fixed cost: median wall-time difference of the whole command, start-up (launch -> first step) and
  tail (last step -> exit: export, analysis, report) plain vs profiled.

Each region compares the same step indices in the plain and profiled run of one repeat. Prints a table
and writes JSON (sorted keys). Exit status: 0 when measured, 1 when a run failed, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_SCRIPT = HERE / "workloads" / "control_transformer.py"
GOAL_RATIO = 1.02


def read_step_times(path: Path) -> list[dict[str, Any]]:
    """Step records written by the workload's StepBench, in step order."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda r: int(r["step"]))


def step_durations_ms(rows: list[dict[str, Any]]) -> dict[int, float]:
    """Duration of step k = host time between the end of step k-1 and the end of step k."""
    return {int(b["step"]): (float(b["t"]) - float(a["t"])) * 1000.0 for a, b in itertools.pairwise(rows)}


def window_steps(rows: list[dict[str, Any]], capture: dict[str, Any]) -> tuple[int, int]:
    """First and last step whose end falls inside the recorded window (by wall clock, else by count)."""
    start, end = capture.get("window_start_unix_s"), capture.get("window_end_unix_s")
    if start is not None and end is not None:
        inside = [int(r["step"]) for r in rows if float(start) < float(r["unix_s"]) <= float(end)]
        if inside:
            return min(inside), max(inside)
    first, last = capture.get("first_recorded_step"), capture.get("last_recorded_step")
    if first is not None and last is not None:
        return int(first), int(last)
    skip = int(capture.get("skip_steps", 10))
    warmup = int(capture.get("warmup_steps", 2))
    active = int(capture.get("active_steps", 10))
    return skip + warmup + 1, skip + warmup + active


def region_median(durs: dict[int, float], lo: int, hi: int) -> float | None:
    vals = [d for k, d in durs.items() if lo <= k <= hi]
    return statistics.median(vals) if vals else None


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a is not None and b else None


def analyze_pair(
    plain: dict[str, Any], profiled: dict[str, Any], capture: dict[str, Any], margin: int
) -> dict[str, Any]:
    """Compare one plain and one profiled run (each: rows, launch_unix_s, end_unix_s, wall_s)."""
    p_durs, q_durs = step_durations_ms(plain["rows"]), step_durations_ms(profiled["rows"])
    first_in, last_in = window_steps(profiled["rows"], capture)
    last_step = max(q_durs) if q_durs else 0
    skip = int(capture.get("skip_steps", 10))
    regions = {"before": (4, skip), "window": (first_in, last_in), "after": (last_in + 1 + margin, last_step)}
    out: dict[str, Any] = {"window_steps": [first_in, last_in]}
    for name, (lo, hi) in regions.items():
        pm, qm = region_median(p_durs, lo, hi), region_median(q_durs, lo, hi)
        out[name] = {"steps": [lo, hi], "plain_ms": pm, "profiled_ms": qm, "ratio": ratio(qm, pm)}

    def startup(run: dict[str, Any]) -> float | None:
        return float(run["rows"][0]["unix_s"]) - run["launch_unix_s"] if run["rows"] else None

    def tail(run: dict[str, Any]) -> float | None:
        return run["end_unix_s"] - float(run["rows"][-1]["unix_s"]) if run["rows"] else None

    out["wall_s"] = {
        "plain": plain["wall_s"],
        "profiled": profiled["wall_s"],
        "difference": profiled["wall_s"] - plain["wall_s"],
    }
    out["startup_s"] = {"plain": startup(plain), "profiled": startup(profiled)}
    out["tail_s"] = {"plain": tail(plain), "profiled": tail(profiled)}
    out["export_seconds"] = capture.get("export_seconds")
    return out


def summarize(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repeats of every per-pair number."""

    def med(vals: list[Any]) -> float | None:
        nums = [float(v) for v in vals if v is not None]
        return round(statistics.median(nums), 4) if nums else None

    summary: dict[str, Any] = {}
    for region in ("before", "window", "after"):
        summary[region] = {
            key: med([p[region][key] for p in pairs]) for key in ("plain_ms", "profiled_ms", "ratio")
        }
    for group in ("wall_s", "startup_s", "tail_s"):
        summary[group] = {key: med([p[group][key] for p in pairs]) for key in pairs[0][group]}
    summary["export_seconds"] = med([p["export_seconds"] for p in pairs])
    after = summary["after"]["ratio"]
    summary["after_within_goal"] = after is not None and after <= GOAL_RATIO
    summary["goal_ratio"] = GOAL_RATIO
    return summary


def run_once(cmd: list[str], times_path: Path, log_path: Path) -> dict[str, Any]:
    env = dict(os.environ, GPUADVISOR_BENCH_STEP_TIMES=str(times_path))
    launch = time.time()
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    wall = time.perf_counter() - t0
    return {
        "rc": rc,
        "launch_unix_s": launch,
        "end_unix_s": time.time(),
        "wall_s": wall,
        "rows": read_step_times(times_path),
        "log": str(log_path),
    }


def print_table(summary: dict[str, Any]) -> None:
    def f(x: Any, spec: str = ".2f") -> str:
        return format(x, spec) if isinstance(x, (int, float)) else "n/a"

    print(f"{'region':<10} {'plain ms':>10} {'profiled ms':>12} {'ratio':>8}")
    for region in ("before", "window", "after"):
        r = summary[region]
        print(f"{region:<10} {f(r['plain_ms']):>10} {f(r['profiled_ms']):>12} {f(r['ratio'], '.4f'):>8}")
    print(f"after-window ratio within {GOAL_RATIO}: {summary['after_within_goal']}")
    for group in ("wall_s", "startup_s", "tail_s"):
        print(f"{group:<10} " + "  ".join(f"{k}={f(v)}" for k, v in sorted(summary[group].items())))
    print(f"export_s   {f(summary['export_seconds'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--script", type=Path, default=DEFAULT_SCRIPT)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--margin", type=int, default=5, help="steps after the window left out of 'after'")
    parser.add_argument("-o", "--output", type=Path, default=Path("overhead.json"))
    parser.add_argument("--workdir", type=Path, default=None, help="keep run directories and logs here")
    parser.add_argument("script_args", nargs="*", help="extra arguments for the script (after --)")
    ns = parser.parse_args(argv)
    if not ns.script.is_file():
        parser.error(f"no such script: {ns.script}")
    if ns.repeats < 1 or ns.steps < 40:
        parser.error("--repeats must be >= 1 and --steps >= 40 (window + margin + an 'after' region)")

    work = ns.workdir or Path(tempfile.mkdtemp(prefix="gpuadvisor-overhead-"))
    work.mkdir(parents=True, exist_ok=True)
    script_cmd = [str(ns.script), "--steps", str(ns.steps), *ns.script_args]
    pairs: list[dict[str, Any]] = []
    for i in range(ns.repeats):
        run_dir = work / f"run{i}"
        cmds = {
            "plain": [sys.executable, *script_cmd],
            "profiled": [
                sys.executable,
                "-m",
                "gpuadvisor",
                "profile",
                "--full",
                "-o",
                str(run_dir),
                "--force",
                *script_cmd,
            ],
        }
        order = ["plain", "profiled"] if i % 2 == 0 else ["profiled", "plain"]
        runs: dict[str, dict[str, Any]] = {}
        for kind in order:
            times = work / f"{kind}{i}.steps.jsonl"
            times.unlink(missing_ok=True)
            runs[kind] = run_once(cmds[kind], times, work / f"{kind}{i}.log")
            print(
                f"repeat {i} {kind:<9} rc={runs[kind]['rc']} wall={runs[kind]['wall_s']:.1f}s "
                f"steps={len(runs[kind]['rows'])}",
                file=sys.stderr,
                flush=True,
            )
            if runs[kind]["rc"] != 0 or len(runs[kind]["rows"]) < ns.steps:
                print(
                    f"error: {kind} run {i} failed (rc={runs[kind]['rc']}, {len(runs[kind]['rows'])} steps "
                    f"recorded); see {runs[kind]['log']}",
                    file=sys.stderr,
                )
                return 1
        manifest_path = run_dir / "manifest.json"
        capture: dict[str, Any] = {}
        if manifest_path.exists():
            capture = json.loads(manifest_path.read_text()).get("capture") or {}
        else:
            print(f"warning: {manifest_path} missing; assuming skip 10, warmup 2, active 10", file=sys.stderr)
        pairs.append(analyze_pair(runs["plain"], runs["profiled"], capture, ns.margin))

    result = {
        "script": str(ns.script),
        "steps": ns.steps,
        "repeats": ns.repeats,
        "margin": ns.margin,
        "pairs": pairs,
        "summary": summarize(pairs),
        "workdir": str(work),
    }
    ns.output.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print_table(result["summary"])
    print(f"wrote {ns.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
