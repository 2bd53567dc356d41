"""The public API as a user's type checker sees it: `mypy --strict` on a small user file.

`import gpuadvisor` is lazy at run time (module `__getattr__`); for mypy the names are the real
functions of gpuadvisor.api, so `reveal_type(gpuadvisor.analyze)` is its signature (not `Any`) and
`gpuadvisor.capture(...)` is checked against `Capture` (not "Module not callable")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

USER_CODE = """
import gpuadvisor
from gpuadvisor.result import AnalysisResult

result: AnalysisResult = gpuadvisor.analyze("runs/a", select=["GA2"])
gate: int = result.exit_code(fail_on="high")
reveal_type(gpuadvisor.analyze)
reveal_type(gpuadvisor.diff("runs/base", result))
reveal_type(gpuadvisor.profile)
with gpuadvisor.capture(out="runs/nb", skip_steps=2) as cap:
    reveal_type(cap)
    cap.step()
"""

# Mistakes a typed API catches (with `Any` they would all pass).
USER_MISTAKES = """
import gpuadvisor

wrong: int = gpuadvisor.analyze("runs/a")
gpuadvisor.capture(out="runs/nb", skip_step=2)
gpuadvisor.diff("runs/a")
"""

# Third-party internals are not what this test checks (and following torch's own types takes minutes).
MYPY_INI = """
[mypy]
[mypy-torch.*]
follow_imports = skip
[mypy-pandas.*]
follow_imports = skip
[mypy-numpy.*]
follow_imports = skip
"""


def _mypy(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "user.py").write_text(textwrap.dedent(code))
    (tmp_path / "mypy.ini").write_text(MYPY_INI)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--python-version",
            "3.10",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            "user.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        # the checkout's package, as an installed one would be found (errors inside it are not the
        # user's: --follow-imports=silent)
        env={**os.environ, "MYPYPATH": str(ROOT)},
    )


@pytest.mark.slow
def test_public_api_passes_mypy_strict_in_user_code(tmp_path: Path) -> None:
    proc = _mypy(tmp_path, USER_CODE)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "Success: no issues found in 1 source file" in out
    assert (
        'Revealed type is "def (path_or_run: str | os.PathLike[str] | gpuadvisor.api.Run, *, select: '
        in out
    )
    assert ") -> gpuadvisor.result.AnalysisResult" in out
    assert 'Revealed type is "gpuadvisor.diff.DiffResult"' in out
    assert ") -> gpuadvisor.api.Run" in out
    assert 'Revealed type is "gpuadvisor.capture.inprocess.Capture"' in out
    assert 'Revealed type is "Any"' not in out


@pytest.mark.slow
def test_public_api_types_catch_user_mistakes(tmp_path: Path) -> None:
    proc = _mypy(tmp_path, USER_MISTAKES)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert 'Incompatible types in assignment (expression has type "AnalysisResult"' in out
    assert 'Unexpected keyword argument "skip_step"' in out
    assert 'Missing positional argument "new" in call to "diff"' in out


@pytest.mark.slow
def test_mypy_outside_the_checkout_sees_the_api_of_the_editable_install(tmp_path: Path) -> None:
    """Issue 42 item 9: with setuptools' default editable install (an import hook) mypy run on a user's
    file outside the checkout found no gpuadvisor ("missing library stubs") and typed the API `Any`.
    scripts/setup.sh installs it as a path entry (editable_mode=compat): this test runs mypy as a user
    would, without MYPYPATH, in a folder outside the checkout, on whatever install this Python has."""
    (tmp_path / "user.py").write_text(textwrap.dedent(USER_CODE))
    (tmp_path / "mypy.ini").write_text(MYPY_INI)
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir",
         str(tmp_path / ".mypy_cache"), "user.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ") -> gpuadvisor.result.AnalysisResult" in proc.stdout


def test_import_gpuadvisor_stays_light() -> None:
    code = (
        "import sys, gpuadvisor\n"
        "assert callable(gpuadvisor.analyze) and callable(gpuadvisor.capture)\n"
        "heavy = sorted(m for m in ('torch', 'pandas', 'numpy', 'plotly') if m in sys.modules)\n"
        "print(heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
