"""Data-driven SYNTHETIC cases of the rules GA0xx-GA3xx (tests/rules/cases/ga0*..ga3*.py)."""

from __future__ import annotations

import pytest

from tests.rules.harness import RuleCase, RuleHarness, collect_cases

CASES = [c for pattern in ("ga0*", "ga1*", "ga2*", "ga3*") for c in collect_cases(pattern)]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rule_case(case: RuleCase, rule_harness: RuleHarness) -> None:
    rule_harness.check(case)


def test_a_background_save_is_priced_the_same_by_the_finding_and_the_replay(rule_harness: RuleHarness) -> None:
    """GA304's impact for a checkpoint and `predict(async_checkpoint)` (calibration, combined remedies)
    are one price: the copy to pinned memory (and a long write's wait) kept on the loop."""
    from gpuadvisor.remedies import RemedyId
    from gpuadvisor.stepmodel import build_step_model
    from gpuadvisor.stepmodel.predict import predict
    from tests.rules.cases.ga3_periodic import FLAT, _capture, _saves
    from tests.synth import training_loop

    manifest = _capture(FLAT, _saves(0.5, 200_000_000))
    finding = rule_harness.run("GA304", training_loop(6), manifest=manifest).first
    trace, run = rule_harness.load(training_loop(6), manifest=manifest)
    model = build_step_model(trace, run)
    replayed = predict(model, RemedyId.ASYNC_CHECKPOINT)
    assert finding.impact == pytest.approx(replayed.recovered_fraction)
    removal = model.predict_without(model.run_timing.costs[0], "async_checkpoint")  # type: ignore[union-attr]
    assert replayed.recovered_fraction < removal.recovered_fraction - 0.3
