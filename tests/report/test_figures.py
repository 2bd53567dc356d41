"""Unit tests of the pure figure functions (plain DataFrames in, plotly dicts out). Data is synthetic."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from gpuadvisor import rundir
from gpuadvisor.render import figures
from gpuadvisor.render.html import BREAKDOWN_COMPONENTS, breakdown_frame


def _per_step() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "step": [1, 2, 3],
            "outlier": [True, False, False],
            "analyzed": [False, True, True],
            "step_time_us": [12000.0, 10000.0, 10000.0],
            "gpu_busy_us": [5000.0, 4000.0, 4000.0],
            "copy_us": [900.0, 900.0, 6000.0],  # step 3: more copy than busy (overlap) -> clipped
            "idle_host_sync_us": [800.0, 800.0, 800.0],
            "idle_data_loading_us": [1500.0, 1500.0, 1500.0],
            "idle_launch_overhead_us": [900.0, 900.0, 900.0],
            "idle_other_us": [100.0, 100.0, 100.0],
        }
    )


def test_breakdown_components_add_up_to_step_time() -> None:
    frame = breakdown_frame(_per_step())
    cols = list(BREAKDOWN_COMPONENTS.values())
    totals = frame[cols].sum(axis=1).tolist()
    assert totals == pytest.approx([12000.0, 10000.0, 10000.0])
    assert frame["bd_copies_us"].tolist() == pytest.approx([900.0, 900.0, 4000.0])
    assert frame["bd_compute_us"].tolist() == pytest.approx([4100.0, 3100.0, 0.0])
    # other = step - busy - attributed idle
    assert frame["bd_other_us"].tolist() == pytest.approx(
        [12000 - 5000 - 3200, 10000 - 4000 - 3200, 10000 - 4000 - 3200]
    )


def test_step_breakdown_figure_stacks_in_ms_and_marks_outliers() -> None:
    fig = figures.step_breakdown_figure(breakdown_frame(_per_step()), BREAKDOWN_COMPONENTS)
    assert fig["layout"]["barmode"] == "stack"
    names = [t["name"] for t in fig["data"]]
    assert names == [n for n in BREAKDOWN_COMPONENTS if n != "collectives"]  # none ran: no legend entry
    compute = fig["data"][0]
    assert compute["x"] == ["step 1", "step 2", "step 3"]
    assert compute["y"] == [4.1, 3.1, 0.0]
    assert compute["marker"]["opacity"] == [0.35, 1.0, 1.0]
    assert "outlier" in compute["hovertext"][0] and "outlier" not in compute["hovertext"][1]
    json.dumps(fig, allow_nan=False)  # JSON-safe


def test_collectives_and_copies_are_their_own_time_not_compute() -> None:
    """A DDP rank whose NCCL kernel waits most of the step for a straggler: its step-time chart drew that
    wait as blue "compute" (issue 30 item 4). The step model's work classes split it out."""
    per_step = pd.DataFrame(
        {
            "step": [1, 2],
            "outlier": [False, False],
            "step_time_us": [10000.0, 10000.0],
            "gpu_busy_us": [400.0, 400.0],  # compute only
            "collective_exposed_us": [9400.0, 9400.0],
            "copy_exposed_us": [100.0, 100.0],
            "gpu_active_us": [9900.0, 9900.0],
            "copy_us": [300.0, 300.0],
            "idle_host_sync_us": [0.0, 0.0],
            "idle_data_loading_us": [0.0, 0.0],
            "idle_launch_overhead_us": [100.0, 100.0],
        }
    )
    frame = breakdown_frame(per_step)
    assert frame[list(BREAKDOWN_COMPONENTS.values())].sum(axis=1).tolist() == pytest.approx([10000.0] * 2)
    assert frame["bd_compute_us"].tolist() == pytest.approx([400.0, 400.0])
    assert frame["bd_collectives_us"].tolist() == pytest.approx([9400.0, 9400.0])
    assert frame["bd_copies_us"].tolist() == pytest.approx([100.0, 100.0])
    fig = figures.step_breakdown_figure(frame, BREAKDOWN_COMPONENTS)
    names = [t["name"] for t in fig["data"]]
    assert names == ["compute", "collectives", "copies", "launch-bound idle"]
    colors = [t["marker"]["color"] for t in fig["data"]]
    assert len(set(colors)) == len(colors)


def test_a_cpu_only_run_draws_no_gpu_legend_entries() -> None:
    per_step = pd.DataFrame(
        {"step": [1, 2], "step_time_us": [5000.0, 5000.0], "gpu_busy_us": [0.0, 0.0], "copy_us": [0.0, 0.0]}
    )
    fig = figures.step_breakdown_figure(breakdown_frame(per_step), BREAKDOWN_COMPONENTS)
    assert [t["name"] for t in fig["data"]] == ["other"]


def test_step_breakdown_skips_missing_columns() -> None:
    frame = pd.DataFrame({"step": [1], "bd_compute_us": [1000.0]})
    fig = figures.step_breakdown_figure(frame, BREAKDOWN_COMPONENTS)
    assert [t["name"] for t in fig["data"]] == ["compute"]


def _steps(n: int, outlier_first: bool = True) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "step": list(range(1, n + 1)),
            "start": [i * 100.0 for i in range(n)],
            "end": [(i + 1) * 100.0 for i in range(n)],
            "outlier": [outlier_first and i == 0 for i in range(n)],
            "analyzed": [not (outlier_first and i == 0) for i in range(n)],
        }
    )


def test_timeline_window_skips_outlier_and_bounds_steps() -> None:
    w = figures.select_timeline_window(_steps(6), max_steps=3)
    assert w is not None
    assert [s[0] for s in w.steps] == [2, 3, 4]
    assert (w.start, w.end) == (100.0, 400.0)
    only = figures.select_timeline_window(_steps(1), max_steps=3)
    assert only is not None and [s[0] for s in only.steps] == [1]  # an outlier is better than nothing
    assert figures.select_timeline_window(_steps(0)) is None


def _table(rows: list[tuple[float, float, str]], **extra: list[object]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["ts", "dur", "name"])
    df["end"] = df["ts"] + df["dur"]
    for key, values in extra.items():
        df[key] = values
    return df


def test_timeline_events_lanes_and_idle_gaps() -> None:
    window = figures.TimelineWindow(0.0, 100.0, ((1, 0.0, 100.0),))
    kernels = _table(
        [(10.0, 20.0, "k1"), (25.0, 10.0, "k2"), (60.0, 10.0, "k3"), (150.0, 5.0, "outside")],
        family=["gemm", "gemm", "elementwise", "gemm"],
    )
    copies = _table([(80.0, 10.0, "Memcpy HtoD (Pageable -> Device)")], direction=["HtoD"])
    annotations = _table(
        [
            (0.0, 100.0, "ProfilerStep#1"),
            (0.0, 9.0, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
            (0.0, 100.0, "ProfilerStep#1"),
            (40.0, 5.0, "Optimizer.step#AdamW.step"),
        ],
        on_gpu=[False, False, True, False],
    )
    runtime = _table([(45.0, 10.0, "cudaStreamSynchronize"), (5.0, 2.0, "cudaLaunchKernel")])
    # the step model's idle (Metrics.gaps), one interval running past the window and one outside it
    idle = pd.DataFrame(
        {
            "start": [0.0, 35.0, 70.0, 90.0, 200.0],
            "end": [10.0, 60.0, 80.0, 120.0, 210.0],
            "cause": ["data_loading", "host_sync", "launch_overhead", "other", "other"],
        }
    )
    events = figures.timeline_events(
        window=window, kernels=kernels, copies=copies, annotations=annotations, runtime=runtime, idle=idle
    )
    by_lane: dict[str, list[tuple[float, float, str]]] = {}
    for e in events:
        by_lane.setdefault(e.lane, []).append((e.start, e.end, e.label))
    assert [x[2] for x in by_lane["GPU · kernels"]] == ["k1", "k2", "k3"]  # "outside" clipped away
    assert by_lane["CPU · steps"] == [(0.0, 100.0, "ProfilerStep#1")]  # the GPU-side span is not a CPU lane
    assert next(x[2] for x in by_lane["CPU · data loading"]).startswith("enumerate(DataLoader)")
    assert by_lane["CPU · annotations"] == [(40.0, 45.0, "Optimizer.step#AdamW.step")]
    assert by_lane["CPU · syncs"] == [(45.0, 55.0, "cudaStreamSynchronize")]
    # the model's idle, clipped to the window and named by its cause
    assert by_lane["GPU · idle"] == [
        (0.0, 10.0, "GPU idle (data loading)"),
        (35.0, 60.0, "GPU idle (host sync)"),
        (70.0, 80.0, "GPU idle (launch overhead)"),
        (90.0, 100.0, "GPU idle (other)"),
    ]
    # without the model's idle there is no idle lane: the report never derives it from the raw tables
    bare = figures.timeline_events(window=window, kernels=kernels, copies=copies)
    assert not [e for e in bare if e.lane == "GPU · idle"]


def test_merge_small_events_keeps_wide_and_counts_merged() -> None:
    tiny = [
        figures.TimelineEvent("GPU · kernels", "elementwise", float(i * 2), float(i * 2 + 1), f"k{i % 2}")
        for i in range(10)
    ]
    wide = figures.TimelineEvent("GPU · kernels", "gemm", 100.0, 200.0, "big")
    out = figures.merge_small_events([*tiny, wide], min_width=5.0)
    # a run of tiny events is merged until it holds one pixel (min_width) of time: 5 x 1 us per bar
    assert [(e.count, e.start, e.end) for e in out] == [(5, 0.0, 9.0), (5, 10.0, 19.0), (1, 100.0, 200.0)]
    assert [e.busy_us for e in out[:2]] == [pytest.approx(5.0), pytest.approx(5.0)]
    assert "5 events merged: 5.0 us over 9.0 us" in out[0].label
    assert out[2] == wide
    # merging again keeps the original event count
    again = figures.merge_small_events(out[:2], min_width=50.0)
    assert len(again) == 1 and again[0].count == 10 and again[0].busy_us == pytest.approx(10.0)


def _busy_run(n_kernels: int, kernel_us: float, gap_us: float) -> tuple[list[figures.TimelineEvent], figures.TimelineWindow]:
    """SYNTHETIC: one lane of kernels `kernel_us` long with `gap_us` of idle between them (3 steps)."""
    period = kernel_us + gap_us
    end = n_kernels * period
    third = end / 3
    window = figures.TimelineWindow(0.0, end, ((1, 0.0, third), (2, third, 2 * third), (3, 2 * third, end)))
    n = n_kernels
    kernels = _table([(i * period, kernel_us, "gemm_kernel") for i in range(n)], family=["gemm"] * n)
    idle = pd.DataFrame({"start": [i * period + kernel_us for i in range(n)], "end": [(i + 1) * period for i in range(n)]})
    return figures.timeline_events(window=window, kernels=kernels, idle=idle), window


def _as_plotly_draws(trace: dict[str, object], span_ms: float, plot_px: float = 1200.0) -> float:
    """Share of the x axis a trace covers once plotly.js widens every bar thinner than a pixel to one
    pixel (bar/plot.js expandToVisible)."""
    px = span_ms / plot_px
    widths = [x for x in trace["x"] if x is not None]  # type: ignore[attr-defined]
    return sum(max(float(w), px) for w in widths) / span_ms


def test_idle_is_drawn_to_scale_on_a_busy_run() -> None:
    # SYNTHETIC 96%-busy run: 600 kernels of 96 us with 4 us gaps, 60 ms shown. Each gap is a tenth of
    # a pixel; drawn one bar per gap, plotly would widen them into a near-solid "GPU idle" band.
    events, window = _busy_run(600, 96.0, 4.0)
    fig = figures.timeline_figure(events, window)
    span_ms = (window.end - window.start) / 1000.0
    idle = next(t for t in fig["data"] if t["name"] == "GPU idle")
    kernels = next(t for t in fig["data"] if t["name"] == "kernel: gemm")
    drawn_idle = sum(idle["x"]) / span_ms
    assert drawn_idle == pytest.approx(0.04, abs=0.004)  # the summed idle, to scale
    assert _as_plotly_draws(idle, span_ms) < 0.07  # and still under twice that once drawn
    assert _as_plotly_draws(kernels, span_ms) > 0.9
    # merged bars say what they hold
    assert any("idle gaps merged" in h and "us idle over" in h for h in idle["hovertext"])


def test_idle_gaps_wider_than_a_pixel_are_drawn_where_they_are() -> None:
    events, window = _busy_run(30, 1000.0, 500.0)  # 0.5 ms gaps on a 45 ms axis: each gap its own bar
    fig = figures.timeline_figure(events, window)
    idle = next(t for t in fig["data"] if t["name"] == "GPU idle")
    assert len(idle["x"]) == 30
    assert idle["base"][:2] == [1.0, 2.5] and idle["x"][:2] == [0.5, 0.5]


def test_timeline_legend_colours_are_distinct() -> None:
    palette = {
        **{f"kernel {k}": v for k, v in figures.FAMILY_COLORS.items()},
        **{f"copy {k}": v for k, v in figures.COPY_COLORS.items()},
        **{f"lane {k}": v for k, v in figures.LANE_COLORS.items()},
    }
    colours = [c.lower() for c in palette.values()]
    assert len(set(colours)) == len(colours), sorted(palette.items(), key=lambda kv: kv[1])
    # a figure with every kind of bar: each legend entry its own colour
    window = figures.TimelineWindow(0.0, 1000.0, ((1, 0.0, 1000.0),))
    families = list(figures.FAMILY_COLORS)
    kernels = _table([(i * 50.0, 40.0, f"k{i}") for i in range(len(families))], family=families)
    copies = _table([(500.0 + i * 50.0, 40.0, f"c{i}") for i in range(4)], direction=["HtoD", "DtoH", "DtoD", "PtoP"])
    idle = pd.DataFrame({"start": [40.0], "end": [50.0], "cause": ["other"]})
    events = figures.timeline_events(window=window, kernels=kernels, copies=copies, idle=idle)
    fig = figures.timeline_figure(events, window)
    by_name = {t["name"]: t["marker"]["color"] for t in fig["data"]}
    assert len(by_name) >= len(families) + 4 + 1  # + GPU idle
    assert len(set(by_name.values())) == len(by_name), by_name


def test_bound_events_caps_the_number_of_bars() -> None:
    events = [
        figures.TimelineEvent("GPU · kernels", "elementwise", i * 3.0, i * 3.0 + 2.0, "k")
        for i in range(20000)
    ]
    bars, passes = figures.bound_events(events, span_us=2000.0, max_events=500)  # 2 us events start "wide"
    assert len(bars) <= 500
    assert passes > 1
    assert sum(b.count for b in bars) == 20000  # nothing dropped, only merged


def test_timeline_figure_is_deterministic_and_bounded() -> None:
    window = figures.TimelineWindow(
        0.0, 30000.0, ((1, 0.0, 10000.0), (2, 10000.0, 20000.0), (3, 20000.0, 30000.0))
    )
    n = 30000
    kernels = _table([(i * 1.0, 0.5, f"kernel{i % 7}") for i in range(n)], family=["elementwise"] * n)
    events = figures.timeline_events(window=window, kernels=kernels)
    fig1 = figures.timeline_figure(events, window, max_events=400)
    fig2 = figures.timeline_figure(list(reversed(events)), window, max_events=400)
    assert json.dumps(fig1, sort_keys=True) == json.dumps(fig2, sort_keys=True)
    assert sum(len(t["x"]) for t in fig1["data"]) <= 400
    assert [a["text"] for a in fig1["layout"]["annotations"]] == ["step 1", "step 2", "step 3"]
    assert fig1["layout"]["yaxis"]["fixedrange"] is True


def _nvml(n: int, *, util: bool = True) -> pd.DataFrame:
    rows = []
    for i in range(n):
        row = {c: float("nan") for c in rundir.NVML_COLUMNS}
        row.update(
            t_unix_s=1000.0 + i * 0.1,
            gpu_index=0.0,
            mem_used_bytes=2.0**30 * 4,
            mem_total_bytes=2.0**30 * 80,
            power_w=300.0,
            power_limit_w=700.0,
            sm_clock_mhz=1980.0,
            sm_clock_max_mhz=1980.0,
            pcie_rx_kbps=1000.0,
            pcie_tx_kbps=500.0,
        )
        if util:
            row["util_gpu_pct"] = 50.0
        rows.append(row)
    return pd.DataFrame(rows)


def test_nvml_figure_shades_window_and_downsamples() -> None:
    fig = figures.nvml_figure(_nvml(5000), t0=1000.0, window=(1003.0, 1004.5), max_points=200)
    rect = fig["layout"]["shapes"][0]
    assert (rect["x0"], rect["x1"]) == (3.0, 4.5)
    assert all(len(t["x"]) <= 200 for t in fig["data"])
    mem = next(t for t in fig["data"] if t["name"] == "used")
    assert mem["y"][0] == 4.0  # GiB
    assert {t["yaxis"] for t in fig["data"]} == {"y", "y2", "y3", "y4", "y5"}


def test_nvml_missing_utilization_is_left_out_not_zero() -> None:
    df = _nvml(10, util=False)  # MIG: utilization cells empty
    shown, missing = figures.nvml_available_panels(df)
    assert "GPU utilization" in missing and "GPU utilization" not in shown
    fig = figures.nvml_figure(df)
    assert all(t["name"] != "kernel running %" for t in fig["data"])
    assert len({t["yaxis"] for t in fig["data"]}) == 4


def test_nvml_panels_have_legends_and_one_colour_per_gpu() -> None:
    """Issue 42 item 5: two series per panel (kernel running vs memory busy, used vs total) and four
    colours for two GPUs, told apart only by hovering: unreadable in a screenshot or a printout."""
    two = pd.concat([_nvml(20).assign(gpu_index=0), _nvml(20).assign(gpu_index=1)], ignore_index=True)
    two["util_mem_pct"] = 10.0
    fig = figures.nvml_figure(two, t0=1000.0)
    traces = fig["data"]
    assert traces and all(t["showlegend"] for t in traces)
    # every panel has its own legend, beside that panel
    panels = sorted({t["yaxis"] for t in traces})
    legends = {t["yaxis"]: t["legend"] for t in traces}
    assert len(set(legends.values())) == len(panels)
    for axis, legend in legends.items():
        domain = fig["layout"][f"yaxis{axis[1:]}"]["domain"]
        assert fig["layout"][legend]["y"] == domain[1] and fig["layout"][legend]["x"] > 1.0
    colours = {t["name"].split(" ")[1]: t["line"]["color"] for t in traces}  # "GPU 0 kernel running %"
    for gpu in ("0", "1"):
        assert {t["line"]["color"] for t in traces if t["name"].startswith(f"GPU {gpu} ")} == {colours[gpu]}
    assert colours["0"] != colours["1"]
    util = [t for t in traces if t["name"].startswith("GPU 0 ") and t["yaxis"] == "y"]
    assert {t["name"] for t in util} == {"GPU 0 kernel running %", "GPU 0 memory busy %"}
    assert len({t["line"]["dash"] for t in util}) == 2  # the two series of a panel look different
