"""Plotly figures of the HTML report, as plain figure dicts (the JSON plotly.js reads).

Every function here is pure: plain DataFrames / numbers in, a JSON-able dict out, no I/O, no global
state, no clock. Figures are built as dicts rather than through `plotly.graph_objects` because the
validation layer is slow to import and adds nothing for figures whose shape we control; the output is
what `go.Figure(...).to_plotly_json()` would give. Floats are rounded so the same input always gives
the same bytes, and the number of drawn points is bounded so the page stays small whatever the trace
size (timeline: a few steps, tiny events merged; NVML: bucket means).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

Figure = dict[str, Any]

# Step-time breakdown components, in stacking order: (label, colour).
BREAKDOWN_COLORS: dict[str, str] = {
    "compute": "#4c78a8",
    "collectives": "#d37295",
    "copies": "#f58518",
    "sync wait": "#e45756",
    "data wait": "#b279a2",
    "launch-bound idle": "#eeca3b",
    "other": "#bab0ac",
}

# The timeline's legend entries (kernel families, copy kinds, CPU lanes, GPU idle) each get their own
# colour (tableau 20); GPU idle is the only red, as the caption says. tests/report/test_figures.py checks
# that no two entries share a colour.
FAMILY_COLORS: dict[str, str] = {
    "gemm": "#4e79a7",
    "conv": "#a0cbe8",
    "attention": "#59a14f",
    "elementwise": "#f1ce63",
    "reduction": "#8cd17d",
    "optimizer": "#499894",
    "collective": "#d37295",
    "memcpy-like": "#86bcb6",
    "other": "#d7b5a6",
}
COPY_COLORS: dict[str, str] = {
    "HtoD": "#f28e2b",
    "DtoH": "#ffbe7d",
    "DtoD": "#b6992d",
    "PtoP": "#fabfd2",
    "memset": "#79706e",
}
LANE_COLORS: dict[str, str] = {
    "step": "#bab0ac",
    "data": "#b07aa1",
    "annotation": "#d4a6c8",
    "sync": "#9d7660",
    "idle": "#e15759",
}
_UNKNOWN_COPY_COLOR = "#ff9d9a"

_FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12}
_MARGIN = {"l": 150, "r": 20, "t": 30, "b": 40}


def _r(value: Any, digits: int = 3) -> float | None:
    """Round for stable bytes; NaN/inf/None -> None (plotly draws a gap)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    out = round(f, digits)
    return 0.0 if out == 0 else out  # no "-0.0"


def _base_layout(height: int) -> dict[str, Any]:
    return {
        "height": height,
        "margin": dict(_MARGIN),
        "font": dict(_FONT),
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "hovermode": "closest",
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0, "xanchor": "left"},
    }


# ---- step-time breakdown ----------------------------------------------------------------------------


def step_breakdown_figure(per_step: pd.DataFrame, components: Mapping[str, str]) -> Figure:
    """Stacked bars, one per step: how each step's wall time splits into `components`.

    `per_step` has a `step` column and, for each `label -> column` of `components` (in stacking order),
    a column of microseconds. Missing columns, and columns that are zero in every step (no collective
    in a one-GPU run, no GPU time at all in a CPU-only run), draw nothing and get no legend entry; steps
    left out of the analysis (an `analyzed` column that is false: the step model's analyzed steps) are
    drawn faded and named in the hover text.
    """
    steps = [int(s) for s in per_step["step"].tolist()] if "step" in per_step else list(range(len(per_step)))
    labels = [f"step {s}" for s in steps]
    outliers: list[bool] = (
        [not bool(v) for v in per_step["analyzed"].fillna(True).tolist()]
        if "analyzed" in per_step
        else [False] * len(steps)
    )
    data: list[dict[str, Any]] = []
    for label, column in components.items():
        if column not in per_step or not (per_step[column].fillna(0.0).astype(float) > 0).any():
            continue
        values_ms = [_r(v / 1000.0) if v is not None else None for v in per_step[column].tolist()]
        hover = [
            f"{lab}{' (outlier, excluded from medians)' if out else ''}<br>{label}: {v if v is not None else 'n/a'} ms"
            for lab, out, v in zip(labels, outliers, values_ms, strict=True)
        ]
        data.append(
            {
                "type": "bar",
                "name": label,
                "x": labels,
                "y": values_ms,
                "hovertext": hover,
                "hoverinfo": "text",
                "marker": {
                    "color": BREAKDOWN_COLORS.get(label, "#888888"),
                    # outliers faded (a hatch pattern would also hatch the legend swatch)
                    "opacity": [0.35 if o else 1.0 for o in outliers],
                },
            }
        )
    layout = _base_layout(320)
    layout.update(
        {
            "barmode": "stack",
            "xaxis": {"type": "category", "title": {"text": "recorded step"}},
            "yaxis": {"title": {"text": "ms"}, "rangemode": "tozero"},
            "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        }
    )
    return {"data": data, "layout": layout}


# ---- timeline -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimelineEvent:
    """One bar to draw: lane, group (colour/legend entry), start/end in microseconds, hover label."""

    lane: str
    group: str
    start: float
    end: float
    label: str
    count: int = 1  # > 1 for a bar that merges several tiny events
    busy: float = -1.0  # summed duration of the merged events (us); -1 = end - start
    names: tuple[tuple[str, int], ...] = ()  # merged bars: (event name, count), most frequent first

    @property
    def busy_us(self) -> float:
        return self.end - self.start if self.busy < 0 else self.busy


@dataclass(frozen=True)
class TimelineWindow:
    """The steps the timeline shows: [start, end) in trace microseconds and the step boundaries."""

    start: float
    end: float
    steps: tuple[tuple[int, float, float], ...]  # (step, start, end)


def select_timeline_window(steps: pd.DataFrame, max_steps: int = 3) -> TimelineWindow | None:
    """Pick up to `max_steps` consecutive steps to draw: the first analyzed steps (an `analyzed` column:
    the per-step table's, the step model's definition; the first recorded step is often a warm-up
    outlier), else the first steps with a time span. None without steps."""
    if steps is None or len(steps) == 0:
        return None
    rows = steps.sort_values("start")
    analyzed = rows["analyzed"].fillna(False).astype(bool).tolist() if "analyzed" in rows else [False] * len(rows)
    records = list(
        zip(rows["step"].tolist(), rows["start"].tolist(), rows["end"].tolist(), analyzed, strict=True)
    )
    spans = [r for r in records if _finite(r[1]) and _finite(r[2]) and r[2] > r[1]]
    usable = [r for r in spans if r[3]] or spans
    if not usable:
        return None
    chosen = usable[:max_steps]
    start = min(float(r[1]) for r in chosen)
    end = max(float(r[2]) for r in chosen)
    return TimelineWindow(start, end, tuple((int(r[0]), float(r[1]), float(r[2])) for r in chosen))


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


_SYNC_RUNTIME = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaStreamWaitEvent",
    "cudaMemcpy",
)
_SYNC_OPS = ("aten::_local_scalar_dense",)


def _clip(df: pd.DataFrame, start: float, end: float) -> pd.DataFrame:
    mask = (df["end"] > start) & (df["ts"] < end)
    clipped: pd.DataFrame = df.loc[mask]
    return clipped


def timeline_events(
    *,
    window: TimelineWindow,
    kernels: pd.DataFrame | None = None,
    copies: pd.DataFrame | None = None,
    memsets: pd.DataFrame | None = None,
    annotations: pd.DataFrame | None = None,
    runtime: pd.DataFrame | None = None,
    cpu_ops: pd.DataFrame | None = None,
    idle: pd.DataFrame | None = None,
) -> list[TimelineEvent]:
    """Collect the events of the window into lanes (CPU: steps, data loading, annotations, syncs;
    GPU: kernels, copies, idle). Tables use the TraceModel columns (ts, dur, end, name, ...); `idle` is
    the step model's GPU idle time (`Metrics.gaps`: start, end, cause), drawn as it is: the report
    never recomputes idle from the raw tables (a scalar read's few-byte copy is idle time there)."""
    start, end = window.start, window.end
    out: list[TimelineEvent] = []

    def add(
        df: pd.DataFrame | None, lane: str, group: str, group_col: str | None = None, suffix: str = ""
    ) -> None:
        if df is None or len(df) == 0:
            return
        rows = _clip(df, start, end)
        starts = rows["ts"].astype(float).tolist()
        ends = rows["end"].astype(float).tolist()
        names = rows["name"].astype(str).tolist()
        groups = (
            [g if isinstance(g, str) and g else group for g in rows[group_col].astype(object).tolist()]
            if group_col is not None and group_col in rows
            else [group] * len(rows)
        )
        for s, e, n, g in zip(starts, ends, names, groups, strict=True):
            out.append(TimelineEvent(lane, g, max(s, start), min(e, end), n + suffix))

    if annotations is not None and len(annotations):
        cpu_ann = annotations[~annotations["on_gpu"].astype(bool)]
        ann_names = cpu_ann["name"].astype(str)
        is_step = ann_names.str.startswith("ProfilerStep#")
        is_data = ann_names.str.contains("DataLoader", regex=False)
        add(cpu_ann[is_step], "CPU · steps", "step")
        add(cpu_ann[is_data & ~is_step], "CPU · data loading", "data")
        add(cpu_ann[~is_data & ~is_step], "CPU · annotations", "annotation")
    if runtime is not None and len(runtime):
        add(runtime[runtime["name"].astype(str).isin(_SYNC_RUNTIME)], "CPU · syncs", "sync")
    if cpu_ops is not None and len(cpu_ops):
        add(
            cpu_ops[cpu_ops["name"].astype(str).isin(_SYNC_OPS)],
            "CPU · syncs",
            "sync",
            suffix=" (scalar read)",
        )
    add(kernels, "GPU · kernels", "other", "family")
    add(copies, "GPU · copies", "other", "direction")
    add(memsets, "GPU · copies", "memset")
    out.extend(_idle_events(window, idle))
    out.sort(key=lambda e: (e.lane, e.start, e.end, e.group, e.label))
    return out


def _idle_events(window: TimelineWindow, idle: pd.DataFrame | None) -> list[TimelineEvent]:
    """The model's idle intervals inside the window, labelled with their cause."""
    if idle is None or len(idle) == 0:
        return []
    rows = idle[(idle["end"] > window.start) & (idle["start"] < window.end)].sort_values("start")
    causes = rows["cause"].astype(str).tolist() if "cause" in rows else [""] * len(rows)
    return [
        TimelineEvent(
            "GPU · idle",
            "idle",
            max(float(s), window.start),
            min(float(e), window.end),
            f"GPU idle ({c.replace('_', ' ')})" if c else "GPU idle",
        )
        for s, e, c in zip(rows["start"].tolist(), rows["end"].tolist(), causes, strict=True)
    ]


# A merged bar collects events over at most this many `min_width`s (about pixels).
MERGE_SPAN = 32


def merge_small_events(events: Sequence[TimelineEvent], min_width: float) -> list[TimelineEvent]:
    """Merge events narrower than `min_width` (microseconds, about one pixel) in the same lane into one
    event ("37 events merged") that keeps their summed time (`busy_us`), so tens of thousands of tiny
    kernels become a few hundred bars. Wide events are kept as they are.

    plotly.js widens any bar thinner than a pixel to one pixel, so 500 gaps of 8 us between kernels
    would draw as 500 pixels of "GPU idle": a solid band on a 96%-busy run. So a run of tiny events
    is merged until it holds one pixel of time (or spans MERGE_SPAN * min_width), and the figure draws
    it as long as its summed time (`drawn_extent`): the lanes stay to scale. Input order does not
    matter."""
    by_lane: dict[str, list[TimelineEvent]] = {}
    for ev in events:
        by_lane.setdefault(ev.lane, []).append(ev)
    out: list[TimelineEvent] = []
    for lane in sorted(by_lane):
        out.extend(_merge_lane(lane, by_lane[lane], min_width))
    return out


def _merge_lane(lane: str, events: Sequence[TimelineEvent], min_width: float) -> list[TimelineEvent]:
    out: list[TimelineEvent] = []
    cluster: list[TimelineEvent] = []
    busy = 0.0

    def flush() -> None:
        if cluster:
            out.append(cluster[0] if len(cluster) == 1 else _merged(lane, cluster))
            cluster.clear()

    for ev in sorted(events, key=lambda e: (e.start, e.end, e.group, e.label)):
        wide = ev.end - ev.start >= min_width
        if cluster and (wide or busy >= min_width or ev.end - cluster[0].start > MERGE_SPAN * min_width):
            flush()
        if wide:
            out.append(ev)
            continue
        busy = ev.busy_us if not cluster else busy + ev.busy_us
        cluster.append(ev)
    flush()
    return out


def _merged(lane: str, cluster: Sequence[TimelineEvent]) -> TimelineEvent:
    weight: dict[str, float] = {}
    names: dict[str, int] = {}
    for ev in cluster:
        weight[ev.group] = weight.get(ev.group, 0.0) + ev.busy_us
        for name, count in ev.names or ((ev.label, 1),):
            names[name] = names.get(name, 0) + count
    group = sorted(weight.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    count = sum(ev.count for ev in cluster)
    busy = sum(ev.busy_us for ev in cluster)
    top = tuple(sorted(names.items(), key=lambda kv: (-kv[1], kv[0]))[:3])
    start, end = min(e.start for e in cluster), max(e.end for e in cluster)
    if group == "idle":
        label = f"{count} idle gaps merged: {busy:.1f} us idle over {end - start:.1f} us"
    else:
        label = f"{count} events merged: {busy:.1f} us over {end - start:.1f} us; most: " + "; ".join(
            f"{_short(n, 60)} x{c}" for n, c in top
        )
    return TimelineEvent(lane, group, start, end, label, count, busy, top)


def drawn_extent(event: TimelineEvent) -> tuple[float, float]:
    """Where a bar is drawn: an event as it is; a merged event as long as its summed time (capped at
    its span), centred in the span it covers, so the drawing stays to scale."""
    if event.count <= 1:
        return event.start, event.end
    span = event.end - event.start
    length = min(max(event.busy_us, 0.0), span)
    start = event.start + (span - length) / 2.0
    return start, start + length


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bound_events(
    events: Sequence[TimelineEvent], span_us: float, max_events: int
) -> tuple[list[TimelineEvent], int]:
    """Merge tiny events with a growing width until at most `max_events` bars remain.
    Returns (bars, number of merge passes); the first width is about one pixel of a 1500 px plot."""
    width = max(span_us / 1500.0, 1e-3)
    bars = merge_small_events(events, width)
    passes = 1
    while len(bars) > max_events and passes < 30:
        width *= 2.0
        bars = merge_small_events(bars, width)
        passes += 1
    if len(bars) > max_events:  # pathological: keep the widest bars, drop the rest deterministically
        bars = sorted(bars, key=lambda e: (-(e.end - e.start), e.lane, e.start))[:max_events]
    return bars, passes


_GPU_LANES = ("GPU · kernels", "GPU · copies", "GPU · idle")
_CPU_LANES = ("CPU · steps", "CPU · data loading", "CPU · annotations", "CPU · syncs")


def _group_color(lane: str, group: str) -> str:
    if lane == "GPU · kernels":
        return FAMILY_COLORS.get(group, FAMILY_COLORS["other"])
    if lane == "GPU · copies":
        return COPY_COLORS.get(group, _UNKNOWN_COPY_COLOR)
    return LANE_COLORS.get(group, "#888888")


def _group_name(lane: str, group: str) -> str:
    if lane == "GPU · kernels":
        return f"kernel: {group}"
    if lane == "GPU · copies":
        return "memset" if group == "memset" else f"copy {group}"
    return {
        "step": "step span",
        "data": "DataLoader wait",
        "annotation": "annotation",
        "sync": "sync / scalar read",
        "idle": "GPU idle",
    }.get(group, group)


def timeline_figure(
    events: Sequence[TimelineEvent], window: TimelineWindow, *, max_events: int = 2500
) -> Figure:
    """Horizontal-bar timeline of the window: CPU lanes on top, GPU lanes below, x in ms from the
    window start; step boundaries as dashed lines. Zoom by dragging on the x axis (y is fixed)."""
    span = window.end - window.start
    bars, _ = bound_events(events, span, max_events)
    lanes = [lane for lane in (*_CPU_LANES, *_GPU_LANES) if any(b.lane == lane for b in bars)]
    groups: dict[tuple[str, str], list[TimelineEvent]] = {}
    for b in bars:
        groups.setdefault((b.lane, b.group), []).append(b)
    data: list[dict[str, Any]] = []
    order = {lane: i for i, lane in enumerate((*_CPU_LANES, *_GPU_LANES))}
    for lane, group in sorted(groups, key=lambda k: (order.get(k[0], 99), k[1])):
        items = sorted(groups[(lane, group)], key=lambda e: (e.start, e.end, e.label))
        extents = [drawn_extent(e) for e in items]
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": _group_name(lane, group),
                "y": [lane] * len(items),
                "base": [_r((s - window.start) / 1000.0, 4) for s, _e in extents],
                "x": [_r((e - s) / 1000.0, 4) for s, e in extents],
                "hovertext": [
                    f"{_short(e.label, 120)}<br>{e.busy_us:.1f} us at +{(e.start - window.start) / 1000.0:.3f} ms"
                    for e in items
                ],
                "hoverinfo": "text",
                "marker": {
                    "color": _group_color(lane, group),
                    # step spans touch each other: a white edge keeps the boundaries visible
                    "line": {"width": 1, "color": "white"} if group == "step" else {"width": 0},
                },
                "width": 0.8,
            }
        )
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for step, s, _e in window.steps:
        x = _r((s - window.start) / 1000.0, 4)
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": x,
                "x1": x,
                "y0": 0,
                "y1": 1,
                "line": {"color": "#555555", "width": 1, "dash": "dash"},
            }
        )
        annotations.append(
            {
                "xref": "x",
                "yref": "paper",
                "x": x,
                "y": 1.0,
                "yanchor": "bottom",
                "xanchor": "left",
                "text": f"step {step}",
                "showarrow": False,
                "font": {"size": 11, "color": "#555555"},
            }
        )
    # The legend goes under the x axis title, placed in pixels: a legend at a fixed paper fraction
    # below the plot overlapped the axis title on timelines with few lanes (the fraction is of the plot
    # area, whose height depends on the lane count).
    plot_px = 34 * max(len(lanes), 2)
    axis_px = 52  # tick labels and the axis title under the plot
    bottom_px = axis_px + 22 * 5  # up to five rows of legend entries
    layout = _base_layout(30 + plot_px + bottom_px)
    layout.update(
        {
            "barmode": "overlay",
            "bargap": 0.1,
            "dragmode": "zoom",
            "xaxis": {
                "title": {"text": "ms from the first shown step"},
                "range": [0, _r(span / 1000.0, 4)],
                "zeroline": False,
            },
            "yaxis": {
                "type": "category",
                "categoryorder": "array",
                "categoryarray": lanes,
                "autorange": "reversed",
                "fixedrange": True,
            },
            "shapes": shapes,
            "annotations": annotations,
            "legend": {"orientation": "h", "yanchor": "top", "y": -axis_px / plot_px, "x": 0, "xanchor": "left"},
            "margin": {"l": 130, "r": 20, "t": 30, "b": bottom_px},
        }
    )
    return {"data": data, "layout": layout}


# ---- NVML ------------------------------------------------------------------------------------------

# (panel title, unit, [(column, scale, series label)], optional reference column)
NVML_PANELS: tuple[tuple[str, str, tuple[tuple[str, float, str], ...]], ...] = (
    (
        "GPU utilization",
        "%",
        (("util_gpu_pct", 1.0, "kernel running %"), ("util_mem_pct", 1.0, "memory busy %")),
    ),
    (
        "Memory used",
        "GiB",
        (("mem_used_bytes", 1.0 / 2**30, "used"), ("mem_total_bytes", 1.0 / 2**30, "total")),
    ),
    ("Power", "W", (("power_w", 1.0, "power"), ("power_limit_w", 1.0, "limit"))),
    ("SM clock", "MHz", (("sm_clock_mhz", 1.0, "SM clock"), ("sm_clock_max_mhz", 1.0, "max"))),
    (
        "PCIe",
        "MB/s",
        (("pcie_rx_kbps", 1.0 / 1000.0, "rx (to GPU)"), ("pcie_tx_kbps", 1.0 / 1000.0, "tx (from GPU)")),
    ),
)
_REFERENCE_SERIES = {"mem_total_bytes", "power_limit_w", "sm_clock_max_mhz"}
_SERIES_DASHES = ("solid", "dot")
_SERIES_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d")


def nvml_available_panels(nvml: pd.DataFrame | None) -> tuple[list[str], list[str]]:
    """(panels with at least one value, panels NVML reported nothing for)."""
    shown: list[str] = []
    missing: list[str] = []
    for title, _unit, series in NVML_PANELS:
        ok = nvml is not None and any(col in nvml and nvml[col].notna().any() for col, _s, _l in series)
        (shown if ok else missing).append(title)
    return shown, missing


def _bucket(
    times: list[float], values: list[float | None], max_points: int
) -> tuple[list[float], list[float | None]]:
    """Down-sample to at most max_points by averaging consecutive buckets (NaN-aware)."""
    n = len(times)
    if n <= max_points:
        return times, values
    size = math.ceil(n / max_points)
    out_t: list[float] = []
    out_v: list[float | None] = []
    for i in range(0, n, size):
        ts = times[i : i + size]
        vs = [v for v in values[i : i + size] if v is not None]
        out_t.append(sum(ts) / len(ts))
        out_v.append(sum(vs) / len(vs) if vs else None)
    return out_t, out_v


def nvml_figure(
    nvml: pd.DataFrame,
    *,
    t0: float | None = None,
    window: tuple[float, float] | None = None,
    max_points: int = 600,
) -> Figure:
    """Stacked panels sharing the time axis (seconds from `t0`, default the first sample): utilization,
    memory, power, SM clock, PCIe; one line per GPU per series (limits dashed); the capture window
    (`window`, unix seconds) shaded. Panels with no value at all are left out."""
    shown, _missing = nvml_available_panels(nvml)
    panels = [p for p in NVML_PANELS if p[0] in shown]
    times_all = nvml["t_unix_s"].astype(float)
    start = float(t0) if t0 is not None and _finite(t0) else float(times_all.min()) if len(nvml) else 0.0
    gpus = sorted({int(g) for g in nvml["gpu_index"].dropna().tolist()}) if "gpu_index" in nvml else [0]
    n = max(len(panels), 1)
    gap = 0.04
    height_each = (1.0 - gap * (n - 1)) / n
    layout = _base_layout(150 * n + 80)
    # each panel's legend stands to its right (a screenshot or a printout says which line is which)
    layout.update({"margin": {"l": 70, "r": 190, "t": 40, "b": 40}, "hovermode": "x unified"})
    data: list[dict[str, Any]] = []
    for i, (title, unit, series) in enumerate(panels):
        axis = "" if i == 0 else str(i + 1)
        legend = "legend" if i == 0 else f"legend{i + 1}"
        top = 1.0 - i * (height_each + gap)
        layout[f"yaxis{axis}"] = {
            "domain": [_r(top - height_each, 4), _r(top, 4)],
            "title": {"text": f"{title}<br>({unit})", "font": {"size": 11}},
            "rangemode": "tozero",
            "anchor": "x",
        }
        layout[legend] = {
            "x": 1.01,
            "xanchor": "left",
            "y": _r(top, 4),
            "yanchor": "top",
            "font": {"size": 11},
            "tracegroupgap": 2,
        }
        for gpu_pos, gpu in enumerate(gpus):
            rows = nvml[nvml["gpu_index"] == gpu] if "gpu_index" in nvml else nvml
            rows = rows.sort_values("t_unix_s")
            t_rel = [float(t) - start for t in rows["t_unix_s"].astype(float).tolist()]
            for j, (col, scale, label) in enumerate(series):
                if col not in rows or not rows[col].notna().any():
                    continue
                vals = [None if v is None or not _finite(v) else float(v) * scale for v in rows[col].tolist()]
                bt, bv = _bucket(t_rel, vals, max_points)
                ref = col in _REFERENCE_SERIES
                data.append(
                    {
                        "type": "scatter",
                        "mode": "lines",
                        "name": f"GPU {gpu} {label}" if len(gpus) > 1 else label,
                        "legendgroup": f"{title}",
                        "legend": legend,
                        "showlegend": True,
                        "x": [_r(t, 2) for t in bt],
                        "y": [_r(v, 2) for v in bv],
                        "xaxis": "x",
                        "yaxis": f"y{axis}",
                        # one colour per GPU; a panel's series told apart by the line's style
                        "line": {
                            "color": _SERIES_COLORS[gpu_pos % len(_SERIES_COLORS)],
                            "width": 1 if ref else 1.6,
                            "dash": "dash" if ref else _SERIES_DASHES[j % len(_SERIES_DASHES)],
                        },
                        "hovertemplate": f"%{{y}} {unit}<extra>{'GPU ' + str(gpu) + ' ' if len(gpus) > 1 else ''}{label}</extra>",
                    }
                )
    layout["xaxis"] = {
        "title": {"text": "seconds since the run started"},
        "anchor": f"y{'' if n == 1 else n}",
    }
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    if window is not None and _finite(window[0]) and _finite(window[1]):
        x0, x1 = _r(window[0] - start, 2), _r(window[1] - start, 2)
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": x0,
                "x1": x1,
                "y0": 0,
                "y1": 1,
                "fillcolor": "rgba(76,120,168,0.12)",
                "line": {"width": 0},
                "layer": "below",
            }
        )
        annotations.append(
            {
                "xref": "x",
                "yref": "paper",
                "x": x0,
                "y": 1.0,
                "yanchor": "bottom",
                "xanchor": "left",
                "text": "capture window",
                "showarrow": False,
                "font": {"size": 11, "color": "#4c78a8"},
            }
        )
    layout["shapes"] = shapes
    layout["annotations"] = annotations
    return {"data": data, "layout": layout}
