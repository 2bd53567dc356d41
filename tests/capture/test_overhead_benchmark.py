"""benchmarks/overhead.py on the CPU (--tiny): the main suite, the all-suspects experiment (every
switch reaches the child or the parent, as the run directories show) and the in-process per-call costs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# The quick tier (`-m "not slow"`) must run in under 2 minutes on 2 idle cores: slow because it times the
# capture's hooks on a real torch loop (seconds).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "overhead.py"


def _bench(tmp: Path, *args: str, timeout: float = 900) -> dict[str, Any]:
    out = tmp / "overhead.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    env.pop("OUT", None)
    r = subprocess.run(
        [sys.executable, str(BENCH), "--tiny", "--repeats", "1", "-o", str(out), "--workdir", str(tmp / "w"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"wrote {out}" in r.stdout
    data: dict[str, Any] = json.loads(out.read_text())
    return data


@pytest.mark.slow
def test_main_suite_tiny(tmp_path: Path) -> None:
    data = _bench(tmp_path, "--workloads", "hostbound_mlp")
    assert data["suite"] == "main" and data["gpu"] == "cpu"
    s = data["workloads"]["hostbound_mlp"]["configs"]["profiled"]["summary"]
    for region in ("before", "window", "after"):
        assert s[region]["plain_ms"] > 0 and s[region]["profiled_ms"] > 0 and s[region]["ratio"] > 0
    assert s["repeats"] == 1 and s["tail_s"]["profiled"] > 0 and s["export_seconds"] is not None
    runs = data["runs"]
    assert len(runs) == 2 and all(r["rc"] == 0 and len(r["step_ms"]) > 30 for r in runs)


@pytest.mark.slow
def test_all_suspects_experiment_tiny(tmp_path: Path) -> None:
    data = _bench(tmp_path, "--experiment", "all-suspects", timeout=1500)
    configs = data["workloads"]["hostbound_mlp"]["configs"]
    assert set(configs) == {
        "baseline", "no_nvml", "no_nvml_pcie", "nvml_full_rate", "no_step_timer", "no_hooks",
        "keep_wrappers", "no_cupti_teardown", "legacy",
    }  # fmt: skip
    for c in configs.values():
        assert c["summary"]["after"]["ratio"] is not None
    work = tmp_path / "w"

    def manifest(config: str) -> dict[str, Any]:
        return json.loads((work / f"run-hostbound_mlp-{config}-0" / "manifest.json").read_text())

    assert "experiment_disabled" not in manifest("baseline")["capture"]
    assert manifest("legacy")["capture"]["experiment_disabled"] == [
        "cupti_teardown", "nvml_relax", "uninstall_after_window"
    ]  # fmt: skip
    assert manifest("no_nvml")["nvml"]["reason"] == "disabled (overhead experiment)"
    log = (work / "run-hostbound_mlp-keep_wrappers-0" / "gpuadvisor.log").read_text()
    assert "experiment: wrappers kept after the window" in log
    # Without step accounting after the window, no boundary after the window is timed.
    ends = manifest("no_step_timer")["capture"]["step_ends"]
    assert max(c for c, _ in ends) == manifest("no_step_timer")["capture"]["last_recorded_step"] + 1


def test_micro_costs(tmp_path: Path) -> None:
    out = tmp_path / "micro.json"
    r = subprocess.run(
        [sys.executable, str(BENCH), "--micro", "-o", str(out)],
        env=dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES=""),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    micro = json.loads(out.read_text())["micro"]
    # A wrapped Tensor.item costs more than the plain call; uninstalling restores the plain cost.
    assert micro["tensor_item_wrapped_us"] > micro["tensor_item_plain_us"]
    assert micro["tensor_item_after_uninstall_us"] < micro["tensor_item_wrapped_us"]
    assert all(v > 0 for k, v in micro.items() if k.endswith("_us"))
