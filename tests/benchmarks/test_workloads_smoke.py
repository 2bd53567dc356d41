"""CPU smoke tests for the benchmark workloads: every workload, planted and fixed, runs with
`--tiny --steps 3` in a subprocess and prints one valid BENCH line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS_DIR = ROOT / "benchmarks" / "workloads"
WORKLOADS = [
    "transfer_bound",
    "sync_bound",
    "dataloader_bound",
    "small_batch",
    "launch_bound",
    "low_occupancy",
    "fp32_transformer",
    "control_transformer",
    "control_convnet",
]
VARIANTS = ["planted", "fixed"]
BENCH_KEYS = {"workload", "variant", "samples_per_s", "step_ms_median", "steps", "device"}

# every test here runs workloads in subprocesses (the module fixture runs all 18, about two minutes)
pytestmark = pytest.mark.slow


def child_env(**extra: str) -> dict[str, str]:
    # One thread per child: the smoke runs execute two at a time on a 2-core machine.
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    env.update(extra)
    return env


def run_workload(name: str, variant: str, steps: int = 3, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(WORKLOADS_DIR / f"{name}.py"), "--tiny", "--steps", str(steps)]
    if variant == "fixed":
        cmd.append("--fixed")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=child_env(**env))


@pytest.fixture(scope="module")
def smoke_results() -> dict[tuple[str, str], subprocess.CompletedProcess[str]]:
    jobs = [(w, v) for w in WORKLOADS for v in VARIANTS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda job: run_workload(*job), jobs))
    return dict(zip(jobs, results, strict=True))


def parse_bench(stdout: str) -> dict[str, object]:
    lines = [line for line in stdout.splitlines() if line.startswith("BENCH ")]
    assert len(lines) == 1, f"expected exactly one BENCH line, got {lines!r}"
    record = json.loads(lines[0][len("BENCH ") :])
    assert isinstance(record, dict)
    return record


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", WORKLOADS)
def test_workload_prints_valid_bench_line(
    smoke_results: dict[tuple[str, str], subprocess.CompletedProcess[str]], name: str, variant: str
) -> None:
    proc = smoke_results[(name, variant)]
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = parse_bench(proc.stdout)
    assert set(record) >= BENCH_KEYS
    assert record["workload"] == name
    assert record["variant"] == variant
    assert record["device"] == "cpu"
    # --steps 3: one warm-up step, two measured steps.
    assert record["steps"] == 2
    assert isinstance(record["samples_per_s"], float) and record["samples_per_s"] > 0
    assert isinstance(record["step_ms_median"], float) and record["step_ms_median"] > 0


def test_fixed_small_batch_uses_a_larger_batch(
    smoke_results: dict[tuple[str, str], subprocess.CompletedProcess[str]],
) -> None:
    planted = parse_bench(smoke_results[("small_batch", "planted")].stdout)
    fixed = parse_bench(smoke_results[("small_batch", "fixed")].stdout)
    assert isinstance(planted["batch_size"], int) and isinstance(fixed["batch_size"], int)
    assert fixed["batch_size"] >= 8 * planted["batch_size"]


def test_step_times_file_gets_one_line_per_step(tmp_path: Path) -> None:
    times = tmp_path / "steps.jsonl"
    proc = run_workload("control_transformer", "planted", steps=5, GPUADVISOR_BENCH_STEP_TIMES=str(times))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in times.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    stamps = [r["t"] for r in rows]
    assert stamps == sorted(stamps)
    assert all(r["workload"] == "control_transformer" and "unix_s" in r for r in rows)


def test_batch_size_override_is_honoured() -> None:
    cmd = [
        sys.executable,
        str(WORKLOADS_DIR / "sync_bound.py"),
        "--tiny",
        "--steps",
        "3",
        "--batch-size",
        "5",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=child_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert parse_bench(proc.stdout)["batch_size"] == 5
