"""The package as a user gets it: the wheel (scripts/check_wheel.sh), its metadata, and the README's
set-up script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def _pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)


def test_every_package_folder_is_listed_in_pyproject() -> None:
    """pyproject lists its packages (rules/ ships as gpuadvisor.builtin_rules, which packages.find
    cannot map): a new folder of modules under gpuadvisor/ must be added there or the wheel lacks it."""
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])  # type: ignore[index]
    found = {
        ".".join(p.relative_to(ROOT).parts)
        for p in (ROOT / "gpuadvisor").rglob("*")
        if p.is_dir() and "__pycache__" not in p.parts and any(p.glob("*.py"))
    } | {"gpuadvisor"}
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    assert "gpuadvisor.builtin_rules" in listed
    assert _pyproject()["tool"]["setuptools"]["package-dir"] == {"gpuadvisor.builtin_rules": "rules"}  # type: ignore[index]


def test_torch_is_an_extra_not_a_dependency() -> None:
    project = _pyproject()["project"]
    deps = " ".join(project["dependencies"])  # type: ignore[index]
    assert "torch" not in deps and "nvidia-ml-py" not in deps
    extras = project["optional-dependencies"]  # type: ignore[index]
    assert any(d.startswith("torch>=2.1,<3") for d in extras["profile"])
    assert any(d.startswith("nvidia-ml-py") for d in extras["profile"])


@pytest.mark.slow
def test_analysis_commands_never_import_torch(tmp_path: Path) -> None:
    """rules, analyze, report and diff in one process: neither torch nor pynvml gets imported."""
    code = f"""
import sys
from gpuadvisor.cli import cli
runs = {str(ROOT / "sample_runs")!r}
for argv in (["rules"], ["analyze", runs + "/sync_bound-planted/trace/rank0.json.gz", "--select", "GA2"],
             ["report", runs + "/sync_bound-planted", "-o", {str(tmp_path / "r.html")!r}, "--select", "GA2"]):
    try:
        cli.main(argv)
    except SystemExit as e:
        assert e.code == 0, (argv, e.code)
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "pynvml"))
assert not bad, bad
print("no torch")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("no torch")


def _check_wheel_log(tmp_path: Path) -> tuple[str, str]:
    """(transcript, how it was obtained): the log of CI job 1 when .ci/run says it just ran on this
    commit (GPUADVISOR_WHEEL_CHECKED=its folder), else a fresh run of scripts/check_wheel.sh."""
    done = os.environ.get("GPUADVISOR_WHEEL_CHECKED")
    if done:
        log = Path(done) / "check.log"
        assert log.is_file(), f"GPUADVISOR_WHEEL_CHECKED={done} but {log} does not exist"
        return log.read_text(encoding="utf-8", errors="replace"), f"read {log}"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check_wheel.sh"), str(tmp_path / "wheel-check")],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc.stdout, "ran scripts/check_wheel.sh"


@pytest.mark.slow
def test_wheel_without_torch_runs_rules_analyze_report(tmp_path: Path) -> None:
    """The wheel, installed into a fresh venv without torch, runs rules / analyze / report / diff on a
    sample run and a raw trace; profile says in one line that it needs torch (scripts/check_wheel.sh)."""
    log, how = _check_wheel_log(tmp_path)
    lines = log.splitlines()
    assert lines[-1] == "check_wheel: OK", (how, log[-3000:])
    expected = [
        "every file of gpuadvisor/ is in it; built-in rules: ",
        "torch: not installed (nor nvidia-ml-py)",
        "rules: ",
        "analyze run: GA102 exposed-host-copies found; --fail-on high exits 1",
        "analyze trace: ",
        "report: report-run.html and report-trace.html written",
        "diff: ok",
        "api: gpuadvisor.analyze -> ",
        "profile: gpuadvisor: error: profile needs PyTorch",
    ]
    for text in expected:
        assert any(text in line for line in lines), (text, how)
    n_rules = int(next(line for line in lines if line.startswith("rules: ")).split()[1])
    assert n_rules == len(list((ROOT / "rules").glob("GA*.py")))
