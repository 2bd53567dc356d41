"""Step times of a run: when the step time has settled, and the distribution the user pays for.

Pure functions over host-measured step durations (milliseconds, in step order), shared by the
capture (where the profiler window may open), verify's trials (which steps a trial measures) and the
analysis (the run's mean step, its median and its stall pattern). No numpy, no torch: the capture
calls it inside the user's process.

The settled-step rule (docs/capture.md, "Start-up and the settled step"):

- Start-up is the prefix of the run whose steps are still falling towards the steady level:
  compilation, cuDNN autotuning, the first batches of DataLoader workers, allocator growth.
- Offline (`settled_start`): the steady level is the median of the second half of the steps; the
  run has settled at the first step k whose rolling median over the next `window` steps is within
  `tolerance` of that level and whose own time is not beyond the second half's 90th percentile by
  more than `tolerance` (a first step that compiled for 30 s is start-up even when the rolling median
  after it is already steady).
- Online (`SettleWatch`, the capture): at each boundary, settled once at least `2 x window` steps were
  timed and the median of the last `window` steps is not below the median of the `window` before them
  by more than `tolerance` and `MIN_FALL_MS` (the step time stopped falling). Medians, not means: a loader whose workers
  deliver in bursts makes every k-th step wait; the median of a few steps is the same in each window,
  the mean is not.

Stalls (`distribution`): a step is a stall when it exceeds the median step by half of it and by 4
median absolute deviations; the pattern is their period (the most common spacing, when it explains
most of them) and their mean excess over the median.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SETTLE_TOLERANCE",
    "SETTLE_WINDOW",
    "SettleWatch",
    "StallPattern",
    "StepDistribution",
    "distribution",
    "settled_start",
]

SETTLE_WINDOW = 4
SETTLE_TOLERANCE = 0.25
# a stall: above the median by this share of it, and by this many median absolute deviations
STALL_RATIO = 0.5
STALL_MADS = 4.0
STALL_MIN_MS = 0.5
MIN_STEPS = 4
# the online rule: a fall smaller than this is noise, not a warm-up (compilation, autotuning and worker
# start-up cost far more)
MIN_FALL_MS = 5.0


def _finite(durations: Sequence[float]) -> list[float]:
    return [float(d) for d in durations if isinstance(d, (int, float)) and math.isfinite(d) and d >= 0]


def _quantile(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return 0.0
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def settled_start(
    durations: Sequence[float], *, window: int = SETTLE_WINDOW, tolerance: float = SETTLE_TOLERANCE
) -> int | None:
    """The index of the first steady step of `durations` (see the module docstring); None when fewer
    than `MIN_STEPS` steps were timed or no step qualifies (the run never settled)."""
    d = _finite(durations)
    n = len(d)
    if n != len(durations) or n < MIN_STEPS:
        return None
    w = max(1, min(window, n // 3))
    tail = d[n // 2 :]
    level = statistics.median(tail)
    ceiling = _quantile(tail, 0.9) * (1 + tolerance)
    for k in range(n - w + 1):
        if d[k] <= ceiling and statistics.median(d[k : k + w]) <= level * (1 + tolerance):
            return k
    return None


class SettleWatch:
    """The online settled-step rule for the capture: `add(ms)` at each step boundary returns True
    once the step time has settled (and stays True)."""

    def __init__(
        self, *, window: int = SETTLE_WINDOW, tolerance: float = SETTLE_TOLERANCE, min_fall_ms: float = MIN_FALL_MS
    ) -> None:
        self.window = max(1, window)
        self.tolerance = tolerance
        self.min_fall_ms = min_fall_ms
        self._recent: list[float] = []
        self.settled = False

    def add(self, ms: float) -> bool:
        if self.settled:
            return True
        if not math.isfinite(ms) or ms < 0:
            return False
        self._recent.append(float(ms))
        w = self.window
        if len(self._recent) > 2 * w:
            del self._recent[0]
        if len(self._recent) == 2 * w:
            before = statistics.median(self._recent[:w])
            last = statistics.median(self._recent[w:])
            self.settled = self._steady(before, last)
        return self.settled

    def _steady(self, before: float, last: float) -> bool:
        """Not falling: by at most the tolerance, or by less than `min_fall_ms` (timing noise of short
        steps on a loaded machine is not a warm-up)."""
        return last >= before * (1 - self.tolerance) or before - last < self.min_fall_ms

    def settled_so_far(self) -> bool:
        """Settled, or too few steps timed to see two windows yet and none falling: fewer than two
        steps, or the later half's median not below the earlier half's by more than the tolerance
        (the capture may not wait for `2 x window` steps when --skip-steps is small)."""
        if self.settled:
            return True
        n = len(self._recent)
        if n < 2:
            return True
        half = n // 2
        before = statistics.median(self._recent[:half])
        last = statistics.median(self._recent[half:])
        return self._steady(before, last)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True)
class StallPattern:
    """The steps that wait much longer than the median step."""

    steps: tuple[int, ...]  # indices (in the distribution's numbering) of the stalled steps
    mean_excess_ms: float  # their mean time over the median step
    period: int | None  # the spacing that explains most of them (None: irregular)

    @property
    def count(self) -> int:
        return len(self.steps)

    def describe(self, total_steps: int) -> str:
        if self.period:
            which = "every other step" if self.period == 2 else f"every {_ordinal(self.period)} step"
            verb = "waits"
        else:
            which, verb = f"{self.count} of {total_steps} steps", "waits" if self.count == 1 else "wait"
        return f"{which} {verb} {self.mean_excess_ms:.1f} ms longer than the median step"

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": list(self.steps),
            "count": self.count,
            "mean_excess_ms": round(self.mean_excess_ms, 3),
            "period": self.period,
        }


@dataclass(frozen=True)
class StepDistribution:
    """The steps a run paid for (start-up excluded by the caller): mean, median, spread and stalls."""

    count: int
    mean_ms: float
    median_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float
    first_step: int = 0  # the numbering of `stalls.steps`
    stalls: StallPattern | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def stall_share(self) -> float:
        """The share of the mean step that the stalls add over the median step."""
        if not self.stalls or self.mean_ms <= 0:
            return 0.0
        return self.stalls.mean_excess_ms * self.stalls.count / self.count / self.mean_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean_ms": round(self.mean_ms, 3),
            "median_ms": round(self.median_ms, 3),
            "p90_ms": round(self.p90_ms, 3),
            "min_ms": round(self.min_ms, 3),
            "max_ms": round(self.max_ms, 3),
            "first_step": self.first_step,
            "stalls": self.stalls.to_dict() if self.stalls else None,
        }


def _period(steps: Sequence[int]) -> int | None:
    """The most common spacing of `steps` when it explains at least two thirds of the gaps (a gap
    that is a multiple of it counts: an occurrence hidden by noise)."""
    if len(steps) < 3:
        return None
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    common, _ = Counter(gaps).most_common(1)[0]
    if common < 2:
        return None
    fits = sum(1 for g in gaps if g % common == 0)
    return common if fits * 3 >= 2 * len(gaps) else None


def distribution(durations: Sequence[float], *, first_step: int = 0) -> StepDistribution | None:
    """The distribution of `durations` (ms; step `first_step` first); None for fewer than `MIN_STEPS`."""
    d = _finite(durations)
    if len(d) != len(durations) or len(d) < MIN_STEPS:
        return None
    med = statistics.median(d)
    mad = statistics.median([abs(x - med) for x in d])
    stalled = [
        i
        for i, x in enumerate(d)
        if x - med > STALL_RATIO * med and x - med > STALL_MADS * mad and x - med > STALL_MIN_MS
    ]
    stalls = None
    if stalled:
        stalls = StallPattern(
            steps=tuple(first_step + i for i in stalled),
            mean_excess_ms=statistics.fmean(d[i] - med for i in stalled),
            period=_period(stalled),
        )
    return StepDistribution(
        count=len(d),
        mean_ms=statistics.fmean(d),
        median_ms=med,
        p90_ms=_quantile(d, 0.9),
        min_ms=min(d),
        max_ms=max(d),
        first_step=first_step,
        stalls=stalls,
    )
