"""scripts/test.sh (issue 42 item 9): Chromium is installed only when the marker expression can select
browser tests (every browser test is slow: the quick tier installs nothing), and the command it
echoes is quoted as it could be typed again.

The script runs with its venv set-up and pytest stubbed out, and with fake `apt-get`, `id` and no
`chromium` on PATH: what it would install is what the fake apt-get records.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *args: str) -> tuple[bool, str]:
    script = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert "source scripts/setup.sh profile,test\n" in script and 'python -m pytest -q "$@"\n' in script
    script = script.replace("source scripts/setup.sh profile,test\n", ":\n")
    script = script.replace('python -m pytest -q "$@"\n', "exit 0\n")
    (tmp_path / "scripts").mkdir(exist_ok=True)
    (tmp_path / "scripts" / "test.sh").write_text(script, encoding="utf-8")
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    log = tmp_path / "apt.log"
    log.unlink(missing_ok=True)
    (fake / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {log}\n', encoding="utf-8")
    (fake / "id").write_text("#!/bin/sh\necho 0\n", encoding="utf-8")
    for tool in ("apt-get", "id"):
        (fake / tool).chmod(0o755)
    for tool, target in (("dirname", shutil.which("dirname")), ("python", sys.executable)):
        assert target is not None
        if not (fake / tool).exists():
            (fake / tool).symlink_to(target)
    res = subprocess.run(
        [shutil.which("bash") or "bash", str(tmp_path / "scripts" / "test.sh"), *args],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PATH": str(fake)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return log.is_file() and "chromium" in log.read_text(), res.stdout


@pytest.mark.parametrize(
    ("args", "installs"),
    [
        (("-m", "not slow", "-n", "2"), False),
        (("-m", "gpu"), False),
        (("-m", "not browser"), False),
        ((), True),
        (("-m", "slow"), True),
        (("-m", "browser", "tests/report"), True),
        (("-mbrowser",), True),
    ],
)
def test_chromium_only_when_browser_tests_can_run(
    tmp_path: Path, args: tuple[str, ...], installs: bool
) -> None:
    installed, _ = _run(tmp_path, *args)
    assert installed is installs


def test_the_echoed_command_is_quoted(tmp_path: Path) -> None:
    _, out = _run(tmp_path, "-m", "not slow", "-n", "2")
    assert "== python -m pytest -m 'not slow' -n 2" in out
