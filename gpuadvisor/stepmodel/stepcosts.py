"""Costs met between steps (issue 27), found in the capture's record of one run: what each cause is,
one `PeriodicCost` per cause, and the two ways they are found. `costs_from_events` prices what the
capture recorded between steps (DataLoader epoch starts and restarts, evaluation passes, `torch.save`
checkpoints, long garbage-collector passes: each event's own duration); `costs_from_slow_steps` finds
periodic slow steps in runs recorded without those events (their excess over the typical step). How
the costs are amortized over the run and what the run's mean step is: `gpuadvisor.stepmodel.periodic`,
which uses this module and names its causes for its callers.

Pure: reads the manifest's capture section and environment.json, never the trace.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuadvisor.manifest import CaptureWindow, StepEvent

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

# a stall is the loader's when the host's measured wait in DataLoader __next__ covers this share of it
DATA_STALL_SHARE = 0.5

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



def median_or_zero(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0



def _batches_per_epoch(loader: Mapping[str, Any]) -> int | None:
    n, bs = loader.get("dataset_len"), loader.get("batch_size")
    if not isinstance(n, int) or not isinstance(bs, int) or bs <= 0 or n <= 0:
        return None
    return n // bs if loader.get("drop_last") else math.ceil(n / bs)


def main_loader(environment: Mapping[str, Any]) -> Mapping[str, Any] | None:
    loaders = [d for d in environment.get("dataloaders") or [] if isinstance(d, Mapping)]
    return max(loaders, key=lambda d: int(d.get("iterations") or 0)) if loaders else None


def regular_period(steps: Sequence[int], *, exact: bool = False) -> int | None:
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



def _loader_detail(loader: Mapping[str, Any], batches_per_epoch: int | None) -> dict[str, Any]:
    """What a cost of the DataLoader's epochs says of the loader: its settings and where it is built."""
    return {
        "num_workers": loader.get("num_workers"),
        "persistent_workers": loader.get("persistent_workers"),
        "batches_per_epoch": batches_per_epoch,
        "file": loader.get("file"),
        "line": loader.get("line"),
        "code": loader.get("code"),
    }


def _step_at(ends: Mapping[int, float], t: float) -> int | None:
    """The step a wall-clock time falls in: step k runs from boundary k to boundary k+1."""
    before = [k for k, te in ends.items() if te <= t]
    return max(before) if before else None


def costs_from_events(cap: CaptureWindow, ends: Mapping[int, float], env: Mapping[str, Any]) -> list[PeriodicCost]:
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
    loader = main_loader(env)
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
        period, source = regular_period([0 if o.step is None else o.step for o in occ]), "observed"
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
            detail.update(_loader_detail(loader, bpe))
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


def costs_from_slow_steps(
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
        med = median_or_zero(list(steps.values()))
        mad = median_or_zero([abs(d - med) for d in steps.values()])
        base_wait = median_or_zero([waits.get(k, 0.0) for k in steps]) if waits else 0.0
        for k, d in steps.items():
            excess = d - med
            if excess > SLOW_STEP_RATIO * med and excess > SLOW_STEP_MADS * mad and excess > 0.5:
                if waits and waits.get(k, 0.0) - base_wait >= DATA_STALL_SHARE * excess:
                    continue  # it waited for data: the loader's stall
                slow[k] = excess
    loader = main_loader(env)
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
        period = regular_period(ordered, exact=True) if len(ordered) >= MIN_UNKNOWN_OCCURRENCES else None
        if period is None:
            return []
    detail: dict[str, Any] = {}
    if cause == EPOCH_RESTART and loader is not None:
        detail.update(_loader_detail(loader, bpe))
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
