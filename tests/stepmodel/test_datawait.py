"""Which DataLoader time the replay takes (gpuadvisor.stepmodel.datawait), on synthetic capture records
built here: 10 skipped steps, a window of steps 12-16, steps timed up to step 40."""

from __future__ import annotations

from typing import Any

import pytest

from gpuadvisor.stepmodel.datawait import MIN_DATA_WAIT_STEPS, in_process_data_time

SINGLE = ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",)
MULTI = ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",)


def capture(profiled_s: float = 0.0056, unprofiled_s: float = 0.0013, last_step: int = 40) -> dict[str, Any]:
    """Step boundaries every 5 ms (synthetic); a wait of `profiled_s` in steps 12-16, `unprofiled_s` in
    the others."""
    return {
        "skip_steps": 10,
        "warmup_steps": 2,
        "active_steps": 5,
        "first_recorded_step": 12,
        "last_recorded_step": 16,
        "state": "complete",
        "step_ends": [[k, 1000.0 + 0.005 * k] for k in range(1, last_step + 1)],
        "step_data_wait": [
            [k, profiled_s if 12 <= k <= 16 else unprofiled_s] for k in range(1, last_step + 1)
        ],
    }


def loader_env(num_workers: int) -> dict[str, Any]:
    return {"dataloaders": [{"num_workers": num_workers, "iterations": 40}]}


def test_an_in_process_loader_takes_the_unprofiled_wait() -> None:
    dt = in_process_data_time(capture(), loader_env(0), SINGLE)
    assert dt is not None
    # the profiled steps are 13-16 (the first recorded step left out), the unprofiled ones 18-39
    assert (dt.steps_profiled, dt.steps_unprofiled) == (4, 22)
    assert dt.profiled_ms == pytest.approx(5.6) and dt.unprofiled_ms == pytest.approx(1.3)
    assert dt.scale == pytest.approx(1.3 / 5.6)


def test_a_raw_traces_single_process_iterator_counts_as_in_process() -> None:
    dt = in_process_data_time(capture(), {}, SINGLE)
    assert dt is not None and dt.scale == pytest.approx(1.3 / 5.6)
    assert in_process_data_time(capture(), {}, MULTI) is None


def test_a_loader_with_workers_keeps_its_recorded_wait() -> None:
    # the main loader's record wins over the trace's iterator name
    assert in_process_data_time(capture(), loader_env(4), SINGLE) is None


def test_the_factor_never_grows_the_data_time() -> None:
    dt = in_process_data_time(capture(profiled_s=0.001, unprofiled_s=0.002), loader_env(0), SINGLE)
    assert dt is not None and dt.scale == 1.0


def test_too_few_timed_waits_keep_the_recorded_time() -> None:
    # no waits recorded (a run from before the capture timed them)
    no_waits = capture()
    del no_waits["step_data_wait"]
    assert in_process_data_time(no_waits, loader_env(0), SINGLE) is None
    # too few unprofiled steps with a wait (two after the window)
    few = capture()
    few["step_data_wait"] = [[k, w] for k, w in few["step_data_wait"] if k <= 19]
    assert in_process_data_time(few, loader_env(0), SINGLE) is None
    # too few profiled steps with a wait
    short = capture()
    short["step_data_wait"] = [
        [k, w] for k, w in short["step_data_wait"] if not 13 <= k <= 17 - MIN_DATA_WAIT_STEPS
    ]
    assert in_process_data_time(short, loader_env(0), SINGLE) is None
    assert in_process_data_time("not a capture", loader_env(0), SINGLE) is None
