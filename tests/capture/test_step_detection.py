"""Step detection from the model's forward calls, short scripts, training vs inference (issue 17),
and the model's call sites (issue 10): real `gpuadvisor profile` runs on the CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from capture_helpers import FAST, SCRIPTS, manifest, run_profile_cli, trace

# The quick tier (`-m "not slow"`) must run in under 2 minutes on 2 idle cores: slow because the tests run
# `gpuadvisor profile` on real scripts (~8 s each on 2 loaded cores).
pytestmark = pytest.mark.slow


def _env(run: Path) -> dict[str, Any]:
    return json.loads((run / "environment.json").read_text())


def _steps_in_trace(run: Path) -> list[int]:
    names = {e["name"] for e in trace(run)["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
    return sorted(int(n.split("#")[1]) for n in names)


def test_inference_loop_is_stepped_by_forward_calls(tmp_path: Path) -> None:
    """Issue 17: a 50-batch inference loop, no optimizer, no DataLoader, finishing well under a second,
    gets a full window with the default options."""
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), "-q", "--no-analyze", str(SCRIPTS / "inference_loop.py"))
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert m["step_detection"] == "module_forward"
    # the steps after the window are timed until step 100 (--observe-steps): the 50 batches all run
    assert m["capture"]["state"] == "complete" and m["exit_reason"] == "completed"
    # skip 10 + warm-up 1: the window opens once the step time settled (issue 38), at step 10 on an
    # idle machine, a few steps later on loaded cores; then 10 active steps
    cap = m["capture"]
    settled = cap["settled_at_step"]
    assert isinstance(settled, int) and 10 <= settled <= 10 + 40
    first, last = cap["first_recorded_step"], cap["last_recorded_step"]
    assert (first, last) == (settled + 2, settled + 11)
    assert _steps_in_trace(out) == list(range(first, last + 1))
    env = _env(out)
    mode = env["settings"]["run_mode"]
    assert mode["kind"] == "inference" and mode["optimizer_steps"] == 0 and mode["backward_calls"] == 0
    assert mode["forward_calls"] == mode["forward_calls_inference_mode"] == mode["forward_calls_no_grad"] > 0
    top = env["model_calls"][0]
    assert top["top"] is True and top["module_class"] == "Sequential"
    assert top["file"].endswith("scripts/inference_loop.py") and top["line"] == 25
    assert top["code"] == "logits = model(images[i])" and top["calls_per_step"] == 1.0
    # The loss module is called at top level too, but it owns no parameters: not a model call.
    assert all(c["module_class"] != "CrossEntropyLoss" for c in env["model_calls"])


def test_short_inference_script_is_still_captured(tmp_path: Path) -> None:
    """8 batches: the script ends before the window (skip 10); the first steps were recorded."""
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), "-q", "--no-analyze", str(SCRIPTS / "inference_loop.py"), "--batches", "8")
    assert r.returncode == 0, r.stderr
    assert "batches 8" in r.stdout
    m = manifest(out)
    assert m["step_detection"] == "module_forward" and m["exit_reason"] == "completed"
    assert m["capture"]["state"] == "partial" and m["capture"]["short_run"] is True
    assert "short_run" in m["degraded"] and "too_few_steps" in m["degraded"]
    # Recorded from the first forward call until boundary skip // 2 = 5.
    assert (m["capture"]["first_recorded_step"], m["capture"]["last_recorded_step"]) == (0, 4)
    assert m["capture"]["speculation_end_step"] == 5
    assert _steps_in_trace(out) == [0, 1, 2, 3, 4]
    assert any("recorded from the first step" in msg for msg in m["messages"])


def test_very_short_script_keeps_the_whole_run(tmp_path: Path) -> None:
    """3 batches end while the speculative recording still runs: the trace holds all of them."""
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), "-q", "--no-analyze", str(SCRIPTS / "inference_loop.py"), "--batches", "3")
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert m["capture"]["short_run"] is True and m["traces"] == ["trace/rank0.json.gz"]
    assert (m["capture"]["first_recorded_step"], m["capture"]["last_recorded_step"]) == (0, 2)
    assert _steps_in_trace(out) == [0, 1, 2]


def test_short_run_recording_can_be_switched_off(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_profile_cli(
        "-o", str(out), "-q", "--no-analyze", "--short-run-seconds", "0",
        str(SCRIPTS / "inference_loop.py"), "--batches", "8",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert m["capture"]["state"] == "not_reached" and m["traces"] == [] and "short_run" not in m["degraded"]


def test_no_step_signal_is_not_a_short_run(tmp_path: Path) -> None:
    """Only a script with no step signal at all ends with nothing recorded, and says why."""
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), "-q", "--no-analyze", str(SCRIPTS / "no_signal_short.py"))
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert m["step_detection"] == "none" and m["capture"]["state"] == "not_reached"
    assert "no_steps_detected" in m["degraded"]
    assert any("no step was detected" in msg for msg in m["messages"])


def test_training_run_mode_and_model_call_site(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), "-q", *FAST, str(SCRIPTS / "train_cpu.py"), "--steps", "30")
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert m["step_detection"] == "optimizer_step_hook"  # the optimizer outranks the forward calls
    env = _env(out)
    mode = env["settings"]["run_mode"]
    assert mode["kind"] == "training" and mode["optimizer_steps"] >= 6
    assert mode["backward_calls"] >= 6 and mode["forward_calls_no_grad"] == 0
    top = env["model_calls"][0]
    assert (top["module_class"], top["line"], top["code"]) == ("Sequential", 24, "loss = model(x).pow(2).mean()")
    assert top["calls_per_step"] == 1.0
    assert env["framework"] == {"name": "plain", "version": None, "settings": {}, "call_site": None, "call_sites": {}}


def test_optimizer_seen_after_an_evaluation_pass_takes_over(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), "-q", *FAST, str(SCRIPTS / "eval_then_train.py"))
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert m["step_detection"] == "optimizer_step_hook" and m["capture"]["state"] == "complete"
    assert (m["capture"]["first_recorded_step"], m["capture"]["last_recorded_step"]) == (3, 5)


@pytest.mark.parametrize("nested_calls", [1, 4])
def test_forward_tracker_counts_only_the_outermost_model_call(nested_calls: int) -> None:
    """In process: nested module calls and parameter-free modules are not steps; after discovery the
    nn.Module.__call__ wrapper is gone and a pre-hook on the top module alone remains."""
    import torch

    from gpuadvisor.capture import forward
    from gpuadvisor.capture.forward import ForwardTracker, Phase
    from gpuadvisor.capture.hooks import Recorder

    rec = Recorder(log=lambda m: None, on_optimizer_step=lambda o: None, on_dataloader_next=lambda: None,
                   on_user_profiler=lambda p: None)  # fmt: skip
    calls: list[int] = []
    tracker = ForwardTracker(rec, lambda evaluating: calls.append(1))
    original_call = torch.nn.Module.__dict__["__call__"]
    tracker.install()
    try:
        inner = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(nested_calls)])
        model = torch.nn.Sequential(inner, torch.nn.ReLU())
        norm = torch.nn.Softmax(dim=1)  # no parameters: never the top module
        x = torch.ones(2, 4)
        for _ in range(10):
            norm(model(x))
        assert len(calls) == 10 and tracker.top_calls == 10
        assert tracker.phase is Phase.TOP_HOOK
        assert torch.nn.Module.__dict__["__call__"] is original_call  # discovery wrapper removed
        assert forward.DISCOVERY_CALLS == 3
        sites = tracker.model_calls_json(steps_in_window=0, steps_seen=10)
        assert [s["module_class"] for s in sites] == ["Sequential"] and sites[0]["calls"] == 10
        tracker.stop(keep_step_hook=False)
        model(x)
        assert len(calls) == 10 and rec.installed() == []
    finally:
        rec.uninstall()
    assert torch.nn.Module.__dict__["__call__"] is original_call


def test_a_step_gradscaler_skips_is_still_a_step() -> None:
    """In process: GradScaler.step skips optimizer.step() when the gradients hold inf/NaN; the loop
    still took a step, so the step signal fires once per scaler.step either way."""
    import torch

    from gpuadvisor.capture.hooks import Recorder

    steps: list[object] = []
    rec = Recorder(log=lambda m: None, on_optimizer_step=steps.append, on_dataloader_next=lambda: None,
                   on_user_profiler=lambda p: None)  # fmt: skip
    rec.install()
    try:
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
        for i in range(6):
            loss = model(torch.ones(2, 4)).sum() * (float("inf") if i in (1, 4) else 1.0)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        assert len(steps) == 6 and all(s is opt for s in steps)
        assert rec.optimizers[0]["steps"] == 4 and rec.optimizers[0]["skipped_steps"] == 2
    finally:
        rec.uninstall()
        rec.remove_gc_callback()
