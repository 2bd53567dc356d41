"""benchmarks/measure.py on the CPU (`--tiny`): the harness end to end on two workloads (one sharing a
process, one isolated), a failing run that does not stop the next, the deadline, the summary arithmetic
on synthetic run records, and the torch state reset between in-process runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import measure  # noqa: E402
from catalog import by_name  # noqa: E402

# The quick tier (`-m "not slow"`) must run in under 2 minutes on 2 idle cores: slow because each test runs
# benchmark workloads as subprocesses (20-75 s on 2 loaded cores).
pytestmark = pytest.mark.slow

ENV = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")


def run_measure(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH / "measure.py"), *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV, cwd=ROOT)


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_measure_tiny_on_two_workloads(tmp_path: Path) -> None:
    # --variants: planted and these (multiscale_memory's compile probes are left out)
    proc = run_measure("--tiny", "--workloads", "sync_bound,multiscale_memory", "--repeats", "2", "--out", str(tmp_path),
                       "--variants", "remove_host_syncs,expandable_segments")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = jsonl(tmp_path / "measure.jsonl")
    runs = [r for r in rows if r["record"] == "run"]
    assert len(runs) == 2 * 2 * 2 and all(r["ok"] for r in runs)
    # Interleaved: repeat 1 starts with the variant that repeat 0 ran second.
    order = [(r["repeat"], r["variant"]) for r in runs if r["workload"] == "sync_bound"]
    assert order == [(0, "planted"), (0, "remove_host_syncs"), (1, "remove_host_syncs"), (1, "planted")]
    assert {r["isolated"] for r in runs if r["workload"] == "multiscale_memory"} == {True}
    assert all(r["steps"] >= 5 for r in runs)  # --min-steps default
    summaries = {(s["workload"], s["variant"]): s for s in rows if s["record"] == "variant"}
    assert ("multiscale_memory", "torch_compile") not in summaries  # not chosen: no summary either
    fixed = summaries[("sync_bound", "remove_host_syncs")]
    assert fixed["n_ok"] == 2 and fixed["remedies"] == ["remove_host_syncs"] and fixed["categories"] == ["host_sync"]
    assert fixed["speedup_min"] <= fixed["speedup_median"] <= fixed["speedup_max"]
    assert "speedup_median" not in summaries[("sync_bound", "planted")]
    log = (tmp_path / "measure.log").read_text()
    assert "sync_bound" in log and "speed-up" in log and "speed-up" in proc.stdout


def test_a_failing_run_does_not_stop_the_next(tmp_path: Path) -> None:
    plan = {"seconds": None, "run_timeout": 120, "runs": [
        {"workload": "sync_bound", "variant": "broken", "repeat": 0, "argv": ["--fix", "no_such_fix", "--tiny"]},
        {"workload": "sync_bound", "variant": "planted", "repeat": 0, "argv": ["--steps", "3", "--tiny"]},
    ]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    proc = run_measure("--child", str(tmp_path / "plan.json"), "--results", str(tmp_path / "r.jsonl"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    broken, ok = jsonl(tmp_path / "r.jsonl")
    assert broken["error"] == "exit status 2"
    assert ok["error"] is None and measure.bench_line(ok["stdout"]) is not None


def test_deadline_skips_and_fails(tmp_path: Path) -> None:
    proc = run_measure("--tiny", "--workloads", "sync_bound", "--deadline", "0", "--out", str(tmp_path))
    assert proc.returncode == 1
    runs = [r for r in jsonl(tmp_path / "measure.jsonl") if r["record"] == "run"]
    assert runs and all(r["error"] == "skipped: deadline" for r in runs)


def test_plan_and_usage_errors(tmp_path: Path) -> None:
    proc = run_measure("--plan", "--shard", "2/2")
    assert proc.returncode == 0 and "total" in proc.stdout
    assert run_measure("--shard", "3/2").returncode == 2
    assert run_measure("--workloads", "nope").returncode == 2


def record(variant: str, repeat: int, sps: float) -> dict[str, Any]:
    """A synthetic run record, as measure.run_record writes them."""
    return {"record": "run", "workload": "tutorial_cnn", "variant": variant, "repeat": repeat, "ok": True,
            "samples_per_s": sps, "step_ms_median": 1000.0 / sps, "device": "synthetic", "batch_size": 4}


def test_summary_pairs_repeats_for_speedups_and_noise_band() -> None:
    w = by_name(["tutorial_cnn"])[0]
    records = [record("planted", 0, 100.0), record("planted", 1, 110.0), record("planted", 2, 90.0),
               record("larger_batch", 0, 1000.0), record("larger_batch", 1, 1320.0), record("larger_batch", 2, 810.0),
               {**record("remove_host_syncs", 0, 1.0), "ok": False}]
    out = {s["variant"]: s for s in measure.summarize(w, records)}
    planted = out["planted"]
    assert planted["samples_per_s_median"] == 100.0 and planted["spread"] == pytest.approx(0.2)
    big = out["larger_batch"]
    assert big["speedup_median"] == pytest.approx(10.0)  # ratios 10, 12, 9 per repeat
    assert (big["speedup_min"], big["speedup_max"]) == (pytest.approx(9.0), pytest.approx(12.0))
    assert big["recovered"] == pytest.approx(0.9)
    assert big["remedies"] == ["larger_batch"] and big["categories"] == ["small_batch"]
    assert out["remove_host_syncs"]["n_ok"] == 0 and out["remove_host_syncs"]["n_runs"] == 1
    assert "samples_per_s_median" not in out["remove_host_syncs"]
    assert "fixed" not in out  # no run of it at all (not chosen with --variants): no summary
    assert "larger_batch" in measure.table(list(out.values()))


def test_torch_state_is_restored_between_runs() -> None:
    torch = pytest.importorskip("torch")
    state = measure.TorchGlobalState()
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = not torch.backends.cudnn.allow_tf32
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    torch.backends.cuda.enable_flash_sdp(False)
    torch.set_autocast_enabled("cpu", True)
    assert len(state.changed()) >= 6
    state.restore()
    assert state.changed() == []
    assert not torch.is_autocast_enabled("cpu")


def test_runs_past_their_time_limit_are_stopped_and_recorded(tmp_path: Path) -> None:
    """In a shared process a run is interrupted by SIGALRM; an isolated run's process group is killed."""
    proc = run_measure("--tiny", "--workloads", "sync_bound,multiscale_memory", "--repeats", "1", "--seconds", "60",
                       "--run-timeout", "3", "--out", str(tmp_path), "--variants", "remove_host_syncs,expandable_segments",
                       timeout=300)
    assert proc.returncode == 1
    runs = [r for r in jsonl(tmp_path / "measure.jsonl") if r["record"] == "run"]
    assert len(runs) == 4
    for r in runs:
        assert not r["ok"] and r["error"] == "run exceeded 3 s", r
        assert r["wall_s"] < 60
