"""Costs that come every N steps (issue 27): the run as timed step by step, not the window's median.

The capture times every step boundary of the run it observes (`manifest.capture.step_ends`: the
skipped steps before the window, the window, and the steps after it, see docs/capture.md) and, since
issue 27, records what happened between steps and cost time (`capture.step_events`): DataLoader epoch
starts and ends (worker start-up and shut-down when workers do not persist), evaluation passes,
`torch.save` checkpoints and long garbage-collector passes.

`run_timing(capture, environment)` prices them over the observed run:

- the typical step is the median of the steps timed without the profiler (steps holding a profiler
  start, stop or export, the first step and the speculative recording are left out);
- a cost with a period (the spacing of its occurrences, or the loader's batches per epoch) costs
  `each / period` per step; one seen once (its period not observed) costs its time over the observed
  steps; the mean step of the run is the typical step plus every cost per step;
- each cost is measured: a recorded event's own duration, or, in runs recorded before issue 27 (no
  events), the excess over the typical step of periodic slow steps, attributed to epoch restarts when
  their spacing is the main DataLoader's batches per epoch, else "cause not recorded";
- its share of the mean step is what removing it recovers (an upper bound when it was seen once: its
  period was then not observed, and a longer period makes it cheaper).

The causes, the cost type and the two ways of finding costs (recorded events, periodic slow steps)
are `gpuadvisor.stepmodel.stepcosts`'s; this module prices them over the run and keeps the run's
timing (`RunTiming`: typical and mean step, loader stalls, start-up).

Pure: reads the manifest's capture section and environment.json, never the trace.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuadvisor.manifest import CaptureWindow
from gpuadvisor.stepmodel.stepcosts import (
    CAUSE_EVENTS,
    CAUSE_LABELS,
    CHECKPOINT,
    DATA_STALL_SHARE,
    EPOCH_RESTART,
    EPOCH_START,
    EVALUATION,
    GC,
    MIN_TIMED_STEPS,
    UNKNOWN,
    Occurrence,
    PeriodicCost,
    costs_from_events,
    costs_from_slow_steps,
    main_loader,
    median_or_zero,
    regular_period,
)
from gpuadvisor.steptimes import StallPattern, distribution, settled_start

# the causes and the cost type are `stepcosts`'s; named here for the rules and renderers that read them
__all__ = [
    "CAUSE_EVENTS",
    "CAUSE_LABELS",
    "CHECKPOINT",
    "EPOCH_RESTART",
    "EPOCH_START",
    "EVALUATION",
    "GC",
    "UNKNOWN",
    "LoaderStalls",
    "Occurrence",
    "PeriodicCost",
    "RunTiming",
    "StartUp",
    "run_step_after",
    "run_timing",
]

# the steps after the window are the typical step's sample when there are this many (before the
# window the run still warms up and CUPTI may stay attached after the speculative recording)
MIN_STEPS_AFTER = 3




@dataclass(frozen=True)
class LoaderStalls:
    """Steps that wait much longer than the typical step, every k-th step or irregularly (issue 38): a
    loader whose workers deliver in bursts of num_workers batches makes every num_workers-th step wait,
    which the median step never shows and the mean step the user pays does.

    `cause` "data": the waits are in DataLoader `__next__` (the capture timed each step's wait, or the
    window's slow steps waited there); the loop then runs at the loader's pace, `loader_interval_ms` per
    batch (the mean step less the costs between steps), and more workers shorten that interval.
    "unknown": slow steps whose cause the run did not record (kept in the mean, not attributed)."""

    pattern: StallPattern
    steps_timed: int  # the steps the pattern was read from
    per_step_ms: float  # the stalls' excess over the typical step, per step
    cause: str  # "data" | "unknown"
    data_wait_ms: float | None = None  # mean measured wait in DataLoader __next__ of a stalled step
    num_workers: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.pattern.to_dict(),
            "steps_timed": self.steps_timed,
            "per_step_ms": round(self.per_step_ms, 4),
            "cause": self.cause,
            "data_wait_ms": None if self.data_wait_ms is None else round(self.data_wait_ms, 3),
            "num_workers": self.num_workers,
        }


@dataclass(frozen=True)
class StartUp:
    """What the run paid once before its steps settled: reported in seconds, never in per-step shares."""

    seconds: float  # from the script's start to the first settled step
    settled_step: int | None  # the first step of the steady run (None: not found, the cap)
    parts: Mapping[str, float] = field(default_factory=dict)  # compile, evaluation, workers, first steps (s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "settled_step": self.settled_step,
            "parts": {k: round(v, 3) for k, v in self.parts.items()},
        }


@dataclass(frozen=True)
class RunTiming:
    """The observed run, step by step (see the module docstring)."""

    steps_observed: int  # steps spanned by the timed boundaries
    steps_timed: int  # steps timed without the profiler (the typical step's sample)
    typical_step_ms: float  # their median
    mean_step_ms: float  # typical_step_ms + every cost's per_step_ms
    costs: tuple[PeriodicCost, ...]
    events_recorded: bool  # the capture recorded step events (issue 27 and later)
    window: tuple[int, int] | None  # (first, last) recorded step
    window_notes: tuple[str, ...] = ()
    stalls: LoaderStalls | None = None  # steps that wait every k-th step (their excess is in the mean)
    startup: StartUp | None = None

    @property
    def median_step_ms(self) -> float:
        """The typical step: the median of the steps timed without the profiler."""
        return self.typical_step_ms

    @property
    def loader_interval_ms(self) -> float | None:
        """The loader's pace when it stalls the loop: the mean step less the costs between steps (the loop
        takes a batch every so often on average); None unless the stalls are the loader's."""
        if self.stalls is None or self.stalls.cause != "data":
            return None
        return self.typical_step_ms + self.stalls.per_step_ms

    def cost(self, cause: str) -> PeriodicCost | None:
        return next((c for c in self.costs if c.cause == cause), None)

    def without(self, cost: PeriodicCost) -> float:
        """The mean step once the removable part of `cost` is gone (ms)."""
        return self.mean_step_ms - cost.per_step_ms * cost.removable_fraction

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps_observed": self.steps_observed,
            "steps_timed": self.steps_timed,
            "typical_step_ms": round(self.typical_step_ms, 3),
            "mean_step_ms": round(self.mean_step_ms, 3),
            "events_recorded": self.events_recorded,
            "costs": [c.to_dict() for c in self.costs],
            "window_notes": list(self.window_notes),
            "stalls": self.stalls.to_dict() if self.stalls else None,
            "startup": self.startup.to_dict() if self.startup else None,
        }


def _profiler_steps(cap: CaptureWindow, steps: Iterable[int]) -> set[int]:
    """Those of `steps` that hold a profiler start, stop or export, or run under a speculative
    recording (a test of each timed step: no loop runs over the recorded step numbers' span)."""
    first, last, spec = cap.first_recorded_step, cap.last_recorded_step, cap.speculation_end_step
    edges = {0, cap.skip_steps}
    if first is not None:
        edges.add(first)
    if last is not None:
        edges.add(last + 1)
    return {
        k
        for k in steps
        if k in edges
        or (spec is not None and 0 <= k <= spec)
        or (first is not None and cap.skip_steps <= k < first)  # warm-up
    }


def _window_range(cap: CaptureWindow) -> tuple[int, int] | None:
    if cap.first_recorded_step is None or cap.last_recorded_step is None or cap.short_run:
        return None
    return cap.first_recorded_step, cap.last_recorded_step


def run_timing(
    capture: CaptureWindow | Mapping[str, Any],
    environment: Mapping[str, Any] | None = None,
    *,
    restart_removable: float | None = None,
    window_data_bound: bool | None = None,
    started_unix_s: float | None = None,
) -> RunTiming | None:
    """The observed run with its costs between steps; None when too few steps were timed.

    `restart_removable`: for a run recorded before the capture's epoch records, the share of an epoch
    restart's slow step that persistent workers remove, as the trace of a recorded restart step shows
    it (`StepModel.epoch_restart_share`); without it the whole excess counts (an upper bound).
    `window_data_bound`: for a run recorded before the capture timed each step's data wait, whether the
    profiled window's slow steps waited in DataLoader `__next__` (the trace says; None: unknown).
    `started_unix_s`: when the script started (the manifest), for the start-up seconds."""
    cap = capture if isinstance(capture, CaptureWindow) else CaptureWindow.from_json(capture)
    env = environment or {}
    ends = cap.step_end_times()
    if len(ends) < MIN_TIMED_STEPS + 1:
        return None
    order = sorted(ends)
    durations = {k: (ends[k + 1] - ends[k]) * 1e3 for k in order if k + 1 in ends and ends[k + 1] >= ends[k]}
    skip = _profiler_steps(cap, durations)
    window = _window_range(cap)
    profiled = {k for k in durations if window[0] <= k <= window[1]} if window else set()
    clean = {k: d for k, d in durations.items() if k not in skip and k not in profiled}
    inside = {k: d for k, d in durations.items() if k in profiled and k not in skip}
    if len(clean) < MIN_TIMED_STEPS:
        clean = {k: d for k, d in durations.items() if k not in skip}
        inside = {}
    if len(clean) < MIN_TIMED_STEPS:
        return None
    after = [d for k, d in clean.items() if window is not None and k > window[1]]
    typical = median_or_zero(after) if len(after) >= MIN_STEPS_AFTER else median_or_zero(list(clean.values()))
    startup = _startup(cap, ends, durations, started_unix_s)
    steps_observed = max(order) - min(order) + 1  # boundaries min..max span these steps, and step min-1
    events_recorded = cap.observe_steps is not None
    costs: list[PeriodicCost] = []
    stalls: LoaderStalls | None = None
    if events_recorded:
        costs = costs_from_events(cap, ends, env)
        # slow steps that no recorded event explains (logging every N steps, a schedule...): the
        # steps holding an event are left out, and the cause is then unknown whatever the loader
        explained = {s for c in costs for s in c.steps if s is not None}
        # steps that wait for the loader every k-th step are the loader's stalls, not a periodic cost
        stalls, typical = _loader_stalls(cap, clean, window, explained, env, typical, window_data_bound)
        if stalls is not None and stalls.cause == "data":
            explained |= set(stalls.pattern.steps)
        regimes = [
            {k: d for k, d in part.items() if k not in explained}
            for part in (
                {k: d for k, d in clean.items() if window is None or k < window[0]},
                inside,
                {k: d for k, d in clean.items() if window is not None and k > window[1]},
            )
        ]
        # a slow step that waited in DataLoader __next__ for most of its excess is the loader's stall,
        # wherever it falls: the stalls above are priced from the steps after the window, and the
        # window's own stalls are the same stalls, not a cost of unknown cause (timm's loader stalls
        # every 4th step: counted twice, its mean step read 207 ms against 114-163 ms measured)
        waits = {k: 1e3 * w for k, w in cap.step_data_wait}
        costs += [c for c in costs_from_slow_steps(regimes, {}, data_wait_ms=waits) if c.cause == UNKNOWN]
    else:
        before = {k: d for k, d in clean.items() if window is None or k < window[0]}
        later = {k: d for k, d in clean.items() if k not in before}
        costs = costs_from_slow_steps([before, inside, later], env, restart_removable)
    def per_step(c: PeriodicCost) -> float:
        if c.period_steps and c.count:
            return c.each_ms / c.period_steps
        return c.cost_ms / steps_observed

    if stalls is not None and stalls.cause != "data" and any(c.cause == UNKNOWN for c in costs):
        stalls = None  # the same slow steps, priced as a periodic cost of unknown cause
    mean = typical + sum(per_step(c) for c in costs) + (stalls.per_step_ms if stalls is not None else 0.0)
    priced = tuple(
        sorted(
            (
                PeriodicCost(
                    cause=c.cause,
                    occurrences=c.occurrences,
                    period_steps=c.period_steps,
                    period_source=c.period_source,
                    cost_ms=c.cost_ms,
                    share=per_step(c) / mean if mean > 0 else 0.0,
                    measured_by=c.measured_by,
                    detail=c.detail,
                    per_step_ms=per_step(c),
                    removable_fraction=c.removable_fraction,
                )
                for c in costs
            ),
            key=lambda c: -c.per_step_ms,
        )
    )
    notes: list[str] = []
    if window is not None:
        for c in priced:
            near = sorted({s for s in c.steps if s is not None and window[0] - 1 <= s <= window[1] + 1})
            if near:
                where = "in" if any(window[0] <= s <= window[1] for s in near) else "next to"
                notes.append(
                    f"the analyzed window (steps {window[0]}-{window[1]}) is {where} step"
                    f"{'s' if len(near) > 1 else ''} {', '.join(map(str, near))}, which carr"
                    f"{'y' if len(near) > 1 else 'ies'} {CAUSE_EVENTS.get(c.cause, c.label)}"
                )
    return RunTiming(
        steps_observed=steps_observed,
        steps_timed=len(clean),
        typical_step_ms=typical,
        mean_step_ms=mean,
        costs=priced,
        events_recorded=events_recorded,
        window=window,
        window_notes=tuple(notes),
        stalls=stalls,
        startup=startup,
    )


def run_step_after(
    timing: RunTiming,
    *,
    ratio: float = 1.0,
    batch_multiplier: float = 1.0,
    workers: tuple[int, int] | None = None,
    removed: Sequence[PeriodicCost] = (),
) -> float:
    """The run's mean step (ms, at the new batch size) once remedies are applied (issue 38): the typical
    step scaled by `ratio` (the replay's new step over its baseline, per step); the loop then runs at
    the slower of that and the loader's pace when the stalls are the loader's (`workers` = (now, new):
    N workers deliver N batches in the time one takes, so the pace scales by now/new; a batch
    `batch_multiplier` times larger takes that much longer to make), or keeps the stalls' excess when
    their cause is unknown; plus the costs between steps, less the removable part of `removed`."""
    typical = timing.typical_step_ms * ratio
    loop = typical
    st = timing.stalls
    if st is not None:
        pace = timing.loader_interval_ms
        if pace is not None:
            pace *= batch_multiplier
            if workers is not None and workers[0] > 0 and workers[1] > workers[0]:
                pace *= workers[0] / workers[1]
            loop = max(typical, pace)
        else:
            loop = typical + st.per_step_ms
    gone = {id(c) for c in removed}
    periodic = sum(c.per_step_ms * (1.0 - c.removable_fraction if id(c) in gone else 1.0) for c in timing.costs)
    return loop + periodic


def _loader_stalls(
    cap: CaptureWindow,
    clean: Mapping[int, float],
    window: tuple[int, int] | None,
    explained: set[int],
    env: Mapping[str, Any],
    typical: float,
    window_data_bound: bool | None,
) -> tuple[LoaderStalls | None, float]:
    """The stall pattern of the steps timed without the profiler after start-up (those after the window
    when there are enough, else all), the steps holding a recorded cost left out; and the typical step
    (their median). Their cause is the loader's when the capture's per-step data wait covers most of the
    stalls' excess, or, in runs recorded before that wait was timed, when the window's slow steps waited
    for data (`window_data_bound`)."""
    after = {k: d for k, d in clean.items() if window is not None and k > window[1]}
    pool = after if len(after) >= 2 * MIN_TIMED_STEPS else dict(clean)
    keys = [k for k in sorted(pool) if k not in explained]
    if len(keys) < 2 * MIN_TIMED_STEPS:
        return None, typical
    start = settled_start([pool[k] for k in keys]) or 0
    keys = keys[start:]
    dist = distribution([pool[k] for k in keys])
    if dist is None or dist.stalls is None:
        return None, typical
    # the pattern's step numbers are the run's
    pattern = StallPattern(
        steps=tuple(keys[i] for i in dist.stalls.steps),
        mean_excess_ms=dist.stalls.mean_excess_ms,
        period=regular_period([keys[i] for i in dist.stalls.steps], exact=True) or dist.stalls.period,
    )
    per_step = pattern.mean_excess_ms * pattern.count / len(keys)
    waits = dict(cap.step_data_wait)
    data_wait: float | None = None
    cause = "unknown"
    if waits:
        data_wait = statistics.fmean(1e3 * waits.get(k, 0.0) for k in pattern.steps)
        # a stalled step's wait beyond the typical step's own wait (a prefetching loader waits a little
        # every step)
        base_wait = median_or_zero([1e3 * waits.get(k, 0.0) for k in keys if k not in set(pattern.steps)])
        if data_wait - base_wait >= DATA_STALL_SHARE * pattern.mean_excess_ms:
            cause = "data"
    elif window_data_bound:
        cause = "data"
    loader = main_loader(env)
    nw = loader.get("num_workers") if loader is not None else None
    return (
        LoaderStalls(
            pattern=pattern,
            steps_timed=len(keys),
            per_step_ms=per_step,
            cause=cause,
            data_wait_ms=data_wait,
            num_workers=nw if isinstance(nw, int) else None,
        ),
        dist.median_ms,
    )


def _startup(
    cap: CaptureWindow,
    ends: Mapping[int, float],
    durations: Mapping[int, float],
    started_unix_s: float | None,
) -> StartUp | None:
    """Start-up: from the script's start to the first step of the steady run (the settled-step rule of
    gpuadvisor.steptimes over the steps timed before the window), with the parts the capture knows:
    torch.compile's compilation, evaluation passes before the first step, the first start of the
    DataLoader workers, and the first steps (until the step time settled)."""
    if not ends or started_unix_s is None:
        return None
    order = sorted(ends)
    first_window = cap.first_recorded_step
    before = [k for k in order if k + 1 in ends and (first_window is None or k < first_window)]
    if not before:
        before = [k for k in order if k + 1 in ends]
    first_step = min(order)
    # the steps before the window: settled where the step time stopped falling (profiler steps count
    # as steps here: a speculative recording is start-up of its own)
    seq = [durations[k] for k in before if k in durations]
    settled_idx = settled_start(seq) if seq else None
    settled = before[settled_idx] if settled_idx is not None and settled_idx < len(before) else None
    if cap.settled_at_step is not None and (settled is None or cap.settled_at_step < settled):
        settled = cap.settled_at_step if cap.settled_at_step in ends else settled
    boundary = ends.get(settled) if settled is not None else ends.get(first_step)
    if boundary is None:
        return None
    seconds = max(0.0, boundary - started_unix_s)
    parts: dict[str, float] = {}
    if cap.compile_seconds:
        parts["compile"] = min(cap.compile_seconds, seconds)
    first_end = ends.get(first_step)
    ev_before = [
        e
        for e in cap.step_events
        if e.kind == EVALUATION and first_end is not None and e.start_unix_s < first_end and e.start_unix_s < boundary
    ]
    if ev_before:
        parts["evaluation_before_training"] = sum(e.seconds for e in ev_before)
    workers = [
        e for e in cap.step_events if e.kind == "epoch_start" and e.detail.get("epoch") == 1 and e.start_unix_s < boundary
    ]
    if workers:
        parts["dataloader_workers"] = sum(e.seconds for e in workers)
    if settled is not None and first_end is not None and settled > first_step:
        parts["first_steps"] = max(0.0, ends[settled] - first_end)
    return StartUp(seconds=seconds, settled_step=settled, parts=parts)


