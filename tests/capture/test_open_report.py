"""`gpuadvisor profile --open`: the run is analyzed, report.html written next to findings.json, and the
report opened with the user's browser (here a stand-in given through $BROWSER that records the URI)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from capture_helpers import SCRIPTS, profile_cmd


@pytest.mark.slow
def test_profile_writes_the_report_and_opens_it(tmp_path: Path) -> None:
    browser = tmp_path / "browser.sh"
    opened = tmp_path / "opened.txt"
    browser.write_text(f'#!/bin/sh\necho "$1" > "{opened}"\n')
    browser.chmod(0o755)
    run = tmp_path / "run"
    env = {**os.environ, "BROWSER": str(browser)}
    proc = subprocess.run(
        profile_cmd(
            "--open",
            "-q",
            "--skip-steps",
            "2",
            "--warmup-steps",
            "1",
            "--active-steps",
            "3",
            "-o",
            str(run),
            str(SCRIPTS / "train_cpu.py"),
            "--steps",
            "12",
        ),
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = run / "report.html"
    assert report.is_file() and (run / "findings.json").is_file()
    assert opened.read_text().strip() == report.resolve().as_uri()
