"""The settled-step rule and the step distribution (gpuadvisor.steptimes), on step times built here."""

from __future__ import annotations

import pytest

from gpuadvisor.steptimes import SettleWatch, distribution, settled_start


def bursty(n: int, *, period: int = 4, fast: float = 70.0, slow: float = 270.0) -> list[float]:
    """A loader whose workers deliver in bursts of `period` batches: every period-th step waits."""
    return [slow if i % period == period - 1 else fast for i in range(n)]


def test_a_compiling_first_step_is_start_up_even_when_the_rest_is_steady() -> None:
    d = [30_000.0, *[70.0] * 40]
    assert settled_start(d) == 1


def test_a_bursty_loader_is_settled_from_its_first_burst() -> None:
    d = [5_000.0, 900.0, *bursty(60)]
    assert settled_start(d) == 2


def test_a_gradual_warm_up_ends_where_the_steps_reach_the_steady_level() -> None:
    d = [400.0, 300.0, 200.0, 150.0, 120.0, *[100.0] * 30]
    assert settled_start(d) == 4  # 120 is within 25% of 100; 150 is not


def test_too_few_or_non_finite_steps_have_no_settled_step() -> None:
    assert settled_start([1.0, 2.0]) is None
    assert settled_start([1.0, float("nan"), 1.0, 1.0, 1.0]) is None


def test_the_online_watch_waits_while_the_step_time_falls_and_accepts_bursts() -> None:
    w = SettleWatch(window=4)
    falling = [1000.0, 800.0, 600.0, 400.0, 300.0, 200.0, 150.0, 100.0]
    assert not any(w.add(x) for x in falling)
    at_level = [w.add(x) for x in [100.0] * 6]
    assert at_level.index(True) == 4  # the earlier window (200, 150, 100, 100) has a median within 25%
    b = SettleWatch(window=4)
    results = [b.add(x) for x in bursty(12)]
    assert results[7] and not results[6]  # settled as soon as two windows were timed


def test_the_distribution_of_a_bursty_loader_has_the_mean_the_user_pays_and_its_pattern() -> None:
    dist = distribution(bursty(40), first_step=10)
    assert dist is not None
    assert dist.median_ms == pytest.approx(70.0)
    assert dist.mean_ms == pytest.approx(120.0)
    assert dist.stalls is not None
    assert dist.stalls.period == 4
    assert dist.stalls.steps[:2] == (13, 17)
    assert dist.stalls.mean_excess_ms == pytest.approx(200.0)
    assert dist.stall_share == pytest.approx(50.0 / 120.0)
    assert "every 4th step" in dist.stalls.describe(dist.count)


def test_steady_steps_have_no_stalls() -> None:
    dist = distribution([10.0, 10.2, 9.9, 10.1, 10.0, 10.3])
    assert dist is not None and dist.stalls is None and dist.stall_share == 0.0


def test_a_stall_pattern_reads_as_english() -> None:
    from gpuadvisor.steptimes import StallPattern

    assert StallPattern((3, 6), 40.0, 3).describe(9) == "every 3rd step waits 40.0 ms longer than the median step"
    assert StallPattern((2, 4), 40.0, 2).describe(9).startswith("every other step waits")
    assert StallPattern((2, 5), 40.0, None).describe(9).startswith("2 of 9 steps wait ")
    assert StallPattern((2,), 40.0, None).describe(9).startswith("1 of 9 steps waits ")
    assert StallPattern((11, 22), 1.0, 11).describe(30).startswith("every 11th step")
