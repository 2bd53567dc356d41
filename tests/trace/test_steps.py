"""Step segmentation on synthetic traces: ProfilerStep, fallbacks, outlier marking."""

from __future__ import annotations

from pathlib import Path

from gpuadvisor.trace.load import load_trace
from tests.synth import K_ELEMENTWISE, SyntheticTrace


def test_profiler_steps_tile_the_window(tmp_path: Path) -> None:
    st = SyntheticTrace()
    for i in range(4):
        # GPU span longer than the CPU span, as in real traces
        st.add_step(10 + i, i * 1000, 600, 900, gpu_start=i * 1000 + 50)
        st.add_kernel(K_ELEMENTWISE, i * 1000 + 60, 800)
    m = load_trace(st.write(tmp_path / "t.json"))
    s = m.steps
    b = st.base
    assert m.step_source == "profiler_step"
    assert s["step"].tolist() == [10, 11, 12, 13]
    assert s["start"].tolist() == [b, b + 1000, b + 2000, b + 3000]
    # end = next CPU start; the last step ends at its CPU end (its step boundary: the GPU backlog
    # drained after it is the profiler's stop, never the script's step)
    assert s["end"].tolist() == [b + 1000, b + 2000, b + 3000, b + 3600]
    assert s["gpu_end"].tolist()[0] == b + 950
    assert s["outlier"].tolist() == [True, False, False, False]


def test_two_steps_no_outlier_and_gpu_span_derived(tmp_path: Path) -> None:
    st = SyntheticTrace()
    st.add_step(1, 0, 500)  # no GPU annotation: GPU span derived from launches inside the CPU span
    st.add_step(2, 500, 500)
    st.add_kernel(K_ELEMENTWISE, 700, 600, launch_ts=600)
    m = load_trace(st.write(tmp_path / "t.json"))
    s = m.steps
    assert s["outlier"].tolist() == [False, False]
    assert s["gpu_start"].iloc[1] == st.base + 700 and s["gpu_end"].iloc[1] == st.base + 1300
    assert s["end"].iloc[1] == st.base + 1000  # the last step ends at its CPU end


def test_optimizer_fallback(tmp_path: Path) -> None:
    st = SyntheticTrace()
    st.add_cpu_op("aten::add", 0, 10)
    for i in range(3):
        st.add_optimizer_step(i * 1000 + 800, 100)
    m = load_trace(st.write(tmp_path / "t.json"))
    assert m.step_source == "optimizer_step"
    assert (m.steps["end"] - st.base).tolist() == [900, 1900, 2900]
    assert (m.steps["start"] - st.base).tolist() == [0, 900, 1900]


def test_dataloader_fallback(tmp_path: Path) -> None:
    st = SyntheticTrace()
    for i in range(3):
        st.add_dataloader_wait(i * 1000, 100, multiprocessing=True)
    st.add_cpu_op("aten::add", 2500, 100)
    m = load_trace(st.write(tmp_path / "t.json"))
    assert m.step_source == "dataloader"
    assert (m.steps["start"] - st.base).tolist() == [0, 1000, 2000]
    assert (m.steps["end"] - st.base).tolist() == [1000, 2000, 2600]


def test_whole_trace_fallback(tmp_path: Path) -> None:
    st = SyntheticTrace()
    st.add_kernel(K_ELEMENTWISE, 100, 50)
    m = load_trace(st.write(tmp_path / "t.json"))
    assert m.step_source == "whole_trace" and len(m.steps) == 1
    assert (m.steps["start"].iloc[0] - st.base, m.steps["end"].iloc[0] - st.base) == (90, 150)
    assert any("whole trace" in w for w in m.warnings)
