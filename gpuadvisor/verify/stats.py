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
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Comparison", "Verdict", "chance_of_separation", "compare"]

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
