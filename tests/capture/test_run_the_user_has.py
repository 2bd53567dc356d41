"""The run the user has (issue 27): scripts written the way their projects ship them, profiled with
the real CLI on the CPU. The window sits on the training loop even when an evaluation comes first;
costs that come every N steps (workers restarted every epoch, evaluation, checkpoints) are timed and
priced over the run; a data-bound CPU run gets its finding. Impacts are checked against the times the
capture recorded, not against fixed numbers."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from capture_helpers import SCRIPTS, manifest, run_profile_cli

# Each test runs `gpuadvisor profile` on a real script in a subprocess (10-40 s each): the slow tier,
# like the other CLI runs (the quick tier stays a few minutes; tests/stepmodel/test_periodic.py and
# tests/rules/cases/ga3_periodic.py cover the same pricing on synthetic records there).
pytestmark = pytest.mark.slow

# The observation after the window ends by steps here, never by time: a loaded CI machine must see
# the same steps (the 20 s default cut a nanoGPT-shaped run before its last evaluation under load).
SMALL = ["--skip-steps", "4", "--warmup-steps", "1", "--active-steps", "3", "--observe-seconds", "600"]


def _findings(run: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads((run / "findings.json").read_text())["findings"]
    return out


def _events(run: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in manifest(run)["capture"]["step_events"] if e["kind"] == kind]


def _trace_names(run: Path) -> set[str]:
    with gzip.open(run / "trace" / "rank0.json.gz", "rt") as fh:
        return {str(e.get("name", "")) for e in json.load(fh)["traceEvents"]}


def _check_priced_over_the_run(
    finding: dict[str, Any], recorded_s: list[float], each_key: str, removable_s: list[float] | None = None
) -> None:
    """The impact is the recorded cost (its removable part: `removable_s`, default all of it), spread
    over its period, against the run's mean step (which holds all of it)."""
    pred = finding["prediction"]
    ev = finding["evidence"]
    assert pred["basis"] == "timed_steps"
    each = 1e3 * sum(recorded_s) / len(recorded_s)
    assert ev[each_key] == pytest.approx(each, rel=1e-3)
    removable = 1e3 * sum(removable_s) / len(removable_s) if removable_s is not None else each
    saved = removable / ev["period_steps"]
    assert pred["predicted_step_ms"] == pytest.approx(pred["baseline_step_ms"] - saved, rel=1e-3)
    assert pred["baseline_step_ms"] >= ev["typical_step_ms"] + each / ev["period_steps"] - 1e-3
    assert finding["impact"] == pytest.approx(1 - pred["predicted_step_ms"] / pred["baseline_step_ms"], abs=1e-3)


def test_nanogpt_shaped_script_is_profiled_on_its_training_steps(tmp_path: Path) -> None:
    """estimate_loss() at iteration 0 (2 x eval_iters model calls under no_grad) comes before the first
    scaler.step(optimizer): the window is still on optimizer steps, and the evaluation is recorded as
    such, at iteration 0 and every eval_interval steps, with the checkpoint saved after it."""
    out = tmp_path / "run"
    r = run_profile_cli(
        "-o", str(out), *SMALL, str(SCRIPTS / "nanogpt_train.py"),
        "--max-iters", "24", "--eval-interval", "8", "--eval-iters", "10", "--out-dir", str(tmp_path / "ckpt"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert m["step_detection"] == "optimizer_step_hook"
    assert (m["capture"]["first_recorded_step"], m["capture"]["last_recorded_step"]) == (5, 7)
    names = _trace_names(out)
    assert any(n.startswith("Optimizer.step#AdamW") for n in names)  # training steps recorded
    assert any("Backward" in n for n in names)
    evals = _events(out, "evaluation")
    assert [e["step"] for e in evals] == [None, 8, 16, 24]  # iteration 0 comes before the first step
    assert all(e["forward_calls"] == 20 and e["seconds"] > 0 for e in evals)
    saves = _events(out, "checkpoint")
    assert [e["step"] for e in saves] == [8, 16, 24] and all(e["bytes"] > 0 for e in saves)
    assert saves[0]["file"].endswith("nanogpt_train.py") and "torch.save(checkpoint" in saves[0]["code"]
    env = json.loads((out / "environment.json").read_text())
    assert env["settings"]["run_mode"]["kind"] == "training"
    result = json.loads((out / "findings.json").read_text())
    assert any("training with evaluation" in n for n in result["notes"])
    ga304 = [f for f in _findings(out) if f["rule"] == "GA304" and f["evidence"]["cause"] == "evaluation"]
    if ga304:  # reported when it costs at least 3% of the run: on a loaded CPU it always did so far
        f = ga304[0]
        assert f["remedy"] == "evaluate_less_often" and f["evidence"]["period_steps"] == 8
        # the evaluation at iteration 0 comes before the first step: start-up, not priced (issue 38)
        last = max(t for _, t in m["capture"]["step_ends"])
        timed = [e for e in evals if e["step"] is not None and e["start_unix_s"] <= last]
        _check_priced_over_the_run(f, [e["seconds"] for e in timed], "each_ms")


def test_a_first_call_that_compiles_for_20_s_keeps_the_window_on_training(tmp_path: Path) -> None:
    """nanoGPT with torch.compile (issue 38): the optimizer exists, the first model call (inside
    estimate_loss at iteration 0) takes 21 s, longer than --time-fallback-after (20 s by default), then
    40 evaluation calls come before the first optimizer step. No time steps, no model-call steps: the
    window is on the optimizer's steps and the script is stopped only after it."""
    out = tmp_path / "run"
    r = run_profile_cli(
        "-o", str(out), *SMALL, "--observe-steps", "20", str(SCRIPTS / "nanogpt_train.py"), "--max-iters", "60",
        "--eval-interval",
        "100", "--eval-iters", "20", "--first-call-seconds", "21", "--out-dir", str(tmp_path / "ckpt"),
        timeout=240,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "counting steps by time" not in r.stderr and "counting steps by module_forward" not in r.stderr
    m = manifest(out)
    assert m["step_detection"] == "optimizer_step_hook"
    assert m["exit_reason"] == "stopped_after_window" and not m["capture"].get("provisional")
    assert m["capture"]["first_recorded_step"] >= 5
    names = _trace_names(out)
    assert any(n.startswith("Optimizer.step#AdamW") for n in names)
    (ev,) = _events(out, "evaluation")
    assert ev["step"] is None and ev["forward_calls"] == 40 and ev["seconds"] >= 21
    notes = json.loads((out / "findings.json").read_text())["notes"]
    assert any(n.startswith("trace kind: training") for n in notes), notes


@pytest.mark.parametrize("persistent", [False, True])
def test_workers_restarted_every_epoch(tmp_path: Path, persistent: bool) -> None:
    """A fine-tuning loop with 8-batch epochs and 2 workers: with persistent_workers=False each epoch
    starts and stops its workers, a data_loading finding names persistent_workers=True and prices the
    restarts from the recorded epoch starts; with persistent workers there is no such finding."""
    out = tmp_path / "run"
    args = ["--epochs", "5", *(["--persistent"] if persistent else [])]
    r = run_profile_cli("-o", str(out), *SMALL, str(SCRIPTS / "finetune_epochs.py"), *args)
    assert r.returncode == 0, r.stderr
    starts = _events(out, "epoch_start")
    assert [e["epoch"] for e in starts] == [1, 2, 3, 4, 5]
    assert all(e["num_workers"] == 2 and e["persistent_workers"] is persistent for e in starts)
    ga303 = [f for f in _findings(out) if f["rule"] == "GA303"]
    if persistent:
        assert ga303 == []
        return
    assert len(ga303) == 1
    f = ga303[0]
    assert f["category"] == "data_loading" and f["remedy"] == "persistent_workers"
    assert "persistent_workers=True" in f["recommendation"]
    assert f["locations"][0]["file"].endswith("finetune_epochs.py") and f["locations"][0]["line"] == 33
    assert f["evidence"]["period_steps"] == 8 and f["evidence"]["restart_steps"] == [8, 16, 24, 32]
    ends = manifest(out)["capture"]["step_ends"]
    last = max(t for _, t in ends)
    # every epoch's start but the first (the workers start once even when they persist) and every end,
    # within the timed steps
    # the new workers noted when they were ready (the probe in front of worker_init_fn)
    assert all(0 <= e["worker_ready_s"] <= e["seconds"] + 1.0 for e in starts)
    # one restart = an epoch's end + the next epoch's start; persistent workers would save the end and
    # the start until the workers were started (the iterator's creation, or the first new worker ready
    # when later), not the first batch made after that
    by_epoch: dict[int, float] = {}
    saved: dict[int, float] = {}
    for e in [e for e in starts if e["epoch"] > 1] + _events(out, "epoch_end"):
        if e["start_unix_s"] <= last:
            key = e["epoch"] + (1 if e["kind"] == "epoch_end" else 0)
            by_epoch[key] = by_epoch.get(key, 0.0) + e["seconds"]
            started = max(e["worker_ready_s"], e["iter_s"]) if e["kind"] == "epoch_start" else 0.0
            part = min(e["seconds"], started) if e["kind"] == "epoch_start" else e["seconds"]
            saved[key] = saved.get(key, 0.0) + part
    _check_priced_over_the_run(f, list(by_epoch.values()), "restart_ms_each", list(saved.values()))


def test_checkpoint_every_n_steps(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_profile_cli(
        "-o", str(out), *SMALL, str(SCRIPTS / "checkpoint_every_n.py"),
        "--steps", "40", "--save-every", "6", "--out-dir", str(tmp_path / "ckpt"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    saves = _events(out, "checkpoint")
    # torch.save after optimizer step 6, 12, ...: in the step that follows boundary 6, 12, ...
    assert [e["step"] for e in saves] == [6, 12, 18, 24, 30, 36]
    assert all(e["bytes"] > 50e6 for e in saves)  # model + AdamW state
    found = [f for f in _findings(out) if f["rule"] == "GA304" and f["evidence"]["cause"] == "checkpoint"]
    assert len(found) == 1, _findings(out)
    f = found[0]
    assert f["remedy"] == "async_checkpoint" and f["evidence"]["period_steps"] == 6
    assert f["locations"][0]["file"].endswith("checkpoint_every_n.py") and f["locations"][0]["line"] == 27
    last = max(t for _, t in manifest(out)["capture"]["step_ends"])
    timed = [e["seconds"] for e in saves if e["start_unix_s"] <= last]
    # saved in the background, the loop still pays the copy to pinned memory (and any wait for the
    # previous write) per save: what the fix removes is the rest (stepmodel/saves.py)
    kept_s = f["evidence"]["async_save"]["kept_ms"] / 1e3
    assert 0 < kept_s < min(timed)
    _check_priced_over_the_run(f, timed, "each_ms", [s - kept_s for s in timed])


def test_cpu_data_bound_run_gets_a_data_loading_finding(tmp_path: Path) -> None:
    """num_workers=0 and heavy per-sample work on a CPU-only run: the step waits for data nearly all the
    time; more workers are bounded by the machine's CPUs, yet the finding is there, rated by the
    measured wait."""
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), *SMALL, "--observe-steps", "0", str(SCRIPTS / "cpu_data_bound.py"), "--steps", "14")
    assert r.returncode == 0, r.stderr
    found = [f for f in _findings(out) if f["category"] == "data_loading"]
    assert found and found[0]["rule"] == "GA301"
    f = found[0]
    share = f["evidence"]["measured_share"]
    assert share > 0.5  # the metrics line prints the same wait
    expected = share if not f["evidence"]["gain_modeled"] else f["prediction"]["recovered_fraction"]
    assert f["impact"] == pytest.approx(expected, abs=1e-3)
    assert f["severity"] == "high"


def test_an_optimizer_that_never_steps_falls_back_to_model_calls(tmp_path: Path) -> None:
    """The hold on model-call counting while an optimizer has not stepped ends after
    --time-fallback-after seconds: an inference script that merely builds an optimizer is still stepped,
    provisionally (issue 38): its window is kept and the script is not stopped after it, since training
    steps may still come; it runs to its end."""
    out = tmp_path / "run"
    r = run_profile_cli(
        "-o", str(out), *SMALL, "--no-analyze", "--time-fallback-after", "1", str(SCRIPTS / "optimizer_never_steps.py")
    )
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert m["step_detection"] == "module_forward" and m["capture"]["state"] == "complete"
    assert m["capture"]["provisional"] is True and m["exit_reason"] == "completed"
    assert "the script is not stopped before a training window exists" in r.stderr
    assert _events(out, "evaluation") == []  # no training: the model calls are the run, not an evaluation


def _plain_mean_step(*args: str) -> float:
    """The fixture's own mean step, run plainly (no gpuadvisor)."""
    res = subprocess.run(
        [sys.executable, str(SCRIPTS / "bursty_loader.py"), *args], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return float(res.stdout.strip().rsplit("mean_step_ms=", 1)[1])


def test_a_loader_that_delivers_in_bursts_is_priced_on_the_mean_step(tmp_path: Path) -> None:
    """timm's ResNet-50 with 4 workers on a 16-CPU H200 host (issue 38): the workers deliver in bursts,
    every 4th step waits, the median step shows no wait and GA301 said "0.8%" for more workers. Here 4
    sleeping workers take 480 ms a batch and the loop 60 ms a step: the run is priced on its mean step,
    the stall pattern is found and blamed on the loader, and the prediction for 8 workers is within 25
    points of what 8 workers measure in plain runs of the same script."""
    import gpuadvisor
    from gpuadvisor.remedies import RemedyId
    from gpuadvisor.stepmodel.predict import predict

    shape = ["--batch-ms", "480", "--step-ms", "60", "--steps", "140"]
    out = tmp_path / "run"
    r = run_profile_cli("-o", str(out), "--observe-seconds", "600", str(SCRIPTS / "bursty_loader.py"), *shape, timeout=300)
    assert r.returncode == 0, r.stderr
    result = gpuadvisor.analyze(out)
    m = result.metrics
    assert m["run_stall_cause"] == "data", m
    assert m["run_mean_step_ms"] > 1.4 * m["run_median_step_ms"]
    timing = result.metrics_detail.model.run_timing if result.metrics_detail is not None else None
    assert timing is not None and timing.stalls is not None
    stalled = timing.stalls.pattern.steps
    # every 4th step (a loaded machine may add or hide one): most stalls on one phase of 4
    phases = [sum(1 for s in stalled if s % 4 == k) for k in range(4)]
    assert max(phases) >= 0.7 * len(stalled) and len(stalled) >= 0.15 * timing.stalls.steps_timed, stalled
    ga301 = next(f for f in result.findings if f.rule == "GA301")
    assert ga301.prediction is not None and ga301.prediction.get("per_step") == "mean"
    model = result.metrics_detail.model if result.metrics_detail is not None else None
    assert model is not None
    predicted = predict(model, RemedyId.DATALOADER_WORKERS, workers=8, current_workers=4).recovered_fraction
    four, eight = _plain_mean_step("--workers", "4", *shape), _plain_mean_step("--workers", "8", *shape)
    measured = 1.0 - eight / four
    assert measured > 0.25  # the fixture does what it says
    assert abs(predicted - measured) <= 0.25, (predicted, measured, four, eight)
