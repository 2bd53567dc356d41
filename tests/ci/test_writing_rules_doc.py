"""docs/writing-rules.md is a test: its example plugin (a rule and its tests with gpuadvisor.testing)
is written into a fresh folder, and its tests and `gpuadvisor rules` run there, as a plugin author would
run them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "writing-rules.md"
BLOCK = re.compile(r"```python\n# file: (\S+)\n(.*?)```", re.S)


def _write_example(folder: Path) -> list[str]:
    written = []
    for name, body in BLOCK.findall(DOC.read_text(encoding="utf-8")):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
        written.append(name)
    return written


@pytest.mark.slow
def test_the_example_plugin_of_the_docs_passes_its_tests(tmp_path: Path) -> None:
    files = _write_example(tmp_path)
    assert files == ["acme_rules/ACME001_kernel_budget.py", "tests/test_acme_rules.py"]
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "4 passed" in proc.stdout
    rules = subprocess.run(
        [sys.executable, "-m", "gpuadvisor", "rules", "ACME001", "--rules", "acme_rules"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert rules.returncode == 0, rules.stderr
    assert rules.stdout.startswith("ACME001 kernel-budget (launch_overhead)")
    assert "max_kernels_per_step = 2000 kernels" in rules.stdout
