"""Measure what `gpuadvisor profile` costs a run, and find where the cost comes from (issue 15).

    python3 benchmarks/overhead.py [--suite main] [--repeats 5] [-o OUT.json]          (about 6 min on an H200)
    python3 benchmarks/overhead.py --experiment all-suspects [--repeats 5] [-o OUT.json] (about 5 min)
    python3 benchmarks/overhead.py --micro [-o OUT.json]                               (seconds, in process)
    python3 benchmarks/overhead.py --script S [--steps N] [-- SCRIPT_ARGS...]          (one workload of yours)
    add --tiny to any of them for a CPU smoke run (tiny sizes, small window; what tests/ run)

Every workload runs plainly (`python SCRIPT`) and under `python -m gpuadvisor profile --full` (the
default window: skip 10, warm-up 2, active 10), interleaved: each repeat runs every kind once, in an
order rotated per repeat, so drift of the machine hits every kind alike. The workloads append one host
timestamp per step (GPUADVISOR_BENCH_STEP_TIMES, no extra GPU sync). From the profiled run's
manifest.json the steps are split into regions, and each region's median step time is compared with
the same steps of the plain run of the same repeat:

- before: steps after the speculative first-step recording and before the window (unprofiled);
- window: the steps whose end falls inside the recorded window;
- after:  from `--margin` steps past the window to the end (goal: profiled / plain <= 1.02);

plus the fixed cost of the whole command: wall-time difference, start-up (launch -> first step) and
tail (last step -> exit: trace export, analysis, report.html), and the export time. Reported per
workload: the median over repeats, and the spread (min..max) of the per-repeat ratios.

`--suite main`: two host-bound workloads (`benchmarks/overhead/hostbound_mlp.py`, issue 15's loop:
host-side batch preparation, pageable copies, small kernels, two `.item()` a step; and
`benchmarks/workloads/sync_bound.py`: hundreds of `.item()` a step) and one GPU-bound
(`benchmarks/workloads/control_transformer.py`). The profiled runs analyze and write report.html, as a
user's run does.

`--experiment all-suspects`: the host-bound MLP, plain python against the capture as it is
(`baseline`) and with each suspect of the post-window slowdown switched off alone
(GPUADVISOR_EXPERIMENT_DISABLE, see gpuadvisor/capture/experiment.py): the parent's NVML sampling,
its PCIe queries, the step accounting after the window, every Python hook, and the three parts of the
fix switched back to the old behaviour (wrappers kept after the window, CUPTI not finalized, NVML
sampled at the full rate after the window; `legacy` is all three). Profiled runs skip the analysis. One config per row: its after-window ratio to plain python.

`--micro`: per-call costs inside one process (Tensor.item wrapper, the nn.Module discovery wrapper and
the top module's pre-hook, each plain vs wrapped), best of several loops.

Writes the raw numbers (every run's per-step durations included) as JSON with sorted keys to `-o`
(default `$OUT/overhead.json` when $OUT is set, else overhead.json) and prints a table. `--budget-s`
stops starting new repeats once that much wall time has passed (what was measured is kept and
reported). Exit status: 0 measured, 1 a run failed, 2 usage error.
"""

# No `from __future__ import annotations`: tests load this file without registering it in sys.modules,
# and dataclasses resolve string annotations through sys.modules.
import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_SCRIPT = HERE / "workloads" / "control_transformer.py"
GOAL_RATIO = 1.02
TINY_WINDOW = ["--skip-steps", "8", "--warmup-steps", "1", "--active-steps", "3"]


@dataclass(frozen=True)
class Workload:
    name: str
    script: Path
    steps: int
    args: tuple[str, ...] = ()
    tiny_args: tuple[str, ...] = ("--tiny",)
    tiny_steps: int = 60


MAIN = (
    Workload(
        "hostbound_mlp",
        HERE / "overhead" / "hostbound_mlp.py",
        400,
        tiny_args=("--device", "cpu", "--width", "32", "--depth", "2", "--batch-size", "8", "--tiny-ops", "20"),
    ),
    Workload("sync_bound", HERE / "workloads" / "sync_bound.py", 250),
    Workload("control_transformer", HERE / "workloads" / "control_transformer.py", 150, tiny_steps=40),
)

# config name -> GPUADVISOR_EXPERIMENT_DISABLE value ("" = the capture as shipped)
EXPERIMENT_CONFIGS = {
    "baseline": "",
    "no_nvml": "nvml",
    "no_nvml_pcie": "nvml_pcie",
    "nvml_full_rate": "nvml_relax",
    "no_step_timer": "step_timer",
    "no_hooks": "hooks",
    "keep_wrappers": "uninstall_after_window",
    "no_cupti_teardown": "cupti_teardown",
    "legacy": "legacy",
}


# ----------------------------------------------------------------------------------------- analysis
def read_step_times(path: Path) -> list[dict[str, Any]]:
    """Step records written by the workload (StepBench's format), in step order."""
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
    """Compare one plain and one profiled run (each: rows, launch_unix_s, end_unix_s, wall_s).

    Step numbers are the workload's (1-based), written after `optimizer.step()` returns: step k ends
    just after the capture handled its boundary k, so step k carries what happens there. The
    speculative recording of the first steps stops at boundary s (in step s) and the window's profiler
    is prepared at boundary `skip` (in step skip): "before" is steps s + 1 .. skip - 1."""
    p_durs, q_durs = step_durations_ms(plain["rows"]), step_durations_ms(profiled["rows"])
    first_in, last_in = window_steps(profiled["rows"], capture)
    last_step = max(q_durs) if q_durs else 0
    skip = int(capture.get("skip_steps", 10))
    spec_end = capture.get("speculation_end_step")
    before_lo = max(4, int(spec_end) + 1) if isinstance(spec_end, int) else 4
    regions = {
        "before": (before_lo, skip - 1),
        "window": (first_in, last_in),
        "after": (last_in + 1 + margin, last_step),
    }
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


def _med(vals: Sequence[Any]) -> float | None:
    nums = [float(v) for v in vals if v is not None]
    return round(statistics.median(nums), 4) if nums else None


def summarize(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repeats of every per-pair number, and the spread of the ratios."""
    summary: dict[str, Any] = {}
    for region in ("before", "window", "after"):
        ratios = [p[region]["ratio"] for p in pairs if p[region]["ratio"] is not None]
        summary[region] = {key: _med([p[region][key] for p in pairs]) for key in ("plain_ms", "profiled_ms", "ratio")}
        summary[region]["ratio_min"] = min(ratios) if ratios else None
        summary[region]["ratio_max"] = max(ratios) if ratios else None
    for group in ("wall_s", "startup_s", "tail_s"):
        summary[group] = {key: _med([p[group][key] for p in pairs]) for key in pairs[0][group]}
    summary["export_seconds"] = _med([p["export_seconds"] for p in pairs])
    after = summary["after"]["ratio"]
    summary["after_within_goal"] = after is not None and after <= GOAL_RATIO
    summary["goal_ratio"] = GOAL_RATIO
    summary["repeats"] = len(pairs)
    return summary


# ----------------------------------------------------------------------------------------- running
@dataclass
class Runner:
    """Runs commands with step timing; every run's raw record is kept in `runs`."""

    work: Path
    tiny: bool
    margin: int
    runs: list[dict[str, Any]] = field(default_factory=list)

    def run(self, label: str, cmd: list[str], experiment: str = "") -> dict[str, Any]:
        times = self.work / f"{label}.steps.jsonl"
        times.unlink(missing_ok=True)
        env = dict(os.environ, GPUADVISOR_BENCH_STEP_TIMES=str(times))
        env.pop("GPUADVISOR_EXPERIMENT_DISABLE", None)
        if experiment:
            env["GPUADVISOR_EXPERIMENT_DISABLE"] = experiment
        if self.tiny:
            env.setdefault("OMP_NUM_THREADS", "1")
            env["CUDA_VISIBLE_DEVICES"] = ""
        log_path = self.work / f"{label}.log"
        launch = time.time()
        t0 = time.perf_counter()
        with open(log_path, "w") as log:
            rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        wall = time.perf_counter() - t0
        rows = read_step_times(times)
        record = {
            "label": label,
            "rc": rc,
            "launch_unix_s": launch,
            "end_unix_s": time.time(),
            "wall_s": wall,
            "rows": rows,
            "log": str(log_path),
            "experiment": experiment,
            "step_ms": [round(d, 4) for _, d in sorted(step_durations_ms(rows).items())],
        }
        self.runs.append({k: v for k, v in record.items() if k != "rows"})
        print(f"{label:<40} rc={rc} wall={wall:6.1f}s steps={len(rows)}", file=sys.stderr, flush=True)
        return record


def _capture_of(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "manifest.json"
    if not path.exists():
        print(f"warning: {path} missing; assuming the default window", file=sys.stderr)
        return {}
    return dict(json.loads(path.read_text()).get("capture") or {})


def _gpu_of(run_dir: Path) -> str | None:
    try:
        env = json.loads((run_dir / "environment.json").read_text())
        gpus = env.get("gpus") or []
        return str(gpus[0]["name"]) if gpus else "cpu"
    except (OSError, ValueError, KeyError, IndexError):
        return None


def profile_cmd(run_dir: Path, script_cmd: list[str], tiny: bool, analyze: bool) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gpuadvisor",
        "profile",
        "--full",
        "--force",
        "-q",
        *([] if analyze else ["--no-analyze"]),
        *(TINY_WINDOW if tiny else []),
        "-o",
        str(run_dir),
        *script_cmd,
    ]


def measure(
    runner: Runner,
    name: str,
    script_cmd: list[str],
    configs: dict[str, str],
    repeats: int,
    analyze: bool,
    deadline: float,
) -> dict[str, Any]:
    """Plain python and one profiled run per config, `repeats` times, interleaved."""
    kinds = ["plain", *configs]
    pairs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    gpu: str | None = None
    for i in range(repeats):
        if i > 0 and time.time() > deadline:
            print(f"budget reached: {name} stopped after {i} repeats", file=sys.stderr)
            break
        order = kinds[i % len(kinds) :] + kinds[: i % len(kinds)]
        if i % 2:
            order.reverse()
        done: dict[str, dict[str, Any]] = {}
        for kind in order:
            label = f"{name}-{kind}-{i}"
            if kind == "plain":
                cmd = [sys.executable, *script_cmd]
                rec = runner.run(label, cmd)
            else:
                run_dir = runner.work / f"run-{label}"
                rec = runner.run(label, profile_cmd(run_dir, script_cmd, runner.tiny, analyze), configs[kind])
                rec["capture"] = _capture_of(run_dir)
                gpu = gpu or _gpu_of(run_dir)
            if rec["rc"] != 0 or len(rec["rows"]) < 2:
                raise RuntimeError(f"{label} failed (rc={rec['rc']}, {len(rec['rows'])} steps); see {rec['log']}")
            done[kind] = rec
        for kind in configs:
            pairs[kind].append(analyze_pair(done["plain"], done[kind], done[kind]["capture"], runner.margin))
    return {
        "gpu": gpu,
        "command": script_cmd,
        "configs": {kind: {"pairs": p, "summary": summarize(p)} for kind, p in pairs.items() if p},
    }


# ----------------------------------------------------------------------------------------- micro
def micro() -> dict[str, Any]:
    """Per-call costs (us) of the wrappers, in this process: best of 7 loops."""
    import torch

    from gpuadvisor.capture.forward import ForwardTracker
    from gpuadvisor.capture.hooks import Recorder

    def best(fn: Callable[[], None], n: int) -> float:
        vals = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            vals.append((time.perf_counter() - t0) / n * 1e6)
        return round(min(vals), 3)

    def recorder() -> Recorder:
        return Recorder(
            log=lambda m: None,
            on_optimizer_step=lambda o: None,
            on_dataloader_next=lambda: None,
            on_user_profiler=lambda p: None,
        )

    torch.set_num_threads(1)  # per-call costs, not kernel speed: no thread pool wake-ups
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t = torch.ones((), device="cpu")
    out: dict[str, Any] = {"device": device}
    out["tensor_item_plain_us"] = best(t.item, 20000)
    rec = recorder()
    rec.install()
    out["tensor_item_wrapped_us"] = best(t.item, 20000)
    rec.uninstall()
    out["tensor_item_after_uninstall_us"] = best(t.item, 20000)

    class Model(torch.nn.Module):
        """One parameter, eight nested module calls, no kernels: only Python call overhead."""

        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(1))
            self.inner = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(8)])

        def forward(self, v: Any) -> Any:
            return self.inner(v)

    x = torch.ones(1, 8)
    model = Model()
    out["model_call_plain_us"] = best(lambda: model(x), 2000)
    rec = recorder()
    tracker = ForwardTracker(rec, lambda evaluating=False: None)  # the session's signal takes the grad state
    from gpuadvisor.capture import forward

    saved = forward.DISCOVERY_CALLS
    forward.DISCOVERY_CALLS = 10**9
    try:
        tracker.install()
        out["model_call_discovery_us"] = best(lambda: model(x), 2000)  # 1 outermost + 9 nested calls
        tracker._end_discovery()
        out["model_call_top_hook_recording_us"] = best(lambda: model(x), 2000)
        tracker.record_sites = False
        out["model_call_top_hook_after_window_us"] = best(lambda: model(x), 2000)
    finally:
        forward.DISCOVERY_CALLS = saved
        rec.uninstall()
    out["model_call_after_uninstall_us"] = best(lambda: model(x), 2000)
    return out


# ----------------------------------------------------------------------------------------- output
def print_table(results: dict[str, Any]) -> None:
    def f(x: Any, spec: str = ".3f") -> str:
        return format(x, spec) if isinstance(x, (int, float)) else "n/a"

    print(f"{'workload / config':<36} {'region':<7} {'plain ms':>9} {'prof. ms':>9} {'ratio':>7} {'min..max':>15}")
    for wname, w in results.get("workloads", {}).items():
        for cname, c in w["configs"].items():
            s = c["summary"]
            for region in ("before", "window", "after"):
                r = s[region]
                print(
                    f"{wname + ' / ' + cname:<36} {region:<7} {f(r['plain_ms'], '.2f'):>9} {f(r['profiled_ms'], '.2f'):>9} "
                    f"{f(r['ratio'], '.3f'):>7} {f(r['ratio_min'], '.3f') + '..' + f(r['ratio_max'], '.3f'):>15}"
                )
            print(
                f"{'':<36} fixed: wall +{f(s['wall_s']['difference'], '.2f')} s, start-up "
                f"{f(s['startup_s']['plain'], '.2f')} -> {f(s['startup_s']['profiled'], '.2f')} s, tail "
                f"{f(s['tail_s']['plain'], '.2f')} -> {f(s['tail_s']['profiled'], '.2f')} s, export "
                f"{f(s['export_seconds'], '.2f')} s; after within {GOAL_RATIO}: {s['after_within_goal']}"
            )
    if "micro" in results:
        for k, v in sorted(results["micro"].items()):
            print(f"micro {k:<40} {v}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--suite", choices=["main"], default=None)
    mode.add_argument("--experiment", choices=["all-suspects"], default=None)
    mode.add_argument("--micro", action="store_true")
    mode.add_argument("--script", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default: per workload)")
    parser.add_argument("--margin", type=int, default=5, help="steps after the window left out of 'after'")
    parser.add_argument("--tiny", action="store_true", help="CPU smoke run: tiny sizes, small window")
    parser.add_argument("--workloads", default=None, help="comma-separated subset of the main suite")
    parser.add_argument("--budget-s", type=float, default=None, help="start no repeat after this many seconds")
    parser.add_argument("-o", "--output", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None, help="keep run directories and logs here")
    parser.add_argument("script_args", nargs="*", help="extra arguments for --script (after --)")
    ns = parser.parse_args(argv)
    if ns.repeats < 1:
        parser.error("--repeats must be >= 1")
    if ns.script is not None and not ns.script.is_file():
        parser.error(f"no such script: {ns.script}")
    if ns.steps is not None and ns.steps < (20 if ns.tiny else 40):
        parser.error("--steps must leave room for the window, a margin and an 'after' region")
    out_dir = os.environ.get("OUT")
    output = ns.output or (Path(out_dir) / "overhead.json" if out_dir else Path("overhead.json"))

    results: dict[str, Any] = {"goal_ratio": GOAL_RATIO, "tiny": ns.tiny, "repeats": ns.repeats}
    with_torch = {}
    try:
        import torch

        with_torch = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available()}
    except ImportError:
        pass
    results.update(with_torch)
    if ns.micro:
        results["micro"] = micro()
        output.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        print_table(results)
        print(f"wrote {output}")
        return 0

    work = ns.workdir or Path(tempfile.mkdtemp(prefix="gpuadvisor-overhead-"))
    work.mkdir(parents=True, exist_ok=True)
    runner = Runner(work=work, tiny=ns.tiny, margin=ns.margin)
    deadline = time.time() + (ns.budget_s if ns.budget_s is not None else 1e9)

    def script_cmd(w: Workload) -> list[str]:
        steps = ns.steps or (w.tiny_steps if ns.tiny else w.steps)
        return [str(w.script), "--steps", str(steps), *(w.tiny_args if ns.tiny else w.args)]

    jobs: list[tuple[str, list[str], dict[str, str], bool]] = []
    if ns.experiment:
        w = MAIN[0]
        jobs.append((w.name, script_cmd(w), dict(EXPERIMENT_CONFIGS), False))
        results["experiment"] = ns.experiment
    elif ns.script is not None:
        steps = ns.steps or 200
        jobs.append((ns.script.stem, [str(ns.script), "--steps", str(steps), *ns.script_args], {"profiled": ""}, True))
    else:
        chosen = set(ns.workloads.split(",")) if ns.workloads else {w.name for w in MAIN}
        unknown = chosen - {w.name for w in MAIN}
        if unknown:
            parser.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
        jobs += [(w.name, script_cmd(w), {"profiled": ""}, True) for w in MAIN if w.name in chosen]
        results["suite"] = "main"

    results["workloads"] = {}
    status = 0
    for name, cmd, configs, analyze in jobs:
        try:
            results["workloads"][name] = measure(runner, name, cmd, configs, ns.repeats, analyze, deadline)
        except RuntimeError as err:
            print(f"error: {err}", file=sys.stderr)
            status = 1
    gpus = {w.get("gpu") for w in results["workloads"].values() if w.get("gpu")}
    results["gpu"] = ", ".join(sorted(gpus)) if gpus else None
    results["runs"] = runner.runs
    results["workdir"] = str(work)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"GPU: {results['gpu']}  torch {results.get('torch')}")
    print_table(results)
    print(f"wrote {output}")
    return status


if __name__ == "__main__":
    sys.exit(main())
