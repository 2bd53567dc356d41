"""The typed run record (gpuadvisor.manifest), ProfileOptions and the experiment switches: no torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.capture import experiment
from gpuadvisor.capture.experiment import Suspect
from gpuadvisor.capture.options import ProfileOptions
from gpuadvisor.errors import UsageError
from gpuadvisor.manifest import (
    CaptureState,
    CaptureWindow,
    ChildState,
    Degraded,
    DegradedFlag,
    ExitReason,
    Manifest,
    StepDetection,
)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_MANIFESTS = sorted((ROOT / "sample_runs").glob("*/manifest.json"))


def _subset(old: Any, new: Any, where: str = "") -> None:
    """Every key/value of `old` is in `new` unchanged (new may add keys with defaults)."""
    if isinstance(old, dict):
        assert isinstance(new, dict), where
        for k, v in old.items():
            assert k in new, f"{where}.{k} lost"
            _subset(v, new[k], f"{where}.{k}")
    elif isinstance(old, list):
        assert isinstance(new, list) and len(old) == len(new), where
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _subset(a, b, f"{where}[{i}]")
    elif isinstance(old, float):
        assert new == pytest.approx(old, abs=1e-6), where
    else:
        assert new == old, where


def test_there_are_sample_runs() -> None:
    assert len(SAMPLE_MANIFESTS) >= 20


@pytest.mark.parametrize("path", SAMPLE_MANIFESTS, ids=lambda p: p.parent.name)
def test_every_sample_run_manifest_loads_and_round_trips(path: Path) -> None:
    raw = json.loads(path.read_text())
    m = Manifest.from_json(raw)
    assert m.schema_version == 1 and m.tool_name == "gpuadvisor"
    # training loops step their optimizer; inference loops and hand-written updates (lstm_lm) call the model
    assert m.step_detection in (StepDetection.OPTIMIZER_STEP_HOOK, StepDetection.MODULE_FORWARD)
    assert m.capture.state is CaptureState.COMPLETE and m.capture.steps_recorded == m.capture.active_steps
    assert m.exit_reason in (ExitReason.STOPPED_AFTER_WINDOW, ExitReason.COMPLETED)
    assert m.traces and all(t.startswith("trace/rank") for t in m.traces)
    assert len(m.capture.step_ends) == len(raw["capture"]["step_ends"])
    if "ranks" in raw:
        assert m.ranks is not None and m.distributed is not None
        assert [r.rank for r in m.ranks] == list(range(m.distributed.world_size or 0))
    out = m.to_json()
    _subset(raw, out)  # nothing of the old file is lost or changed
    assert Manifest.from_json(out) == m  # and the typed form is stable


def test_degraded_flags_are_typed_and_unknown_ones_survive() -> None:
    raw = {
        "degraded": ["nvml_unavailable", "script_failed_at_step_3", "from_a_newer_writer", "nvml_unavailable"],
        "capture": {"state": "partial", "new_capture_key": 1},
        "future_key": {"x": 1},
        "step_detection": "warp_drive",
        "exit_reason": 7,
        "steps_seen": "many",
    }
    m = Manifest.from_json(raw)
    assert m.degraded == (DegradedFlag(Degraded.NVML_UNAVAILABLE), DegradedFlag(Degraded.SCRIPT_FAILED, 3))
    assert m.has(Degraded.SCRIPT_FAILED) and not m.has(Degraded.SHORT_RUN)
    assert m.unknown_degraded == ("from_a_newer_writer",)
    assert m.step_detection is StepDetection.NONE and m.exit_reason is ExitReason.NOT_STARTED
    assert m.steps_seen == 0 and m.capture.state is CaptureState.PARTIAL
    out = m.to_json()
    assert out["degraded"] == ["nvml_unavailable", "script_failed_at_step_3", "from_a_newer_writer"]
    assert out["future_key"] == {"x": 1} and out["capture"]["new_capture_key"] == 1
    assert str(DegradedFlag(Degraded.SCRIPT_FAILED)) == "script_failed"


@pytest.mark.parametrize("junk", [None, [], "text", 3, {"capture": [1, 2]}, {"ranks": "x", "nvml": 5}])
def test_malformed_manifests_read_as_defaults(junk: Any) -> None:
    m = Manifest.from_json(junk)
    assert m.capture == CaptureWindow.from_json({}) and m.traces == ()
    assert m.ranks is None


def test_with_degraded_and_child_state_merge() -> None:
    m = Manifest().with_degraded(Degraded.NVML_UNAVAILABLE, "no NVML.").with_degraded(Degraded.NVML_UNAVAILABLE, "no NVML.")
    assert m.degraded_strings == ["nvml_unavailable"] and m.messages == ("no NVML.",)
    state = ChildState(
        step_detection=StepDetection.MODULE_FORWARD,
        steps_seen=9,
        capture=CaptureWindow(state=CaptureState.PARTIAL, short_run=True, first_recorded_step=0, last_recorded_step=4),
        degraded=(DegradedFlag(Degraded.SHORT_RUN),),
        messages=("short.",),
        exit_reason=ExitReason.COMPLETED,
    )
    assert ChildState.from_json(state.to_json()) == state
    merged = m.with_child(state)
    assert merged.degraded_strings == ["nvml_unavailable", "short_run"]
    assert merged.messages == ("no NVML.", "short.") and merged.steps_seen == 9
    assert merged.capture.steps_recorded == 5 and merged.step_detection is StepDetection.MODULE_FORWARD


def test_run_info_record_is_the_typed_manifest() -> None:
    from gpuadvisor.runinfo import load_run_info

    run = load_run_info(SAMPLE_MANIFESTS[0].parent)
    assert run.record.steps_seen == run.manifest["steps_seen"]
    assert run.record.capture.window_start_unix_s == run.manifest["capture"]["window_start_unix_s"]


def test_host_step_durations_skip_the_speculative_steps_and_short_runs() -> None:
    from gpuadvisor.manifest import host_step_durations

    ends = tuple((c, 100.0 + 0.01 * c + (0.005 * c if c > 6 else 0.0)) for c in range(1, 30))
    cap = CaptureWindow(
        skip_steps=10, warmup_steps=2, active_steps=5, first_recorded_step=12, last_recorded_step=16, step_ends=ends
    )
    unprofiled, profiled = host_step_durations(cap)
    assert len(profiled) == 4
    assert len(unprofiled) == 11  # steps 18..28 after the window: enough to be the reference alone
    # With only 2 steps after the window: skipped steps 5..9 and those 2
    few = CaptureWindow(**{**cap.__dict__, "step_ends": ends[:20]})
    assert len(host_step_durations(few)[0]) == 5 + 2
    spec = CaptureWindow(**{**few.__dict__, "speculation_end_step": 5})
    assert len(host_step_durations(spec)[0]) == 4 + 2  # step 5 carried the speculative stop
    assert host_step_durations({**cap.to_json(), "short_run": True}) == ([], [])


def test_profile_options_validate_and_replace() -> None:
    opts = ProfileOptions.from_kwargs(skip_steps=3, out=Path("runs/x"))
    assert opts.skip_steps == 3 and opts.out == "runs/x" and opts.active_steps == 10
    with pytest.raises(UsageError, match=r"unknown profile option.*skip_stepz"):
        ProfileOptions.from_kwargs(skip_stepz=3)
    for bad, msg in (
        ({"active_steps": 0}, "--active-steps must be >= 1"),
        ({"skip_steps": -1}, "--skip-steps must be >= 0"),
        ({"short_run_seconds": -1.0}, "--short-run-seconds must be >= 0"),
        ({"nvml_interval": 0.0}, "--nvml-interval must be > 0"),
    ):
        with pytest.raises(UsageError, match=msg):
            ProfileOptions.from_kwargs(**bad).validate()


def test_experiment_switches_parse() -> None:
    assert experiment.parse(None) == frozenset()
    assert experiment.parse("nvml, Tensor_Hooks,typo") == {Suspect.NVML, Suspect.TENSOR_HOOKS}
    assert experiment.parse("legacy") == {Suspect.UNINSTALL_AFTER_WINDOW, Suspect.CUPTI_TEARDOWN, Suspect.NVML_RELAX}
    assert Suspect.MODULE_HOOKS in experiment.parse("hooks")
    assert experiment.disabled({experiment.ENV_VAR: "step_timer"}) == {Suspect.STEP_TIMER}
