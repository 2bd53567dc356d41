"""The child's exit after a profiled run: python's shutdown work is done, the C++ static destructors
are skipped (libkineto can crash there once a profiler ran: pytorch #195837), the status is kept."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from capture_helpers import SCRIPTS, manifest, run_profile_cli


@pytest.mark.parametrize("status", [0, 5])
def test_shutdown_work_of_the_script_survives_the_fast_exit(tmp_path: Path, status: int) -> None:
    files = tmp_path / "files"
    files.mkdir()
    run = tmp_path / "run"
    r = run_profile_cli(
        "-o", str(run), "--full", "--skip-steps", "2", "--warmup-steps", "1", "--active-steps", "2",
        "--no-analyze", str(SCRIPTS / "exit_leftovers.py"), str(files), str(status),
    )
    assert r.returncode == status, r.stderr
    assert "gpuadvisor/capture" not in r.stderr  # nothing of ours (a warning, a traceback) on the way out
    m = manifest(run)
    assert m["exit_status"] == status and m["capture"]["state"] == "complete"
    assert (files / "unclosed.txt").read_text() == "buffered line\n"
    with gzip.open(files / "unclosed.txt.gz", "rt") as fh:
        assert fh.read() == "gzip line\n"  # the trailer was written: the file was closed
    assert (files / "atexit.txt").read_text() == "atexit ran\n"
    assert (files / "thread.txt").read_text() == "thread finished\n"  # non-daemon thread joined


def test_os_exit_inside_the_window_is_recorded_as_abrupt(tmp_path: Path) -> None:
    """RELIABILITY (issue 12): os._exit(7) while recording: exit status 7, `abrupt_exit`, the trace
    said lost, never `completed`."""
    run = tmp_path / "run"
    r = run_profile_cli(
        "-o", str(run), "--skip-steps", "2", "--warmup-steps", "1", "--active-steps", "5", "--no-analyze",
        str(SCRIPTS / "abrupt_exit.py"),
    )
    assert r.returncode == 7, r.stderr
    m = manifest(run)
    assert m["exit_reason"] == "abrupt_exit" and m["exit_status"] == 7
    assert "child_killed" in m["degraded"] and "trace_not_exported" in m["degraded"]
    assert any("exited abruptly" in msg and "os._exit" in msg for msg in m["messages"])
