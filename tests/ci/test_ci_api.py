"""The Python API (gpuadvisor.api, re-exported lazily by `gpuadvisor`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import gpuadvisor
from gpuadvisor.api import Run
from gpuadvisor.config import AnalysisConfig
from gpuadvisor.errors import ConfigError, InputError

from .test_ci_diff_synthetic import planted_trace


def test_imports_stay_light() -> None:
    code = (
        "import sys, gpuadvisor, gpuadvisor.api, gpuadvisor.config, gpuadvisor.diff, gpuadvisor.commands.diff, "
        "gpuadvisor.render.markdown, gpuadvisor.render.junit, gpuadvisor.render.sarif\n"
        "heavy = sorted(m for m in ('torch', 'pandas', 'numpy', 'plotly') if m in sys.modules)\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_run_open(tmp_path: Path) -> None:
    manifest = {"schema_version": 1, "exit_status": 3, "degraded": ["nvml_unavailable"]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    run = Run.open(tmp_path)
    assert run.exit_status == 3 and not run.ok and run.degraded == ["nvml_unavailable"]
    with pytest.raises(InputError, match="not a run directory"):
        Run.open(tmp_path / "nope")
    (tmp_path / "manifest.json").write_text("{broken", encoding="utf-8")
    with pytest.raises(InputError, match="unreadable"):
        Run.open(tmp_path)


def test_analyze_config_precedence(tmp_path: Path) -> None:
    trace = planted_trace(tmp_path / "fp32.json.gz", fp32=True)
    assert "GA701" in {f.rule for f in gpuadvisor.analyze(trace).findings}
    # configuration from a TOML file: ignore GA701
    toml = tmp_path / "gpuadvisor.toml"
    toml.write_text('ignore = ["GA701"]\n', encoding="utf-8")
    ignored = gpuadvisor.analyze(trace, config=toml)
    assert "GA701" not in {f.rule for f in ignored.findings}
    assert {s.rule: s.status for s in ignored.rules}["GA701"] == "deselected"
    # an explicit argument replaces the configured list
    again = gpuadvisor.analyze(trace, config=AnalysisConfig(ignore=("GA701",)), ignore=["GA601"])
    assert "GA701" in {f.rule for f in again.findings}
    # thresholds by rule name, through the API
    strict = gpuadvisor.analyze(trace, thresholds={"fp32-matmul": {"min_fp32_fraction": 0.99}})
    assert "GA701" not in {f.rule for f in strict.findings}
    with pytest.raises(ConfigError):
        gpuadvisor.analyze(trace, select=["GA9999-no-such-rule"])


def test_diff_module_and_function_both_work(tmp_path: Path) -> None:
    import gpuadvisor.diff as diff_module  # binds gpuadvisor.diff to the module

    a = planted_trace(tmp_path / "a.json.gz", fp32=True)
    b = planted_trace(tmp_path / "b.json.gz", fp32=False)
    result = gpuadvisor.diff(a, b)
    assert isinstance(result, diff_module.DiffResult) and result.improved()
    # Run objects and ready results are accepted too
    assert gpuadvisor.diff(gpuadvisor.analyze(a), b).improved()


def test_profile_passes_options_to_run_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuadvisor.capture.runner as runner

    seen: dict[str, Any] = {}

    def fake_run_profile(target: str, args: list[str], **kwargs: Any) -> Any:
        seen.update(target=target, args=args, **kwargs)
        return runner.ProfileOutcome(
            run_dir=tmp_path / "r", exit_status=130, manifest={"degraded": ["interrupted"]}
        )

    monkeypatch.setattr(runner, "run_profile", fake_run_profile)
    run = gpuadvisor.profile("train.py", args=("--lr", "3"), out=tmp_path / "r", module=False, active_steps=5)
    assert seen == {
        "target": "train.py",
        "args": ["--lr", "3"],
        "out": tmp_path / "r",
        "module": False,
        "force": False,
        "full": False,
        "active_steps": 5,
    }
    assert run.exit_status == 130 and run.degraded == ["interrupted"] and run.run_dir == tmp_path / "r"


def test_capture_function_survives_package_import() -> None:
    import gpuadvisor.capture

    assert callable(gpuadvisor.capture)
