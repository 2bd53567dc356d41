"""CPU smoke tests for the corpus (benchmarks/workloads, listed by benchmarks/catalog.py): every workload
runs with `--tiny --steps 3`, planted and `--fixed` (quick tier), every single fix and probe (slow tier),
and prints one valid BENCH line.

Workloads run here the way benchmarks/measure.py runs them, through its child runner (one process runs
many scripts with `runpy` and resets torch's global state in between), which also tests that runner;
framework trainers run as their own processes. Framework workloads skip with
the reason when `transformers`/`accelerate` or `lightning` is not installed
(benchmarks/requirements-frameworks.txt)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
WORKLOADS_DIR = BENCH / "workloads"
sys.path.insert(0, str(BENCH))

from catalog import CATALOG, Framework, Variant, Workload  # noqa: E402

BENCH_KEYS = {"workload", "variant", "samples_per_s", "step_ms_median", "steps", "device", "batch_size"}
FRAMEWORK_MODULES = {Framework.HF_TRAINER: ("transformers", "accelerate"), Framework.LIGHTNING: ("lightning",)}

# every test here runs workloads in subprocesses (the module fixture runs all 18, about two minutes)
pytestmark = pytest.mark.slow


def child_env(**extra: str) -> dict[str, str]:
    # One thread per child: the smoke runs execute two at a time on a 2-core machine.
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    env.pop("GPUADVISOR_BENCH_SECONDS", None)
    env.update(extra)
    return env


def missing_modules(w: Workload) -> list[str]:
    return [m for m in FRAMEWORK_MODULES.get(w.framework, ()) if importlib.util.find_spec(m) is None]


def quick_variants(w: Workload) -> list[Variant]:
    planted = Variant("planted", (), ())
    return [planted] if w.control else [planted, Variant("fixed", ("--fixed",), w.fixes)]


def slow_variants(w: Workload) -> list[Variant]:
    """The single fixes and probes not already covered by the quick tier."""
    quick = {v.name for v in quick_variants(w)}
    return [v for v in w.variants() if v.name not in quick]


def expected_variant_name(w: Workload, v: Variant) -> str:
    if not v.fixes:
        return "planted"
    return "fixed" if set(v.fixes) == set(w.fixes) else "+".join(sorted(v.fixes))


def run_subprocess(w: Workload, v: Variant, steps: int = 3) -> dict[str, Any]:
    cmd = [sys.executable, str(WORKLOADS_DIR / f"{w.name}.py"), "--tiny", "--steps", str(steps), *v.args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=child_env(), cwd=ROOT)
    return {"stdout": proc.stdout, "error": None if proc.returncode == 0 else f"exit {proc.returncode}",
            "stderr": proc.stderr}


def run_in_children(jobs: list[tuple[Workload, Variant]], tmp: Path, steps: int = 3) -> dict[tuple[str, str], Any]:
    """Run non-isolated jobs through measure.py's in-process child runner, in two children."""
    halves = [jobs[0::2], jobs[1::2]]

    def run_half(k: int) -> list[dict[str, Any]]:
        part = halves[k]
        if not part:
            return []
        plan = {"seconds": None, "run_timeout": 240, "runs": [
            {"workload": w.name, "variant": v.name, "repeat": 0, "argv": [*v.args, "--steps", str(steps), "--tiny"]}
            for w, v in part]}
        plan_path, results = tmp / f"plan{k}.json", tmp / f"results{k}.jsonl"
        plan_path.write_text(json.dumps(plan))
        proc = subprocess.run([sys.executable, str(BENCH / "measure.py"), "--child", str(plan_path), "--results",
                               str(results)], capture_output=True, text=True, timeout=900, env=child_env(), cwd=ROOT)
        rows = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
        for row in rows:
            row["stderr"] = proc.stderr[-3000:]
        return rows

    with ThreadPoolExecutor(max_workers=2) as pool:
        rows = [row for part in pool.map(run_half, range(2)) for row in part]
    return {(r["run"]["workload"], r["run"]["variant"]): r for r in rows}


def own_process(w: Workload) -> bool:
    """Framework trainers keep process-global state (accelerate's AcceleratorState): one process per run.
    The other isolated workloads are isolated on the GPU only (allocator settings, a memory cap); their
    CPU path is safe to share a process."""
    return w.isolated and w.framework is not Framework.PLAIN


def run_jobs(jobs: list[tuple[Workload, Variant]], tmp: Path) -> dict[tuple[str, str], Any]:
    runnable = [(w, v) for w, v in jobs if not missing_modules(w)]
    results = run_in_children([(w, v) for w, v in runnable if not own_process(w)], tmp)
    isolated = [(w, v) for w, v in runnable if own_process(w)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        for (w, v), res in zip(isolated, pool.map(lambda job: run_subprocess(*job), isolated), strict=True):
            results[(w.name, v.name)] = res
    return results


def parse_bench(stdout: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.startswith("BENCH ")]
    assert len(lines) == 1, f"expected exactly one BENCH line, got {lines!r}"
    record = json.loads(lines[0][len("BENCH "):])
    assert isinstance(record, dict)
    return record


def check(results: dict[tuple[str, str], Any], w: Workload, v: Variant) -> dict[str, Any]:
    missing = missing_modules(w)
    if missing:
        pytest.skip(f"{w.name} needs {', '.join(missing)} (pip install -r benchmarks/requirements-frameworks.txt)")
    res = results.get((w.name, v.name))
    assert res is not None, f"{w.name} {v.name}: the runner produced no result"
    assert res["error"] is None, f"{w.name} {v.name}: {res['error']}\n{res['stdout'][-2000:]}\n{res['stderr'][-3000:]}"
    record = parse_bench(res["stdout"])
    assert set(record) >= BENCH_KEYS
    assert record["workload"] == w.name
    assert record["variant"] == expected_variant_name(w, v)
    assert record["device"] == "cpu"
    assert record["steps"] == 2  # --steps 3: one warm-up step, two measured steps
    assert isinstance(record["samples_per_s"], float) and record["samples_per_s"] > 0
    assert isinstance(record["step_ms_median"], float) and record["step_ms_median"] > 0
    return record


QUICK = [(w, v) for w in CATALOG for v in quick_variants(w)]
SLOW = [(w, v) for w in CATALOG for v in slow_variants(w)]


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    return run_jobs(QUICK, tmp_path_factory.mktemp("quick"))


@pytest.fixture(scope="module")
def slow_results(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    return run_jobs(SLOW, tmp_path_factory.mktemp("slow"))


@pytest.mark.parametrize(("w", "v"), QUICK, ids=[f"{w.name}-{v.name}" for w, v in QUICK])
def test_workload_runs_planted_and_fixed(quick_results: dict[tuple[str, str], Any], w: Workload, v: Variant) -> None:
    check(quick_results, w, v)


@pytest.mark.slow
@pytest.mark.parametrize(("w", "v"), SLOW, ids=[f"{w.name}-{v.name}" for w, v in SLOW])
def test_every_single_fix_and_probe_runs(slow_results: dict[tuple[str, str], Any], w: Workload, v: Variant) -> None:
    check(slow_results, w, v)


def test_fixed_batch_fixes_use_a_larger_batch(quick_results: dict[tuple[str, str], Any]) -> None:
    for w in CATALOG:
        if "larger_batch" not in w.fixes or missing_modules(w):
            continue
        planted = parse_bench(quick_results[(w.name, "planted")]["stdout"])
        fixed = parse_bench(quick_results[(w.name, "fixed")]["stdout"])
        assert fixed["batch_size"] >= 8 * planted["batch_size"], w.name


def test_step_times_file_gets_one_line_per_step(tmp_path: Path) -> None:
    times = tmp_path / "steps.jsonl"
    cmd = [sys.executable, str(WORKLOADS_DIR / "control_transformer.py"), "--tiny", "--steps", "5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env=child_env(GPUADVISOR_BENCH_STEP_TIMES=str(times)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in times.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    stamps = [r["t"] for r in rows]
    assert stamps == sorted(stamps)
    assert all(r["workload"] == "control_transformer" and "unix_s" in r for r in rows)


def test_batch_size_override_is_honoured() -> None:
    cmd = [sys.executable, str(WORKLOADS_DIR / "sync_bound.py"), "--tiny", "--steps", "3", "--batch-size", "5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=child_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert parse_bench(proc.stdout)["batch_size"] == 5


def test_time_budget_ends_the_measured_region(tmp_path: Path) -> None:
    """GPUADVISOR_BENCH_SECONDS stops a 100k-step run after its budget, with a BENCH line and status 0."""
    cmd = [sys.executable, str(WORKLOADS_DIR / "sync_bound.py"), "--tiny", "--steps", "100000"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env=child_env(GPUADVISOR_BENCH_SECONDS="0.3", GPUADVISOR_BENCH_MIN_STEPS="4"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = parse_bench(proc.stdout)
    assert 4 <= record["steps"] < 100000 - 10
    assert record["steps"] * record["step_ms_mean"] / 1000.0 >= 0.3


def test_unknown_fix_is_a_usage_error() -> None:
    cmd = [sys.executable, str(WORKLOADS_DIR / "sync_bound.py"), "--tiny", "--fix", "no_such_fix"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=child_env())
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr
