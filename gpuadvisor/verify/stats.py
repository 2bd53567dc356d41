"""The comparison of remedy trials with baseline trials: speed-up, noise band and verdict.

Pure functions over per-trial measurements (one number per trial process: its steady-state step time,
or its samples/s). No torch, no I/O.

Speed-up
    median(baseline) / median(remedy) for step times (lower is better), median(remedy) /
    median(baseline) for samples/s (higher is better).
Noise band (`low`..`high`)
    the range of every baseline/remedy ratio: for step times `min(baseline) / max(remedy)` ..
    `max(baseline) / min(remedy)`. `low` is the worst case for the remedy: `low > 1` means every remedy
    trial beat every baseline trial.
Verdict
    `faster` when low > 1 and the speed-up is at least 2% (`MIN_EFFECT`), `slower` when high < 1 and
    the slow-down is at least 2%, `negligible` when the trials separate but by less than 2% (run-to-run
    differences between machines, clocks and thermals are larger than that), `within_noise` when the
    band contains 1; `inconclusive` with fewer than 2 trials on either side. Under no effect (trials exchangeable) a complete separation in one
    given direction happens by chance with probability 1 / C(n_b + n_r, n_r): 5% for 3 + 3 trials, 1.4%
    for 4 + 4, 0.4% for 5 + 5 (a one-sided Mann-Whitney test at its most extreme value).
Samples along the batch axis (`batch_samples`)
    a trial counts the first dimension of the first tensor of each batch (its DataLoader's, else the
    model's input) and records that tensor's shape. A lever that raises the batch is compared in
    samples/s along the axis that grew: axis 0, unless axis 0 kept its size and exactly one other axis
    grew (a sequence-first RNN's input is (seq, batch, ...): counting axis 0 would count time steps).
    Shapes equal on both sides mean the lever left the batch as it was: nothing to compare.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["BatchSamples", "Comparison", "Verdict", "batch_samples", "chance_of_separation", "compare", "measured", "other_factor"]

MIN_TRIALS_FOR_VERDICT = 2
MIN_EFFECT = 1.02  # a separated change smaller than 2% is reported as negligible


class Verdict(str, enum.Enum):
    FASTER = "faster"
    SLOWER = "slower"
    WITHIN_NOISE = "within_noise"
    NEGLIGIBLE = "negligible"
    INCONCLUSIVE = "inconclusive"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Comparison:
    speedup: float
    low: float
    high: float
    verdict: Verdict
    baseline_trials: int
    remedy_trials: int

    @property
    def chance(self) -> float:
        """Probability of this complete a separation by chance (see the module docstring)."""
        return chance_of_separation(self.baseline_trials, self.remedy_trials)


def chance_of_separation(n_baseline: int, n_remedy: int) -> float:
    """1 / C(n_b + n_r, n_r): the chance that all remedy trials beat all baseline trials under no effect."""
    return 1.0 / math.comb(n_baseline + n_remedy, n_remedy)


def compare(baseline: Sequence[float], remedy: Sequence[float], *, higher_is_better: bool) -> Comparison:
    """Compare per-trial measurements (all > 0). Raises ValueError on empty or non-positive input."""
    if not baseline or not remedy:
        raise ValueError("compare needs at least one baseline and one remedy measurement")
    if any(not (v > 0 and math.isfinite(v)) for v in (*baseline, *remedy)):
        raise ValueError("measurements must be finite and > 0")
    if higher_is_better:
        speedup = statistics.median(remedy) / statistics.median(baseline)
        low, high = min(remedy) / max(baseline), max(remedy) / min(baseline)
    else:
        speedup = statistics.median(baseline) / statistics.median(remedy)
        low, high = min(baseline) / max(remedy), max(baseline) / min(remedy)
    if min(len(baseline), len(remedy)) < MIN_TRIALS_FOR_VERDICT:
        verdict = Verdict.INCONCLUSIVE
    elif low > 1.0:
        verdict = Verdict.FASTER if speedup >= MIN_EFFECT else Verdict.NEGLIGIBLE
    elif high < 1.0:
        verdict = Verdict.SLOWER if speedup <= 1.0 / MIN_EFFECT else Verdict.NEGLIGIBLE
    else:
        verdict = Verdict.WITHIN_NOISE
    return Comparison(speedup, low, high, verdict, len(baseline), len(remedy))


def measured(results: Iterable[Mapping[str, Any]], key: str) -> list[float]:
    """The trials' positive numeric values of `key` (a trial without it is left out)."""
    out: list[float] = []
    for r in results:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            out.append(float(v))
    return out


@dataclass(frozen=True)
class BatchSamples:
    """Samples/s of baseline and remedy trials, counted along the batch's axis (module docstring)."""

    baseline: list[float]
    remedy: list[float]
    axis: int  # the axis of the counted tensor that holds the batch
    unchanged: tuple[int, ...] | None = None  # the shape both sides share where the lever left it as it was
    sizes: tuple[int, int] | None = None  # the batch axis's size in the baseline and the remedy trials

    @property
    def factor(self) -> float | None:
        """How many times larger the remedy's batch was, as its input's shape says."""
        return self.sizes[1] / self.sizes[0] if self.sizes else None

    def other_factor(self, multiplier: int) -> bool:
        """The input's shape shows the batch grew by another factor than `multiplier` (a --batch-size
        multiplied from a count that was not the batch)."""
        return other_factor(self.sizes, multiplier)

    @property
    def note(self) -> str | None:
        if self.unchanged is not None:
            return (
                f"the input counted as the batch has the shape {list(self.unchanged)} in every trial: "
                "the lever did not change it (no samples/s to compare)"
            )
        if self.axis:
            return f"samples counted along axis {self.axis} of the input, the one the larger batch grew (axis 0 kept its size)"
        return None


def other_factor(sizes: Sequence[int] | None, multiplier: int) -> bool:
    """`sizes` (the batch axis's size at the baseline and the lever) are not `multiplier` apart (1%)."""
    if not sizes or len(sizes) != 2 or not sizes[0]:
        return False
    return abs(sizes[1] / sizes[0] - multiplier) > 0.01 * multiplier


def _shapes(results: Iterable[Mapping[str, Any]]) -> set[tuple[int, ...]]:
    out = set()
    for r in results:
        shape = r.get("samples_shape")
        if isinstance(shape, (list, tuple)) and shape and all(isinstance(n, int) and n > 0 for n in shape):
            out.add(tuple(shape))
    return out


def batch_samples(baseline: Sequence[Mapping[str, Any]], remedy: Sequence[Mapping[str, Any]]) -> BatchSamples:
    """The samples/s of each side for a lever that raises the batch (module docstring). Trials
    without a recorded shape (older records) are counted along axis 0, as they were measured."""
    base, mine = _shapes(baseline), _shapes(remedy)
    axis, unchanged, sizes = 0, None, None
    if len(base) == 1 and len(mine) == 1:
        b, m = next(iter(base)), next(iter(mine))
        if b == m:
            unchanged = b
        elif len(b) == len(m) and b[0] == m[0]:
            grown = [i for i, (x, y) in enumerate(zip(b, m, strict=True)) if y > x]
            if len(grown) == 1:
                axis = grown[0]
        if unchanged is None and len(b) == len(m):
            sizes = (b[axis], m[axis])

    def along(results: Sequence[Mapping[str, Any]]) -> list[float]:
        out = []
        for r in results:
            v = measured([r], "samples_per_s")
            shape = r.get("samples_shape")
            if not v:
                continue
            if not axis:
                out.append(v[0])
            elif isinstance(shape, (list, tuple)) and len(shape) > axis and shape[0]:
                out.append(v[0] * shape[axis] / shape[0])  # per batch: shape[axis] samples, not shape[0]
        return out

    return BatchSamples(along(baseline), along(remedy), axis, unchanged, sizes)
