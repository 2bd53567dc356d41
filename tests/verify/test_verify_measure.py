"""What a verify trial measures (gpuadvisor/verify/measure.py), on synthetic step times fed through a
fake clock: start-up left out by the settled-step rule, the mean over whole periods of a stall
pattern, a loader's start-up backlog not taken for its pace, a script that ends early."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from gpuadvisor.verify.measure import SteadyRegion, across_trials, measurement_text


class Loop:
    """Drives a SteadyRegion like a training loop: each step lasts its duration (ms) on a fake clock;
    a step that waited for its batch reports the wait first."""

    def __init__(self, warmup: int, steps: int, backlog: int = 0) -> None:
        self.now = 0.0
        self.region = SteadyRegion(warmup_steps=warmup, steps=steps, started=0.0, sync=lambda: None, clock=lambda: self.now)
        self.region.loader(backlog)
        self.count = 0
        self.events: list[str] = []

    def run(self, durations: Iterable[float], waits: Iterable[float] | None = None) -> str:
        wait_list = list(waits) if waits is not None else None
        what = "warmup"
        for i, ms in enumerate(durations):
            if wait_list is not None:
                self.region.waited(wait_list[i] / 1000.0)
            self.now += ms / 1000.0
            self.count += 1
            what = self.region.boundary(self.count)
            self.events.append(what)
            if what == "done":
                break
        return what


SLOW_START = [70.0] * 10
BURSTS = [46.0, 6.0, 6.0, 6.0] * 40  # every 4th step waits 40 ms: median 6 ms, mean 16 ms


def test_start_up_is_left_out_and_a_stall_pattern_is_measured_over_whole_periods() -> None:
    loop = Loop(warmup=2, steps=6)
    assert loop.run(SLOW_START + BURSTS) == "done"
    out = loop.region.result()
    # the 70 ms steps are start-up: the region opened once the step time settled
    assert out["settled"] is True and out["settled_at_step"] > 10
    assert out["startup_s"] == pytest.approx(0.001 * sum(SLOW_START) + 0.001 * sum(BURSTS[: out["settled_at_step"] - 10]), rel=0.01)
    # 6 steps would cut the pattern anywhere; a whole number of periods, at least 3, gives the mean
    assert out["steps_timed"] % 4 == 0 and out["steps_timed"] >= 12
    assert out["step_time_ms"] == pytest.approx(16.0, rel=0.01)
    assert out["median_step_ms"] == pytest.approx(6.0, rel=0.01)
    assert out["stall_pattern"] == "every 4th step waits 40.0 ms longer than the median step"
    assert "checkpoint" in loop.events  # the first 6 steps were kept in case the script ends early


def test_a_steady_loop_is_measured_on_its_steps_and_no_more() -> None:
    loop = Loop(warmup=3, steps=10)
    loop.run([20.0] * 40)
    out = loop.region.result()
    assert out["steps_timed"] == 10 and out["settled_at_step"] == 9  # 2 x 4 steps for the settle window
    assert out["step_time_ms"] == pytest.approx(20.0) and out["stall_pattern"] is None


def test_the_workers_start_up_backlog_is_not_taken_for_their_pace() -> None:
    # while the first steps are slow, 4 workers x prefetch 2 fill 8 batches ahead; the loop then takes
    # them at its own pace (6 ms, no wait) until they are gone, and waits for each burst after that
    drain = [6.0] * 13
    durations = SLOW_START + drain + BURSTS
    waits = [0.0] * (10 + 13) + [40.0 if i % 4 == 0 else 0.0 for i in range(len(BURSTS))]
    blind = Loop(warmup=2, steps=6)  # the loader's backlog unknown: the region opens during the drain
    blind.run(durations, waits)
    assert blind.region.result()["step_time_ms"] < 13.0
    loop = Loop(warmup=2, steps=6, backlog=8)
    loop.run(durations, waits)
    out = loop.region.result()
    assert out["settled_at_step"] > 10 + 13
    assert out["step_time_ms"] == pytest.approx(16.0, rel=0.01)
    # a loop that never waits is not bound by its loader: the region opens after the backlog's bound
    busy = Loop(warmup=2, steps=6, backlog=8)
    busy.run([20.0] * 60, [0.0] * 60)
    assert busy.region.result()["settled_at_step"] <= 9 + 2 * 8


def test_a_script_that_ends_early_says_so() -> None:
    loop = Loop(warmup=2, steps=6)
    loop.run(SLOW_START + BURSTS[:14])  # settles, times its first 6 steps, then the script ends
    assert not loop.region.done and loop.region.ended()
    out = loop.region.result()
    assert out["steps_timed"] == 6 and "the script ended after" in str(out["measure_note"])
    assert "the first 6 settled steps were measured" in str(out["measure_note"])
    short = Loop(warmup=2, steps=6)
    short.run(SLOW_START[:5])
    assert not short.region.ended()
    assert "before its step time settled" in short.region.why_not("optimizer_step_hook", 2, 6)
    early = Loop(warmup=2, steps=6)
    early.run([20.0] * 11)
    assert not early.region.ended()
    assert "settled at step 9, so 2 settled steps were timed of the 6 needed" in early.region.why_not("dataloader", 2, 6)


def test_the_progress_line_and_the_entry_say_mean_median_and_start_up() -> None:
    loop = Loop(warmup=2, steps=6)
    loop.run(SLOW_START + BURSTS)
    result: dict[str, Any] = {"status": "ok", **loop.region.result()}
    text = measurement_text(result)
    assert text.startswith(f"16.0 ms/step (mean of {result['steps_timed']} settled steps; median 6.0; start-up ")
    assert "every 4th step waits 40.0 ms" in text
    summary = across_trials([result, {**result, "startup_s": 1.0, "median_step_ms": 5.0}])
    assert summary["median_step_ms"] == pytest.approx(5.5) and len(summary["per_trial"]) == 2
    assert summary["stall_pattern"] == result["stall_pattern"]


def test_a_hiccup_does_not_reopen_the_region_and_a_plateau_does() -> None:
    hiccup = Loop(warmup=2, steps=10)
    hiccup.run([20.0] * 9 + [30.0] + [20.0] * 40)  # one slow step where the region opens
    assert "restart" not in hiccup.events
    plateau = Loop(warmup=2, steps=6)
    plateau.run(SLOW_START + BURSTS)
    assert "restart" in plateau.events and plateau.region.result()["settled_at_step"] > 10


def test_a_script_that_ends_after_the_region_opened_again_keeps_what_was_measured() -> None:
    loop = Loop(warmup=2, steps=6)
    loop.run(SLOW_START + BURSTS[:8])  # opened on the plateau, again after it, then the script ended
    assert "restart" in loop.events and loop.region.ended()
    out = loop.region.result()
    assert out["steps_timed"] == 6 and "before the region that opened again at step" in str(out["measure_note"])


def test_a_script_that_ends_while_the_backlog_rule_holds_the_region_is_measured_from_the_settled_step() -> None:
    """timm's one epoch of 78 batches, with 12 workers x prefetch 4 (48 batches ahead: the rule waits up
    to 96 steps for a first wait) and a loop that kept up: the trial failed "before its step time
    settled". The held steps are timed in case the script ends first (synthetic step times)."""
    loop = Loop(warmup=2, steps=6, backlog=8)
    loop.run([20.0] * 22, [0.0] * 22)  # settles at step 9; the rule would hold it until step 25
    assert "start" not in loop.events
    assert loop.region.ended()
    out = loop.region.result()
    assert out["steps_timed"] == 12 and out["step_time_ms"] == pytest.approx(20.0)
    assert out["settled"] is True and out["settled_at_step"] == 9
    assert "before the 8 batches its DataLoader workers hold ahead" in str(out["measure_note"])
    # where the region does open, what the hold timed is dropped
    opened = Loop(warmup=2, steps=6, backlog=8)
    opened.run([20.0] * 60, [0.0] * 60)
    assert opened.region.done and opened.region.result()["measure_note"] is None
