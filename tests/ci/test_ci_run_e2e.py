"""A real (CPU-only) run directory made by `gpuadvisor.profile`, through every CI path:
findings.json against the schema, the CI formats, and `diff` on runs, including a refused mismatch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import gpuadvisor
from gpuadvisor.cli import cli

from .test_ci_renderers import check_sarif_structure
from .test_ci_schema import validator

pytestmark = pytest.mark.slow

SCRIPT = """\
import torch
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(30):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ci_run")
    script = root / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    run = gpuadvisor.profile(
        script, out=root / "run", skip_steps=2, warmup_steps=1, active_steps=5, quiet=True
    )
    assert run.exit_status == 0, run.manifest
    assert run.run_dir == root / "run" and run.manifest.get("schema_version") == 1
    return run.run_dir


def test_findings_json_matches_schema(run_dir: Path) -> None:
    data = json.loads((run_dir / "findings.json").read_text(encoding="utf-8"))
    errors = [f"{list(e.path)}: {e.message}" for e in validator().iter_errors(data)]
    assert not errors, errors
    assert data["source"]["kind"] == "run"
    # the API gives the same contract
    result = gpuadvisor.analyze(run_dir)
    assert not list(validator().iter_errors(json.loads(json.dumps(result.to_dict()))))


def test_ci_formats_on_run(run_dir: Path, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    runner = CliRunner()
    junit_file = tmp_path / "r.xml"
    res = runner.invoke(
        cli, ["analyze", str(run_dir), "--format", "junit", "--fail-on", "high", "-o", str(junit_file)]
    )
    assert res.exit_code == 0, res.output  # CPU-only: GPU rules not applicable, nothing high
    suite = ET.parse(junit_file).getroot().find("testsuite")
    assert suite is not None and int(suite.get("skipped", "0")) >= 1  # GPU rules skipped on a CPU run
    skipped = [c for c in suite.findall("testcase") if c.find("skipped") is not None]
    assert any("needs GPU kernels" in (c.find("skipped").get("message") or "") for c in skipped)  # type: ignore[union-attr]
    sarif = runner.invoke(cli, ["analyze", str(run_dir), "--format", "sarif"])
    assert sarif.exit_code == 0
    check_sarif_structure(json.loads(sarif.stdout))
    md = runner.invoke(cli, ["analyze", str(run_dir), "--format", "markdown", "--fail-on", "high"])
    assert md.exit_code == 0 and "PASS" in md.output and "not applicable" in md.output


def test_diff_on_runs(run_dir: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    same = runner.invoke(
        cli, ["diff", str(run_dir), str(run_dir), "--fail-on-regression", "5", "--format", "json"]
    )
    assert same.exit_code == 0, same.output
    data = json.loads(same.stdout)
    assert data["compatible"] is True and data["regressed"] is False
    assert data["step_time"] is not None and data["step_time"]["delta_ms"] == 0
    # the same run "recorded" with another torch: refused, then allowed with a warning
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    env = json.loads((other / "environment.json").read_text(encoding="utf-8"))
    env["torch"] = "9.9.9"
    (other / "environment.json").write_text(json.dumps(env), encoding="utf-8")
    refused = runner.invoke(cli, ["diff", str(run_dir), str(other)])
    assert refused.exit_code == 2 and "different torch" in refused.output
    allowed = runner.invoke(cli, ["diff", str(run_dir), str(other), "--allow-mismatch"])
    assert allowed.exit_code == 0 and "WARNING" in allowed.output
