"""gpuadvisor.diff on hand-built (synthetic) AnalysisResults, and the `diff` command's exit codes.

The command tests replace `gpuadvisor.api.analyze` with a lookup of prepared results, so they check
the gate logic and exit codes independently of trace loading (end-to-end runs: test_ci_diff_synthetic)."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from gpuadvisor.cli import cli
from gpuadvisor.diff import StepTimeDelta, compare_environments, diff_results, robust_spread
from gpuadvisor.metrics import Metrics
from gpuadvisor.model import Category, Location
from gpuadvisor.result import AnalysisResult, SourceInfo

from .results import finding

ENV = {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.1", "cuda_runtime": "13.0", "torch": "2.11.0+cu130"}


def result_with_steps(
    path: str,
    step_ms: list[float],
    *,
    env: dict[str, Any] | None = None,
    copy_ms: float = 0.0,
    findings: list[Any] | None = None,
    outliers: tuple[int, ...] = (),
) -> AnalysisResult:
    per_step = pd.DataFrame(
        {
            "step": list(range(1, len(step_ms) + 1)),
            "outlier": [i in outliers for i in range(len(step_ms))],
            "analyzed": [i not in outliers for i in range(len(step_ms))],
            "step_time_us": [v * 1000 for v in step_ms],
            "compute_us": [(v - copy_ms) * 1000 for v in step_ms],
            "copy_us": [copy_ms * 1000] * len(step_ms),
        }
    )
    empty = pd.DataFrame()
    metrics = Metrics(window={"step_time_ms": None}, per_step=per_step, kernels=empty, ops=empty, gaps=empty)
    return AnalysisResult(
        source=SourceInfo(path=path, kind="run"),
        environment=dict(ENV if env is None else env),
        metrics={"step_time_ms": sorted(step_ms)[len(step_ms) // 2], "steps_analyzed": len(step_ms)},
        findings=findings or [],
        metrics_detail=metrics,
    )


def test_robust_spread() -> None:
    assert robust_spread([1.0, 2.0]) is None  # too few steps
    assert robust_spread([5.0, 5.0, 5.0, 5.0]) == 0.0
    # 1..9: IQR = 4 -> 2.965; MAD = 2 -> 2.965
    assert robust_spread([float(v) for v in range(1, 10)]) == pytest.approx(max(4 / 1.349, 1.4826 * 2))
    # one wild value barely moves it
    # IQR 0.1 -> 0.074, MAD 0.1 -> 0.148; a plain standard deviation would be ~443
    assert robust_spread([10.0, 10.1, 9.9, 10.0, 1000.0]) == pytest.approx(0.14826)


def test_step_time_noise_and_regression_gate() -> None:
    base = result_with_steps("base", [10.0, 10.2, 9.8, 10.1, 9.9, 10.0])
    slower = result_with_steps("new", [11.0, 11.2, 10.8, 11.1, 10.9, 11.0])
    d = diff_results(base, slower)
    st = d.step_time
    assert st is not None
    assert st.delta_ms == pytest.approx(1.0) and st.delta_pct == pytest.approx(10.0)
    assert st.noise_ms is not None and st.noise_ms < 0.5 and st.beyond_noise is True
    assert d.regressed(5.0) and not d.regressed(10.5)
    assert d.exit_code(5.0) == 1 and d.exit_code(None) == 0 and d.exit_code(20.0) == 0
    # the same +10% inside a very noisy run: not a regression
    noisy = result_with_steps("noisy", [8.0, 14.0, 11.0, 9.0, 13.0, 11.0])
    nd = diff_results(base, noisy)
    assert nd.step_time is not None and nd.step_time.delta_pct == pytest.approx(10.0)
    assert nd.step_time.beyond_noise is False and not nd.regressed(5.0)
    # the faster direction is an improvement, never a regression
    back = diff_results(slower, base)
    assert back.improved() and not back.regressed(0.0)


def test_outlier_steps_excluded_and_unknown_noise() -> None:
    with_outlier = result_with_steps("a", [50.0, 10.0, 10.0, 10.0], outliers=(0,))
    d = diff_results(with_outlier, result_with_steps("b", [10.0, 10.0, 10.0]))
    assert d.step_time is not None and d.step_time.base_ms == 10.0 and d.step_time.base_steps == 3
    few = diff_results(result_with_steps("a", [10.0, 10.0]), result_with_steps("b", [12.0, 12.0]))
    assert few.step_time is not None and few.step_time.noise_ms is None
    assert any("noise unknown" in n for n in few.notes)
    assert few.regressed(10.0)  # noise unknown: the percentage alone decides
    assert not few.regressed(25.0)


def test_category_deltas() -> None:
    d = diff_results(
        result_with_steps("a", [10.0] * 4, copy_ms=4.0), result_with_steps("b", [7.0] * 4, copy_ms=1.0)
    )
    cats = {c.key: c for c in d.categories}
    assert cats["copy"].delta_ms == pytest.approx(-3.0)
    assert cats["compute"].delta_ms == pytest.approx(0.0)
    assert "idle_host_sync" not in cats  # no column, no window value: left out, not shown as 0


def test_window_fallback_without_per_step() -> None:
    a = AnalysisResult(SourceInfo("a", "trace"), {}, {"step_time_ms": 10.0, "copy_fraction": 0.5}, [])
    b = AnalysisResult(SourceInfo("b", "trace"), {}, {"step_time_ms": 8.0, "copy_fraction": 0.25}, [])
    d = diff_results(a, b)
    assert d.step_time == StepTimeDelta(10.0, 8.0, None, None, 0, 0)
    assert {c.key: c.delta_ms for c in d.categories} == {"copy": pytest.approx(-3.0)}


def test_finding_matching_new_resolved_persisting() -> None:
    at = (Location(file="train.py", line=36),)
    base = [
        finding("GA201", "blocking-scalar-reads", Category.HOST_SYNC, 0.3, locations=at),
        finding(
            "GA301",
            "pageable-copies",
            Category.HOST_DEVICE_TRANSFER,
            0.1,
            locations=(Location(file="t.py", line=9),),
        ),
    ]
    new = [
        finding("GA201", "blocking-scalar-reads", Category.HOST_SYNC, 0.1, locations=at),
        # same rule, other place: a new finding, not the same one
        finding(
            "GA301",
            "pageable-copies",
            Category.HOST_DEVICE_TRANSFER,
            0.1,
            locations=(Location(file="t.py", line=12),),
        ),
    ]
    d = diff_results(
        result_with_steps("a", [10.0] * 3, findings=base), result_with_steps("b", [10.0] * 3, findings=new)
    )
    assert [(f.status, f.rule, f.location) for f in d.findings] == [
        ("new", "GA301", "t.py:12"),
        ("resolved", "GA301", "t.py:9"),
        ("persisting", "GA201", "train.py:36"),
    ]
    persisting = d.persisting_findings[0]
    assert (persisting.base_impact, persisting.new_impact) == (0.3, 0.1)


def test_compare_environments() -> None:
    assert compare_environments(ENV, dict(ENV)) == ([], [])
    other = {**ENV, "gpu": "NVIDIA H200", "torch": "2.12.0+cu130"}
    mismatches, _ = compare_environments(ENV, other)
    assert mismatches == [
        "different GPU: NVIDIA H100 80GB HBM3 (base) vs NVIDIA H200 (new)",
        "different torch: 2.11.0+cu130 (base) vs 2.12.0+cu130 (new)",
    ]
    # trace-style integers vs run-style strings; torch without local part on one side
    trace_env = {"gpu": ENV["gpu"], "cuda_runtime_version": 13000, "torch": "2.11.0"}
    mismatches, notes = compare_environments(ENV, trace_env)
    assert mismatches == [] and any("driver known for only one run" in n for n in notes)
    assert compare_environments({"cuda_runtime": "12.8"}, {"cuda_runtime_version": 13000})[0] == [
        "different CUDA runtime: 12.8 (base) vs 13.0 (new)"
    ]


# ------------------------------------------------------------------------------------- the command


@pytest.fixture
def prepared(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, AnalysisResult]:
    results: dict[str, AnalysisResult] = {}

    def fake_analyze(path: Any, **options: Any) -> AnalysisResult:
        return results[Path(path).name]

    import gpuadvisor.api

    monkeypatch.setattr(gpuadvisor.api, "analyze", fake_analyze)
    monkeypatch.chdir(tmp_path)  # no pyproject.toml above: defaults
    return results


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["diff", *args])


def test_cli_exit_codes(prepared: dict[str, AnalysisResult]) -> None:
    prepared["base"] = result_with_steps("base", [10.0, 10.2, 9.8, 10.1, 9.9])
    prepared["slow"] = result_with_steps("slow", [12.0, 12.2, 11.8, 12.1, 11.9])
    prepared["fast"] = result_with_steps("fast", [8.0, 8.2, 7.8, 8.1, 7.9])
    prepared["h200"] = result_with_steps(
        "h200", [12.0, 12.2, 11.8, 12.1, 11.9], env={**ENV, "gpu": "NVIDIA H200"}
    )

    ok = invoke("base", "slow")
    assert ok.exit_code == 0, ok.output  # no gate
    # synthetic results: no unprofiled steps, so the profiled traces' step times, said as such
    assert "step time (median, profiled): 10.00 ms -> 12.00 ms (+2.00 ms, +20.0%)" in ok.output

    gated = invoke("base", "slow", "--fail-on-regression", "5")
    assert gated.exit_code == 1 and "REGRESSION" in gated.output
    assert invoke("base", "slow", "--fail-on-regression", "25").exit_code == 0
    assert invoke("base", "fast", "--fail-on-regression", "5").exit_code == 0
    assert "improvement" in invoke("base", "fast").output

    refused = invoke("base", "h200", "--fail-on-regression", "5")
    assert refused.exit_code == 2
    assert (
        "not comparable (different GPU: NVIDIA H100 80GB HBM3 (base) vs NVIDIA H200 (new))" in refused.output
    )
    allowed = invoke("base", "h200", "--allow-mismatch", "--fail-on-regression", "5")
    assert allowed.exit_code == 1
    assert "WARNING: comparing runs that differ" in allowed.output

    assert invoke("base", "slow", "--fail-on-regression", "-3").exit_code == 2
    assert invoke("base", "slow", "--format", "xml").exit_code == 2


def test_cli_formats(prepared: dict[str, AnalysisResult], tmp_path: Path) -> None:
    prepared["base"] = result_with_steps("base", [10.0, 10.2, 9.8, 10.1, 9.9], copy_ms=3.0)
    prepared["slow"] = result_with_steps("slow", [12.0, 12.2, 11.8, 12.1, 11.9], copy_ms=5.0)
    out = invoke("base", "slow", "--format", "json", "--fail-on-regression", "5")
    assert out.exit_code == 1
    data = json.loads(out.stdout)
    assert data["schema_version"] == 1 and data["regressed"] is True and data["fail_on_regression"] == 5.0
    assert data["step_time"]["delta_pct"] == pytest.approx(20.0)
    assert {c["key"]: c["delta_ms"] for c in data["categories"]}["copy"] == pytest.approx(2.0)
    md = invoke("base", "slow", "--format", "markdown", "-o", str(tmp_path / "d.md"))
    assert md.exit_code == 0 and md.output == ""
    text = (tmp_path / "d.md").read_text(encoding="utf-8")
    assert text.startswith("## gpuadvisor diff") and "| copies (all) | 3.00 ms | 5.00 ms | +2.00 ms |" in text


def test_cli_unreadable_input_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("not json", encoding="utf-8")
    result = invoke(str(tmp_path / "missing"), str(tmp_path / "bad.json"))
    assert result.exit_code == 2, result.output
    assert "gpuadvisor: error:" in result.output and "Traceback" not in result.output


def test_cli_internal_error_and_lost_output(
    prepared: dict[str, AnalysisResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared["base"] = result_with_steps("base", [10.0, 10.0, 10.0])
    unwritable = tmp_path / "no" / "such" / "dir" / "out.md"
    lost = invoke("base", "base", "-o", str(unwritable))  # refused before the analysis (issue 42 item 9)
    assert lost.exit_code == 2 and "does not exist" in lost.output

    def full_disk(path: Path, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("gpuadvisor.commands._options.write_text_atomic", full_disk)
    lost = invoke("base", "base", "-o", str(tmp_path / "out.md"))
    assert lost.exit_code == 74 and "cannot write" in lost.output and "No space left" in lost.output
    broken = invoke("base", "missing-key")  # the fake analyze raises KeyError: a bug, not bad input
    assert broken.exit_code == 70 and "internal error: KeyError" in broken.output


def test_runs_from_different_gpus_are_refused_before_either_is_analyzed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`diff` reads the GPUs environment.json recorded and refuses before analyzing (issue 30 item 8:
    it analyzed both runs, seconds each, and then refused)."""
    import json

    import gpuadvisor.api

    analyzed: list[str] = []

    def fake_analyze(path: Any, **options: Any) -> AnalysisResult:
        analyzed.append(str(path))
        raise AssertionError("analyze must not run for runs that cannot be compared")

    monkeypatch.setattr(gpuadvisor.api, "analyze", fake_analyze)
    monkeypatch.chdir(tmp_path)
    for name, gpu in (("a", "NVIDIA H100 80GB HBM3"), ("b", "NVIDIA H200")):
        (tmp_path / name).mkdir()
        env = {"torch": "2.11.0+cu130", "gpus": [{"cuda_index": 0, "name": gpu}]}
        (tmp_path / name / "environment.json").write_text(json.dumps(env))
    refused = invoke("a", "b")
    assert refused.exit_code == 2, refused.output
    assert "different GPU: NVIDIA H100 80GB HBM3 (base) vs NVIDIA H200 (new)" in refused.output
    assert analyzed == []


def test_runs_of_different_scripts_or_devices_are_not_comparable() -> None:
    """Issue 42 item 6: `diff sample_runs/sync_bound-planted sample_runs/transfer_bound-planted` said
    "slower: step time +104.1%", exit 0; a CPU run against an H200 run named only "different torch"."""
    a = {**ENV, "script": "benchmarks/workloads/sync_bound.py"}
    assert compare_environments(a, {**a, "script": "./benchmarks/workloads/sync_bound.py"}) == ([], [])
    # one script in two checkouts (absolute paths): the file names are compared
    assert compare_environments({**a, "script": "/work/a/train.py"}, {**a, "script": "/work/b/train.py"})[0] == []
    mismatches, _ = compare_environments(a, {**a, "script": "benchmarks/workloads/transfer_bound.py"})
    assert mismatches == [
        "different script: benchmarks/workloads/sync_bound.py (base) vs benchmarks/workloads/transfer_bound.py (new)"
    ]
    cpu = {"cuda_available": False, "torch": ENV["torch"]}
    mismatches, _ = compare_environments(cpu, ENV)
    assert mismatches == ["different device: CPU only (base) vs NVIDIA H100 80GB HBM3 (new)"]


@pytest.mark.parametrize("new", ["transfer_bound-planted", "sync_bound-fixed"])
def test_diff_of_two_sample_runs_refuses_different_scripts(new: str) -> None:
    """Refused before either run is analyzed (exit 2, documented in `diff --help`); the planted and fixed
    runs of one workload are one script with `--fixed`, and compare."""
    samples = Path(__file__).resolve().parents[2] / "sample_runs"
    from gpuadvisor.diff import recorded_environment

    early, _ = compare_environments(
        recorded_environment(samples / "sync_bound-planted") or {}, recorded_environment(samples / new) or {}
    )
    if new == "sync_bound-fixed":
        assert early == []
        return
    assert early == [
        "different script: benchmarks/workloads/sync_bound.py (base) vs benchmarks/workloads/transfer_bound.py (new)"
    ]
    res = CliRunner().invoke(cli, ["diff", str(samples / "sync_bound-planted"), str(samples / new)])
    assert res.exit_code == 2 and "different script" in res.output and "--allow-mismatch" in res.output
    assert "runs of different scripts" in CliRunner().invoke(cli, ["diff", "--help"]).output
