"""The child's exit after a profiled run: python's shutdown work is done, the C++ static destructors
are skipped (libkineto can crash there once a profiler ran: pytorch #195837), the status is kept."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from capture_helpers import SCRIPTS, manifest, run_profile_cli

# The quick tier (`-m "not slow"`) must run in under 2 minutes on 2 idle cores: slow because the tests run
# `gpuadvisor profile` on real scripts (~8 s each on 2 loaded cores).
pytestmark = pytest.mark.slow


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


@pytest.mark.parametrize("full", [False, True])
def test_optimizer_step_in_backward_is_captured(tmp_path: Path, full: bool) -> None:
    """RELIABILITY (issue 12): per-parameter optimizers stepped inside backward (the PyTorch tutorial):
    the profiler is never started or stopped inside the backward pass (it crashed there); the steps
    are taken at the model's next call, and the window is recorded in full."""
    run = tmp_path / "run"
    r = run_profile_cli(
        "-o", str(run), "--skip-steps", "4", "--warmup-steps", "1", "--active-steps", "3", "--no-analyze",
        "--observe-steps", "0", *(["--full"] if full else []), str(SCRIPTS / "optim_in_backward.py"), "40",
    )
    assert r.returncode == 0, r.stderr
    m = manifest(run)
    assert m["step_detection"] == "optimizer_step_hook"
    assert m["capture"]["state"] == "complete" and "user_profiler_conflict" not in m["degraded"]
    assert m["exit_reason"] == ("completed" if full else "stopped_after_window")
    assert ("done" in r.stdout) is full
    with gzip.open(run / "trace" / "rank0.json.gz", "rt") as fh:
        names = [e.get("name", "") for e in json.load(fh)["traceEvents"]]
    assert sorted(n for n in names if n.startswith("ProfilerStep#")) == ["ProfilerStep#5", "ProfilerStep#6", "ProfilerStep#7"]
    assert any("Optimizer.step" in n for n in names)


def test_a_forked_child_that_raises_exits_1_and_the_run_goes_on(tmp_path: Path) -> None:
    """RELIABILITY (issue 12): a fork inside the window whose code raises: the child prints the user's
    traceback (no gpuadvisor frames) and exits 1 as under python, instead of hanging at exit in
    libkineto's destructors; the parent's capture completes."""
    run = tmp_path / "run"
    r = run_profile_cli(
        "-o", str(run), "--full", "--skip-steps", "10", "--warmup-steps", "2", "--active-steps", "5",
        "--no-analyze", str(SCRIPTS / "fork_raises.py"), timeout=90,
    )
    assert r.returncode == 0, r.stderr
    assert "child status 1" in r.stdout and "done" in r.stdout
    assert "RuntimeError: child fails" in r.stderr and "gpuadvisor/capture" not in r.stderr
    m = manifest(run)
    assert m["exit_reason"] == "completed" and m["capture"]["state"] == "complete"


def test_stray_temporaries_are_removed_when_the_run_ends(tmp_path: Path) -> None:
    """RELIABILITY (issue 12): temporaries a killed child leaves (a third Ctrl-C: its native stderr
    capture, a half-written trace) are removed by the parent once the child has ended."""
    run = tmp_path / "run"
    r = run_profile_cli(
        "-o", str(run), "--skip-steps", "2", "--warmup-steps", "1", "--active-steps", "2", "--no-analyze",
        str(SCRIPTS / "leaves_temporaries.py"), str(run),
    )
    assert r.returncode == 0, r.stderr
    assert not list(run.glob(".*.tmp")) and not list((run / "trace").glob(".*.tmp"))
    assert (run / "trace" / "rank0.json.gz").is_file()


def test_a_report_lost_to_a_full_disk_exits_74(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RELIABILITY (issue 12): the script succeeded but report.html could not be written (ENOSPC,
    simulated): exit 74, and the manifest says what was lost (it used to exit 0)."""
    import errno

    import gpuadvisor.api
    import gpuadvisor.render.html as html

    def full_disk(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(html, "write_report", full_disk)
    run = tmp_path / "run"
    # the API's profile: the capture, then the analysis (the capture alone never analyzes)
    outcome = gpuadvisor.api.profile(
        str(SCRIPTS / "train_cpu.py"), ["--steps", "12"], out=str(run), skip_steps=2, warmup_steps=1,
        active_steps=2, quiet=True,
    )
    assert outcome.exit_status == 74
    m = manifest(run)
    assert "output_incomplete" in m["degraded"] and m["exit_status"] == 74
    assert any("report.html could not be written" in msg for msg in m["messages"]), m["messages"]
    assert (run / "findings.json").is_file() and not (run / "report.html").exists()


def test_a_real_small_filesystem_loses_the_report_and_says_so(tmp_path: Path) -> None:
    """RELIABILITY (issue 12) on a real 200 KB tmpfs as -o (root only; skipped elsewhere): the trace,
    manifest and findings fit, report.html does not: exit 74, `output_incomplete`, no temporaries left."""
    import os
    import subprocess

    small = tmp_path / "small"
    small.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(small)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        run = small / "run"
        r = run_profile_cli(
            "-o", str(run), "--skip-steps", "2", "--warmup-steps", "1", "--active-steps", "3",
            str(SCRIPTS / "train_cpu.py"), "--steps", "12",
        )
        assert r.returncode == 74, r.stderr
        m = manifest(run)
        assert m["exit_status"] == 74 and "output_incomplete" in m["degraded"]
        assert any("report.html could not be written" in msg for msg in m["messages"])
        assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")]
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)
