"""Helpers for the capture tests: run `gpuadvisor profile` as a real subprocess."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gpuadvisor.cli import cli

SCRIPTS = Path(__file__).parent / "scripts"
# a small window; the script is stopped right after the window's reference steps (no observation of
# the costs between steps: --observe-steps 0), as before issue 27
FAST = ["--skip-steps", "2", "--warmup-steps", "1", "--active-steps", "3", "--no-analyze", "--observe-steps", "0"]


def profile_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuadvisor", "profile", *args]


def run_profile_cli(
    *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(profile_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout)


def refused_profile_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`gpuadvisor profile ARGS` in this process (click's CliRunner), for the usage errors refused before
    any work: the same command, exit code and messages as `run_profile_cli` without a Python start-up
    (~0.7 s each). Nothing is started on these paths; a test that needs a child process uses
    `run_profile_cli`."""
    res = CliRunner().invoke(cli, ["profile", *args])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"gpuadvisor profile {args}: {res.exception!r}") from res.exception
    return subprocess.CompletedProcess(["gpuadvisor", "profile", *args], res.exit_code, res.stdout, res.stderr)


def manifest(run: Path) -> dict[str, Any]:
    return json.loads((run / "manifest.json").read_text())


def trace(run: Path) -> dict[str, Any]:
    with gzip.open(run / "trace" / "rank0.json.gz", "rt") as fh:
        return json.load(fh)
