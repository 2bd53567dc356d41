"""Every shared quantity has one definition (issue 26), and every reader gets the same value from it:
which steps are analyzed, the SM count, `sm_use`, kernels per step, the GPU idle time the report draws,
the finding groups, and the cross-rank comparison (computed once per analysis).

Unit cases on small frames and SYNTHETIC traces (tests/synth.py); agreement between the readers on
real recordings of sample_runs/ (each README says where it was recorded).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpuadvisor import analysis, engine, multirank
from gpuadvisor.diff import _analyzed_steps
from gpuadvisor.render import figures
from gpuadvisor.render import html as report_html
from gpuadvisor.result import AnalysisResult
from gpuadvisor.rulekit import gpuwork
from gpuadvisor.stepmodel import Prediction, build_step_model
from gpuadvisor.stepmodel.predict import group_fields
from gpuadvisor.stepmodel.tables import sm_use
from gpuadvisor.trace.load import load_trace
from gpuadvisor.trace.model import analyzed_mask
from tests.sample_results import analyzed
from tests.synth import K_ELEMENTWISE, SyntheticTrace

SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"


def sample(name: str) -> AnalysisResult:
    return analyzed(name)


# ---- which steps are analyzed ------------------------------------------------------------------------


def test_analyzed_mask() -> None:
    steps = pd.DataFrame(
        {
            "start": [0.0, 10.0, 20.0, 20.0, 30.0],
            "end": [10.0, 20.0, 20.0, np.nan, 40.0],
            "outlier": [True, False, False, False, False],
        }
    )
    # the outlier, a step of zero length and one of undefined length are left out
    assert analyzed_mask(steps).tolist() == [False, True, False, False, True]
    # every step an outlier: all of them are analyzed rather than none
    assert analyzed_mask(steps.assign(outlier=True)).tolist() == [True, True, False, False, True]
    assert analyzed_mask(steps.iloc[0:0]).tolist() == []


def test_every_reader_analyzes_the_same_steps() -> None:
    result = sample("low_occupancy-planted")
    model = result.metrics_detail.model
    per_step = result.metrics_detail.per_step
    chosen = per_step["step"][per_step["analyzed"]].tolist()
    assert len(chosen) == result.metrics["steps_analyzed"] >= 3
    assert not per_step["analyzed"].all()  # the warm-up outlier is left out
    assert model.window.step_ids.tolist() == chosen
    summary = multirank.rank_summary(result.trace, result.metrics_detail)
    assert [s.step for s in summary.analyzed] == chosen
    assert _analyzed_steps(result)["step"].tolist() == chosen
    window = figures.select_timeline_window(per_step, max_steps=len(per_step))
    assert window is not None and [s[0] for s in window.steps] == chosen


# ---- the SM count, sm_use ----------------------------------------------------------------------------


def test_sm_count_from_the_trace_or_the_table(tmp_path: Path) -> None:
    def model(props: dict[str, Any]) -> Any:
        st = SyntheticTrace(device_properties=(props,))
        st.add_step(1, cpu_start=0.0, cpu_dur=100.0, gpu_dur=100.0)
        st.add_kernel(K_ELEMENTWISE, ts=10.0, dur=50.0, launch_ts=5.0, launch_dur=2.0)
        return build_step_model(load_trace(st.write(tmp_path / f"{len(props)}.json")))

    assert model({"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 100}).sm_count == 100  # as recorded
    # a trace that names its GPU but not its SMs: the peak table's count for that GPU
    assert model({"id": 0, "name": "NVIDIA A100-SXM4-80GB"}).sm_count == 108


def test_every_reader_uses_the_models_sm_count_and_sm_use() -> None:
    result = sample("small_batch-planted")
    model = result.metrics_detail.model
    assert model.sm_count == result.metrics["num_sms"] == 132
    ctx = engine.make_context(result.trace, result.run, result.metrics_detail)[2]({})
    assert gpuwork.sm_count(ctx) == model.sm_count
    ga401 = next(f for f in result.findings if f.rule == "GA401")
    assert ga401.evidence["sm_use"] == pytest.approx(model.sm_use)


def test_sm_use_prefers_the_recorded_blocks_per_sm() -> None:
    kernels = pd.DataFrame(
        {"dur": [10.0, 30.0, 60.0], "blocks": [66.0, 264.0, 33.0], "blocks_per_sm": [0.5, np.nan, np.nan]}
    )
    # kernel 1: recorded 0.5 (not 66 / 100); kernel 2: 264 / 132 -> 2, counted as 1; kernel 3: 0.25
    assert sm_use(kernels, 132) == pytest.approx((0.5 * 10 + 1.0 * 30 + 0.25 * 60) / 100)
    # without an SM count only the recorded values are known
    assert sm_use(kernels, None) == pytest.approx(0.5)
    assert sm_use(kernels.iloc[0:0], 132) is None


# ---- kernels per step --------------------------------------------------------------------------------


def test_kernels_per_step_counts_what_each_step_launched(tmp_path: Path) -> None:
    # SYNTHETIC: the GPU runs a step behind the host: the 3 kernels launched in step i run in step i+1.
    # Counted by start time, the first step would hold none and the last all that drained late.
    st = SyntheticTrace()
    for i in range(6):
        t0 = i * 100.0
        st.add_step(i + 1, cpu_start=t0, cpu_dur=100.0, gpu_dur=100.0)
        for j in range(3):
            st.add_kernel(K_ELEMENTWISE, ts=t0 + 110.0 + 20 * j, dur=10.0, launch_ts=t0 + 5.0 + 10 * j, launch_dur=2.0)
    model = build_step_model(load_trace(st.write(tmp_path / "lag.json")))
    assert model.per_step["kernels"].tolist() == [3, 3, 3, 3, 3, 3]
    assert model.kernels_per_step == 3.0


def test_the_metric_and_ga501_read_the_same_kernels_per_step() -> None:
    result = sample("launch_bound-planted")
    model = result.metrics_detail.model
    assert result.metrics["kernels_per_step"] == model.kernels_per_step
    ga501 = [f for f in result.findings if f.rule == "GA501"]
    assert ga501 and ga501[0].evidence["kernels_per_step"] == model.kernels_per_step


# ---- GPU idle in the report ---------------------------------------------------------------------------


def test_the_timeline_draws_the_models_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    # tutorial_cnn reads the loss every step: the scalar read's few-byte copy is idle time in the
    # model (docs/model.md), and so it is on the timeline
    result = sample("tutorial_cnn-planted")
    gaps = result.metrics_detail.gaps
    seen: dict[str, Any] = {}
    original = figures.timeline_events

    def spy(**kwargs: Any) -> list[figures.TimelineEvent]:
        seen.update(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(figures, "timeline_events", spy)
    report_html.build_context(result, generated_at="2026-01-01T00:00:00+00:00", rule_docs={})
    assert seen["idle"] is gaps
    window = seen["window"]
    events = original(**seen)
    idle = [(e.start, e.end) for e in events if e.lane == "GPU · idle"]
    inside = gaps[(gaps["end"] > window.start) & (gaps["start"] < window.end)]
    drawn = sum(e - s for s, e in idle)
    assert drawn == pytest.approx(float((inside["end"].clip(upper=window.end) - inside["start"].clip(lower=window.start)).sum()))
    trace = result.trace
    copies = trace.copies
    reads = copies[
        (copies["direction"].astype(str) == "DtoH")
        & (copies["bytes"] <= 8)
        & (copies["ts"] >= window.start)
        & (copies["end"] <= window.end)
    ]
    assert len(reads), "the window holds a scalar read's copy"
    for s, e in zip(reads["ts"].tolist(), reads["end"].tolist(), strict=True):
        assert any(a <= s and e <= b for a, b in idle), (s, e)


# ---- finding groups ------------------------------------------------------------------------------------


@pytest.mark.parametrize("run", ["transfer_bound-planted", "dlrm-planted"])
def test_grouped_findings_carry_the_same_keys_and_sentence(run: str) -> None:
    # transfer_bound: the copy rules' group (GA101-GA103); dlrm: launch_overhead (group_findings)
    result = sample(run)
    grouped = [f for f in result.findings if f.prediction and "group" in f.prediction]
    assert len(grouped) >= 2, [f.rule for f in result.findings]
    keys = set(group_fields("g", Prediction("a+b", 1.0, 0.5, 2.0, 0.5)))
    for f in grouped:
        assert keys <= set(f.prediction)
        assert "act on the same" in f.message and "their fixes together are predicted at" in f.message


# ---- cross-rank analysis, once --------------------------------------------------------------------------


def test_cross_rank_is_computed_once_per_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = multirank.compute_metrics

    def counting(trace: Any, run: Any = None, model: Any = None) -> Any:
        calls.append(trace.rank)
        return original(trace, run, model)

    monkeypatch.setattr(multirank, "compute_metrics", counting)
    result = analysis.analyze(SAMPLES / "ddp_straggler-planted")
    assert result.cross_rank is not None and len(result.cross_rank.ranks) == len(result.traces) >= 2
    assert sorted(calls) == sorted(t.rank for t in result.traces[1:])  # every rank but the first, once
    calls.clear()
    page = report_html.render_html(result, generated_at="2026-01-01T00:00:00+00:00", rule_docs={})
    assert calls == [] and "straggler" in page.lower()
