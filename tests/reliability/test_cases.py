"""The 24 reliability cases (docs/capture.md, "Faults and bad input"), each checked from the outside: the real
`gpuadvisor` CLI as a subprocess on a real script (tests/reliability/scripts, SYNTHETIC fixtures) or a
real file (traces built by tests/synth.py, SYNTHETIC). One test per case or sub-case, its docstring
quoting the case. docs/capture.md ("Faults and bad input") maps each case to its tests here and
elsewhere. The CPU build of torch is enough for everything but the parts marked `gpu`."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.synth import K_ADAM, K_ELEMENTWISE, K_NVJET_BF16, SyntheticTrace

# The quick tier (`-m "not slow"`) must run in under 2 minutes on 2 idle cores: slow because every case runs
# the real CLI as a subprocess, most of them `gpuadvisor profile` on a real script (1-70 s each; the 67 took
# ~10 of the quick tier's 18 minutes on 2 loaded cores). The quick tier keeps the in-process tests of the
# same behaviour (tests/capture, tests/engine, tests/trace).
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
FAKE_NVML = HERE / "fake_nvml"
ROOT = HERE.parents[1]
SAMPLE_RUNS = ROOT / "sample_runs"
# skip 1, warm-up 1, record 2: steps 2 and 3 are recorded (steps count from 0, as torch's ProfilerStep#)
FAST = ("--skip-steps", "1", "--warmup-steps", "1", "--active-steps", "2")


# ---------------------------------------------------------------------------------------- helpers


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("FORCE_COLOR", None)
    env.update(extra)
    return env


def _nvml_env(config: dict[str, Any], **extra: str) -> dict[str, str]:
    """The fake NVML (tests/reliability/fake_nvml/pynvml.py, SYNTHETIC devices) first on the path."""
    path = os.pathsep.join(p for p in (str(FAKE_NVML), os.environ.get("PYTHONPATH", "")) if p)
    return _env(PYTHONPATH=path, FAKE_NVML=json.dumps(config), **extra)


def ga(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """`python -m gpuadvisor ARGS` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "gpuadvisor", *args],
        cwd=cwd,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def py(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The same script under plain python, for the parity checks."""
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=120
    )


def no_traceback(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr[-3000:]


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    no_traceback(r)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def manifest(run: Path) -> dict[str, Any]:
    return dict(json.loads((run / "manifest.json").read_text()))


def trace_events(run: Path) -> list[dict[str, Any]]:
    with gzip.open(run / "trace" / "rank0.json.gz", "rt") as fh:
        return list(json.load(fh)["traceEvents"])


def step_numbers(run: Path) -> list[int]:
    return sorted(
        int(e["name"].split("#")[1]) for e in trace_events(run) if str(e.get("name", "")).startswith("ProfilerStep#")
    )


def nvml_rows(run: Path) -> list[dict[str, str]]:
    import csv

    with gzip.open(run / "nvml.csv.gz", "rt", newline="") as fh:
        return list(csv.DictReader(fh))


def rule_status(findings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["rule"]: r for r in findings["rules"]}


def findings(run: Path) -> dict[str, Any]:
    return dict(json.loads((run / "findings.json").read_text()))


ONE_GPU = {"gpus": [{"uuid": "GPU-11111111-aaaa-bbbb-cccc-000000000001", "name": "Fake H200", "util": 63}]}


class Running:
    """`gpuadvisor profile --full` of train.py (600 steps of 50 ms), started and waited for until the
    script passed step 6, inside the capture window: ready to be signalled."""

    def __init__(
        self,
        tmp_path: Path,
        *extra: str,
        env: dict[str, str] | None = None,
        script_args: tuple[str, ...] = (),
        analyze: bool = False,
    ) -> None:
        self.out = tmp_path / "run"
        self.ready = tmp_path / "ready"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuadvisor", "profile", "-o", str(self.out), "--full",
             "--analyze" if analyze else "--no-analyze",
             "--skip-steps", "1", "--warmup-steps", "1", "--active-steps", "200", "--nvml-interval", "0.05",
             *extra, str(SCRIPTS / "train.py"), "--steps", "600", "--sleep", "0.05", "--ready-file", str(self.ready),
             *script_args],
            env=env or _env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                status, _, err = self.finish(timeout=1)
                raise AssertionError(f"the script never reached step 6 (status {status}): {err[-3000:]}")
            time.sleep(0.05)

    def child_pid(self) -> int:
        return int(json.loads((self.out / ".child_state.json").read_text())["pid"])

    def finish(self, timeout: float = 90) -> tuple[int, str, str]:
        """(exit status, stdout, stderr); a run still going after `timeout` s is killed (status -9)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
        return self.proc.returncode, out, err


def _needs_cuda() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not running
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------------------- the script and its process


@pytest.mark.parametrize("kind", ["missing", "directory", "not-python", "syntax-error"])
def test_case_01_bad_script_is_a_usage_error_before_any_work(tmp_path: Path, kind: str) -> None:
    """1. Script path missing, a directory, not Python, or a syntax error: usage error before any GPU work."""
    target = {
        "missing": tmp_path / "missing.py",
        "directory": tmp_path,
        "not-python": tmp_path / "weights.pt",
        "syntax-error": tmp_path / "broken.py",
    }[kind]
    if kind == "not-python":
        target.write_bytes(b"PK\x03\x04\x00\x00\x08\x00binary zip archive\x00\xff\xfe")
    if kind == "syntax-error":
        target.write_text("import torch\nfor i in range(3)\n    print(i)\n")
    out = tmp_path / "run"
    t0 = time.monotonic()
    r = ga("profile", "-o", str(out), str(target), env=_nvml_env(ONE_GPU))
    assert r.returncode == 2, r.stderr
    line = one_line_error(r)
    assert line.startswith("gpuadvisor: error:") and str(target.name) in line
    assert not out.exists()  # nothing started: no run directory, no NVML sampler, no child
    assert time.monotonic() - t0 < 30


def _traceback(stderr: str) -> str:
    start = stderr.index("Traceback (most recent call last):")
    block = stderr[start:].splitlines()
    end = next(i for i, ln in enumerate(block) if ln.startswith("ValueError:"))
    return "\n".join(block[: end + 1])


def test_case_02_script_raises_at_step_3(tmp_path: Path) -> None:
    """2. Script raises at step 3: the user's traceback printed unchanged; partial trace and samples kept;
    report marked "script failed at step 3"; exit status is the script's (1)."""
    script = str(SCRIPTS / "train.py")
    plain = py(script, "--fail-at", "3")
    assert plain.returncode == 1
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), "--skip-steps", "1", "--warmup-steps", "0", "--active-steps", "5",
           "--nvml-interval", "0.02", script, "--fail-at", "3", env=_nvml_env(ONE_GPU))  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert _traceback(r.stderr) == _traceback(plain.stderr)
    m = manifest(out)
    assert m["exit_status"] == 1 and m["failed_at_step"] == 3 and "script_failed_at_step_3" in m["degraded"]
    assert m["capture"]["state"] == "partial" and step_numbers(out)[:2] == [1, 2]  # steps 1 and 2 recorded, step 3 failed
    assert nvml_rows(out), "the NVML samples were not kept"
    # said in the loop's own count (issue 42 item 9): steps 0-2 completed, step 3 raised
    said = "The script failed after 3 completed steps (0-2)"
    assert said in r.stderr  # the summary; stdout is the script's
    assert said in (out / "report.html").read_text()
    assert said in [f["title"] for f in findings(out)["findings"]]


@pytest.mark.parametrize(
    ("code", "status", "stderr_line"), [("3", 3, None), ("a message for the user", 1, "a message for the user"),
                                        ("none", 0, None)]
)  # fmt: skip
def test_case_03_sys_exit(tmp_path: Path, code: str, status: int, stderr_line: str | None) -> None:
    """3. `sys.exit(3)`, `sys.exit("msg")`, `sys.exit()`: exit 3, 1 (message on stderr), 0; report still written."""
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), "--full", *FAST, str(SCRIPTS / "train.py"), "--steps", "6", "--exit", code)
    assert r.returncode == status, r.stderr
    no_traceback(r)
    if stderr_line is not None:
        assert stderr_line in r.stderr.splitlines()
        assert stderr_line not in r.stdout
    m = manifest(out)
    assert m["exit_reason"] == "sys_exit" and m["exit_status"] == status
    assert (out / "report.html").is_file() and (out / "findings.json").is_file()
    assert f"exit status {status}" in r.stderr


def test_case_04_ctrl_c_flushes_the_partial_trace(tmp_path: Path) -> None:
    """4. Ctrl-C during capture: profiler stopped, partial trace flushed, exit 130."""
    run = Running(tmp_path, env=_nvml_env(ONE_GPU))
    time.sleep(0.3)
    os.killpg(run.proc.pid, signal.SIGINT)  # what the terminal sends to the foreground group
    status, _, err = run.finish()
    assert status == 130, err
    m = manifest(run.out)
    assert m["exit_reason"] == "signal" and m["signal"] == signal.SIGINT and "interrupted" in m["degraded"]
    assert m["capture"]["state"] == "partial" and m["traces"] == ["trace/rank0.json.gz"]
    assert len(step_numbers(run.out)) >= 4
    assert nvml_rows(run.out)


def test_case_04_second_ctrl_c_skips_the_export_but_keeps_samples_and_manifest(tmp_path: Path) -> None:
    """4. A second Ctrl-C skips the export but keeps samples and manifest. (2000 small ops a step make an
    export of several seconds; the second press comes while it runs.)"""
    run = Running(tmp_path, env=_nvml_env(ONE_GPU), script_args=("--ops", "2000"))
    time.sleep(1.0)
    os.killpg(run.proc.pid, signal.SIGINT)
    time.sleep(0.4)  # a second, separate press (copies of one press within 0.3 s count once)
    os.killpg(run.proc.pid, signal.SIGINT)
    status, _, err = run.finish()
    assert status == 130, err
    m = manifest(run.out)
    assert m["exit_reason"] == "signal" and "interrupted" in m["degraded"]
    assert "trace_not_exported" in m["degraded"] and m["traces"] == []
    assert any("skipped by a second Ctrl-C" in x for x in m["messages"])
    assert not (run.out / "trace" / "rank0.json.gz").exists()
    rows = nvml_rows(run.out)
    assert rows and rows[0]["gpu_uuid"] == ONE_GPU["gpus"][0]["uuid"]
    assert m["nvml"]["samples"] >= len(rows) // 2 > 0
    assert (run.out / "environment.json").is_file()
    assert not [p for p in run.out.rglob("*") if p.name.endswith(".tmp")], "temporaries left behind"


def test_case_05_sigterm_is_forwarded_flushed_and_exits_143(tmp_path: Path) -> None:
    """5. SIGTERM from a scheduler: forwarded to the child, flushed within a deadline, exit 143 (never 0)."""
    run = Running(tmp_path)
    child = run.child_pid()
    t0 = time.monotonic()
    run.proc.send_signal(signal.SIGTERM)  # to gpuadvisor only, as a scheduler does
    status, _, err = run.finish()
    assert status == 143, err
    assert time.monotonic() - t0 < 25
    assert not _pid_alive(child)
    m = manifest(run.out)
    assert m["exit_status"] == 143 and m["exit_reason"] == "signal" and m["signal"] == signal.SIGTERM
    assert len(step_numbers(run.out)) >= 4  # flushed, a valid gzip JSON trace


def test_case_05_sigterm_caught_by_the_script_still_exits_143(tmp_path: Path) -> None:
    """5. SIGTERM ... forwarded to the child ... exit 143 (never 0): the script catches SIGTERM and calls
    sys.exit(0); the signal reached it, and the run does not read as a success."""
    caught = tmp_path / "caught"
    run = Running(tmp_path, "-q", script_args=("--on-sigterm", str(caught)))
    run.proc.send_signal(signal.SIGTERM)
    status, _, err = run.finish()
    assert caught.exists(), "SIGTERM was not forwarded to the script"
    assert status == 143, err
    assert manifest(run.out)["exit_status"] == 143 and len(step_numbers(run.out)) >= 4


def test_case_06_child_killed_still_gets_manifest_and_report(tmp_path: Path) -> None:
    """6. Child killed (SIGKILL, OOM killer): the parent still writes the manifest and a report from what
    exists; 137."""
    run = Running(tmp_path, env=_nvml_env(ONE_GPU), analyze=True)
    os.kill(run.child_pid(), signal.SIGKILL)
    status, stdout, err = run.finish(timeout=120)
    out = run.out
    assert status == 137, err
    no_traceback(subprocess.CompletedProcess([], status, stdout, err))
    m = manifest(out)
    assert m["exit_reason"] == "killed" and m["exit_status"] == 137 and "child_killed" in m["degraded"]
    assert m["steps_seen"] >= 2  # what the child last reported (at the window's start)
    assert nvml_rows(out)
    report = (out / "report.html").read_text()
    assert "killed" in report.lower()
    assert (out / "findings.json").is_file()


def test_case_07_script_ends_before_the_window(tmp_path: Path) -> None:
    """7. Script ends before the capture window: a clear "too few steps (n seen, m needed)" and whatever
    was recorded."""
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), "--skip-steps", "4", "--warmup-steps", "1", "--active-steps", "3",
           str(SCRIPTS / "train.py"), "--steps", "3")  # fmt: skip
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    assert "too few steps (3 seen, 8 needed" in r.stderr + r.stdout
    m = manifest(out)
    assert "too_few_steps" in m["degraded"] and m["steps_seen"] == 3
    assert m["traces"] == ["trace/rank0.json.gz"]  # the first steps, recorded for a short run
    assert trace_events(out)
    assert "finished 3" in r.stdout
    text = " ".join(ga("analyze", str(out)).stdout.split())
    assert "The script ran 3 steps, fewer than the 8 the capture window needs" in text, text
    assert "the record holds 2 steps (steps 0 to 1). At least 3 are needed" in text, text


def test_case_07_short_run_with_enough_steps_is_not_called_too_few(tmp_path: Path) -> None:
    """7. A short run whose first steps were recorded in number enough: GA001 says the script ended before
    the window and what the record holds, never "holds 5 steps; at least 3 are needed"."""
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), str(SCRIPTS / "train.py"), "--steps", "5")
    assert r.returncode == 0, r.stderr
    text = " ".join(ga("analyze", str(out)).stdout.split())
    assert "The script ran 5 steps, fewer than the 22 the capture window needs" in text, text
    assert "its first steps were recorded instead" in text and "the record holds 5 steps" in text, text
    assert "are needed for stable per-step numbers" not in text, text


@pytest.mark.parametrize(
    ("script", "detection"),
    [("inference_dl.py", ("dataloader", "module_forward")), ("custom_optimizer.py", ("module_forward",)),
     ("gradscaler_skips.py", ("optimizer_step_hook",)), ("functional_loop.py", ("time",))],
    ids=["inference", "custom-optimizer", "gradscaler-skips-every-step", "no-model-no-loader"],
)
def test_case_08_no_optimizer_step(tmp_path: Path, script: str, detection: tuple[str, ...]) -> None:
    """8. Script never calls `optimizer.step()` (inference, custom optimizers, GradScaler skipping steps,
    optimizer-in-backward): fall back to DataLoader or time-based steps and say which was used.
    Here the fallback is the model's forward calls (module_forward) where an nn.Module is called once a
    step, which is more exact than a DataLoader batch or a time slice. A GradScaler that skips every
    `optimizer.step()` (inf gradients) still steps the loop: its wrapped `GradScaler.step` counts each
    call as a step (issue 27; docs/trace-inputs.md: "a skipped step is still a step of the loop"), said as
    `optimizer_step_hook` with `optimizers[].skipped_steps`. (Optimizer-in-backward:
    tests/capture/test_exit_path.py::test_optimizer_step_in_backward_is_captured.)"""
    out = tmp_path / "run"
    # the time fallback only where nothing else can count steps (it would race a slow first step)
    timed = ("--time-fallback-after", "0.5", "--time-step-seconds", "0.2") if detection == ("time",) else ()
    r = ga("profile", "-o", str(out), "--no-analyze", *FAST, *timed, str(SCRIPTS / script))
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    m = manifest(out)
    used = m["step_detection"]
    assert used in detection, used
    assert f"counting steps by {used}" in r.stderr
    assert m["capture"]["state"] in ("complete", "partial") and m["traces"] == ["trace/rank0.json.gz"]
    assert step_numbers(out)


def test_case_09_script_runs_its_own_profiler(tmp_path: Path) -> None:
    """9. Script uses torch.profiler itself, or runs under another CUPTI client: clear message, no crash,
    no corruption of the user's own profile. (Another CUPTI client, e.g. Nsight Systems, needs a GPU and
    the tool: not tested here.)"""
    users = tmp_path / "users_trace.json"
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), "--no-analyze", "--skip-steps", "1", "--warmup-steps", "0",
           "--active-steps", "10", str(SCRIPTS / "user_profiler.py"), str(users))  # fmt: skip
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    assert "user profile rows True" in r.stdout and "done" in r.stdout
    own = json.loads(users.read_text())
    assert sum(1 for e in own["traceEvents"] if e.get("name") == "users_own_step") == 3
    msg = [ln for ln in r.stderr.splitlines() if "torch.profiler" in ln and "gpuadvisor:" in ln]
    assert msg, r.stderr
    assert "user_profiler_conflict" in manifest(out)["degraded"]


@pytest.mark.gpu
def test_case_09_script_runs_its_own_profiler_on_the_gpu(tmp_path: Path) -> None:
    """9. Script uses torch.profiler itself (with CUDA activity: both profilers use CUPTI): clear message,
    no crash, no corruption of the user's own profile."""
    _needs_cuda()
    users = tmp_path / "users_trace.json"
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), "--no-analyze", "--skip-steps", "1", "--warmup-steps", "0",
           "--active-steps", "10", str(SCRIPTS / "user_profiler.py"), str(users), "cuda")  # fmt: skip
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    assert "user profile rows True" in r.stdout and "done" in r.stdout
    own = json.loads(users.read_text())["traceEvents"]
    # on a GPU each record_function range is written twice: on the host (user_annotation) and on the
    # stream that ran its kernels (gpu_user_annotation)
    assert sum(1 for e in own if e.get("name") == "users_own_step" and e.get("cat") == "user_annotation") == 3
    assert any(e.get("cat") == "kernel" for e in own), "the script's own profile lost its GPU kernels"
    assert "user_profiler_conflict" in manifest(out)["degraded"]


@pytest.mark.gpu
def test_case_09_script_runs_under_another_cupti_client(tmp_path: Path) -> None:
    """9. ...or runs under another CUPTI client: the script holds CUPTI's one callback subscription, as
    Nsight Systems does (cupti_subscriber.py). The run ends as under plain python with no traceback, and
    the record is either complete (kernels in the trace) or says plainly that the GPU activity is missing
    and why (GA001), never a quiet analysis of an empty GPU. (On an H100 with torch 2.11 Kineto recorded
    no GPU activity at all behind the other subscriber, and GA001 named the likely cause.)"""
    _needs_cuda()
    script = str(SCRIPTS / "cupti_subscriber.py")
    plain = py(script)
    assert plain.returncode == 0 and plain.stdout.endswith("done\n"), plain.stderr
    if "subscribe rc=0" not in plain.stdout:
        pytest.skip(f"could not take CUPTI's subscription here: {plain.stdout.strip()}")
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), "--full", *FAST, script)  # --full: the script runs to its end
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    assert r.stdout.startswith(plain.stdout), (r.stdout, plain.stdout)
    events = trace_events(out)
    kernels = sum(1 for e in events if e.get("cat") == "kernel")
    text = " ".join(ga("analyze", str(out), "-v").stdout.split())
    if kernels == 0:
        assert "no GPU kernel events although" in text and "nothing else profiling the GPU" in text, text
    else:
        assert "Metrics:" in text and "kernels/step 0 " not in text, text


def test_case_10_an_exception_inside_a_hook_never_reaches_the_script(tmp_path: Path) -> None:
    """10. An exception inside a gpuadvisor hook: logged once, hook disabled, never reaches user code."""
    script = str(SCRIPTS / "hook_raises.py")
    plain = py(script)
    assert plain.returncode == 0 and plain.stdout == "done\n"
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), "--full", "--no-analyze", *FAST, script)
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout
    no_traceback(r)
    log = (out / "gpuadvisor.log").read_text()
    failed = [ln for ln in log.splitlines() if "failed and was disabled" in ln]
    assert len(failed) == 1 and "the context is chosen when iteration starts" in failed[0], log
    m = manifest(out)
    assert m["exit_reason"] == "completed" and m["capture"]["state"] == "complete"


def test_case_11_script_sees_what_python_gives_it(tmp_path: Path) -> None:
    """11. `if __name__ == "__main__":`, `__file__`, `sys.argv[0]`, arguments that look like gpuadvisor's
    own options: all behave exactly as under `python`."""
    args = ("-o", "elsewhere", "--force", "-m", "x", "--help", "--full", "-q", "--", "--active-steps", "3")
    for script in ("how_run.py", str(SCRIPTS / "how_run.py")):  # relative and absolute
        plain = py(script, *args, cwd=SCRIPTS)
        assert plain.returncode == 4
        r = ga("profile", "-q", "--no-analyze", "-o", str(tmp_path / script.replace("/", "_")), script, *args,
               cwd=SCRIPTS)  # fmt: skip
        assert r.returncode == 4, r.stderr
        assert r.stdout == plain.stdout
        assert "main block ran" in r.stdout and "elsewhere" in r.stdout
    assert not (SCRIPTS / "elsewhere").exists()


def test_case_11_module_with_relative_imports(tmp_path: Path) -> None:
    """11. `-m package.module`, relative imports ... all behave exactly as under `python`."""
    args = ("--lr", "3", "-o", "x", "-m", "y")
    plain = py("-m", "relpkg.main", *args, cwd=SCRIPTS)
    assert plain.returncode == 5 and "answer 42" in plain.stdout
    r = ga("profile", "-q", "--no-analyze", "-o", str(tmp_path / "run"), "-m", "relpkg.main", *args, cwd=SCRIPTS)
    assert r.returncode == 5, r.stderr
    assert r.stdout == plain.stdout
    assert "__name__ __main__ __package__ relpkg" in r.stdout
    assert manifest(tmp_path / "run")["target"]["kind"] == "module"


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_case_12_dataloader_workers_with_a_dataset_class_in_the_script(tmp_path: Path, method: str) -> None:
    """12. DataLoader with `num_workers=4` under fork, spawn and forkserver, with a Dataset class defined in
    the script."""
    script = str(SCRIPTS / "dl_workers.py")
    plain = py(script, method)
    assert plain.returncode == 0
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), "-q", "--full", "--no-analyze", *FAST, script, method, timeout=240)
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    assert r.stdout == plain.stdout == "batches 8 sum 1984.0\n"
    dl = json.loads((out / "environment.json").read_text())["dataloaders"][0]
    assert (dl["num_workers"], dl["multiprocessing_context"], dl["dataset_type"]) == (4, method, "ScriptDataset")
    assert manifest(out)["capture"]["state"] == "complete" and step_numbers(out) == [2, 3]


def test_case_13_a_forked_process_writes_no_gpuadvisor_output(tmp_path: Path) -> None:
    """13. The script forks: only the original process writes gpuadvisor outputs."""
    script = str(SCRIPTS / "forks_in_window.py")
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), "--full", "--no-analyze", *FAST, script)
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    assert "fork exit status 0" in r.stdout and "parent done" in r.stdout
    fork_pid = int(re.search(r"fork (\d+) trained", r.stdout).group(1))  # type: ignore[union-attr]
    m = manifest(out)
    assert m["exit_reason"] == "completed" and m["steps_seen"] == 12 and step_numbers(out) == [2, 3]
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == sorted(["callsites.json", "environment.json", "gpuadvisor.log", "manifest.json",
                            "trace/rank0.json.gz"]), files  # fmt: skip
    assert f"[child {fork_pid}]" not in (out / "gpuadvisor.log").read_text()
    # the fork's optimizer step is not counted as the script's
    assert json.loads((out / "environment.json").read_text())["optimizers"][0]["steps"] == 12


# ---------------------------------------------------------------------------------------- the machine


def test_case_14_no_gpu_no_nvml_records_on_the_cpu(tmp_path: Path) -> None:
    """14. No GPU, no driver, NVML library missing ...: runs, records on the CPU, says so; NVML-based rules
    report "not applicable", never a false finding."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the case is about machines without one")
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), *FAST, "--", str(SCRIPTS / "train.py"), "--steps", "12",
           env=_env())  # fmt: skip
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    assert "CUDA is not available" in r.stderr  # the summary goes to stderr: stdout is the script's
    assert "GPU samples were not recorded" in r.stderr
    m = manifest(out)
    assert "cuda_unavailable" in m["degraded"] and "nvml_unavailable" in m["degraded"]
    f = findings(out)
    status = rule_status(f)
    for rule in ("GA901", "GA902"):
        assert status[rule]["status"] == "not_applicable", status[rule]
    gpu_rules = [x for x in f["findings"] if x["rule"] not in ("GA001",)]
    assert not gpu_rules, gpu_rules


def test_case_14_nvml_library_mismatched(tmp_path: Path) -> None:
    """14. ... NVML library missing or mismatched: runs, records on the CPU, says so; NVML-based rules
    report "not applicable"."""
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), *FAST, str(SCRIPTS / "train.py"), "--steps", "12",
           env=_nvml_env({"init_error": "LibRmVersionMismatch"}))  # fmt: skip
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    m = manifest(out)
    assert "NVMLError_LibRmVersionMismatch" in m["nvml"]["reason"] and "nvml_unavailable" in m["degraded"]
    assert "GPU samples were not recorded: NVML is not usable (NVMLError_LibRmVersionMismatch" in r.stderr
    status = rule_status(findings(out))
    assert status["GA901"]["status"] == status["GA902"]["status"] == "not_applicable"


def _cupti_less_trace(path: Path) -> Path:
    """A SYNTHETIC GPU run's trace without kernels: launch calls on the CPU side, nothing on the GPU."""
    st = SyntheticTrace()
    for i in range(6):
        t = i * 2000.0
        st.add_step(i + 1, t, 1900)
        ext = st.add_cpu_op("aten::mm", t + 10, 300, input_types=["float", "float"], input_dims=[[512, 512]] * 2)
        for k in range(4):
            st.add_runtime("cudaLaunchKernel", t + 20 + 50 * k, 5, correlation=100 * i + k + 1, external_id=ext)
        st.add_runtime("cudaDeviceSynchronize", t + 400, 1200)
        st.add_optimizer_step(t + 1700, 100)
    return st.write(path)


def test_case_15_no_kernels_recorded(tmp_path: Path) -> None:
    """15. CUPTI unavailable or not permitted (no kernels in the trace): report "GPU kernels were not
    recorded" with the likely causes, not a wall of false findings."""
    p = _cupti_less_trace(tmp_path / "nocupti.json")
    r = ga("analyze", str(p), "--format", "json")
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    result = json.loads(r.stdout)
    assert [(f["rule"], f["title"]) for f in result["findings"]] == [("GA001", "GPU kernels were not recorded")]
    assert "Likely causes:" in result["findings"][0]["recommendation"]
    assert "another CUPTI client" in result["findings"][0]["recommendation"]
    status = rule_status(result)
    assert {status[rule]["status"] for rule in ("GA101", "GA201", "GA401", "GA501")} == {"not_applicable"}
    text = ga("analyze", str(p))
    assert "GPU kernels were not recorded" in text.stdout and "CUPTI" in text.stdout


MIG = {
    "gpus": [
        {"uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000", "name": "Fake H200", "util": 12},
        {
            "uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000000",
            "name": "Fake H200",
            "util": 99,
            "mig_devices": [{"uuid": "MIG-cccccccc-1111-2222-3333-444444444444", "name": "Fake H200 MIG 1g.18gb"}],
        },
    ]
}


def test_case_16_mig_slice_utilization_is_na_not_zero(tmp_path: Path) -> None:
    """16. MIG slice: utilization N/A, not 0. (A fake NVML with a MIG slice, SYNTHETIC: its utilization
    query answers NotSupported as a real slice does.)"""
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), "--nvml-interval", "0.02", *FAST, str(SCRIPTS / "train.py"), "--steps", "12",
           env=_nvml_env(MIG, CUDA_VISIBLE_DEVICES="MIG-cccccccc"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    gpus = manifest(out)["nvml"]["gpus"]
    assert [(g["uuid"], g["mig"], g["nvml_index"]) for g in gpus] == [(MIG["gpus"][1]["mig_devices"][0]["uuid"], True, 1)]
    rows = nvml_rows(out)
    assert rows and {row["util_gpu_pct"] for row in rows} == {""}
    metrics = findings(out)["metrics"]
    assert metrics.get("nvml_util_mean_pct") is None and metrics.get("nvml_util_window_mean_pct") is None
    assert not re.search(r"GPU util(ization)?[^,\n]* 0%", r.stdout), r.stdout


def test_case_16_cuda_visible_devices_uuid_is_mapped_by_uuid(tmp_path: Path) -> None:
    """16. `CUDA_VISIBLE_DEVICES` subsets or UUIDs: NVML mapped by UUID."""
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), "--no-analyze", "--nvml-interval", "0.02", *FAST,
           str(SCRIPTS / "train.py"), "--steps", "12",
           env=_nvml_env(MIG, CUDA_VISIBLE_DEVICES="GPU-bbbbbbbb"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    gpus = manifest(out)["nvml"]["gpus"]
    assert [(g["uuid"], g["nvml_index"], g["cuda_index"]) for g in gpus] == [(MIG["gpus"][1]["uuid"], 1, 0)]
    assert {row["gpu_uuid"] for row in nvml_rows(out)} == {MIG["gpus"][1]["uuid"]}
    subset = tmp_path / "subset"
    r = ga("profile", "-o", str(subset), "--no-analyze", *FAST, str(SCRIPTS / "train.py"), "--steps", "12",
           env=_nvml_env(MIG, CUDA_VISIBLE_DEVICES="1,0"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    gpus = manifest(subset)["nvml"]["gpus"]
    assert [(g["uuid"], g["cuda_index"]) for g in gpus] == [(MIG["gpus"][1]["uuid"], 0), (MIG["gpus"][0]["uuid"], 1)]


def test_case_17_existing_output_is_never_overwritten_without_force(tmp_path: Path) -> None:
    """17. Output directory ... existing: fail fast before training; never overwrite a previous run
    without `--force`."""
    first = tmp_path / "run"
    r = ga("profile", "-o", str(first), "--no-analyze", *FAST, str(SCRIPTS / "train.py"), "--steps", "8")
    assert r.returncode == 0, r.stderr
    before = {p: p.read_bytes() for p in first.rglob("*") if p.is_file()}
    started = tmp_path / "started"
    r = ga("profile", "-o", str(first), *FAST, str(SCRIPTS / "train.py"), "--started-file", str(started))
    assert r.returncode == 2
    assert "--force" in one_line_error(r)
    assert not started.exists(), "the script ran although the run directory was refused"
    assert {p: p.read_bytes() for p in first.rglob("*") if p.is_file()} == before
    r = ga("profile", "-o", str(first), "--force", "--no-analyze", *FAST, str(SCRIPTS / "train.py"),
           "--steps", "8", "--started-file", str(started))  # fmt: skip
    assert r.returncode == 0 and started.exists()


@pytest.mark.parametrize("where", ["under-a-file", "proc"])
def test_case_17_unwritable_output_directory_fails_before_training(tmp_path: Path, where: str) -> None:
    """17. Output directory unwritable ...: fail fast before training. (Paths no user, root included, can
    create: below a regular file, and in /proc.)"""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    out = blocker / "run" if where == "under-a-file" else Path("/proc/self/gpuadvisor-run")
    started = tmp_path / "started"
    r = ga("profile", "-o", str(out), *FAST, str(SCRIPTS / "train.py"), "--started-file", str(started))
    assert r.returncode == 2
    assert str(out) in one_line_error(r)
    assert not started.exists()


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0  # fmt: skip


@pytest.fixture
def tiny_tmp(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KB tmpfs, filled up (root only: skipped with the reason otherwise)."""
    tiny = tmp_path / "tinytmp"
    if not _mount_tmpfs(tiny, "64k"):
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    try:
        fd = os.open(tiny / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:  # ENOSPC: full
            pass
        finally:
            os.close(fd)
        yield tiny
    finally:
        subprocess.run(["umount", "-l", str(tiny)], capture_output=True)


def test_case_18_a_full_tmp_loses_nothing(tmp_path: Path, tiny_tmp: Path) -> None:
    """18. Disk full or a tiny /tmp during export: keep what can be kept ...: with TMPDIR a full 64 KB
    tmpfs the export (which goes through the run directory) loses nothing. (A full run directory:
    tests/capture/test_exit_path.py::test_a_real_small_filesystem_loses_the_report_and_says_so.)"""
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), *FAST, str(SCRIPTS / "train.py"), "--steps", "12",
           env=_env(TMPDIR=str(tiny_tmp)))  # fmt: skip
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    m = manifest(out)
    assert "output_incomplete" not in m["degraded"] and m["capture"]["state"] == "complete"
    assert step_numbers(out) == [2, 3] and (out / "report.html").is_file()


# ------------------------------------------------------------------------- the inputs to analyze/report/diff


def _steps_trace(n: int = 4, *, train: bool = True, **kwargs: Any) -> SyntheticTrace:
    """n SYNTHETIC ProfilerSteps with a GEMM, an elementwise kernel and (train) an optimizer step."""
    st = SyntheticTrace(**kwargs)
    for i in range(n):
        t = i * 1000.0
        st.add_step(i + 1, t, 900, gpu_dur=950)
        st.add_kernel(K_NVJET_BF16, t + 100, 300, op="aten::mm", op_input_types=["c10::BFloat16"] * 2)
        st.add_kernel(K_ELEMENTWISE, t + 420, 50, op="aten::add")
        if train:
            st.add_optimizer_step(t + 600, 100)
            st.add_kernel(K_ADAM, t + 650, 40)
    return st


def _bad_trace(kind: str, tmp_path: Path) -> Path:
    st = _steps_trace()
    raw = st.to_bytes()
    p = tmp_path / "trace.json"
    if kind == "truncated":
        p.write_bytes(raw[: int(len(raw) * 0.6)])
    elif kind == "truncated-gzip":
        p = tmp_path / "trace.json.gz"
        p.write_bytes(gzip.compress(raw)[:-200])
    elif kind == "not-json":
        p.write_text("this is not a trace\n")
    elif kind == "invalid-utf8":
        p.write_bytes(raw.replace(b"aten::add", b"aten::\xff\xfeadd", 1))
    elif kind == "utf8-bom":
        p.write_bytes(b"\xef\xbb\xbf" + raw)
    elif kind == "empty-events":
        p.write_text(json.dumps({**st.top, "traceEvents": []}))
    else:
        d = st.to_dict()
        events = d["traceEvents"]
        if kind == "no-dur":
            for e in events[::3]:
                e.pop("dur", None)
        elif kind == "ts-0":
            events += [{**e, "ts": 0} for e in events[:5]]
        elif kind == "kernels-without-args":
            for e in events:
                if e.get("cat") == "kernel":
                    e.pop("args", None)
        elif kind in ("schema-0", "schema-99"):
            d["schemaVersion"] = int(kind.split("-")[1])
        p.write_text(json.dumps(d))
    return p


BAD_TRACES = {
    # kind: (exit status, text that must be in the output: a warning, a label or the error)
    "truncated": (0, "truncated"),
    "truncated-gzip": (0, "truncated"),
    "not-json": (2, "not a JSON trace"),
    "invalid-utf8": (0, "UTF-8"),
    "utf8-bom": (0, "kernels/step 3"),
    "empty-events": (0, "holds no events"),
    "no-dur": (0, "had no 'dur'"),
    "ts-0": (0, "ts"),
    "kernels-without-args": (0, "Metrics:"),
    "schema-0": (0, "unknown trace schema 0"),
    "schema-99": (0, "unknown trace schema 99"),
}


@pytest.mark.parametrize("kind", list(BAD_TRACES))
def test_case_19_damaged_traces(tmp_path: Path, kind: str) -> None:
    """19. Trace truncated mid-file, not JSON, invalid UTF-8, empty `traceEvents`, events without `dur`,
    `ts: 0` events, kernels without args (and a UTF-8 BOM, schemaVersion 0 or 99): a degraded but correct
    analysis, or a clear error; never a traceback."""
    status, needle = BAD_TRACES[kind]
    p = _bad_trace(kind, tmp_path)
    r = ga("analyze", str(p), "-v")
    assert r.returncode == status, r.stderr + r.stdout
    no_traceback(r)
    if status == 2:
        assert needle in one_line_error(r)
    else:
        assert needle in r.stdout + r.stderr, r.stdout + r.stderr


def test_case_19_truncated_trace_leaves_out_the_step_it_cut(tmp_path: Path) -> None:
    """19. Trace truncated mid-file: a degraded but CORRECT analysis: the per-step numbers of the complete
    steps are those of the undamaged trace (3 kernels a step), not diluted by the step the cut ran
    through."""
    whole = json.loads(ga("analyze", str(_steps_trace().write(tmp_path / "whole.json")), "--format", "json").stdout)
    assert whole["metrics"]["kernels_per_step"] == 3
    r = ga("analyze", str(_bad_trace("truncated", tmp_path)), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["metrics"]["kernels_per_step"] == 3


@pytest.mark.parametrize("fraction", [0.85, 0.95, 0.99])
def test_case_19_truncated_real_trace_keeps_the_complete_steps(tmp_path: Path, fraction: float) -> None:
    """19. A REAL recording (Kineto writes every CPU op first, then runtime calls and GPU activities in time
    order) cut at `fraction` of its bytes: the cut empties the later steps of their kernels; the steps
    left are those the cut did not reach, with the undamaged trace's kernels per step, and the text
    says which steps were left out."""
    raw = gzip.decompress((SAMPLE_RUNS / "fp32_transformer-planted" / "trace" / "rank0.json.gz").read_bytes())
    (tmp_path / "whole.json").write_bytes(raw)
    whole = json.loads(ga("analyze", str(tmp_path / "whole.json"), "--format", "json").stdout)["metrics"]
    (tmp_path / "cut.json").write_bytes(raw[: int(len(raw) * fraction)])
    r = ga("analyze", str(tmp_path / "cut.json"), "--format", "json")
    assert r.returncode == 0, r.stderr
    cut = json.loads(r.stdout)["metrics"]
    assert 1 <= cut["steps_analyzed"] < whole["steps_analyzed"]
    assert cut["kernels_per_step"] == whole["kernels_per_step"]
    text = ga("analyze", str(tmp_path / "cut.json")).stdout
    assert "The truncation cut through step" in " ".join(text.split()), text


def test_case_19_cut_in_the_closing_metadata_loses_no_step(tmp_path: Path) -> None:
    """19. A REAL recording cut among the metadata events Kineto writes after every timed event: nothing
    of any step was lost, so every step is analyzed (the file is still reported as truncated)."""
    raw = gzip.decompress((SAMPLE_RUNS / "fp32_transformer-planted" / "trace" / "rank0.json.gz").read_bytes())
    (tmp_path / "whole.json").write_bytes(raw)
    whole = json.loads(ga("analyze", str(tmp_path / "whole.json"), "--format", "json").stdout)["metrics"]
    cut_at = raw.rindex(b'"ph": "M"')  # inside the last metadata event
    (tmp_path / "cut.json").write_bytes(raw[:cut_at])
    r = ga("analyze", str(tmp_path / "cut.json"), "-v")
    assert r.returncode == 0, r.stderr
    assert "truncated" in r.stdout and "The truncation cut through" not in r.stdout, r.stdout
    cut = json.loads(ga("analyze", str(tmp_path / "cut.json"), "--format", "json").stdout)["metrics"]
    assert cut["steps_analyzed"] == whole["steps_analyzed"]


def test_case_19_truncation_that_cut_every_step_is_a_clear_error(tmp_path: Path) -> None:
    """19. Cut inside Kineto's CPU-op part of a REAL recording: every launch and kernel is lost, so no step
    is complete; a one-line error (exit 2), not an analysis that reports an idle GPU."""
    raw = gzip.decompress((SAMPLE_RUNS / "sync_bound-planted" / "trace" / "rank0.json.gz").read_bytes())
    (tmp_path / "cut.json").write_bytes(raw[: int(len(raw) * 0.6)])
    r = ga("analyze", str(tmp_path / "cut.json"))
    assert r.returncode == 2, r.stdout + r.stderr
    no_traceback(r)
    assert "no complete step is left to analyze" in one_line_error(r)


_RSS_CHILD = """
import os, pty, resource, subprocess, sys, threading
# stderr on a pseudo-terminal, as in a person's shell: progress is shown only where someone watches
master, slave = pty.openpty()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=slave)
os.close(slave)
chunks = []
def pump():
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            return
        if not data:
            return
        chunks.append(data)
reader = threading.Thread(target=pump)
reader.start()
status = proc.wait()
reader.join(10)
print(status, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.stderr.write(b"".join(chunks).decode("utf-8", "replace"))
"""


def _big_trace(path: Path, mb: float) -> Path:
    """A SYNTHETIC trace of about `mb` MB: the steps of _steps_trace repeated, renumbered."""
    import orjson

    unit = _steps_trace(4)
    period = 4 * 1000.0
    with path.open("wb") as fh:
        fh.write(orjson.dumps(unit.top)[:-1] + b', "traceEvents": [\n')
        rep = 0
        while fh.tell() < mb * 1e6:
            chunk = []
            for e in unit.events:
                e2 = {**e, "ts": e["ts"] + rep * period}
                if str(e2.get("name", "")).startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{rep * 4 + int(e2['name'].split('#')[1])}"
                chunk.append(orjson.dumps(e2))
            fh.write((b",\n" if rep else b"") + b",\n".join(chunk))
            rep += 1
        fh.write(b"\n]}")
    return path


def _analyze_rss(path: Path) -> tuple[int, int, str]:
    """(exit status, peak RSS in bytes, stderr) of `gpuadvisor analyze PATH --progress` in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, sys.executable, "-m", "gpuadvisor", "analyze", str(path),
         "--format", "json", "-o", str(path.with_suffix(".findings.json"))],
        capture_output=True, text=True, timeout=600, env=_env(),
    )  # fmt: skip
    status, kb = (int(x) for x in out.stdout.split())
    return status, kb * 1024, out.stderr


@pytest.mark.slow
def test_case_20_a_large_trace_fits_in_24gb_with_progress(tmp_path: Path) -> None:
    """20. A 1 GB trace: analyzed within the memory of a 24 GB machine, with progress shown. Measured on
    SYNTHETIC traces of 10 and 55 MB, with stderr on a terminal: the peak RSS of `gpuadvisor analyze`
    extrapolated linearly to 1 GB stays below 20 GB (24 GB less the rest of the machine), and loading
    the large one (progress is shown from 50 MB) prints its progress."""
    small = _big_trace(tmp_path / "small.json", 10)
    large = _big_trace(tmp_path / "large.json", 55)
    s_status, s_rss, _ = _analyze_rss(small)
    l_status, l_rss, err = _analyze_rss(large)
    assert s_status == l_status == 0, err
    assert "Traceback" not in err
    per_byte = max(0.0, (l_rss - s_rss) / (large.stat().st_size - small.stat().st_size))
    at_1gb = l_rss + per_byte * (1e9 - large.stat().st_size)
    assert at_1gb < 20e9, f"{at_1gb / 1e9:.1f} GB extrapolated for 1 GB ({per_byte:.1f} bytes per trace byte)"
    progress = re.findall(r"gpuadvisor: loading large\.json: +(\d+)%", err)
    assert len(progress) >= 3 and progress[-1] == "100", err


def _labels(path: Path) -> tuple[str, dict[str, Any]]:
    r = ga("analyze", str(path), "-v")
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    j = ga("analyze", str(path), "--format", "json")
    return r.stdout, json.loads(j.stdout)["environment"]["trace_kind"]


def test_case_21_trace_from_another_pytorch_version(tmp_path: Path) -> None:
    """21. A trace from another PyTorch version ...: handled and labelled (the 2021 Kineto schema of the
    tb_plugin samples, SYNTHETIC)."""
    from tests.trace.test_robust_inputs import _old_schema_trace

    p = tmp_path / "worker0.pt.trace.json"
    p.write_text(json.dumps(_old_schema_trace()))
    text, kind = _labels(p)
    assert kind["old_categories"] and "trace kind:" in text
    assert "2021" in text or "old" in text.lower(), text


def test_case_21_cpu_only_trace(cpu_run: Path) -> None:
    """21. ... a CPU-only trace ...: handled and labelled (the trace of a real CPU run, as a raw trace)."""
    text, kind = _labels(cpu_run / "trace" / "rank0.json.gz")
    assert kind["cpu_only"] and kind["vendor"] == "none"
    assert "trace kind: training, CPU only" in text and "GPU rules are not applicable" in text


def test_case_21_inference_trace(tmp_path: Path) -> None:
    """21. ... an inference trace without optimizer steps ...: handled and labelled."""
    text, kind = _labels(_steps_trace(train=False).write(tmp_path / "infer.json"))
    assert kind["workload"] == "inference" and "inference" in text


def test_case_21_cuda_graphs_trace(tmp_path: Path) -> None:
    """21. ... a trace with CUDA graphs ...: handled and labelled."""
    st = SyntheticTrace()
    for i in range(4):
        t = i * 1000.0
        st.add_step(i + 1, t, 900, gpu_dur=950)
        corr = st.new_correlation()
        st.add_runtime("cudaGraphLaunch", t + 20, 10, correlation=corr)
        for k in range(5):
            st.add_event({"ph": "X", "cat": "kernel", "name": K_ELEMENTWISE, "pid": 0, "tid": 7,
                          "ts": st.base + t + 50 + 100 * k, "dur": 80,
                          "args": {"device": 0, "stream": 7, "correlation": corr, "grid": [132, 1, 1],
                                   "block": [256, 1, 1]}})  # fmt: skip
    text, kind = _labels(st.write(tmp_path / "graphs.json"))
    assert kind["graph_launches"] == 4 and "CUDA graph" in text


def test_case_21_torch_compile_trace(tmp_path: Path) -> None:
    """21. ... a trace with ... torch.compile kernels: handled and labelled."""
    st = SyntheticTrace()
    for i in range(4):
        t = i * 1000.0
        st.add_step(i + 1, t, 900, gpu_dur=950)
        st.add_annotation("CompiledFunction", t + 5, 500)
        st.add_kernel("triton_poi_fused_add_mul_0", t + 100, 200, op="aten::add")
        st.add_kernel("triton_red_fused_sum_1", t + 320, 100, op="aten::sum")
        st.add_optimizer_step(t + 600, 100)
        st.add_kernel(K_ADAM, t + 650, 40)
    text, kind = _labels(st.write(tmp_path / "compiled.json"))
    assert kind["torch_compile"] and kind["triton_kernels"] > 0 and "torch.compile" in text


@pytest.mark.parametrize("what", ["GPU", "CUDA driver API"])
def test_case_22_diff_across_gpus_or_drivers(tmp_path: Path, what: str) -> None:
    """22. `diff` across different GPUs, drivers or torch versions: refused or clearly warned."""
    base = _steps_trace(8).write(tmp_path / "base.json")
    other = _steps_trace(8)
    if what == "GPU":
        other.top["deviceProperties"][0]["name"] = "NVIDIA A100-SXM4-80GB"
    else:
        other.top["cuda_driver_version"] = 12040
    new = other.write(tmp_path / "new.json")
    r = ga("diff", str(base), str(new))
    assert r.returncode == 2
    assert f"different {what}" in one_line_error(r) and "--allow-mismatch" in r.stderr
    r = ga("diff", str(base), str(new), "--allow-mismatch")
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    assert f"different {what}" in r.stdout + r.stderr


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real CPU run of train.py (analyzed), shared by the tests that read a run directory."""
    out = tmp_path_factory.mktemp("cpu_run") / "run"
    r = ga("profile", "-o", str(out), "-q", *FAST, str(SCRIPTS / "train.py"), "--steps", "12")
    assert r.returncode == 0, r.stderr
    return out


def test_case_22_diff_across_torch_versions(tmp_path: Path, cpu_run: Path) -> None:
    """22. `diff` across ... torch versions: refused or clearly warned (a copy of a real run whose
    environment.json says it ran on another torch)."""
    other = tmp_path / "other"
    shutil.copytree(cpu_run, other)
    env = json.loads((other / "environment.json").read_text())
    env["torch"] = "2.11.0+cpu"
    (other / "environment.json").write_text(json.dumps(env))
    r = ga("diff", str(cpu_run), str(other))
    assert r.returncode == 2
    assert "different torch" in one_line_error(r)
    r = ga("diff", str(cpu_run), str(other), "--allow-mismatch")
    assert r.returncode == 0, r.stderr
    assert "different torch" in r.stdout + r.stderr


HOSTILE = '</script><script>alert("x")</script><img src=x onerror=alert(1)>'


def _assert_escaped(html: str) -> None:
    assert "<script>alert(" not in html and "<img src=x" not in html
    assert "onerror=alert(1)>" not in html


def test_case_23_hostile_kernel_names_in_html(tmp_path: Path) -> None:
    """23. HTML report built from hostile strings (kernel names ...): escaped."""
    st = _steps_trace(6)
    for i in range(6):
        st.add_kernel(HOSTILE, i * 1000.0 + 480, 400, op=HOSTILE)
        st.add_cpu_op(HOSTILE, i * 1000.0 + 470, 5)
    p = st.write(tmp_path / "hostile.json")
    out = tmp_path / "report.html"
    r = ga("report", str(p), "-o", str(out), "--cdn")
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    _assert_escaped(html)
    assert "&lt;/script&gt;&lt;script&gt;alert" in html or "\\u003c/script\\u003e" in html


def test_case_23_hostile_paths_and_argv_in_html(tmp_path: Path) -> None:
    """23. HTML report built from hostile strings (... file paths, argv with `<script>`): escaped."""
    folder = tmp_path / '<img src=x onerror=alert(1)>"'
    folder.mkdir()
    script = folder / "train.py"
    shutil.copy(SCRIPTS / "train.py", script)
    out = tmp_path / "run"
    r = ga("profile", "-o", str(out), *FAST, str(script), "--steps", "12", "--note", HOSTILE)
    assert r.returncode == 0, r.stderr
    html = (out / "report.html").read_text()
    _assert_escaped(html)
    assert "&lt;img src=x onerror=alert(1)&gt;&#34;/train.py" in html  # the folder, shown escaped
    assert "&lt;/script&gt;&lt;script&gt;alert(&#34;x&#34;)" in html  # the argument, shown escaped


def test_case_23_overflowing_grid_in_a_kernel_event(tmp_path: Path) -> None:
    """(issue 12, with case 23's inputs) a 64-bit overflowing `grid` value in a kernel event: analyzed
    and rendered, no traceback."""
    st = _steps_trace(4)
    st.add_event({"ph": "X", "cat": "kernel", "name": "overflowed_kernel", "pid": 0, "tid": 7,
                  "ts": st.base + 2500, "dur": 10,
                  "args": {"grid": [2**64 + 5, 2**70, 1], "block": [-1, 1, 1], "correlation": 2**64 + 1}})  # fmt: skip
    p = st.write(tmp_path / "grid.json")
    r = ga("analyze", str(p), "-v")
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    assert "impossible launch dimensions" in r.stdout + r.stderr
    r = ga("report", str(p), "-o", str(tmp_path / "r.html"), "--cdn")
    assert r.returncode == 0, r.stderr


def test_case_24_a_rule_that_raises(tmp_path: Path) -> None:
    """24. A rule that raises: reported as an internal error of that rule; the other rules still run."""
    rules = tmp_path / "plugins"
    rules.mkdir()
    from tests.ci.test_cli_manners import _EXITING_RULE

    (rules / "raises.py").write_text(
        _EXITING_RULE.format(cls="Raises", what="has a bug", rid="XR001", name="raises",
                             body='{}["missing key of a buggy rule"]')
    )  # fmt: skip
    p = _steps_trace(6).write(tmp_path / "t.json")
    plain = json.loads(ga("analyze", str(p), "--format", "json").stdout)
    r = ga("analyze", str(p), "--rules", str(rules), "--format", "json")
    assert r.returncode == 0, r.stderr
    no_traceback(r)
    result = json.loads(r.stdout)
    status = rule_status(result)
    assert status["XR001"]["status"] == "error" and "KeyError" in status["XR001"]["detail"]
    assert {k: v["status"] for k, v in status.items() if k != "XR001"} == {
        k: v["status"] for k, v in rule_status(plain).items()
    }
    assert [f["rule"] for f in result["findings"] if f["rule"] != "XR001"] == [f["rule"] for f in plain["findings"]]
    text = ga("analyze", str(p), "--rules", str(rules))
    assert text.returncode == 0 and "XR001" in text.stdout and "KeyError" in text.stdout
