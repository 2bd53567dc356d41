"""The comparison of trials: speed-up, noise band, verdict (pure numbers, no processes)."""

from __future__ import annotations

import pytest

from gpuadvisor.verify.stats import Verdict, batch_samples, chance_of_separation, compare, measured


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


def _trial(samples_per_s: float, shape: list[int] | None) -> dict[str, object]:
    return {"status": "ok", "samples_per_s": samples_per_s, "samples_shape": shape}


def test_a_sequence_first_input_is_counted_along_the_axis_that_grew() -> None:
    # an LSTM fed (seq=35, batch=20): axis 0 counts time steps. 8x the batch took 2.2x the step time:
    # counted along axis 0 the lever looks 2.2x slower; along the batch axis it is 8 / 2.2 = 3.6x faster
    base = [_trial(35 / 0.0063, [35, 20]), _trial(35 / 0.0061, [35, 20])]
    mine = [_trial(35 / 0.0138, [35, 160]), _trial(35 / 0.0139, [35, 160])]
    s = batch_samples(base, mine)
    assert s.axis == 1 and s.unchanged is None and "axis 1" in str(s.note)
    cmp = compare(s.baseline, s.remedy, higher_is_better=True)
    expected = ((160 / 0.0138 + 160 / 0.0139) / 2) / ((20 / 0.0063 + 20 / 0.0061) / 2)  # medians of two
    assert cmp.speedup == pytest.approx(expected, rel=1e-9)
    assert cmp.speedup > 3.5 and cmp.verdict is Verdict.FASTER
    # counted on axis 0, as before, the same trials say "slower"
    plain = compare(measured(base, "samples_per_s"), measured(mine, "samples_per_s"), higher_is_better=True)
    assert plain.verdict is Verdict.SLOWER


def test_a_batch_first_input_stays_on_axis_0() -> None:
    base = [_trial(1000.0, [8, 12]), _trial(1010.0, [8, 12])]
    mine = [_trial(7000.0, [64, 12]), _trial(7100.0, [64, 12])]
    s = batch_samples(base, mine)
    assert s.axis == 0 and s.note is None and s.baseline == [1000.0, 1010.0] and s.remedy == [7000.0, 7100.0]


def test_shapes_unchanged_mean_the_batch_did_not_change() -> None:
    s = batch_samples([_trial(1000.0, [8, 12])], [_trial(990.0, [8, 12])])
    assert s.unchanged == (8, 12) and "did not change" in str(s.note)


@pytest.mark.parametrize(
    ("base_shape", "mine_shape"),
    [
        (None, None),  # records without shapes (written before shapes were recorded)
        ([35, 20, 4], [35, 160, 8]),  # two axes grew: which one is the batch is not known
        ([35, 20], [35, 160, 1]),  # the rank changed
    ],
)
def test_unclear_shapes_fall_back_to_axis_0(base_shape: list[int] | None, mine_shape: list[int] | None) -> None:
    s = batch_samples([_trial(100.0, base_shape)], [_trial(300.0, mine_shape)])
    assert (s.axis, s.unchanged, s.baseline, s.remedy) == (0, None, [100.0], [300.0])


def test_the_batch_note_tells_the_factor_the_shape_shows() -> None:
    from gpuadvisor.verify.trials import batch_note

    # a --batch-size multiplied from 35 counted time steps: 35 x 8 = 280 against a batch of 20
    s = batch_samples([_trial(5000.0, [35, 20])], [_trial(2500.0, [35, 280])])
    assert s.axis == 1 and s.sizes == (20, 280) and s.factor == 14.0
    note = batch_note(8, s)
    assert note.startswith("the batch is 14x larger (20 -> 280, as the input's shape says)") and "x14" in note
    assert "axis 1" in note
    # the shape agrees with the multiplier: the multiplier is told, nothing else
    same = batch_samples([_trial(1000.0, [8, 12])], [_trial(6000.0, [64, 12])])
    assert batch_note(8, same).startswith("the batch is 8x larger: compared in samples/s")
    assert batch_note(8, None).startswith("the batch is 8x larger: compared in samples/s")


def test_a_batch_label_shows_the_sizes_where_they_are_not_the_multiplier_apart() -> None:
    from gpuadvisor.verify.explore_run import _label_as_measured

    entry = {"changes_batch": True, "batch_sizes": [2, 32]}
    assert _label_as_measured("script --batch-size x4", 4, entry) == "script --batch-size x4 (batch 2 -> 32)"
    assert _label_as_measured("script --batch-size x4", 4, {**entry, "batch_sizes": [2, 8]}) == "script --batch-size x4"
    assert _label_as_measured("bf16_autocast", 4, {"changes_batch": False}) == "bf16_autocast"
