"""What one verify trial measures: the settled region of the training loop, its mean step, its step
distribution and the time the loop waited for data.

A trial process calls `SteadyRegion.boundary(count)` at each step boundary (the step signal is the
trial's business, gpuadvisor/verify/trial.py) and `SteadyRegion.waited(seconds)` for each wait in
a DataLoader's `__next__`. The region:

1. **Start-up** is left out by the settled-step rule the capture uses (`gpuadvisor.steptimes.SettleWatch`
   over the host time of every step): the region opens at the first boundary after at least
   `warmup_steps` steps at which the step time has settled (compilation, autotuning, the first batches
   of the workers are behind), or, when it never settles, `MAX_SETTLE_STEPS` steps or `MAX_SETTLE_S`
   seconds after the warm-up, whichever comes first (the result says `settled: false`).
   A loader whose workers got ahead while the first steps were slow hands out that backlog at the
   loop's own pace, faster than it delivers afterwards: where the script reads a DataLoader with
   workers, the region also waits until the loop has waited in `__next__` once since the step time
   settled (its backlog is used up: a wait means the batch was not ready), for at most
   `BACKLOG_STEPS` x the batches its workers hold ahead (a loop that never waits is not bound by its
   loader: its backlog does not matter). The steps this rule holds are timed too (a sync when the hold
   starts and every `steps` steps): a script that ends before the region opens (one short epoch) is
   measured on them, and the result says so. `startup_s` is the time from the trial's start (before torch
   is imported) to the region's first boundary: what the user pays once. The online rule sees only
   that the step time stopped falling; a start-up that holds one pace for a while and then drops
   passes it. So the region's first `steps` are checked by the offline rule (`settled_start`): where
   they start above the region's own level by more than `RESTART_MIN_SHARE` of its time, the region
   opens again from there (at most `MAX_RESTARTS` times; what it measured is kept in case the script
   ends first).
2. **The mean.** One device synchronize at the region's start, one at its end (none per step):
   `step_time_ms` = elapsed / steps, the mean the user pays, stalls included. Host times of each step
   give the distribution (`gpuadvisor.steptimes.distribution`: median, stalls and their period).
3. **Enough steps for a stall pattern.** After `steps` timed steps the distribution is read once: with
   a stall every p-th step the region grows to a whole number of periods and at least
   `STALL_PERIODS` of them (every stretch of p steps then holds one stall: the mean is not a matter of
   where the region happens to cut the pattern); with stalls but no period yet, to `IRREGULAR_FACTOR`
   x `steps`, where the distribution is read again (a period that shows then is completed); never past `MAX_REGION_FACTOR` x `steps` or `MAX_REGION_S` seconds. Where it grows, the
   first `steps` are kept (one more synchronize): a script that ends before the longer region is done
   is measured on them, and the result says so (`measure_note`).
4. **Data wait**: the seconds spent inside DataLoader `__next__` during the region, per step and as a
   share of the mean step (`data_wait_ms`, `data_wait_share`): the measured bottleneck that tells
   explore whether the data levers come next.

Pure Python: no torch (the caller passes its device synchronize).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuadvisor.steptimes import SettleWatch, StepDistribution, distribution, settled_start

__all__ = ["MAX_SETTLE_STEPS", "STALL_PERIODS", "SteadyRegion", "across_trials", "measurement_text"]

STALL_PERIODS = 3  # a stall pattern of period p is measured over at least this many periods
IRREGULAR_FACTOR = 4  # stalls without a period: the region grows to this many x `steps`
MAX_REGION_FACTOR = 8  # never more than this many x `steps` timed steps
MAX_REGION_S = 120.0  # nor (once `steps` are timed) a region longer than this
# steps, or seconds, after the warm-up without a settled step time: the region opens anyway
MAX_SETTLE_STEPS = 200
MAX_SETTLE_S = 60.0
MAX_RESTARTS = 2  # times the region opens again when its first steps were still start-up
RESTART_MIN_SHARE = 0.10  # ... and weighed on its mean by more than this share of its time
# the backlog rule: at most this many x the batches the workers hold ahead, after the settled step
BACKLOG_STEPS = 2
# a wait in __next__ that says the batch was not ready: at least this long, and this share of the median step
WAIT_MIN_S = 0.001
WAIT_MIN_SHARE = 0.25


@dataclass
class _Snapshot:
    """A measurement of `steps` settled steps kept in case the script ends early: the region's first
    `steps` where it grows for a stall pattern, or a region that opened again (`reopened`)."""

    steps: int
    elapsed_s: float
    data_wait_s: float
    durations: list[float]
    first: int
    reopened: bool = False
    held: bool = False  # measured while the backlog rule held the region (it never opened)


class SteadyRegion:
    """The measured region of one trial (module docstring). `boundary()` returns what the caller does
    at this step boundary: "warmup", "start" (reset the region's counters), "timing", "checkpoint" (the
    first `steps` are kept: snapshot the counters), "restart" (the region opens again: snapshot the
    counters, then reset them) or "done" (the region is complete: `result()`)."""

    def __init__(
        self,
        *,
        warmup_steps: int,
        steps: int,
        started: float,
        sync: Callable[[], None],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.warmup_steps = max(1, warmup_steps)
        self.steps = max(1, steps)
        self.started = started
        self._sync = sync
        self._clock = clock
        self._watch = SettleWatch()
        self._last: float | None = None
        self._warm_end: float | None = None  # when the warm-up's minimum of steps was done
        self.backlog = 0  # batches the script's DataLoader workers hold ahead (num_workers x prefetch_factor)
        self._settled_at: int | None = None  # the count at which the step time settled
        self._waited_since_settled = False
        self._recent: list[float] = []  # the last few step times (ms), for what counts as a wait
        self.count = 0
        self.first: int | None = None  # the count at the region's start
        self.settled: bool | None = None
        self.region_start: float | None = None
        self.startup_s: float | None = None
        self.durations: list[float] = []  # host ms of each step in the region
        self.data_wait_s = 0.0
        self.target = self.steps
        self.elapsed_s: float | None = None
        self.snapshot: _Snapshot | None = None
        self.note: str | None = None
        self._irregular = False  # the first `steps` showed stalls without a period
        self.restarts = 0
        self.done = False
        # while the backlog rule holds the region after the step time settled: the steps since then,
        # timed in case the script ends first (a sync when the hold starts and every `steps` steps)
        self._held_start: float | None = None
        self._held_first = 0
        self._held_durations: list[float] = []
        self._held_wait_s = 0.0

    @property
    def timing(self) -> bool:
        return self.region_start is not None and not self.done

    @property
    def timed(self) -> int:
        return 0 if self.first is None else self.count - self.first

    def waited(self, seconds: float) -> None:
        if self.timing and seconds > 0:
            self.data_wait_s += seconds
        elif self._settled_at is not None and self.region_start is None and self._recent:
            if self._held_start is not None and seconds > 0:
                self._held_wait_s += seconds
            median_s = statistics.median(self._recent) / 1000.0
            if seconds >= max(WAIT_MIN_S, WAIT_MIN_SHARE * median_s):
                self._waited_since_settled = True

    def loader(self, backlog: int) -> None:
        """The script reads a DataLoader whose workers hold `backlog` batches ahead."""
        self.backlog = max(self.backlog, backlog)

    def boundary(self, count: int) -> str:
        now = self._clock()
        ms = None if self._last is None else 1000.0 * (now - self._last)
        self._last = now
        self.count = count
        if self.done:
            return "done"
        if self.region_start is None:
            if ms is not None:
                self._watch.add(ms)
                self._recent = [*self._recent[-7:], ms]
            if count < self.warmup_steps:
                return "warmup"
            if self._warm_end is None:
                self._warm_end = now
            settled = self._watch.settled
            waited_long = count >= self.warmup_steps + MAX_SETTLE_STEPS or now - self._warm_end > MAX_SETTLE_S
            if not settled and not waited_long:
                return "warmup"
            if settled and self._settled_at is None:
                self._settled_at = count
            if (
                settled
                and self.backlog
                and not self._waited_since_settled
                and count - (self._settled_at or count) < BACKLOG_STEPS * self.backlog
            ):
                self._hold(count, ms)
                return "warmup"  # the workers' backlog from the start-up is still being handed out
            if self.snapshot is not None and self.snapshot.held:
                self.snapshot = None  # the region opens: what the hold timed is not needed
            self.settled = settled
            return self._open(count)
        if ms is not None:
            self.durations.append(ms)
        n = self.timed
        if n == self.steps and self.restarts < MAX_RESTARTS and self._start_up_left():
            # the first steps of the region were still above its level (start-up that held one pace
            # for a while, then dropped): the region opens again from here; what it measured is kept
            # in case the script ends first
            self.restarts += 1
            self._sync()
            self.snapshot = self._snapshot(reopened=True)
            return self._open(count, "restart")
        if n == self.steps:
            self.target = self._target()
            if self.target > n:
                self._sync()
                self.snapshot = self._snapshot()
                return "checkpoint"
        elif n == self.target and self._irregular:
            # irregular stalls in the first `steps`: their period may show over the longer region
            self._irregular = False
            self.target = self._target()
        if n >= self.target:
            self._sync()
            self.elapsed_s = self._clock() - self.region_start
            self.done = True
            return "done"
        return "timing"

    def _hold(self, count: int, ms: float | None) -> None:
        """A step the backlog rule held after the step time settled: timed in case the script ends
        before the region opens (a short epoch: 78 batches against 2 x 48 held ahead). Its first step
        starts the clock (one sync); every `steps` steps are kept (one sync each)."""
        if self._held_start is None:
            self._sync()
            self._held_start = self._clock()
            self._held_first = count
            return
        if ms is not None:
            self._held_durations.append(ms)
        n = len(self._held_durations)
        if n % self.steps == 0:
            self._sync()
            elapsed = self._clock() - self._held_start
            self.snapshot = _Snapshot(n, elapsed, self._held_wait_s, list(self._held_durations), self._held_first, held=True)

    def _snapshot(self, reopened: bool = False) -> _Snapshot:
        assert self.region_start is not None and self.first is not None
        elapsed = self._clock() - self.region_start
        return _Snapshot(self.timed, elapsed, self.data_wait_s, list(self.durations), self.first, reopened)

    def _start_up_left(self) -> bool:
        """The offline settled-step rule finds start-up at the head of the region, and it weighs on the
        mean (more than RESTART_MIN_SHARE of the region's time: a one-step hiccup does not)."""
        k = settled_start(self.durations)
        if not k:
            return False
        rest = statistics.median(self.durations[k:])
        excess = sum(self.durations[:k]) - k * rest
        return excess > RESTART_MIN_SHARE * sum(self.durations)

    def _open(self, count: int, event: str = "start") -> str:
        self._sync()
        self.region_start = self._last = self._clock()
        self.first = count
        self.startup_s = self.region_start - self.started
        self.durations = []
        self.data_wait_s = 0.0
        return event

    def _target(self) -> int:
        """How many steps the region needs, read from the steps timed so far (module docstring)."""
        dist = distribution(self.durations)
        if dist is None or dist.stalls is None:
            return self.steps
        cap = self.steps * MAX_REGION_FACTOR
        assert self.region_start is not None
        per_step_s = max(1e-9, (self._clock() - self.region_start) / max(1, self.timed))
        cap = max(self.steps, min(cap, int(MAX_REGION_S / per_step_s)))
        period = dist.stalls.period
        if period is None:
            if self.timed > self.steps:
                return self.timed  # read again at the longer region: still no period
            self._irregular = True
            return min(self.steps * IRREGULAR_FACTOR, cap)
        want = max(self.timed, STALL_PERIODS * period)
        want = period * math.ceil(want / period)
        if want > cap:
            whole = period * (cap // period)
            want = whole if whole >= self.timed else self.timed
            self.note = (
                f"a stall every {period}th step needs {STALL_PERIODS} periods; the region was capped at "
                f"{want} steps"
            )
        return want

    def ended(self) -> bool:
        """The script ended before the region was complete: fall back on the first `steps` where they
        were kept (True), else nothing was measured (False, `why_not()` says why)."""
        if self.done or self.snapshot is None:
            return self.done
        snap = self.snapshot
        if snap.held:
            self.note = (
                f"the script ended after {self.count} steps, before the {self.backlog} batches its DataLoader "
                f"workers hold ahead were surely used up (the loop had not waited for data since its step "
                f"time settled at step {snap.first}): {snap.steps} steps from there were measured"
            )
            self.settled = True
            assert self._held_start is not None
            self.startup_s = self._held_start - self.started
        elif snap.reopened:
            self.note = (
                f"the script ended after {self.count} steps, before the region that opened again at step "
                f"{self.first} was complete: the {snap.steps} steps before it were measured (start-up "
                "may weigh on them)"
            )
        else:
            self.note = (
                f"the script ended after {self.count} steps, before the {self.target} settled steps the "
                f"stall pattern needs: the first {snap.steps} settled steps were measured"
            )
        self.durations, self.first = snap.durations, snap.first
        self.elapsed_s, self.data_wait_s, self.target = snap.elapsed_s, snap.data_wait_s, snap.steps
        self.count = snap.first + snap.steps
        self.done = True
        return True

    def why_not(self, method: str | None, warmup_steps: int, steps: int) -> str:
        """Why a script that ended measured nothing (the failed trial's reason)."""
        counted = f"counted by {method or 'none'}"
        if self.first is None:
            return (
                f"the script ended after {self.count} steps ({counted}) before its step time settled; the "
                f"trial needs at least {warmup_steps} warm-up steps, then {steps} settled steps"
            )
        return (
            f"the script ended after {self.count} steps ({counted}): its step time settled at step "
            f"{self.first}, so {self.timed} settled steps were timed of the {steps} needed (--steps)"
        )

    def distribution(self) -> StepDistribution | None:
        return distribution(self.durations, first_step=(self.first or 0) + 1)

    def result(self) -> dict[str, Any]:
        """The measurement of a complete region (after "done", or `ended()` True)."""
        assert self.elapsed_s is not None
        steps = self.target
        elapsed = self.elapsed_s
        dist = self.distribution()
        mean_ms = 1000.0 * elapsed / steps
        return {
            "elapsed_s": round(elapsed, 6),
            "steps_timed": steps,
            "step_time_ms": round(mean_ms, 6),
            "median_step_ms": round(dist.median_ms, 6) if dist is not None else None,
            "step_distribution": dist.to_dict() if dist is not None else None,
            "stall_pattern": dist.stalls.describe(dist.count) if dist is not None and dist.stalls else None,
            "startup_s": round(self.startup_s, 3) if self.startup_s is not None else None,
            "settled_at_step": self.first,
            "settled": self.settled,
            "data_wait_ms": round(1000.0 * self.data_wait_s / steps, 6),
            "data_wait_share": round(self.data_wait_s / elapsed, 4) if elapsed > 0 else None,
            "measure_note": self.note,
        }


def measurement_text(result: Mapping[str, Any]) -> str:
    """One trial's result in a progress line: the mean (what is compared), then what explains it."""
    if result.get("status") != "ok":
        return f"{result.get('status')}: {result.get('reason')}"
    text = f"{_num(result.get('step_time_ms')):.1f} ms/step"
    details = []
    steps = result.get("steps_timed")
    if isinstance(steps, int):
        details.append(
            f"mean of {steps} settled steps"
            if result.get("settled") is not False
            else f"mean of {steps} steps (never settled)"
        )
    if isinstance(result.get("median_step_ms"), (int, float)):
        details.append(f"median {_num(result.get('median_step_ms')):.1f}")
    if isinstance(result.get("startup_s"), (int, float)):
        details.append(f"start-up {_num(result.get('startup_s')):.1f} s")
    share = result.get("data_wait_share")
    if isinstance(share, (int, float)) and share >= 0.01:
        details.append(f"data wait {100 * share:.0f}% of the step")
    if result.get("stall_pattern"):
        details.append(str(result["stall_pattern"]))
    if details:
        text += f" ({'; '.join(details)})"
    if result.get("samples_per_s"):
        text += f", {_num(result.get('samples_per_s')):.0f} samples/s"
    if result.get("measure_note"):
        text += f"; {result['measure_note']}"
    return text


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def across_trials(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What verify.json says of a configuration's measured trials besides the compared number: the
    median over its trials of their median step, start-up and data wait, a stall pattern one of them
    saw, and each trial's own numbers (`per_trial`)."""

    def median(key: str) -> float | None:
        values = [
            float(r[key])
            for r in results
            if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)
        ]
        return round(statistics.median(values), 4) if values else None

    per_trial = [
        {
            "mean_ms": r.get("step_time_ms"),
            "median_ms": r.get("median_step_ms"),
            "startup_s": r.get("startup_s"),
            "steps": r.get("steps_timed"),
            "settled": r.get("settled"),
            "data_wait_share": r.get("data_wait_share"),
            "stall_pattern": r.get("stall_pattern"),
            "note": r.get("measure_note"),
        }
        for r in results
    ]
    return {
        "median_step_ms": median("median_step_ms"),
        "startup_s": median("startup_s"),
        "data_wait_share": median("data_wait_share"),
        "stall_pattern": next((r["stall_pattern"] for r in results if r.get("stall_pattern")), None),
        "per_trial": per_trial,
    }
