"""Measure every variant of the planted-problem corpus with plain python (no profiler).

    python3 benchmarks/measure.py [--workloads A,B] [--variants V,W] [--shard I/N] [--repeats 3] [--seconds 1.5]
                                  [--out DIR] [--tiny] [--run-timeout S] [--deadline S] [--plan]

For each workload of benchmarks/catalog.py: the planted script, each single fix, all fixes together and
the catalog's probes, `--repeats` times, interleaved (repeat r runs the variants rotated by r so that no
variant always runs first or last). Each run is timed by the workload's own StepBench over a measured
region of about `--seconds` (default 1.2; GPUADVISOR_BENCH_SECONDS: the region ends at the first step boundary past
it), after `--warmup-steps` (default 5) warm-up steps.

To pay Python start-up, imports, CUDA initialization and torch.compile's caches once, all runs of a
workload share one child process (`runpy`, `sys.argv` per variant) that resets the process-global torch
state between runs (TF32 flags, float32 matmul precision, cuDNN flags, SDPA backends, default dtype,
grad mode, autocast, torch._dynamo, the CUDA cache). Workloads marked `isolated` (environment read at
CUDA start-up, framework trainers) get one fresh process per run. A failing run or workload never stops
the others; a child that hangs is killed at its time limit.

Outputs (in --out, default ./measure-out): `measure[-sIofN].jsonl`, one JSON object per line:
`{"record": "run", ...}` per run as it ends, then `{"record": "variant", ...}` per variant with the
median samples/s over repeats, its min/max and relative spread, and the speed-up against planted (the
median of the per-repeat ratios, with their min and max as the noise band) and the recovered share of
the step (1 - 1/speed-up); `measure[-sIofN].log`: progress lines, failed runs' output, the table.
The table is also printed. `--plan` prints the shard plan with estimated GPU seconds and runs nothing.

Exit status: 0 when every run produced a measurement, 1 when some failed or were skipped by the
deadline, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKLOADS_DIR = HERE / "workloads"
sys.path.insert(0, str(HERE))

from catalog import Variant, Workload, by_name, shard  # noqa: E402

CHILD_START_S = 3.0  # python + torch import + CUDA init of one in-process child (estimate)
ACTIVE_GROUPS: set[int] = set()  # process groups of running children, killed if this process is terminated
TINY_SECONDS = 0.2


# ---------------------------------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedRun:
    workload: str
    variant: str
    repeat: int
    order: int  # position of the variant within its repeat
    args: tuple[str, ...]
    fixes: tuple[str, ...]


def chosen_variants(w: Workload, only: Sequence[str] = ()) -> list[Variant]:
    """The variants of `w` to measure: all, or planted and those named in `only` (`--variants`)."""
    return [v for v in w.variants() if not only or v.name == "planted" or v.name in only]


def interleaved_runs(w: Workload, repeats: int, only: Sequence[str] = ()) -> list[PlannedRun]:
    """Repeat r runs the variants rotated left by r."""
    variants: Sequence[Variant] = chosen_variants(w, only)
    runs = []
    for r in range(repeats):
        k = r % len(variants)
        for order, v in enumerate([*variants[k:], *variants[:k]]):
            runs.append(PlannedRun(w.name, v.name, r, order, v.args, v.fixes))
    return runs


def estimated_seconds(w: Workload, repeats: int, seconds: float, only: Sequence[str] = ()) -> float:
    """Estimated wall time on an H200 of measuring `w` (plans shards and the deadline)."""
    runs = len(chosen_variants(w, only)) * repeats
    per_run = w.measure.est_run_s + (seconds - 1.5)  # est_run_s assumes 1.5 s regions
    return (0.0 if w.isolated else CHILD_START_S) + w.measure.est_first_s + runs * per_run


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard wants I/N, e.g. 1/2, not {text!r}") from None
    if not 1 <= i <= n:
        raise argparse.ArgumentTypeError(f"--shard {text}: I must be in 1..N")
    return i, n


# ---------------------------------------------------------------------------------------------------
# One run inside a child process (in-process mode)
# ---------------------------------------------------------------------------------------------------


class RunTimeout(Exception):
    """Raised in the child's main thread by SIGALRM when a run exceeds its time limit."""


def bench_line(stdout: str) -> dict[str, Any] | None:
    lines = [line for line in stdout.splitlines() if line.startswith("BENCH ")]
    if not lines:
        return None
    record = json.loads(lines[-1][len("BENCH "):])
    return record if isinstance(record, dict) else None


class TorchGlobalState:
    """Process-global torch settings a workload may change, captured once and restored after each run."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        b = torch.backends
        self.values: dict[str, Any] = {
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "matmul_allow_tf32": b.cuda.matmul.allow_tf32,
            "matmul_bf16_reduced": b.cuda.matmul.allow_bf16_reduced_precision_reduction,
            "matmul_fp16_reduced": b.cuda.matmul.allow_fp16_reduced_precision_reduction,
            "cudnn_allow_tf32": b.cudnn.allow_tf32,
            "cudnn_benchmark": b.cudnn.benchmark,
            "cudnn_deterministic": b.cudnn.deterministic,
            "cudnn_enabled": b.cudnn.enabled,
            "default_dtype": torch.get_default_dtype(),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "grad_enabled": torch.is_grad_enabled(),
            "num_threads": torch.get_num_threads(),
            "flash_sdp": b.cuda.flash_sdp_enabled(),  # type: ignore[no-untyped-call]
            "mem_efficient_sdp": b.cuda.mem_efficient_sdp_enabled(),  # type: ignore[no-untyped-call]
            "math_sdp": b.cuda.math_sdp_enabled(),  # type: ignore[no-untyped-call]
        }

    def restore(self) -> None:
        torch = self.torch
        v = self.values
        b = torch.backends
        torch.set_float32_matmul_precision(v["float32_matmul_precision"])
        b.cuda.matmul.allow_tf32 = v["matmul_allow_tf32"]
        b.cuda.matmul.allow_bf16_reduced_precision_reduction = v["matmul_bf16_reduced"]
        b.cuda.matmul.allow_fp16_reduced_precision_reduction = v["matmul_fp16_reduced"]
        b.cudnn.allow_tf32 = v["cudnn_allow_tf32"]
        b.cudnn.benchmark = v["cudnn_benchmark"]
        b.cudnn.deterministic = v["cudnn_deterministic"]
        b.cudnn.enabled = v["cudnn_enabled"]
        torch.set_default_dtype(v["default_dtype"])
        torch.use_deterministic_algorithms(v["deterministic_algorithms"])
        torch.set_grad_enabled(v["grad_enabled"])
        torch.set_num_threads(v["num_threads"])
        b.cuda.enable_flash_sdp(v["flash_sdp"])
        b.cuda.enable_mem_efficient_sdp(v["mem_efficient_sdp"])
        b.cuda.enable_math_sdp(v["math_sdp"])
        for device_type in ("cpu", "cuda"):  # a run that raised inside `with torch.autocast(...)`
            if torch.is_autocast_enabled(device_type):
                torch.set_autocast_enabled(device_type, False)
        torch.clear_autocast_cache()
        if "torch._dynamo" in sys.modules:
            torch._dynamo.reset()  # compiled graphs, guards and CUDA graph trees of the last run
        import gc

        gc.collect()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def changed(self) -> list[str]:
        """Names of settings that differ from the captured values (for tests)."""
        now = TorchGlobalState()
        return sorted(k for k, v in self.values.items() if now.values[k] != v)


def run_in_process(script: Path, args: Sequence[str], timeout_s: float, state: TorchGlobalState) -> dict[str, Any]:
    """Run `script` as __main__ with `args`, capture its stdout, restore the torch state afterwards."""
    import io
    import runpy
    import traceback

    out = io.StringIO()
    saved_argv = sys.argv
    error: str | None = None

    def on_alarm(signum: int, frame: Any) -> None:
        raise RunTimeout(f"run exceeded {timeout_s:.0f} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    t0 = time.perf_counter()
    try:
        sys.argv = [str(script), *args]
        with contextlib.redirect_stdout(out):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (0, None):
            error = f"exit status {exc.code}"
    except RunTimeout as exc:
        error = str(exc)
    except BaseException as exc:  # the workload's own failure: recorded, the next run goes on
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        sys.stderr.write(traceback.format_exc())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.argv = saved_argv
    wall = time.perf_counter() - t0
    try:
        state.restore()
    except Exception as exc:  # a broken CUDA context: later runs of this child will say so too
        error = error or f"state reset failed: {exc}"
    return {"stdout": out.getvalue(), "error": error, "wall_s": round(wall, 3)}


def bench_env(seconds: float, min_steps: int, warmup_steps: int) -> dict[str, str]:
    """The StepBench variables of a measured run (benchmarks/workloads/_common.py)."""
    return {"GPUADVISOR_BENCH_SECONDS": str(seconds), "GPUADVISOR_BENCH_MIN_STEPS": str(min_steps),
            "GPUADVISOR_BENCH_WARMUP_STEPS": str(warmup_steps)}


def child_main(plan_path: Path, results_path: Path) -> int:
    """Internal: run the plan's runs in this process, one JSON line per run to `results_path`.

    The plan is JSON: {"seconds": float | null, "min_steps": int, "warmup_steps": int, "run_timeout": float,
    "runs": [{"workload",
    "variant", "repeat", "argv"}]}; each result line is {"run": <the plan's run>, "stdout", "error", "wall_s"}.
    """
    plan = json.loads(plan_path.read_text())
    sys.path.insert(0, str(WORKLOADS_DIR))
    if plan.get("seconds") is not None:  # else --steps alone decides (smoke tests)
        os.environ.update(bench_env(plan["seconds"], plan.get("min_steps", 3), plan.get("warmup_steps", 10)))
    state = TorchGlobalState()
    with results_path.open("a", buffering=1) as results:
        for run in plan["runs"]:
            script = WORKLOADS_DIR / f"{run['workload']}.py"
            print(f"--- {run['workload']} {run['variant']} repeat {run['repeat']}", file=sys.stderr, flush=True)
            res = run_in_process(script, run["argv"], plan["run_timeout"], state)
            results.write(json.dumps({"run": run, **res}) + "\n")
    return 0


# ---------------------------------------------------------------------------------------------------
# The parent: runs workloads, collects, summarizes
# ---------------------------------------------------------------------------------------------------


class Reporter:
    """Progress lines to stderr and the log file; result records to the JSONL file."""

    def __init__(self, jsonl: TextIO, log: TextIO, label: str) -> None:
        self.jsonl, self.log, self.label = jsonl, log, label
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        line = f"[{self.label} +{self.elapsed():5.0f}s] {text}"
        print(line, file=sys.stderr, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def record(self, obj: dict[str, Any]) -> None:
        self.jsonl.write(json.dumps(obj, sort_keys=True) + "\n")
        self.jsonl.flush()

    def attach(self, title: str, text: str, max_lines: int = 60) -> None:
        lines = text.splitlines()[-max_lines:]
        self.log.write(f"----- {title} (last {len(lines)} lines)\n" + "\n".join(lines) + "\n-----\n")
        self.log.flush()


def run_record(w: Workload, run: PlannedRun, bench: dict[str, Any] | None, error: str | None,
               wall_s: float, stdout: str = "") -> dict[str, Any]:
    rec: dict[str, Any] = {
        "record": "run", "workload": w.name, "variant": run.variant, "repeat": run.repeat, "order": run.order,
        "args": list(run.args), "fixes": list(run.fixes), "isolated": w.isolated, "split": w.split.value,
        "family": w.family.value, "wall_s": round(wall_s, 3), "ok": bench is not None and error is None,
        "error": error if error is not None else (None if bench is not None else "no BENCH line"),
    }
    # The script's own last lines (e.g. the memory workloads' allocator retry counts), kept short.
    rec["stdout_tail"] = [line[:200] for line in stdout.splitlines() if not line.startswith("BENCH ")][-3:]
    if bench is not None:
        for key in ("samples_per_s", "step_ms_median", "step_ms_mean", "steps", "warmup_steps", "batch_size",
                    "device"):
            rec[key] = bench.get(key)
    return rec


def script_argv(w: Workload, run: PlannedRun, tiny: bool) -> list[str]:
    return [*run.args, "--steps", str(w.measure.max_steps), *(["--tiny"] if tiny else [])]


def measure_isolated(w: Workload, runs: list[PlannedRun], opts: argparse.Namespace, rep: Reporter,
                     deadline_at: float | None) -> list[dict[str, Any]]:
    records = []
    env = dict(os.environ, **bench_env(opts.seconds, opts.min_steps, opts.warmup_steps))
    for run in runs:
        if deadline_at is not None and time.monotonic() + w.measure.est_run_s > deadline_at:
            rec = run_record(w, run, None, "skipped: deadline", 0.0)
        else:
            cmd = [opts.python, str(WORKLOADS_DIR / f"{w.name}.py"), *script_argv(w, run, opts.tiny)]
            t0 = time.monotonic()
            timeout = opts.run_timeout if deadline_at is None else max(1.0, min(opts.run_timeout,
                                                                              deadline_at - time.monotonic()))
            rc, stdout, stderr = run_with_limit(cmd, timeout, env)
            bench = bench_line(stdout)
            error = (f"run exceeded {timeout:.0f} s" if rc is None
                     else None if rc == 0 else f"exit status {rc}")
            if error or bench is None:
                rep.attach(f"{w.name} {run.variant} r{run.repeat} stderr", stderr)
            rec = run_record(w, run, bench, error, time.monotonic() - t0, stdout)
        records.append(rec)
        rep.record(rec)
        progress(rep, rec)
    return records


def run_with_limit(cmd: Sequence[str], timeout: float, env: dict[str, str] | None = None,
                   grace: float = 10.0) -> tuple[int | None, str, str]:
    """Run `cmd` in its own process group from the repository root; at `timeout` send the group SIGTERM
    (a profiler flushes what it has), after `grace` SIGKILL. Returns (exit status or None when it had to
    be stopped, stdout, stderr)."""
    proc = subprocess.Popen(list(cmd), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    ACTIVE_GROUPS.add(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        return None, out, err
    finally:
        ACTIVE_GROUPS.discard(proc.pid)


def stop_children_on_sigterm() -> None:
    """`timeout` or a scheduler terminating the harness also stops the workload processes it started
    (each runs in its own session); what was measured is already on disk, line by line."""

    def handler(signum: int, frame: Any) -> None:
        for pgid in list(ACTIVE_GROUPS):
            with contextlib.suppress(ProcessLookupError):  # already gone
                os.killpg(pgid, signal.SIGKILL)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def measure_in_process(w: Workload, runs: list[PlannedRun], opts: argparse.Namespace, rep: Reporter,
                       deadline_at: float | None) -> list[dict[str, Any]]:
    """All runs of `w` in one child process; results streamed back through a file."""
    by_key = {(r.variant, r.repeat): r for r in runs}
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix=f"measure-{w.name}-") as tmp:
        plan_path, results_path, err_path = Path(tmp, "plan.json"), Path(tmp, "results.jsonl"), Path(tmp, "stderr")
        plan = {
            "seconds": opts.seconds, "min_steps": opts.min_steps, "warmup_steps": opts.warmup_steps,
            "run_timeout": opts.run_timeout,
            "runs": [{"workload": r.workload, "variant": r.variant, "repeat": r.repeat,
                      "argv": script_argv(w, r, opts.tiny)} for r in runs],
        }
        plan_path.write_text(json.dumps(plan))
        results_path.touch()
        limit = w.measure.est_first_s + CHILD_START_S + len(runs) * opts.run_timeout
        if deadline_at is not None:
            limit = min(limit, deadline_at - time.monotonic())
        cmd = [opts.python, str(Path(__file__).resolve()), "--child", str(plan_path), "--results", str(results_path)]
        t0 = time.monotonic()
        with err_path.open("w") as err:
            proc = subprocess.Popen(cmd, stdout=err, stderr=err, cwd=ROOT, start_new_session=True)
            ACTIVE_GROUPS.add(proc.pid)
            seen = 0
            killed = False
            while True:
                done = proc.poll() is not None
                lines = results_path.read_text().splitlines()
                for line in lines[seen:]:
                    res = json.loads(line)
                    run = by_key[(res["run"]["variant"], res["run"]["repeat"])]
                    rec = run_record(w, run, bench_line(res["stdout"]), res["error"], res["wall_s"], res["stdout"])
                    if not rec["ok"]:
                        rep.attach(f"{w.name} {run.variant} r{run.repeat} stdout", res["stdout"], 20)
                    records.append(rec)
                    rep.record(rec)
                    progress(rep, rec)
                seen = len(lines)
                if done:
                    break
                if time.monotonic() - t0 > limit:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    killed = True
                    continue  # read what was written before the kill, then leave
                time.sleep(0.25)
            ACTIVE_GROUPS.discard(proc.pid)
        finished = {(r["variant"], r["repeat"]) for r in records}
        child_err = err_path.read_text(errors="replace")
        missing = [r for r in runs if (r.variant, r.repeat) not in finished]
        if missing or any(not r["ok"] for r in records):
            rep.attach(f"{w.name} child stderr", child_err, 80)
        for run in missing:
            reason = (f"child killed at its {limit:.0f} s limit" if killed
                      else f"child exited with status {proc.returncode} before this run")
            rec = run_record(w, run, None, reason, 0.0)
            records.append(rec)
            rep.record(rec)
            progress(rep, rec)
    return records


def progress(rep: Reporter, rec: dict[str, Any]) -> None:
    status = f"{rec['samples_per_s']:,.1f} samples/s" if rec["ok"] else f"FAILED: {rec['error']}"
    rep.say(f"{rec['workload']:<22} r{rec['repeat']} {rec['variant']:<20} {status} ({rec['wall_s']:.1f}s)")


def summarize(w: Workload, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One summary per variant: medians over repeats and speed-ups against planted with noise bands."""
    ok = [r for r in records if r["ok"]]
    planted = {r["repeat"]: r["samples_per_s"] for r in ok if r["variant"] == "planted"}
    remedies = {p.fix: p.remedy for p in w.problems}
    categories = {p.fix: p.category for p in w.problems}
    probe_remedy = dict(w.probe_remedies)
    out = []
    for v in w.variants():
        if not any(r["variant"] == v.name for r in records):
            continue  # not measured in this run (`--variants`)
        runs = [r for r in ok if r["variant"] == v.name]
        values = [r["samples_per_s"] for r in runs]
        summary: dict[str, Any] = {
            "record": "variant", "workload": w.name, "variant": v.name, "fixes": list(v.fixes),
            "remedies": [remedies[f] for f in v.fixes] or (probe_remedy[v.name].split("+") if v.name in probe_remedy else []),
            "categories": [categories[f] for f in v.fixes],
            "probe": v.name in dict(w.probes), "control": w.control, "split": w.split.value,
            "family": w.family.value, "n_ok": len(runs), "n_runs": sum(1 for r in records if r["variant"] == v.name),
            "device": runs[0].get("device") if runs else None,
            "batch_size": runs[0].get("batch_size") if runs else None,
        }
        if values:
            med = statistics.median(values)
            summary.update(samples_per_s_median=round(med, 3), samples_per_s_min=min(values),
                           samples_per_s_max=max(values),
                           spread=round((max(values) - min(values)) / med, 4) if med > 0 else None,
                           step_ms_median=statistics.median(r["step_ms_median"] for r in runs))
        ratios = [r["samples_per_s"] / planted[r["repeat"]] for r in runs
                  if v.name != "planted" and planted.get(r["repeat"])]
        if ratios:
            speedup = statistics.median(ratios)
            summary.update(speedup_median=round(speedup, 4), speedup_min=round(min(ratios), 4),
                           speedup_max=round(max(ratios), 4), recovered=round(1.0 - 1.0 / speedup, 4))
            if planted:
                summary["speedup_of_medians"] = round(statistics.median(values) / statistics.median(planted.values()), 4)
        out.append(summary)
    return out


def table(summaries: list[dict[str, Any]]) -> str:
    head = f"{'workload':<22} {'variant':<20} {'n':>3} {'samples/s':>12} {'spread':>7} {'speed-up':>9} {'band':>15} {'recovered':>9}"
    rows = [head, "-" * len(head)]
    for s in summaries:
        sps = f"{s['samples_per_s_median']:,.1f}" if "samples_per_s_median" in s else "n/a"
        spread = f"{100 * s['spread']:.1f}%" if s.get("spread") is not None else ""
        sp = f"{s['speedup_median']:.2f}x" if "speedup_median" in s else ""
        band = f"[{s['speedup_min']:.2f}-{s['speedup_max']:.2f}]" if "speedup_min" in s else ""
        rec = f"{100 * s['recovered']:.0f}%" if "recovered" in s else ""
        rows.append(f"{s['workload']:<22} {s['variant']:<20} {s['n_ok']:>3} {sps:>12} {spread:>7} {sp:>9} {band:>15} {rec:>9}")
    return "\n".join(rows)


def selected(opts: argparse.Namespace) -> tuple[Workload, ...]:
    names = [n for n in opts.workloads.split(",") if n] if opts.workloads else None
    workloads = by_name(names)
    if opts.shard is not None:
        i, n = opts.shard
        cost = {w.name: estimated_seconds(w, opts.repeats, opts.seconds, opts.variants) for w in workloads}
        workloads = shard(workloads, i, n, cost)
    return workloads


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="", help="comma-separated subset (default: the whole catalog)")
    parser.add_argument("--variants", default="",
                        help="comma-separated variants to measure beside planted (default: every variant)")
    parser.add_argument("--shard", type=parse_shard, default=None, metavar="I/N",
                        help="measure shard I of N (workloads packed by estimated GPU time)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=None,
                        help=f"measured region per run (default 1.2; {TINY_SECONDS} with --tiny)")
    parser.add_argument("--min-steps", type=int, default=5, help="measured steps at least (default 5)")
    parser.add_argument("--warmup-steps", type=int, default=5,
                        help="steps before the measured region (default 5: compilation, CUDA graph capture, "
                             "cuDNN autotuning and DataLoader start-up all happen in the first steps)")
    parser.add_argument("--out", type=Path, default=Path("measure-out"))
    parser.add_argument("--tiny", action="store_true", help="pass --tiny to every workload (CPU smoke test)")
    parser.add_argument("--run-timeout", type=float, default=180.0, help="seconds per run (default 180)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds from start after which no new run starts (default: none)")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the workloads")
    parser.add_argument("--plan", action="store_true", help="print the plan with time estimates; run nothing")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.repeats < 1:
        parser.error("--repeats must be >= 1")
    if opts.seconds is None:
        opts.seconds = TINY_SECONDS if opts.tiny else 1.2
    opts.variants = tuple(n for n in opts.variants.split(",") if n)
    try:
        opts.selection = () if opts.child else selected(opts)
    except KeyError as exc:
        parser.error(str(exc.args[0]))
    return opts


ENV_PROBE = (
    "import json, platform, torch; cuda = torch.cuda.is_available(); "
    "print(json.dumps({'python': platform.python_version(), 'torch': torch.__version__, "
    "'cuda_runtime': torch.version.cuda, 'cudnn': torch.backends.cudnn.version() if cuda else None, "
    "'gpu': torch.cuda.get_device_name(0) if cuda else None, "
    "'cuda_visible_devices': __import__('os').environ.get('CUDA_VISIBLE_DEVICES')}))"
)


def environment(python: str) -> dict[str, Any]:
    """Versions and the GPU the runs see (one short subprocess: the parent never imports torch)."""
    env: dict[str, Any] = {"record": "environment"}
    try:
        proc = subprocess.run([python, "-c", ENV_PROBE], capture_output=True, text=True, timeout=120)
        env.update(json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else
                   {"error": proc.stderr.strip()[-500:]})
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        env["error"] = str(exc)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        env["nvidia_smi"] = smi.stdout.strip().splitlines() if smi.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        env["nvidia_smi"] = None  # no NVIDIA driver on this machine
    return env


def shard_suffix(opts: argparse.Namespace) -> str:
    return "" if opts.shard is None else f"-s{opts.shard[0]}of{opts.shard[1]}"


def iter_plan(opts: argparse.Namespace) -> Iterator[tuple[Workload, list[PlannedRun], float]]:
    for w in opts.selection:
        yield (
            w,
            interleaved_runs(w, opts.repeats, opts.variants),
            estimated_seconds(w, opts.repeats, opts.seconds, opts.variants),
        )


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.child is not None:
        return child_main(opts.child, opts.results)
    if opts.plan:
        total = 0.0
        for w, runs, est in iter_plan(opts):
            total += est
            print(f"{w.name:<24} {len(runs):>3} runs {'isolated' if w.isolated else 'in-process':<10} ~{est:5.0f} s")
        print(f"{'total':<24} ~{total:.0f} s on an H200 (estimate)")
        return 0
    stop_children_on_sigterm()
    opts.out.mkdir(parents=True, exist_ok=True)
    suffix = shard_suffix(opts)
    label = f"s{opts.shard[0]}/{opts.shard[1]}" if opts.shard else "measure"
    deadline_at = time.monotonic() + opts.deadline if opts.deadline is not None else None
    all_summaries: list[dict[str, Any]] = []
    failed = 0
    with (opts.out / f"measure{suffix}.jsonl").open("w") as jsonl, (opts.out / f"measure{suffix}.log").open("w") as log:
        rep = Reporter(jsonl, log, label)
        env = environment(opts.python)
        rep.record(env)
        rep.say("environment: " + json.dumps({k: v for k, v in env.items() if k != "record"}, sort_keys=True))
        rep.say(f"{len(opts.selection)} workloads, {opts.repeats} repeats, {opts.seconds} s regions: "
                + ", ".join(w.name for w in opts.selection))
        for w, runs, est in iter_plan(opts):
            if deadline_at is not None and time.monotonic() + min(est, 30.0) > deadline_at:
                records = [run_record(w, r, None, "skipped: deadline", 0.0) for r in runs]
                for rec in records:
                    rep.record(rec)
                rep.say(f"{w.name}: skipped, the deadline leaves too little time (estimate {est:.0f} s)")
            else:
                rep.say(f"{w.name}: {len(runs)} runs ({'isolated' if w.isolated else 'one process'}), estimate {est:.0f} s")
                measure = measure_isolated if w.isolated else measure_in_process
                records = measure(w, runs, opts, rep, deadline_at)
            failed += sum(1 for r in records if not r["ok"])
            summaries = summarize(w, records)
            for s in summaries:
                rep.record(s)
            all_summaries += summaries
        text = table(all_summaries)
        print(text, flush=True)
        log.write(text + "\n")
        rep.say(f"done: {failed} failed or skipped runs")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
