"""End-to-end CPU tests of `gpuadvisor profile` (real child processes, small windows); the usage errors
refused before any work run the same command in this process (`refused_profile_cli`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from capture_helpers import FAST, SCRIPTS, manifest, profile_cmd, refused_profile_cli, run_profile_cli, trace

import gpuadvisor


@pytest.mark.slow
def test_cpu_training_run_directory(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), *FAST, str(SCRIPTS / "train_cpu.py"), "--steps", "30")
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert m["exit_reason"] == "stopped_after_window"
    assert m["step_detection"] == "optimizer_step_hook"
    assert m["capture"]["state"] == "complete"
    assert (m["capture"]["first_recorded_step"], m["capture"]["last_recorded_step"]) == (3, 5)
    assert m["traces"] == ["trace/rank0.json.gz"]
    assert "nvml_unavailable" in m["degraded"] and "cuda_unavailable" in m["degraded"]
    assert m["nvml"]["available"] is False and m["nvml"]["reason"]
    assert isinstance(m["capture"]["export_seconds"], float)
    t = trace(out)
    assert t["distributedInfo"]["rank"] == 0
    cats = {e.get("cat") for e in t["traceEvents"]}
    assert "cpu_op" in cats and "kernel" not in cats
    steps = sorted(e["name"] for e in t["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]
    env = json.loads((out / "environment.json").read_text())
    assert env["optimizers"][0]["class"] == "SGD" and env["optimizers"][0]["line"] == 19
    # the line as it was at profile time, with the lines around it and the file's hash (issue 30 item 1)
    import hashlib

    script_lines = (SCRIPTS / "train_cpu.py").read_text().splitlines()
    assert env["optimizers"][0]["snippet"] == {"first_line": 17, "lines": script_lines[16:21]}
    assert env["optimizers"][0]["file_sha256"] == hashlib.sha256((SCRIPTS / "train_cpu.py").read_bytes()).hexdigest()
    assert env["settings"]["snapshot"] == "window_end"
    cs = json.loads((out / "callsites.json").read_text())
    # CPU: nothing is a host sync. 6 steps to the window end, less step 1-2 (the unprofiled reference
    # step before the warm-up runs without the wrappers).
    assert cs["callsites"] == [] and cs["steps_counted"] == 5
    assert "capture window complete after step 6" in r.stderr
    assert "USDT:" not in r.stderr
    assert "finished" not in r.stdout  # stopped after the window
    assert not list(out.glob(".*"))  # no hand-over or temporary files left


@pytest.mark.slow
def test_full_runs_to_the_end(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), "--full", "-q", *FAST, str(SCRIPTS / "train_cpu.py"), "--steps", "12")
    assert r.returncode == 0, r.stderr
    assert "finished 12" in r.stdout
    assert r.stderr.strip().splitlines() == [] or all(
        not ln.startswith("gpuadvisor: step") for ln in r.stderr.splitlines()
    )
    m = manifest(out)
    assert m["exit_reason"] == "completed" and m["steps_seen"] == 12 and m["capture"]["full"] is True


@pytest.mark.parametrize(
    ("make", "msg"),
    [
        (lambda d: d / "missing.py", "script not found"),
        (lambda d: d, "not a file"),
        (lambda d: _write(d / "bad.py", "def f(:\n"), "not a valid Python script"),
        (lambda d: _write_bytes(d / "bin.py", b"\x7fELF\x00\x00"), "not a Python script"),
    ],
    ids=["missing", "directory", "syntax-error", "binary"],
)
def test_bad_script_is_usage_error_before_work(tmp_path: Path, make, msg: str) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    r = refused_profile_cli("-o", str(out), str(make(tmp_path)))
    assert r.returncode == 2
    assert msg in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()


def _write(p: Path, text: str) -> Path:
    p.write_text(text)
    return p


def _write_bytes(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


def test_existing_run_refused_without_force(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    r = refused_profile_cli("-o", str(out), str(SCRIPTS / "parity.py"))
    assert r.returncode == 2 and "--force" in r.stderr
    assert (out / "manifest.json").read_text() == "{}"


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_out_dir(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    r = refused_profile_cli("-o", str(ro / "run"), str(SCRIPTS / "parity.py"))
    assert r.returncode == 2 and "not writable" in r.stderr


def test_out_path_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    r = refused_profile_cli("-o", str(f), str(SCRIPTS / "parity.py"))
    assert r.returncode == 2 and "not a directory" in r.stderr


@pytest.mark.slow
def test_parity_with_plain_python(tmp_path: Path) -> None:
    """pyinstrument's test_script_execution_details: same __name__, argv, __file__, cwd, executable."""
    script = str(SCRIPTS / "parity.py")
    plain = subprocess.run(
        [sys.executable, script, "7", "--force", "-o", "x"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    prof = subprocess.run(
        profile_cmd("-q", "--no-analyze", "-o", str(tmp_path / "run"), script, "7", "--force", "-o", "x"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plain.returncode == 7 and prof.returncode == 7, prof.stderr
    assert prof.stdout == plain.stdout
    assert "argv ['" + script + "', '7', '--force', '-o', 'x']" in prof.stdout
    assert manifest(tmp_path / "run")["exit_reason"] == "sys_exit"


@pytest.mark.slow
def test_relative_script_path_parity(tmp_path: Path) -> None:
    plain = subprocess.run(
        [sys.executable, "parity.py"], cwd=SCRIPTS, capture_output=True, text=True, timeout=60
    )
    prof = subprocess.run(
        profile_cmd("-q", "--no-analyze", "-o", str(tmp_path / "run"), "parity.py"),
        cwd=SCRIPTS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert prof.returncode == 0 and prof.stdout == plain.stdout


@pytest.mark.slow
def test_module_mode_relative_import(tmp_path: Path) -> None:
    plain = subprocess.run(
        [sys.executable, "-m", "pkg.run", "--lr", "3"],
        cwd=SCRIPTS,
        capture_output=True,
        text=True,
        timeout=60,
    )
    prof = subprocess.run(
        profile_cmd("-q", "--no-analyze", "-o", str(tmp_path / "run"), "-m", "pkg.run", "--lr", "3"),
        cwd=SCRIPTS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plain.returncode == 5 and prof.returncode == 5, prof.stderr
    assert prof.stdout == plain.stdout == "module __main__ pkg 42 ['--lr', '3']\n"
    assert manifest(tmp_path / "run")["target"]["kind"] == "module"


def test_module_not_found_is_usage_error(tmp_path: Path) -> None:
    r = refused_profile_cli("-o", str(tmp_path / "run"), "-m", "no_such_module_xyz")
    assert r.returncode == 2 and "module not found" in r.stderr


@pytest.mark.slow
def test_script_raises_at_step_3(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_profile_cli(
        "-o",
        str(out),
        "--skip-steps",
        "1",
        "--warmup-steps",
        "0",
        "--active-steps",
        "10",
        "--no-analyze",
        str(SCRIPTS / "train_cpu.py"),
        "--fail-at",
        "3",
    )
    assert r.returncode == 1
    tb = r.stderr[r.stderr.index("Traceback") :]
    assert 'train_cpu.py", line 22, in <module>' in tb
    assert "ValueError: planted failure at step 3" in tb
    # no frames of ours (judged by the package's folder, not by the word "gpuadvisor", which may be in
    # the checkout's own path)
    ours = Path(gpuadvisor.__file__).resolve().parent
    frames = re.findall(r'File "([^"]+)", line', tb.split("ValueError")[0])
    assert frames and not [f for f in frames if Path(f).resolve().is_relative_to(ours)], frames
    m = manifest(out)
    assert m["exit_reason"] == "exception" and m["failed_at_step"] == 3
    assert "script_failed_at_step_3" in m["degraded"]
    assert m["capture"]["state"] == "partial" and m["traces"] == ["trace/rank0.json.gz"]
    assert m["capture"]["first_recorded_step"] == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("code", "status", "stderr_has"), [("3", 3, None), ("boom", 1, "boom"), ("none", 0, None)]
)
def test_sys_exit(tmp_path: Path, code: str, status: int, stderr_has: str | None) -> None:
    out = tmp_path / "run"
    r = run_profile_cli(
        "-o",
        str(out),
        "-q",
        "--full",
        *FAST,
        str(SCRIPTS / "train_cpu.py"),
        "--steps",
        "3",
        "--exit-code",
        code,
    )
    assert r.returncode == status, r.stderr
    if stderr_has:
        assert stderr_has + "\n" in r.stderr
    m = manifest(out)
    assert m["exit_reason"] == "sys_exit" and m["exit_status"] == status


@pytest.mark.slow
def test_too_few_steps(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), "-q", *FAST, str(SCRIPTS / "train_cpu.py"), "--steps", "4")
    assert r.returncode == 0
    m = manifest(out)
    assert "too_few_steps" in m["degraded"]
    assert any("too few steps (4 seen, 6 needed" in x for x in m["messages"])
    assert m["capture"]["state"] == "partial" and m["exit_reason"] == "completed"


@pytest.mark.slow
def test_no_optimizer_falls_back_to_dataloader(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), "-q", *FAST, str(SCRIPTS / "no_optimizer.py"))
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert m["step_detection"] == "dataloader" and m["capture"]["state"] == "complete"
    assert any("counted by dataloader" in x for x in m["messages"])
    env = json.loads((out / "environment.json").read_text())
    dl = env["dataloaders"][0]
    assert dl["file"].endswith("scripts/no_optimizer.py") and not os.path.isabs(dl["file"])  # relative to cwd
    assert (dl["line"], dl["batch_size"], dl["num_workers"]) == (8, 8, 0)
    assert dl["code"] == "loader = DataLoader(ds, batch_size=8)"
    assert dl["dataset_type"] == "TensorDataset" and dl["dataset_len"] == 256


@pytest.mark.slow
def test_time_based_steps(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_profile_cli(
        "-o",
        str(out),
        "-q",
        "--skip-steps",
        "1",
        "--warmup-steps",
        "0",
        "--active-steps",
        "2",
        "--no-analyze",
        "--time-step-seconds",
        "0.5",
        "--time-fallback-after",
        "0.5",
        str(SCRIPTS / "no_steps.py"),
    )
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert m["step_detection"] == "time" and m["capture"]["state"] == "complete"
    assert m["exit_reason"] == "stopped_after_window"


@pytest.mark.slow
def test_user_profiler_conflict(tmp_path: Path) -> None:
    out = tmp_path / "run"
    user_trace = tmp_path / "user.json"
    r = run_profile_cli(
        "-o",
        str(out),
        "-q",
        "--skip-steps",
        "1",
        "--warmup-steps",
        "0",
        "--active-steps",
        "10",
        "--no-analyze",
        str(SCRIPTS / "user_profiler.py"),
        str(user_trace),
    )
    assert r.returncode == 0, r.stderr
    assert "user profile ok True" in r.stdout and "done" in r.stdout
    json.loads(user_trace.read_text())  # the script's own profile is intact
    m = manifest(out)
    assert "user_profiler_conflict" in m["degraded"]
    assert m["traces"] == ["trace/rank0.json.gz"]  # what we had recorded before backing off


@pytest.mark.slow
def test_script_forks_only_original_writes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), "-q", *FAST, str(SCRIPTS / "forks.py"))
    assert r.returncode == 0, r.stderr
    assert "in fork" in r.stdout and "parent done" in r.stdout
    m = manifest(out)
    assert m["exit_reason"] == "completed"
    log = (out / "gpuadvisor.log").read_text()
    pids = {ln.split("[child ")[1].split("]")[0] for ln in log.splitlines() if "[child " in ln}
    assert len(pids) == 1


@pytest.mark.slow
@pytest.mark.parametrize("ctx", ["fork", "spawn", "forkserver"])
def test_dataloader_workers_with_script_dataset(tmp_path: Path, ctx: str) -> None:
    out = tmp_path / "run"
    r = run_profile_cli(
        "-o", str(out), "-q", "--full", *FAST, str(SCRIPTS / "dl_workers.py"), ctx, timeout=240
    )
    assert r.returncode == 0, r.stderr
    assert "batches 16" in r.stdout
    env = json.loads((out / "environment.json").read_text())
    assert env["dataloaders"][0]["num_workers"] == 4
    assert env["dataloaders"][0]["multiprocessing_context"] == ctx


@pytest.mark.slow  # two real `gpuadvisor profile` runs (~14 s on 2 loaded cores): not the quick tier
def test_two_runs_into_one_directory_the_second_is_refused(tmp_path: Path) -> None:
    """RELIABILITY (issue 12): a second `profile --force` into a folder another run is writing gets a
    usage error (exit 2) naming the holder, and the first run's files are untouched; the lock file is
    gone when the first run ends."""
    import subprocess
    import time

    from capture_helpers import profile_cmd

    out = tmp_path / "run"
    ready = tmp_path / "ready"
    first = subprocess.Popen(
        profile_cmd("-o", str(out), "--full", "--no-analyze", "-q", str(SCRIPTS / "train_cpu.py"),
                    "--steps", "20", "--sleep", "0.1", "--ready-file", str(ready)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.05)
        assert ready.exists(), "the first run never reached step 6"
        second = run_profile_cli("-o", str(out), "--force", "--no-analyze", str(SCRIPTS / "train_cpu.py"))
        assert second.returncode == 2, second.stderr
        assert "another gpuadvisor run is writing to" in second.stderr and f"pid {first.pid}" in second.stderr
    finally:
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert manifest(out)["exit_reason"] == "completed" and manifest(out)["steps_seen"] == 20
    assert not (out / ".gpuadvisor.lock").exists()


@pytest.mark.slow  # a real `gpuadvisor profile` run (~12 s on 2 loaded cores): not the quick tier
def test_a_symlink_at_the_trace_temporary_path_is_not_written_through(tmp_path: Path) -> None:
    """RELIABILITY (issue 12): with --force into a run directory where trace/.rank0.json.gz.tmp is a
    symbolic link to a file elsewhere, the export replaces the link; the file it pointed to is untouched."""
    out = tmp_path / "run"
    (out / "trace").mkdir(parents=True)
    (out / "manifest.json").write_text('{"tool": {"name": "gpuadvisor"}}')  # a previous run
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    for name in (".rank0.json.gz.tmp", ".rank0.json.gz.json.tmp"):
        (out / "trace" / name).symlink_to(victim)
    r = run_profile_cli("-o", str(out), "--force", *FAST, str(SCRIPTS / "train_cpu.py"), "--steps", "12")
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "keep me"
    assert manifest(out)["capture"]["state"] == "complete" and (out / "trace" / "rank0.json.gz").is_file()
    assert not list((out / "trace").glob(".*.tmp"))
