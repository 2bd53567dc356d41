"""Ctrl-C, SIGTERM and SIGKILL during the capture window (real processes, CPU)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from capture_helpers import SCRIPTS, manifest, profile_cmd, trace

# The quick tier (`-m "not slow"`) must run in under 2 minutes on 2 idle cores: slow because the tests send
# signals to real `gpuadvisor profile` runs (~8-10 s each on 2 loaded cores).
pytestmark = pytest.mark.slow


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    out = tmp_path / "run"
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        profile_cmd(
            "-o",
            str(out),
            "-q",
            "--full",
            "--no-analyze",
            "--skip-steps",
            "2",
            "--warmup-steps",
            "1",
            "--active-steps",
            "100",
            str(SCRIPTS / "train_cpu.py"),
            "--steps",
            "400",
            "--sleep",
            "0.05",
            "--ready-file",
            str(ready),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "script never reached step 6"
        time.sleep(0.05)
    return proc, out


@pytest.mark.slow
def test_ctrl_c_to_process_group(tmp_path: Path) -> None:
    proc, out = _start(tmp_path)
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "KeyboardInterrupt" in err
    m = manifest(out)
    assert m["exit_reason"] == "signal" and m["signal"] == signal.SIGINT
    assert "interrupted" in m["degraded"] and m["capture"]["state"] == "partial"
    assert any(e.get("name", "").startswith("ProfilerStep#") for e in trace(out)["traceEvents"])


@pytest.mark.slow
def test_sigterm_to_parent_is_forwarded(tmp_path: Path) -> None:
    proc, out = _start(tmp_path)
    proc.send_signal(signal.SIGTERM)  # a scheduler signalling the launcher only
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    m = manifest(out)
    assert m["exit_status"] == 143 and m["exit_reason"] == "signal"
    assert m["traces"] == ["trace/rank0.json.gz"]
    trace(out)  # flushed and valid


@pytest.mark.slow
def test_child_sigkill_still_writes_manifest(tmp_path: Path) -> None:
    proc, out = _start(tmp_path)
    state = json.loads((out / ".child_state.json").read_text())
    os.kill(state["pid"], signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == 137
    m = manifest(out)
    assert m["exit_reason"] == "killed" and m["exit_status"] == 137
    assert "child_killed" in m["degraded"] and m["traces"] == []
    assert m["steps_seen"] >= 3 and m["step_detection"] == "optimizer_step_hook"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT])
def test_second_ctrl_c_skips_export_keeps_manifest(tmp_path: Path, sig: int) -> None:
    proc, out = _start(tmp_path)
    os.killpg(proc.pid, sig)
    time.sleep(0.6)  # a second, separate Ctrl-C (copies within 0.3 s count as one)
    os.killpg(proc.pid, sig)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    m = manifest(out)
    assert m["exit_reason"] == "signal" and "interrupted" in m["degraded"]


def test_sigterm_after_the_script_raised_does_not_abandon_the_export(tmp_path: Path) -> None:
    """The script raised inside the window; a SIGTERM arrives while gpuadvisor exports the partial trace
    (torchrun stops the surviving ranks so, right as their own collective has raised). The SIGTERM has
    nothing left to interrupt: the trace is written, the script's own failure is what is recorded."""
    out = tmp_path / "run"
    res = subprocess.run(
        profile_cmd("-o", str(out), "-q", "--no-analyze", "--skip-steps", "2", "--warmup-steps", "1",
                    "--active-steps", "5", str(SCRIPTS / "sigterm_in_export.py"), "--fail-at", "5"),
        capture_output=True, text=True, timeout=90,
    )
    assert res.returncode == 1, res.stderr[-3000:]
    m = manifest(out)
    assert (m["exit_reason"], m["failed_at_step"]) == ("exception", 5)
    assert m["capture"]["state"] == "partial" and m["traces"] == ["trace/rank0.json.gz"], m["messages"]
    assert "trace_not_exported" not in m["degraded"]
    assert any(e.get("name", "").startswith("ProfilerStep#") for e in trace(out)["traceEvents"])
    assert "SIGTERM arrived after the script had ended" in (out / "gpuadvisor.log").read_text()


def test_sigterm_to_a_script_that_ignores_it_is_recorded_and_never_exits_0(tmp_path: Path) -> None:
    """RELIABILITY (issue 12): the script ignores SIGTERM; after --term-timeout it is killed, the
    manifest says so, and the exit status is 143 (a scheduler's SIGTERM never reads as success)."""
    out = tmp_path / "run"
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        profile_cmd("-o", str(out), "-q", "--full", "--no-analyze", "--term-timeout", "2",
                    "--skip-steps", "2", "--warmup-steps", "1", "--active-steps", "3",
                    str(SCRIPTS / "ignores_sigterm.py"), str(ready)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "script never reached step 6"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # to the parent only, as a scheduler would
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    m = manifest(out)
    assert m["exit_status"] == 143 and "interrupted" in m["degraded"]
    assert any("did not exit within 2 s" in msg and "SIGKILL" in msg for msg in m["messages"]), m["messages"]


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_parent_sigkill_does_not_leave_the_script_running(tmp_path: Path) -> None:
    """RELIABILITY (issue 12): `gpuadvisor profile` killed outright (SIGKILL): the training process gets
    SIGTERM from the kernel (PR_SET_PDEATHSIG), flushes and ends, instead of running on as an orphan."""
    proc, out = _start(tmp_path)
    child = json.loads((out / ".child_state.json").read_text())["pid"]
    proc.kill()
    proc.communicate(timeout=60)
    # the script alone would run ~20 s more (400 steps of 50 ms): it must end well before that
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the training process outlived its parent by 10 s")
    # the parent never finished manifest.json: a reader completes it from the child's hand-over and
    # says the run was cut off, instead of "0 steps" beside a trace
    from gpuadvisor.runinfo import load_run_info

    info = load_run_info(out)
    assert any("cut off" in n for n in info.notes), info.notes
    assert info.record.steps_seen >= 6 and info.record.exit_reason.value == "signal"
