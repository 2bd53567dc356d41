"""End to end on SYNTHETIC traces (tests/synth.py): a planted FP32-matmul problem and its fix.

base: every step runs its matmuls as FP32 SIMT SGEMM kernels (no tensor cores), ~2 ms per step;
fixed: the same matmuls as BF16 tensor-core kernels, ~0.9 ms per step. The diff must show the fix as
an improvement beyond the noise, the FP32 finding as resolved, and `diff` must gate correctly both ways.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import gpuadvisor
from gpuadvisor.cli import cli
from tests.synth import K_NVJET_BF16, K_SIMT_SGEMM, SyntheticTrace

STEPS = 8


def planted_trace(path: Path, *, fp32: bool, properties: dict[str, object] | None = None) -> Path:
    st = SyntheticTrace() if properties is None else SyntheticTrace(device_properties=(properties,))
    t0 = 0.0
    for n in range(STEPS):
        step = (2000.0 if fp32 else 900.0) + (n % 3) * 10.0  # a little jitter: measurable noise
        st.add_step(n + 1, cpu_start=t0, cpu_dur=step, gpu_dur=step)
        t = t0 + 20.0
        dur = (step - 100.0) / 4 - 5.0
        # GPU-bound like a real step: the host launches the 4 GEMMs at the step's start, then reads the
        # loss (`.item()` waits for the GPU) and starts the next step
        for i in range(4):
            launch = {"launch_ts": t0 + 2.0 + 4.0 * i, "launch_dur": 2.0}
            if fp32:
                st.add_kernel(
                    K_SIMT_SGEMM, ts=t, dur=dur, op="aten::mm", op_input_types=["float", "float"], **launch
                )
            else:
                st.add_kernel(
                    K_NVJET_BF16,
                    ts=t,
                    dur=dur,
                    grid=(2, 66, 1),
                    block=(384, 1, 1),
                    occupancy=0.0,
                    op="aten::mm",
                    op_input_types=["c10::BFloat16", "c10::BFloat16"],
                    **launch,
                )
            t += dur + 5.0
        st.add_item_read(ts=t0 + 20.0, dur=t - (t0 + 20.0), copy_ts=t - 3.0)
        st.add_optimizer_step(t + 2.0, 5.0)
        t0 += step
    return st.write(path)


@pytest.fixture
def traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.chdir(tmp_path)
    return planted_trace(tmp_path / "base.json.gz", fp32=True), planted_trace(
        tmp_path / "fixed.json.gz", fp32=False
    )


def test_fix_shows_as_improvement_and_resolved(traces: tuple[Path, Path]) -> None:
    base, fixed = traces
    d = gpuadvisor.diff(base, fixed)
    assert d.compatible, d.mismatches
    st = d.step_time
    assert st is not None and st.base_steps >= 5 and st.new_steps >= 5
    assert st.base_ms == pytest.approx(2010.0 / 1000, rel=0.02)
    assert st.new_ms == pytest.approx(910.0 / 1000, rel=0.02)
    assert st.beyond_noise is True and d.improved() and not d.regressed(0.0)
    resolved = {f.rule for f in d.resolved_findings}
    assert "GA701" in resolved, [(f.status, f.rule) for f in d.findings]
    assert "GA701" not in {f.rule for f in d.new_findings}
    compute = {c.key: c for c in d.categories}["compute"]
    assert compute.delta_ms is not None and compute.delta_ms < -0.9

    # and the other way round: the "fix" reverted is a regression beyond the noise
    back = gpuadvisor.diff(fixed, base)
    assert back.regressed(50.0) and back.exit_code(50.0) == 1
    assert "GA701" in {f.rule for f in back.new_findings}


def test_cli_on_synthetic_traces(traces: tuple[Path, Path]) -> None:
    base, fixed = traces
    runner = CliRunner()
    improved = runner.invoke(cli, ["diff", str(base), str(fixed), "--fail-on-regression", "5"])
    assert improved.exit_code == 0, improved.output
    assert "improvement" in improved.output and "- GA701" in improved.output
    regressed = runner.invoke(
        cli, ["diff", str(fixed), str(base), "--fail-on-regression", "5", "--format", "json"]
    )
    assert regressed.exit_code == 1, regressed.output
    data = json.loads(regressed.stdout)
    assert data["regressed"] is True and data["compatible"] is True


def test_cli_refuses_other_gpu(tmp_path: Path, traces: tuple[Path, Path]) -> None:
    from tests.synth import H100_PROPERTIES

    base, _ = traces
    h200 = {**H100_PROPERTIES, "name": "NVIDIA H200", "totalGlobalMem": 150_000_000_000}
    other = planted_trace(tmp_path / "h200.json.gz", fp32=False, properties=h200)
    runner = CliRunner()
    refused = runner.invoke(cli, ["diff", str(base), str(other)])
    assert refused.exit_code == 2 and "different GPU" in refused.output
    allowed = runner.invoke(cli, ["diff", str(base), str(other), "--allow-mismatch"])
    assert allowed.exit_code == 0 and "WARNING" in allowed.output


def test_analyze_outputs_validate_and_gate(traces: tuple[Path, Path], tmp_path: Path) -> None:
    """Real `gpuadvisor analyze` output in every CI format: JSON against the shipped schema,
    JUnit and SARIF structure, and the --fail-on exit code."""
    import xml.etree.ElementTree as ET

    from .test_ci_renderers import check_sarif_structure
    from .test_ci_schema import validator

    base, fixed = traces
    runner = CliRunner()
    out = runner.invoke(cli, ["analyze", str(base), "--format", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    errors = [e.message for e in validator().iter_errors(data)]
    assert not errors, errors
    assert any(f["rule"] == "GA701" for f in data["findings"])

    gated = runner.invoke(cli, ["analyze", str(base), "--format", "junit", "--fail-on", "low"])
    assert gated.exit_code == 1
    suite = ET.fromstring(gated.output.encode()).find("testsuite")
    assert suite is not None and int(suite.get("failures", "0")) >= 1
    cases = {c.get("name", "").split()[0]: c for c in suite.findall("testcase")}
    assert cases["GA701"].find("failure") is not None
    assert cases["GA701"].get("classname") == "gpuadvisor.fp32_math"
    assert int(suite.get("tests", "0")) == len(suite.findall("testcase")) == len(data["rules"])

    sarif_out = runner.invoke(cli, ["analyze", str(base), "--format", "sarif"])
    assert sarif_out.exit_code == 0
    log = json.loads(sarif_out.stdout)
    check_sarif_structure(log)
    rules = {r["id"]: r for r in log["runs"][0]["tool"]["driver"]["rules"]}
    assert "GA701" in rules and rules["GA701"]["help"]["text"].count("How to fix") == 1

    clean = runner.invoke(cli, ["analyze", str(fixed), "--format", "markdown", "--fail-on", "high"])
    assert clean.exit_code == 0, clean.output
    assert "PASS" in clean.output


def test_analyze_cli_config_precedence(traces: tuple[Path, Path], tmp_path: Path) -> None:
    """pyproject.toml in the working directory vs command-line options, through `gpuadvisor analyze`."""
    base, _ = traces
    (tmp_path / "pyproject.toml").write_text(
        '[tool.gpuadvisor]\nfail-on = "low"\nignore = ["GA701"]\n', encoding="utf-8"
    )
    runner = CliRunner()
    # configured: GA701 ignored, gate at low -> whatever remains decides
    configured = runner.invoke(cli, ["analyze", str(base), "--format", "json"])
    assert configured.exit_code in (0, 1), configured.output
    data = json.loads(configured.stdout)
    assert "GA701" not in {f["rule"] for f in data["findings"]}
    # CLI --ignore replaces the configured list: GA701 is back, and the low gate from pyproject fails it
    cli_ignore = runner.invoke(cli, ["analyze", str(base), "--format", "json", "--ignore", "GA601"])
    assert cli_ignore.exit_code == 1
    assert "GA701" in {f["rule"] for f in json.loads(cli_ignore.stdout)["findings"]}
    # CLI --fail-on none overrides the configured gate
    assert runner.invoke(cli, ["analyze", str(base), "--ignore", "GA601", "--fail-on", "none"]).exit_code == 0
    # a bad configuration is a one-line usage error naming the file
    (tmp_path / "pyproject.toml").write_text('[tool.gpuadvisor]\nfail-on = "sometimes"\n', encoding="utf-8")
    bad = runner.invoke(cli, ["analyze", str(base)])
    assert bad.exit_code == 2
    assert "pyproject.toml: [tool.gpuadvisor] fail-on must be one of" in bad.output
    assert "Traceback" not in bad.output
