"""Tests for the benchmark tooling: raw_trace.py, run_gpu_suite.sh (CPU, --tiny) and the analysis
half of overhead.py (on synthetic step-time records built here)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
ENV = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")


def load_overhead() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_overhead", BENCH / "overhead.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def raw_trace(out: Path, *script_args: str, active: int = 2) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        str(BENCH / "raw_trace.py"),
        "-o",
        str(out),
        "--skip",
        "2",
        "--warmup",
        "1",
        "--active",
        str(active),
        str(BENCH / "workloads" / "sync_bound.py"),
        "--tiny",
        *script_args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=ENV)


@pytest.mark.slow
def test_raw_trace_records_the_window_and_stops_the_script(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "trace.json.gz"
    proc = raw_trace(out, "--steps", "50")
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Stopped after the window: the script never reached its final BENCH line.
    assert "BENCH " not in proc.stdout
    with gzip.open(out, "rt") as f:
        trace = json.load(f)
    steps = sorted(
        {e["name"] for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
    )
    # skip 2 + warmup 1 -> the recorded window is optimizer steps 3 and 4 (0-based profiler step numbers).
    assert steps == ["ProfilerStep#3", "ProfilerStep#4"]
    assert any(e.get("name") == "aten::addmm" for e in trace["traceEvents"])


@pytest.mark.slow
def test_raw_trace_fails_when_the_script_ends_before_the_window(tmp_path: Path) -> None:
    out = tmp_path / "trace.json.gz"
    proc = raw_trace(out, "--steps", "2")
    assert proc.returncode == 1
    assert "no trace written" in proc.stderr
    assert "BENCH " in proc.stdout  # the script itself ran to completion
    assert not out.exists()


@pytest.mark.slow
def test_raw_trace_exports_but_fails_when_the_window_is_cut_short(tmp_path: Path) -> None:
    out = tmp_path / "trace.json.gz"
    proc = raw_trace(out, "--steps", "4", active=3)
    assert proc.returncode == 1
    assert "1 of 3 active steps recorded" in proc.stderr
    assert out.exists()


def test_raw_trace_rejects_a_missing_script(tmp_path: Path) -> None:
    cmd = [sys.executable, str(BENCH / "raw_trace.py"), "-o", str(tmp_path / "t.json.gz"), "nope.py"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=ENV)
    assert proc.returncode == 2
    assert "no such script" in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_suite_runs_on_cpu_with_tiny_sizes(tmp_path: Path) -> None:
    env = dict(ENV, PYTHON=sys.executable, WORKLOADS="transfer_bound", EXTRA_ARGS="--tiny", STEPS="4")
    proc = subprocess.run(
        ["bash", str(BENCH / "run_gpu_suite.sh"), str(tmp_path), "--raw"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "bench.jsonl").read_text().splitlines()]
    assert [(r["workload"], r["variant"]) for r in rows] == [
        ("transfer_bound", "planted"),
        ("transfer_bound", "fixed"),
    ]
    for variant in ("planted", "fixed"):
        assert (tmp_path / "traces" / f"transfer_bound-{variant}.json.gz").stat().st_size > 0
    tsv = (tmp_path / "runs.tsv").read_text().splitlines()
    assert len(tsv) == 5 and all(line.split("\t")[3] == "0" for line in tsv[1:])
    assert "speed-up" in proc.stdout and "transfer_bound" in proc.stdout.splitlines()[-2]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_suite_usage_error_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", str(BENCH / "run_gpu_suite.sh"), str(tmp_path), "--bogus"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "usage" in proc.stderr


def synthetic_run(step_ms: list[float], t0: float = 100.0, unix0: float = 1000.0) -> dict[str, Any]:
    """Synthetic step-time records (as StepBench writes them) for a run whose step k lasts step_ms[k-1]."""
    rows, t, u = [], t0, unix0
    for k, ms in enumerate(step_ms, start=1):
        t += ms / 1000.0
        u += ms / 1000.0
        rows.append({"step": k, "t": t, "unix_s": u})
    return {
        "rows": rows,
        "launch_unix_s": unix0 - 2.0,
        "end_unix_s": u + 0.5,
        "wall_s": u + 0.5 - (unix0 - 2.0),
    }


def test_overhead_analysis_separates_before_window_and_after() -> None:
    overhead = load_overhead()
    n = 60
    plain = synthetic_run([10.0] * n)
    # Profiled: same speed before the window, 30% slower inside it (steps 13-22), one slow export step,
    # 1% slower after the window.
    prof_ms = [10.0] * 12 + [13.0] * 10 + [500.0] + [10.1] * (n - 23)
    profiled = synthetic_run(prof_ms)
    stamps = {r["step"]: r["unix_s"] for r in profiled["rows"]}
    capture = {
        "skip_steps": 10,
        "warmup_steps": 2,
        "active_steps": 10,
        "window_start_unix_s": stamps[12] + 1e-6,
        "window_end_unix_s": stamps[22] + 1e-6,
        "export_seconds": 0.5,
    }
    pair = overhead.analyze_pair(plain, profiled, capture, margin=5)
    assert pair["window_steps"] == [13, 22]
    assert pair["before"]["ratio"] == pytest.approx(1.0, abs=1e-3)
    assert pair["window"]["ratio"] == pytest.approx(1.3, abs=1e-3)
    assert pair["after"]["steps"][0] == 28  # the 500 ms export step (23) and the margin are left out
    assert pair["after"]["ratio"] == pytest.approx(1.01, abs=1e-3)
    summary = overhead.summarize([pair, pair])
    assert summary["after_within_goal"] is True
    assert summary["window"]["ratio"] == pytest.approx(1.3, abs=1e-3)


def test_overhead_analysis_flags_a_slow_after_window() -> None:
    overhead = load_overhead()
    plain = synthetic_run([10.0] * 60)
    profiled = synthetic_run([10.0] * 22 + [11.5] * 38)  # CUPTI left attached: 15% slower afterwards
    # No wall-clock window in the manifest: falls back to first/last_recorded_step.
    pair = overhead.analyze_pair(
        plain, profiled, {"first_recorded_step": 13, "last_recorded_step": 22}, margin=5
    )
    assert pair["after"]["ratio"] == pytest.approx(1.15, abs=1e-3)
    assert overhead.summarize([pair])["after_within_goal"] is False
