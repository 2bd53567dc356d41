"""Two numbers a finding compares never read the same (issue 30 item 7): GA101 said "the copies take
0.02 ms instead of 0.02 ms", and "At 2 GB/s instead of 2.0 GB/s" when the link is slow; a replayed step
read "0.50 -> 0.50 ms" when the gain was under 0.01 ms. The cause was each number rounded on its own
to a fixed number of places; `gpuadvisor.words.apart` gives both the digits that tell them apart.

The traces here are SYNTHETIC (tests/synth.py)."""

from __future__ import annotations

import re

import pytest

from gpuadvisor.rulekit import common as cm
from gpuadvisor.stepmodel import Prediction
from gpuadvisor.stepmodel.predict import group_sentence
from gpuadvisor.words import apart, change
from tests.rules.cases.ga1_transfers import BATCH, STEP, _trace
from tests.rules.harness import RuleHarness

_NUMBER = r"(\d[\d,]*(?:\.\d+)?)"
_UNIT = r"\s*(%|ms|s|GB/s|MiB|x)?"
# "A instead of B", "A -> B", "A → B", "from A to B", each number with an optional unit
_COMPARED = re.compile(
    rf"(?:{_NUMBER}{_UNIT}\s+(?:instead of|->|→)\s+{_NUMBER}{_UNIT})|(?:from {_NUMBER}{_UNIT} to {_NUMBER}{_UNIT})"
)


def same_number_comparisons(text: str) -> list[str]:
    """The places in `text` that compare a number with one that reads the same ("0.02 ms instead of
    0.02 ms", "2 GB/s instead of 2.0 GB/s", "0.50 -> 0.50 ms")."""
    found = []
    for m in _COMPARED.finditer(text):
        groups = m.groups()
        a, ua, b, ub = groups[:4] if groups[0] is not None else groups[4:]
        if ua and ub and ua != ub:
            continue  # different units: not the same quantity
        if float(a.replace(",", "")) == float(b.replace(",", "")):
            found.append(m.group(0))
    return found


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
        (3.0, 3.0, 2, ("3.000000", "3.000000")),  # equal numbers stay equal (up to `most` places)
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
    assert "0.500 -> 0.495 ms per step" in cm.prediction_sentence(pred, "pinned copies")
    assert "0.500 -> 0.495 ms per step" in group_sentence("GA101 and GA102", "copies", pred)


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
