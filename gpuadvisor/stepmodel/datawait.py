"""The time an in-process DataLoader takes as the run shows it outside the profiler.

With `num_workers=0` the DataLoader's `__next__` runs the Dataset's `__getitem__` and the collate
function in the training process, on the host, where the profiler slows it like any other host work
(every op it records pays the profiler's per-op cost). The replay scales host work by `host_scale` to
remove that cost, but not the time in `__next__`, which for a loader with workers is a wait on a queue
the profiler does not slow. For an in-process loader the profiled `__next__` then keeps the profiler's
cost: an H200 Lightning run (256x784 float batches from a Subset) waited 5.7 ms a step in `__next__`
under the profiler and 1.3 ms outside it, with a 5.0 ms unprofiled step; priced from the profiled wait,
more workers were predicted to save 51% of the step, and verify measured 1.13x.

The capture times the wait in `__next__` of every step (`manifest.capture.step_data_wait`). Over the
steps `manifest.timed_steps` picks without the profiler and inside the window, the median waits give
the factor the replay applies to the program's DataLoader time (StepModel.data_time, the one place that
decides it; docs/model.md "The profiler's cost").
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuadvisor.manifest import CaptureWindow, timed_steps
from gpuadvisor.stepmodel.build import main_loader

# steps with a recorded wait needed on each side (unprofiled, profiled) to use the capture's timing
MIN_DATA_WAIT_STEPS = 3
# the smallest factor applied (the program's data time is restored by dividing by it: replay_fit)
MIN_DATA_SCALE = 0.02
SINGLE_PROCESS_ITER = "_SingleProcessDataLoaderIter"


@dataclass(frozen=True)
class InProcessDataTime:
    """An in-process loader's wait per step (ms, medians) without and with the profiler, and the factor
    on the program's DataLoader time that takes the profiler's cost out (`scale`, in [0.02, 1])."""

    unprofiled_ms: float
    profiled_ms: float
    steps_unprofiled: int
    steps_profiled: int

    @property
    def scale(self) -> float:
        if self.profiled_ms <= 0:
            return 1.0
        return max(MIN_DATA_SCALE, min(1.0, self.unprofiled_ms / self.profiled_ms))


def in_process_data_time(
    capture: Any, environment: Mapping[str, Any], iterator_names: tuple[str, ...] | frozenset[str]
) -> InProcessDataTime | None:
    """The unprofiled and profiled data waits of an in-process loader, or None (the data time stays as
    recorded): the main loader (environment.json `dataloaders`, most batches) runs workers, or, without
    that record, the trace's iterator is not `_SingleProcessDataLoaderIter`; or fewer than
    MIN_DATA_WAIT_STEPS steps on either side have a recorded wait (runs recorded before the capture
    timed it, short runs)."""
    main = main_loader(environment)
    if main is not None:
        if main.get("num_workers"):
            return None
    elif not any(SINGLE_PROCESS_ITER in n for n in iterator_names):
        return None
    if not isinstance(capture, (CaptureWindow, Mapping)):
        return None
    cap = capture if isinstance(capture, CaptureWindow) else CaptureWindow.from_json(capture)
    waits = dict(cap.step_data_wait)
    if not waits:
        return None
    unprofiled, profiled = timed_steps(cap)
    u = [1e3 * waits[k] for k in unprofiled if k in waits]
    p = [1e3 * waits[k] for k in profiled if k in waits]
    if len(u) < MIN_DATA_WAIT_STEPS or len(p) < MIN_DATA_WAIT_STEPS:
        return None
    return InProcessDataTime(
        unprofiled_ms=statistics.median(u),
        profiled_ms=statistics.median(p),
        steps_unprofiled=len(u),
        steps_profiled=len(p),
    )
