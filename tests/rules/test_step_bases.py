"""Every step-relative number a finding says names its base (issue 42 item 2): a prediction is priced on
the run's mean step (issue 38), a measured share is of the profiled step, a kernel-time share of the
replayed step, a batch change's gain of the time per sample (README "Step bases"). The sentences here
are built from hand-made predictions (no trace); tests/test_sample_runs.py walks every sample run."""

from __future__ import annotations

from typing import Any

import pytest

from gpuadvisor.model import Category, Finding, Severity, impact_base, prediction_base, prediction_step
from gpuadvisor.render._format import combined_prediction_text
from gpuadvisor.rulekit import common as cm
from gpuadvisor.stepmodel import Prediction
from gpuadvisor.stepmodel.predict import group_sentence
from gpuadvisor.testing import step_numbers_without_base
from gpuadvisor.words import Base, of_base

# lightning_autoencoder-fixed's GA301 (issue 42): replayed on its typical step, carried to the 5.44 ms mean step
ON_MEAN = Prediction("dataloader_workers", 5.44, 0.648, 8.39, 0.88, median_step_ms=2.1, typical_speedup=3.0)
# a raw trace's prediction: nothing to carry it to
ON_REPLAY = Prediction("pinned_async_copies", 9.35, 1.77, 5.28, 0.81)
# two_tower's GA401: 8x the batch, the step stays
PER_SAMPLE = Prediction("larger_batch", 2.93, 2.93, 8.0, 0.875, batch_multiplier=8.0, median_step_ms=2.93)


def _finding(
    title: str, message: str = "m", recommendation: str = "r", prediction: dict[str, Any] | None = None
) -> Finding:
    return Finding(
        rule="GA999",
        name="x",
        category=Category.DATA_LOADING,
        severity=Severity.HIGH,
        impact=0.5,
        title=title,
        message=message,
        evidence={},
        recommendation=recommendation,
        prediction=prediction,
    )


@pytest.mark.parametrize(
    "text",
    [
        "The GPU waits for data 44% of the 11.7 ms profiled step; the fix is predicted to save 88%",
        "Predicted gain: 88% of the step (8.39x).",
        "Replaying the steps with the reads taken out of the step: 9.35 -> 1.77 ms per step (5.28x).",
        "Small batch: the GPU is busy 25% of each step; 8x the batch gives 8.00x the samples/s",
        "The GPU is busy 25% of the 2.77 ms step",
        "Allocator churn: 23.5 allocation calls per step (12.8% of step time)",
        "NCHW convolutions with layout transposes (12% of the step): channels_last saves up to 9.5% (unproven)",
        "Replaying the steps with 8 loader workers: still 2.61 ms per step (1.00x).",
    ],
)
def test_the_check_sees_a_number_without_its_base(text: str) -> None:
    """The sentences of the issue and of main before it, each in a title, a message and a fix."""
    assert step_numbers_without_base(_finding(text))
    assert step_numbers_without_base(_finding("t", message=text))
    assert step_numbers_without_base(_finding("t", recommendation=text))


@pytest.mark.parametrize(
    "text",
    [
        "The GPU waits for data 44% of the 11.7 ms profiled step; the fix is predicted to save 88% of the mean step",
        "Predicted gain: 88% of the 5.44 ms mean step (8.39x).",
        "Replaying the steps with the reads taken out: 9.35 -> 1.77 ms per mean step (5.28x).",
        "Small batch: the GPU is busy 25% of the replayed step; 8x the batch gives 8.00x the samples/s",
        "Raise the batch size 8x: predicted 8.00x the samples/s (87% less time per sample).",
        "Evaluation every 50 steps: 23% of the run",
        "549 blocking reads per step; the host spent 3.20 ms per step in them",
    ],
)
def test_the_check_passes_a_number_with_its_base(text: str) -> None:
    assert not step_numbers_without_base(_finding(text, message=text, recommendation=text))


def test_a_prediction_says_the_step_it_is_priced_on() -> None:
    assert prediction_step(ON_MEAN.to_dict()) is Base.MEAN_STEP
    assert prediction_step(ON_REPLAY.to_dict()) is Base.REPLAYED_STEP
    assert prediction_step({"basis": "timed_steps"}) is Base.MEAN_STEP  # GA303/GA304: the steps as timed
    assert prediction_base(PER_SAMPLE.to_dict()) is Base.SAMPLE
    assert cm.gain(ON_MEAN) == "Predicted gain: 88% of the 5.44 ms mean step (8.39x)."
    assert cm.gain(ON_REPLAY) == "Predicted gain: 81% of the 9.35 ms replayed step (5.28x)."
    assert cm.gain(PER_SAMPLE) == "Predicted gain: 88% of the time per sample (8.00x)."  # cm.pct: 0 places from 10%
    assert cm.gain(ON_MEAN, 0.05) == "Predicted gain: 5.0% of the 5.44 ms mean step (8.39x)."  # the number given
    assert cm.saves(ON_MEAN) == "88% of the mean step"
    assert cm.prediction_sentence(ON_MEAN, "8 workers").endswith("5.44 -> 0.65 ms per mean step (8.39x).")
    assert cm.prediction_sentence(ON_REPLAY, "pinned copies").endswith("9.35 -> 1.77 ms per replayed step (5.28x).")
    assert "still 2.93 ms per mean step, so 8.00x the samples/s" in cm.prediction_sentence(PER_SAMPLE, "8x the batch")
    assert "9.35 -> 1.77 ms per replayed step (81% of the replayed step, 5.28x)" in group_sentence(
        "GA101 and GA102", "copies", ON_REPLAY
    )
    combined = combined_prediction_text({**ON_MEAN.to_dict(), "rules": ["GA101", "GA102"]})
    assert combined is not None and "5.44 -> 0.65 ms per mean step (8.39x)" in combined
    assert of_base(Base.PROFILED_STEP, "11.7 ms") == "of the 11.7 ms profiled step"


def test_an_impact_names_its_base_only_when_it_is_the_predicted_gain() -> None:
    """GA301 rated by the measured wait when more workers do not remove it: its impact is a share of the
    profiled step, not of the prediction's mean step; the renderers then say "of the step" and the
    impact explanation says which."""
    assert impact_base(_finding("t", prediction=ON_MEAN.to_dict() | {"recovered_fraction": 0.5})) is Base.MEAN_STEP
    assert impact_base(_finding("t", prediction=PER_SAMPLE.to_dict() | {"recovered_fraction": 0.5})) is Base.SAMPLE
    assert impact_base(_finding("t", prediction=ON_MEAN.to_dict())) is Base.STEP  # recovered 0.88, impact 0.5
    assert impact_base(_finding("t")) is Base.STEP
