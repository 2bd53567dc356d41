"""Two numbers a finding compares never read the same (issue 30 item 7): GA101 said "the copies take
0.02 ms instead of 0.02 ms", and "At 2 GB/s instead of 2.0 GB/s" when the link is slow; a replayed step
read "0.50 -> 0.50 ms" when the gain was under 0.01 ms. The cause was each number rounded on its own
to a fixed number of places; `gpuadvisor.words.apart` gives both the digits that tell them apart.

The traces here are SYNTHETIC (tests/synth.py)."""

from __future__ import annotations

import pytest

from gpuadvisor.rulekit import common as cm
from gpuadvisor.stepmodel import Prediction
from gpuadvisor.stepmodel.predict import group_sentence
from gpuadvisor.words import apart, change
from tests.compared import same_number_comparisons
from tests.rules.cases.ga1_transfers import BATCH, STEP, _trace
from tests.rules.harness import RuleHarness


def test_the_check_sees_the_sentences_of_the_issue() -> None:
    assert same_number_comparisons("the copies take 0.02 ms instead of 0.02 ms per step") == ["0.02 ms instead of 0.02 ms"]
    assert same_number_comparisons("At 2 GB/s instead of 2.0 GB/s the copies") == ["2 GB/s instead of 2.0 GB/s"]
    assert same_number_comparisons("Replaying: 0.50 -> 0.50 ms per step") == ["0.50 -> 0.50 ms"]
    assert same_number_comparisons("went from 12% to 12.0%") == ["from 12% to 12.0%"]
    assert not same_number_comparisons("0.016 ms instead of 0.021 ms; 2.2 GB/s instead of 2.0 GB/s; 9.74 -> 9.69 ms")
    assert not same_number_comparisons("1.20 s -> 1.20 ms")  # different units: different numbers


@pytest.mark.parametrize(
    ("a", "b", "decimals", "said"),
    [
        (0.021, 0.016, 2, ("0.021", "0.016")),  # "0.02" and "0.02" would say nothing
        (0.5, 0.4951, 2, ("0.500", "0.495")),
        (14.6, 4.5, 2, ("14.60", "4.50")),  # already apart: the places asked for
        (2.2, 2.0, 0, ("2.2", "2.0")),  # "2" and "2"
        (3.0, 3.0, 2, ("3.00", "3.00")),  # equal numbers stay equal, at the places asked for
        (4.0509, 4.05091, 2, ("4.05", "4.05")),  # equal to 2 more places: equal
    ],
)
def test_apart_adds_the_digits_that_tell_two_numbers_apart(
    a: float, b: float, decimals: int, said: tuple[str, str]
) -> None:
    assert apart(a, b, decimals) == said


def test_durations_and_step_changes_read_apart() -> None:
    assert cm.ms_pair(16.0, 21.0) == ("0.016 ms", "0.021 ms")
    assert cm.ms_pair(12_320.0, 12_340.0) == ("12.32 ms", "12.34 ms")  # the 1-place unit, one more place
    assert cm.ms_pair(1_500_000.0, 1_501_000.0) == ("1.500 s", "1.501 s")
    assert cm.ms_pair(850.0, 420.0) == ("0.85 ms", "0.42 ms")  # unchanged where they differ
    assert change(0.5, 0.4951, "ms") == "0.500 -> 0.495 ms"
    pred = Prediction("pinned_async_copies", 0.500, 0.4951, 1.0099, 0.0098)
    assert "0.500 -> 0.495 ms per replayed step" in cm.prediction_sentence(pred, "pinned copies")
    assert "0.500 -> 0.495 ms per replayed step" in group_sentence("GA101 and GA102", "copies", pred)


def test_a_prediction_of_no_change_says_so() -> None:
    """Real sample runs (tutorial_cnn-planted GA301, launch_bound-planted GA401) read "2.61 -> 2.61 ms per
    step (1.00x)" and "32.02 ms per step now, 32.02 ms per step at 8x the batch": the replay predicts the
    same step time, which is what the sentence must say."""
    assert change(2.614657, 2.614657, "ms") == "still 2.61 ms"
    same = Prediction("more_workers", 2.614657, 2.614657, 1.0, 0.0)
    assert cm.prediction_sentence(same, "8 loader workers") == (
        "Replaying the steps with 8 loader workers: still 2.61 ms per replayed step (1.00x)."
    )
    bigger = Prediction("larger_batch", 32.024679, 32.024679, 8.0, 0.875, batch_multiplier=8.0)
    assert cm.prediction_sentence(bigger, "8x the batch") == (
        "Replaying the steps with 8x the batch: still 32.02 ms per replayed step, so 8.00x the samples/s."
    )
    grown = Prediction("larger_batch", 2.5, 12.0, 1.67, 0.4, batch_multiplier=8.0)
    assert "2.50 ms per replayed step now, 12.00 ms per replayed step at 8x the batch" in cm.prediction_sentence(
        grown, "a batch"
    )


def test_ga101_on_a_slow_link_says_two_bandwidths(rule_harness: RuleHarness) -> None:
    """A link where pageable copies reach 2.0 GB/s and pinned ones 2.2 GB/s (a degraded PCIe link; the
    trace's own pinned copies measure it): the finding said "At 2 GB/s instead of 2.0 GB/s"."""
    pageable_us = BATCH / 2.0e3  # 12 MiB at 2.0 GB/s: 6.3 ms of the 10 ms step
    st = _trace("Pageable", pageable_us)
    pinned_bytes = 2 << 20
    for i in range(12):  # a 2 MiB pinned copy on a side stream beside the model's GEMM, at 2.2 GB/s
        st.add_copy("HtoD", "Pinned", pinned_bytes, ts=i * STEP + 7000, dur=pinned_bytes / 2.2e3, stream=9)
    outcome = rule_harness.run("GA101", st)
    assert outcome.findings, outcome.detail
    f = outcome.first
    assert f.evidence["pageable_gbps"] == pytest.approx(2.0, rel=0.01)
    assert f.evidence["pinned_gbps"] == pytest.approx(2.2, rel=0.01)
    for text in (f.title, f.message, f.recommendation, f.impact_explanation or ""):
        assert not same_number_comparisons(text), text
    assert "At 2.2 GB/s instead of 2.0 GB/s" in f.recommendation
