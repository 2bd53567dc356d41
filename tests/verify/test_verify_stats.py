"""The comparison of trials: speed-up, noise band, verdict (pure numbers, no processes)."""

from __future__ import annotations

import pytest

from gpuadvisor.verify.stats import Verdict, chance_of_separation, compare


def test_step_times_separated_is_faster() -> None:
    c = compare([30.0, 31.0, 32.0], [10.0, 10.5, 11.0], higher_is_better=False)
    assert c.speedup == pytest.approx(31.0 / 10.5)
    assert (c.low, c.high) == (pytest.approx(30.0 / 11.0), pytest.approx(32.0 / 10.0))
    assert c.verdict is Verdict.FASTER
    assert c.chance == pytest.approx(0.05)


def test_overlapping_trials_are_within_noise() -> None:
    c = compare([10.0, 10.4, 9.8], [10.1, 9.9, 10.3], higher_is_better=False)
    assert c.low < 1.0 < c.high
    assert c.verdict is Verdict.WITHIN_NOISE


def test_separated_but_tiny_change_is_negligible() -> None:
    c = compare([10.0, 10.01, 10.02], [9.95, 9.96, 9.97], higher_is_better=False)
    assert c.low > 1.0 and c.speedup < 1.02
    assert c.verdict is Verdict.NEGLIGIBLE


def test_slower_and_samples_per_s() -> None:
    assert compare([10.0, 10.1], [13.0, 13.2], higher_is_better=False).verdict is Verdict.SLOWER
    c = compare([100.0, 110.0], [400.0, 420.0], higher_is_better=True)
    assert c.speedup == pytest.approx(410.0 / 105.0)
    assert c.low == pytest.approx(400.0 / 110.0)
    assert c.verdict is Verdict.FASTER


def test_one_trial_is_inconclusive_and_bad_input_raises() -> None:
    assert compare([10.0], [5.0], higher_is_better=False).verdict is Verdict.INCONCLUSIVE
    with pytest.raises(ValueError):
        compare([], [1.0], higher_is_better=False)
    with pytest.raises(ValueError):
        compare([1.0, 0.0], [1.0], higher_is_better=False)
    assert chance_of_separation(4, 4) == pytest.approx(1 / 70)
