"""Nothing of the capture slows the steps after the window (issue 15), on a host-bound CPU loop.

The workload is `benchmarks/overhead/hostbound_mlp.py` with 3000 `.item()` reads per step on a CPU
tensor: a `Tensor.item` wrapper left installed costs about 2.5 us per call there, which made the steps
after the window 2.2x slower than plain python when measured on this 2-core machine (the legacy
behaviour, `GPUADVISOR_EXPERIMENT_DISABLE=legacy`), while without it the ratio stayed within noise.
The tolerance (1.4) sits well between the two; the legacy run is measured in the same test to show the
instrument can fail. Each step is measured in the main thread's CPU time (where a wrapper runs), which
a neighbour process on a loaded machine does not inflate as it does the wall clock. A deterministic check comes first: after the run, no torch attribute gpuadvisor
wraps carries a wrapper.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from capture_helpers import profile_cmd

# The quick tier (`-m "not slow"`) must run in under 2 minutes on 2 idle cores: slow because each test runs
# `gpuadvisor profile` on a real script (~15 s on 2 loaded cores).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "benchmarks" / "overhead" / "hostbound_mlp.py"
SYNC_HEAVY = ["--device", "cpu", "--width", "16", "--depth", "1", "--batch-size", "8", "--tiny-ops", "0"]
WINDOW = ["--skip-steps", "2", "--warmup-steps", "1", "--active-steps", "3"]
AFTER_FROM = 20  # steps after the window (ends at step 6) and its export
TOLERANCE = 1.4


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    env.pop("GPUADVISOR_EXPERIMENT_DISABLE", None)
    env.update(extra)
    return env


def _run(kind: str, tmp: Path, i: int, steps: int, items: int) -> list[float]:
    """Per-step durations (ms) after the window of one run: plain python, `new` (gpuadvisor profile
    --full) or `legacy` (the same with the fix switched off)."""
    times = tmp / f"{kind}{i}.jsonl"
    args = [str(WORKLOAD), "--steps", str(steps), "--items", str(items), *SYNC_HEAVY]
    env = _env(GPUADVISOR_BENCH_STEP_TIMES=str(times))
    if kind == "plain":
        cmd = [sys.executable, *args]
    else:
        cmd = profile_cmd("-q", "--full", "--no-analyze", "--force", "-o", str(tmp / f"run-{kind}{i}"), *WINDOW, *args)
        if kind == "legacy":
            env["GPUADVISOR_EXPERIMENT_DISABLE"] = "legacy"
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in times.read_text().splitlines()]
    # the main thread's CPU time per step: a left-over wrapper runs there, while other processes on a
    # loaded 2-core machine (a CI neighbour) inflate the wall clock of some runs and not others
    key = "cpu_s" if all("cpu_s" in row for row in rows) else "t"
    return [
        (b[key] - a[key]) * 1e3 for a, b in itertools.pairwise(rows) if a["step"] >= AFTER_FROM
    ]


def test_no_wrapper_is_left_after_the_window(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [str(WORKLOAD), "--steps", "30", "--items", "2", "--report-wrappers", *SYNC_HEAVY]
    r = subprocess.run(
        profile_cmd("-q", "--full", "--no-analyze", "-o", str(out), *WINDOW, *args),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    # of the attributes the workload watches, only DataLoader.__iter__ stays wrapped: it times the
    # epoch starts (issue 27), once per epoch
    assert "wrapped after the run: DataLoader.__iter__\n" in r.stdout
    log = (out / "gpuadvisor.log").read_text()
    # Only the optimizer step hook stays, to time the step boundaries after the window, and the hooks
    # that time the costs between steps (issue 27): each runs once per step or more rarely.
    left = log.split("after the window: wrappers left installed: ")[1].split("\n")[0].split(", ")
    assert set(left) == {
        "hook:step_timer",  # the step boundaries
        "GradScaler.step",  # a step GradScaler skips (inf/NaN gradients) is still a boundary
        "hook:module_hooks",  # the model's pre-hook: evaluation passes
        "DataLoader.__iter__",  # epoch starts
        "_BaseDataLoaderIter.__next__",  # an epoch's first batch and its end
        "torch.save",  # checkpoints
    }, left
    m = json.loads((out / "manifest.json").read_text())
    ends = dict(m["capture"]["step_ends"])
    assert max(ends) == 30  # boundaries after the window are still timed

    legacy = tmp_path / "legacy"
    r = subprocess.run(
        profile_cmd("-q", "--full", "--no-analyze", "-o", str(legacy), *WINDOW, *args),
        env=_env(GPUADVISOR_EXPERIMENT_DISABLE="uninstall_after_window"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    wrapped = r.stdout.split("wrapped after the run: ")[1].split("\n")[0].split(",")
    assert "Tensor.item" in wrapped and "Optimizer.__init__" in wrapped  # the check can fail


def test_reference_steps_run_without_the_tensor_wrappers(tmp_path: Path) -> None:
    """The steps the analysis uses as the unprofiled reference (the second half of the skipped steps,
    gpuadvisor.manifest.host_step_durations) run without the per-call Tensor wrappers, which cost
    microseconds per `.item()`; the wrappers are back for the window, where call sites are counted."""
    args = [str(WORKLOAD), "--steps", "14", "--items", "2", "--report-wrappers-at", "1,4,8", *SYNC_HEAVY]
    window = ["--skip-steps", "6", "--warmup-steps", "1", "--active-steps", "3"]
    r = subprocess.run(
        profile_cmd("-q", "--full", "--no-analyze", "-o", str(tmp_path / "run"), *window, *args),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    at = {
        int(line.split()[3].rstrip(":")): line.split(": ", 1)[1].split(",")
        for line in r.stdout.splitlines()
        if line.startswith("wrapped at step ")
    }
    assert "Tensor.item" in at[1]  # before the reference steps (call sites of set-up code)
    assert "Tensor.item" not in at[4]  # steps 3..5: the unprofiled reference
    assert "Tensor.item" in at[8]  # the window


@pytest.mark.slow
def test_steps_after_the_window_run_as_fast_as_plain_python(tmp_path: Path) -> None:
    steps, items = 100, 3000
    # A round: the three kinds interleaved, in both orders, so that drift of the machine's load hits
    # every kind alike. Load on a 2-core machine only adds time, and unevenly (one round in six measured
    # 1.8x on an idle CI machine, the next five 1.0-1.2x): up to 3 rounds, judged on the round whose
    # `new` ratio is lowest (a real left-over wrapper is slow in every round).
    rounds: list[tuple[float, float, str]] = []
    for r in range(3):
        durations: dict[str, list[float]] = {"plain": [], "new": [], "legacy": []}
        for i, order in enumerate((("plain", "new", "legacy"), ("legacy", "new", "plain"))):
            for kind in order:
                durations[kind].extend(_run(kind, tmp_path, 2 * r + i, steps, items))
        med = {k: statistics.median(v) for k, v in durations.items()}
        detail = ", ".join(f"{k} {v:.2f} ms" for k, v in med.items())
        rounds.append((med["new"] / med["plain"], med["legacy"] / med["plain"], detail))
        if rounds[-1][0] <= TOLERANCE and rounds[-1][1] > TOLERANCE + 0.2:
            break
    ratio_new, ratio_legacy, detail = min(rounds)
    tried = f"{detail} ({len(rounds)} round{'s' if len(rounds) > 1 else ''})"
    assert ratio_legacy > TOLERANCE + 0.2, f"the instrument did not see the left-over wrappers: {tried}"
    assert ratio_new <= TOLERANCE, f"steps after the window are {ratio_new:.2f}x plain python: {tried}"
