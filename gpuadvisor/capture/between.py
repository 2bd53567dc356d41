"""Costs between steps, as the training process sees them (issue 27): one of the jobs of the
capture session, kept apart from step counting and the profiler window.

`StepEventLog` collects `manifest.capture.step_events` (docs/capture.md, "Costs between steps"):
the events the Recorder's wrappers report (DataLoader epoch starts and ends, `torch.save`, long gc
passes) and the evaluation passes it finds in the top module's calls. It knows nothing of the
profiler; the session tells it the current step and whether the script trains.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# Costs recorded between steps (epoch starts, evaluation passes, checkpoints, long gc passes): bounded.
MAX_STEP_EVENTS = 2_000
# evaluation passes held until the first optimizer step (evaluation before training) at most
MAX_PENDING_EVALUATIONS = 16


class StepEventLog:
    """The step events of one capture.

    `current_step()`: the step running now (None before the first step); `trained()`: an optimizer
    stepped or a backward pass ran; `optimizer_built()`: an optimizer was constructed.
    """

    def __init__(
        self,
        current_step: Callable[[], int | None],
        trained: Callable[[], bool],
        optimizer_built: Callable[[], bool],
    ) -> None:
        self._current_step = current_step
        self._trained = trained
        self._optimizer_built = optimizer_built
        self.events: list[dict[str, Any]] = []
        self.dropped = 0
        self._eval_open: list[Any] | None = None  # [start perf_counter, forward calls]
        self._pending: list[tuple[float, float, int]] = []  # before the first optimizer step

    def model_call(self, evaluating: bool) -> None:
        """A call of the top module. An evaluation pass is consecutive calls with grad off, inference
        mode or the module in eval mode, from the first to the next training call, optimizer step,
        epoch start or checkpoint."""
        now = time.perf_counter()
        if evaluating:
            if self._eval_open is None:
                self._eval_open = [now, 0]
            self._eval_open[1] += 1
        elif self._eval_open is not None:
            self.close_evaluation(now)

    def optimizer_step(self) -> None:
        """An optimizer step: it ends an evaluation pass; passes held before the first one are kept."""
        if self._eval_open is not None:
            self.close_evaluation(time.perf_counter())
        if self._pending:
            pending, self._pending = self._pending, []
            for start, end, calls in pending:
                # before the first optimizer step by definition, whatever counted steps meanwhile
                self.add("evaluation", start, max(0.0, end - start), {"forward_calls": calls}, step=None)

    def close_evaluation(self, end: float) -> None:
        ev, self._eval_open = self._eval_open, None
        if ev is None:
            return
        start, calls = ev
        if self._trained():
            self.add("evaluation", start, max(0.0, end - start), {"forward_calls": calls})
        elif self._optimizer_built() and len(self._pending) < MAX_PENDING_EVALUATIONS:
            # an optimizer exists but has not stepped: an evaluation before training (nanoGPT's at
            # iteration 0) if it ever steps, else the model calls of an inference script (dropped)
            self._pending.append((start, end, calls))

    def add(self, kind: str, start: float, seconds: float, detail: dict[str, Any], **given: Any) -> None:
        """One event, with its wall-clock start (from its perf_counter `start`) and the step it fell in
        (`step=` given: that one)."""
        if kind not in ("evaluation", "gc") and self._eval_open is not None:
            # a checkpoint or a new epoch ends an evaluation pass; a gc pass inside it does not (the
            # collections during torch.compile's first call split nanoGPT's evaluation in two on an H200)
            self.close_evaluation(start)
        if len(self.events) >= MAX_STEP_EVENTS:
            self.dropped += 1
            return
        wall = time.time() - (time.perf_counter() - start)
        self.events.append(
            {
                "kind": kind,
                "step": given["step"] if "step" in given else self._current_step(),
                "start_unix_s": round(wall, 6),
                "seconds": round(seconds, 6),
                **detail,
            }
        )

    def finish(self) -> None:
        """The run ended: an open evaluation pass ends now (held ones are dropped: no training)."""
        if self._eval_open is not None:
            self.close_evaluation(time.perf_counter())

    def merge_worker_starts(self, starts: dict[tuple[int, int], float]) -> None:
        """When each epoch's first new DataLoader worker was ready (noted by the workers themselves:
        `hooks.WorkerStartProbe`, `hooks.read_worker_starts`), into its `epoch_start` event as
        `worker_ready_s`."""
        for ev in self.events:
            if ev.get("kind") == "epoch_start" and "worker_ready_s" not in ev:
                ready = starts.get((int(ev.get("dataloader", -1)), int(ev.get("epoch", -1))))
                if ready is not None:
                    ev["worker_ready_s"] = round(ready, 6)
