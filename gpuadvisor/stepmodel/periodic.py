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

Pure: reads the manifest's capture section and environment.json, never the trace.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuadvisor.manifest import CaptureWindow, StepEvent
from gpuadvisor.steptimes import StallPattern, distribution, settled_start

__all__ = [
    "EPOCH_RESTART",
    "LoaderStalls",
    "PeriodicCost",
    "RunTiming",
    "StartUp",
    "run_step_after",
    "run_timing",
]

EPOCH_RESTART = "epoch_restart"  # workers started and stopped every epoch (persistent_workers=False)
EPOCH_START = "epoch_start"  # a new epoch's first batch with persistent workers or none
EVALUATION = "evaluation"
CHECKPOINT = "checkpoint"
GC = "gc"
UNKNOWN = "unknown"  # periodic slow steps whose cause the run did not record

CAUSE_LABELS: Mapping[str, str] = {
    EPOCH_RESTART: "DataLoader workers restarted every epoch",
    EPOCH_START: "epoch start (first batch of each epoch)",
    EVALUATION: "evaluation",
    CHECKPOINT: "checkpoint saving (torch.save)",
    GC: "garbage collection",
    UNKNOWN: "periodic slow steps (cause not recorded)",
}

# what one occurrence is, in a sentence ("step 16 carries ...")
CAUSE_EVENTS: Mapping[str, str] = {
    EPOCH_RESTART: "a restart of the DataLoader workers (a new epoch)",
    EPOCH_START: "an epoch start",
    EVALUATION: "an evaluation pass",
    CHECKPOINT: "a checkpoint save",
    GC: "a full garbage collection",
    UNKNOWN: "one of the periodic slow steps",
}

# A step is slow when it exceeds the typical step by this share of it and by this many MADs.
SLOW_STEP_RATIO = 0.5
SLOW_STEP_MADS = 4.0
MIN_TIMED_STEPS = 4
MIN_PERIOD = 2
MIN_UNKNOWN_OCCURRENCES = 3
# the steps after the window are the typical step's sample when there are this many (before the
# window the run still warms up and CUPTI may stay attached after the speculative recording)
MIN_STEPS_AFTER = 3


@dataclass(frozen=True)
class Occurrence:
    """One occurrence of a cost: the step it fell in (None: before the first timed step) and its cost."""

    step: int | None
    cost_ms: float


@dataclass(frozen=True)
class PeriodicCost:
    """A cost met between steps, amortized over the observed run."""

    cause: str
    occurrences: tuple[Occurrence, ...]
    period_steps: int | None  # spacing of the occurrences in steps (None: seen once or irregular)
    period_source: str  # "observed", "batches_per_epoch" or "not_observed"
    cost_ms: float  # every occurrence in the observed run together
    share: float  # per_step_ms / the run's mean step: what removing it recovers
    measured_by: str  # "step_events" (recorded durations) or "slow_steps" (excess of slow steps)
    detail: Mapping[str, Any] = field(default_factory=dict)

    per_step_ms: float = 0.0  # amortized: each / period, or cost_ms / steps observed without a period
    # the part of the cost its remedy removes (epoch restarts: not the first batch, which persistent
    # workers make too)
    removable_fraction: float = 1.0

    @property
    def count(self) -> int:
        return len(self.occurrences)

    @property
    def each_ms(self) -> float:
        return self.cost_ms / self.count if self.count else 0.0

    @property
    def period_observed(self) -> bool:
        return self.period_source != "not_observed"

    @property
    def steps(self) -> list[int | None]:
        return [o.step for o in self.occurrences]

    @property
    def label(self) -> str:
        return CAUSE_LABELS.get(self.cause, self.cause)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "count": self.count,
            "steps": self.steps,
            "cost_ms": round(self.cost_ms, 3),
            "each_ms": round(self.each_ms, 3),
            "share": round(self.share, 4),
            "per_step_ms": round(self.per_step_ms, 4),
            "removable_fraction": round(self.removable_fraction, 4),
            "period_steps": self.period_steps,
            "period_source": self.period_source,
            "measured_by": self.measured_by,
            **({"detail": dict(self.detail)} if self.detail else {}),
        }


# a stall is the loader's when the host's measured wait in DataLoader __next__ covers this share of it
DATA_STALL_SHARE = 0.5


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


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


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


def _batches_per_epoch(loader: Mapping[str, Any]) -> int | None:
    n, bs = loader.get("dataset_len"), loader.get("batch_size")
    if not isinstance(n, int) or not isinstance(bs, int) or bs <= 0 or n <= 0:
        return None
    return n // bs if loader.get("drop_last") else math.ceil(n / bs)


def _main_loader(environment: Mapping[str, Any]) -> Mapping[str, Any] | None:
    loaders = [d for d in environment.get("dataloaders") or [] if isinstance(d, Mapping)]
    return max(loaders, key=lambda d: int(d.get("iterations") or 0)) if loaders else None


def _regular_period(steps: Sequence[int], *, exact: bool = False) -> int | None:
    """The spacing of `steps` when it is regular: every gap within one step of the median gap (or a
    multiple of it: an occurrence the observation missed), or, `exact`, every gap a multiple of the
    shortest one, seen at least twice."""
    if len(steps) < 2:
        return None
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    mid = round(statistics.median(gaps))
    # consecutive slow steps are a slow phase (warm-up, a stall), not a cost that comes every N steps
    if mid < MIN_PERIOD or min(gaps) < MIN_PERIOD:
        return None
    if exact:
        # every gap a multiple of the shortest (an occurrence in a step left out of the timing is
        # missed), and the shortest seen at least twice
        low = min(gaps)
        ok = all(g % low == 0 for g in gaps) and sum(g == low for g in gaps) >= MIN_UNKNOWN_OCCURRENCES - 1
        return low if ok else None
    if any(abs(g - mid) > 1 and g % mid for g in gaps):
        return None
    return mid


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
    typical = _median(after) if len(after) >= MIN_STEPS_AFTER else _median(list(clean.values()))
    startup = _startup(cap, ends, durations, started_unix_s)
    steps_observed = max(order) - min(order) + 1  # boundaries min..max span these steps, and step min-1
    events_recorded = cap.observe_steps is not None
    costs: list[PeriodicCost] = []
    stalls: LoaderStalls | None = None
    if events_recorded:
        costs = _costs_from_events(cap, ends, env)
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
        costs += [c for c in _costs_from_slow_steps(regimes, {}, data_wait_ms=waits) if c.cause == UNKNOWN]
    else:
        before = {k: d for k, d in clean.items() if window is None or k < window[0]}
        later = {k: d for k, d in clean.items() if k not in before}
        costs = _costs_from_slow_steps([before, inside, later], env, restart_removable)
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
        period=_regular_period([keys[i] for i in dist.stalls.steps], exact=True) or dist.stalls.period,
    )
    per_step = pattern.mean_excess_ms * pattern.count / len(keys)
    waits = dict(cap.step_data_wait)
    data_wait: float | None = None
    cause = "unknown"
    if waits:
        data_wait = statistics.fmean(1e3 * waits.get(k, 0.0) for k in pattern.steps)
        # a stalled step's wait beyond the typical step's own wait (a prefetching loader waits a little
        # every step)
        base_wait = _median([1e3 * waits.get(k, 0.0) for k in keys if k not in set(pattern.steps)])
        if data_wait - base_wait >= DATA_STALL_SHARE * pattern.mean_excess_ms:
            cause = "data"
    elif window_data_bound:
        cause = "data"
    loader = _main_loader(env)
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


def _step_at(ends: Mapping[int, float], t: float) -> int | None:
    """The step a wall-clock time falls in: step k runs from boundary k to boundary k+1."""
    before = [k for k, te in ends.items() if te <= t]
    return max(before) if before else None


def _costs_from_events(cap: CaptureWindow, ends: Mapping[int, float], env: Mapping[str, Any]) -> list[PeriodicCost]:
    last_end = max(ends.values())
    groups: dict[str, list[tuple[StepEvent, int | None]]] = {}
    for ev in cap.step_events:
        if ev.start_unix_s > last_end:
            continue  # after the last timed boundary: outside the observed run
        if ev.kind == CHECKPOINT and ev.detail.get("background"):
            continue  # saved from a background thread (an asynchronous checkpoint): the loop did not wait
        step = _step_at(ends, ev.start_unix_s)
        if step is None and ev.kind != EVALUATION:
            continue  # set-up before the training loop (imports, the first workers): not a periodic cost
        cause = ev.kind
        if ev.kind in ("epoch_start", "epoch_end"):
            restart = bool(ev.detail.get("num_workers")) and not ev.detail.get("persistent_workers")
            if (not restart and ev.kind == "epoch_end") or (ev.kind == "epoch_start" and ev.detail.get("epoch") == 1):
                continue  # the first start of a loader's workers is paid once, persistent or not
            cause = EPOCH_RESTART if restart else EPOCH_START
        groups.setdefault(cause, []).append((ev, step))
    out: list[PeriodicCost] = []
    loader = _main_loader(env)
    for cause, items in groups.items():
        if cause == EPOCH_RESTART:
            # one occurrence per epoch boundary: an epoch's end and the next one's start together
            by_epoch: dict[Any, list[tuple[StepEvent, int | None]]] = {}
            for ev, step in items:
                epoch = ev.detail.get("epoch")
                key = (ev.detail.get("dataloader"), int(epoch) + (1 if ev.kind == "epoch_end" else 0)) if isinstance(epoch, int) else id(ev)
                by_epoch.setdefault(key, []).append((ev, step))
            occ = [
                Occurrence(
                    step=next((s for e, s in evs if e.kind == "epoch_start"), evs[0][1]),
                    cost_ms=sum(e.seconds for e, _ in evs) * 1e3,
                )
                for evs in by_epoch.values()
            ]
            full = sum(e.seconds for e, _ in items)
            removable = sum(_restart_part(e) for e, _ in items) / full if full > 0 else 1.0
            ready = [e for e, _ in items if e.kind == "epoch_start" and _start_recorded(e)]
        else:
            occ = [Occurrence(step, ev.seconds * 1e3) for ev, step in items]
        occ.sort(key=lambda o: -1 if o.step is None else o.step)
        if cause != EPOCH_RESTART:
            removable = 1.0
        detail: dict[str, Any] = {}
        period, source = _regular_period([0 if o.step is None else o.step for o in occ]), "observed"
        if cause == EVALUATION:
            # An evaluation before the first step is start-up (issue 38: nanoGPT's at iteration 0 holds the
            # compilation of the evaluation graph, 8 s against 0.7 s later): it dates the period (step 0),
            # it is never priced as one of the run's evaluations. Seen only before training: no cost here.
            before = [o for o in occ if o.step is None]
            if before:
                detail["before_first_step_ms"] = round(sum(o.cost_ms for o in before), 3)
            occ = [o for o in occ if o.step is not None]
            if not occ:
                continue
        if cause == EPOCH_RESTART:
            # what a persistent worker would still pay: the first batch made after the worker is ready
            residual = [max(0.0, e.seconds - _restart_part(e)) for e in ready]
            detail["worker_start_measured"] = bool(ready)
            if residual:
                detail["first_batch_after_start_ms"] = round(1e3 * statistics.median(residual), 3)
        if cause in (EPOCH_RESTART, EPOCH_START) and loader is not None:
            bpe = _batches_per_epoch(loader)
            detail.update(
                num_workers=loader.get("num_workers"),
                persistent_workers=loader.get("persistent_workers"),
                batches_per_epoch=bpe,
                file=loader.get("file"),
                line=loader.get("line"),
                code=loader.get("code"),
            )
            if period is None and bpe:
                period, source = bpe, "batches_per_epoch"
        if cause == CHECKPOINT:
            sizes = [int(b) for ev, _ in items if isinstance(b := ev.detail.get("bytes"), int)]
            on_gpu = [int(b) for ev, _ in items if isinstance(b := ev.detail.get("device_bytes"), int)]
            first = items[0][0].detail
            detail.update(
                bytes_each=max(sizes) if sizes else None,
                device_bytes_each=max(on_gpu) if on_gpu else None,
                file=first.get("file"),
                line=first.get("line"),
                code=first.get("code"),
            )
        if cause == EVALUATION:
            detail["forward_calls_each"] = max(int(ev.detail.get("forward_calls") or 0) for ev, _ in items)
            detail["before_first_step"] = sum(1 for _, st in items if st is None)
        if period is None:
            source = "not_observed"
        out.append(
            PeriodicCost(
                cause=cause,
                occurrences=tuple(occ),
                period_steps=period,
                period_source=source,
                cost_ms=sum(o.cost_ms for o in occ),
                share=0.0,
                measured_by="step_events",
                detail=detail,
                removable_fraction=removable,
            )
        )
    return _saved_after_evaluation(out)


def _saved_after_evaluation(costs: list[PeriodicCost]) -> list[PeriodicCost]:
    """A checkpoint seen once, in the step of an evaluation whose period is known, comes with the
    evaluations: its period is theirs (period_source "with_evaluation"). Training scripts save after
    evaluating (nanoGPT: `always_save_checkpoint`, every `eval_interval`); an observation of 100 steps
    sees one save of a 50-step period, which alone says nothing of how often it comes."""
    evaluation = next((c for c in costs if c.cause == EVALUATION and c.period_steps), None)
    if evaluation is None:
        return costs
    at = {o.step for o in evaluation.occurrences if o.step is not None}
    out = []
    for c in costs:
        if c.cause == CHECKPOINT and c.period_steps is None and c.steps and all(s in at for s in c.steps):
            c = replace(c, period_steps=evaluation.period_steps, period_source="with_evaluation")
        out.append(c)
    return out


def _worker_ready(ev: StepEvent) -> float | None:
    ready = ev.detail.get("worker_ready_s")
    return float(ready) if isinstance(ready, (int, float)) and ready >= 0 else None


def _start_recorded(ev: StepEvent) -> bool:
    """The epoch start says how long starting the workers took (iterator creation or first worker ready)."""
    iter_s = ev.detail.get("iter_s")
    return _worker_ready(ev) is not None or (isinstance(iter_s, (int, float)) and iter_s >= 0)


def _restart_part(ev: StepEvent) -> float:
    """The part of an epoch start or end that persistent workers save (seconds): the shut-down, and
    the start-up: the iterator's creation (`iter_s`: the main process starts every worker there, one
    after the other; a persistent loader only resets its iterator) or, when longer, the time until the
    first new worker was ready. Without either record, all of the start, the first batch's making
    included: an upper bound. (Counting only the first worker's readiness, 20 ms of a 100 ms
    `__iter__` with 8 workers, predicted 22% where persistent workers measured 61% on an H200.)"""
    if ev.kind != "epoch_start":
        return ev.seconds
    ready = _worker_ready(ev)
    iter_s = ev.detail.get("iter_s")
    created = float(iter_s) if isinstance(iter_s, (int, float)) and iter_s >= 0 else None
    if ready is None and created is None:
        return ev.seconds
    return min(ev.seconds, max(ready or 0.0, created or 0.0))


def _costs_from_slow_steps(
    regimes: Sequence[Mapping[int, float]],
    env: Mapping[str, Any],
    restart_removable: float | None = None,
    *,
    data_wait_ms: Mapping[int, float] | None = None,
) -> list[PeriodicCost]:
    """Periodic slow steps, priced by their excess over the median of their own regime (before the
    window, inside it, after it: the profiler slows the window's steps, the run still warms up before
    it): the costs of runs recorded before issue 27, and the slow steps no recorded event explains.
    `data_wait_ms`: each step's time in DataLoader `__next__` (ms), where the capture timed it: a slow
    step that waited there for at least DATA_STALL_SHARE of its excess is the loader's, not a cost."""
    slow: dict[int, float] = {}
    waits = data_wait_ms or {}
    for steps in regimes:
        if len(steps) < MIN_TIMED_STEPS:
            continue
        med = _median(list(steps.values()))
        mad = _median([abs(d - med) for d in steps.values()])
        base_wait = _median([waits.get(k, 0.0) for k in steps]) if waits else 0.0
        for k, d in steps.items():
            excess = d - med
            if excess > SLOW_STEP_RATIO * med and excess > SLOW_STEP_MADS * mad and excess > 0.5:
                if waits and waits.get(k, 0.0) - base_wait >= DATA_STALL_SHARE * excess:
                    continue  # it waited for data: the loader's stall
                slow[k] = excess
    loader = _main_loader(env)
    bpe = _batches_per_epoch(loader) if loader is not None else None
    restart = loader is not None and bool(loader.get("num_workers")) and not loader.get("persistent_workers")
    if not slow or (len(slow) < 2 and not (restart and bpe)):
        return []
    ordered = sorted(slow)
    period: int | None = None
    source = "observed"
    cause = UNKNOWN
    if restart and bpe:
        # the slow steps at one phase of the epoch: epoch starts (with gradient accumulation over A
        # batches an epoch is bpe / A steps); slow steps off that phase are noise here
        best: list[int] = []
        for p in sorted({bpe, *(bpe // a for a in (2, 4, 8) if bpe % a == 0 and bpe // a >= MIN_PERIOD)}, reverse=True):
            for phase in sorted({k % p for k in ordered}):
                on = [k for k in ordered if k % p == phase]
                if len(on) > len(best):
                    best, period = on, p
            if len(best) >= 2:
                break  # the longest period that explains two slow steps (the epoch, before its divisors)
        if best and (len(best) >= 2 or len(ordered) == 1):
            cause = EPOCH_RESTART
            ordered = best
            if len(best) < 2:
                source = "batches_per_epoch"
    if cause == UNKNOWN:
        # no recorded cause: only an exact period seen at least MIN_UNKNOWN_OCCURRENCES times counts
        # (two slow steps, or uneven gaps, are what variable-length batches and noise look like)
        period = _regular_period(ordered, exact=True) if len(ordered) >= MIN_UNKNOWN_OCCURRENCES else None
        if period is None:
            return []
    detail: dict[str, Any] = {}
    if cause == EPOCH_RESTART and loader is not None:
        detail.update(
            num_workers=loader.get("num_workers"),
            persistent_workers=loader.get("persistent_workers"),
            batches_per_epoch=bpe,
            file=loader.get("file"),
            line=loader.get("line"),
            code=loader.get("code"),
        )
    removable = 1.0
    if cause == EPOCH_RESTART and restart_removable is not None and 0.0 < restart_removable <= 1.0:
        removable = restart_removable
        detail["removable_share"] = round(restart_removable, 4)
    occ = tuple(Occurrence(k, slow[k]) for k in ordered)
    return [
        PeriodicCost(
            cause=cause,
            occurrences=occ,
            period_steps=period,
            period_source=source,
            cost_ms=sum(o.cost_ms for o in occ),
            share=0.0,
            measured_by="slow_steps",
            detail=detail,
            removable_fraction=removable,
        )
    ]
