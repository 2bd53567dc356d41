"""Metrics computed from a `TraceModel` (and a `RunInfo` when analyzing a run directory).

`compute_metrics(trace, run)` -> `Metrics`:
  * `window`: dict of JSON-safe scalars over the analyzed steps (keys in `WINDOW_KEYS`, documented
    precisely in docs/metrics.md). A value that cannot be computed is None, never 0.
  * `per_step`: one row per segmented step (columns `PER_STEP_COLUMNS`), `outlier` steps included
    but marked; window medians exclude them.
  * `kernels`: aggregate by kernel name (columns `KERNEL_AGG_COLUMNS`), sorted by total time.
  * `ops`: aggregate of cpu ops by name (columns `OP_AGG_COLUMNS`), sorted by self time.
  * `gaps`: every GPU idle gap inside an analyzed step with its attributed cause (`GAP_COLUMNS`).
  * `gpu_peak`: `GpuPeak` for the trace's GPU (gpuadvisor.hardware), or None when the GPU is unknown.
  * `busy_classes`: kernel time by class and its distance to the roofline (the step model's
    `busy_by_class`, docs/model.md "Busy time").

Everything is vectorized with numpy/pandas (an 80k-event trace takes well under a second).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gpuadvisor.hardware import MATMUL_FAMILIES, GpuPeak, classify_tensor_core, gpu_peak_for
from gpuadvisor.hardware import tf32_allowed as _tf32_allowed
from gpuadvisor.manifest import host_step_durations
from gpuadvisor.stepmodel import build as _intervals
from gpuadvisor.stepmodel import build as sb
from gpuadvisor.stepmodel import build_step_model
from gpuadvisor.stepmodel import tables as _tables
from gpuadvisor.stepmodel.intervals import rows_where
from gpuadvisor.stepmodel.kernels import group_modes, sorted_name_groups
from gpuadvisor.stepmodel.tables import sm_use

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.runinfo import RunInfo
    from gpuadvisor.stepmodel import StepModel
    from gpuadvisor.trace.model import TraceModel

WindowValue = float | int | str | bool | None

# Window metric keys (stable; add at the end). Units in the names: _ms milliseconds, _us microseconds,
# _fraction 0..1 share of the median analyzed step time unless said otherwise.
WINDOW_KEYS: tuple[str, ...] = (
    "step_source",
    "steps_total",
    "steps_analyzed",
    "step_time_ms",
    "step_time_mean_ms",
    "step_time_p90_ms",
    "step_time_spread",
    "gpu_busy_ms",
    "gpu_busy_fraction",
    "gpu_idle_fraction",
    "compute_fraction",
    "collective_fraction",
    "memset_fraction",
    "copy_fraction",
    "copy_htod_fraction",
    "copy_dtoh_fraction",
    "copy_dtod_fraction",
    "copy_pageable_fraction",
    "copy_pinned_fraction",
    "idle_data_loading_fraction",
    "idle_host_sync_fraction",
    "idle_launch_overhead_fraction",
    "idle_other_fraction",
    "dataloader_wait_ms",
    "dataloader_wait_fraction",
    "sync_blocked_ms",
    "sync_blocked_fraction",
    "scalar_reads_per_step",
    "kernels_per_step",
    "kernel_median_us",
    "sm_use",
    "occupancy_weighted_pct",
    "matmul_fraction",
    "tensor_core_fraction",
    "fp32_matmul_fraction",
    "achieved_tflops",
    "peak_tflops",
    "peak_dtype",
    "mfu",
    "peak_memory_bytes",
    "memory_capacity_bytes",
    "peak_memory_fraction",
    "gpu_name",
    "num_sms",
    "kernels_total",
    "trace_span_ms",
    "unprofiled_step_time_ms",
    "profiled_step_time_ms",
    "profiler_overhead_ms",
    "profiler_overhead_fraction",
    "nvml_util_mean_pct",
    "nvml_util_window_mean_pct",
    "nvml_sm_clock_mean_mhz",
    "nvml_sm_clock_max_mhz",
    "nvml_sm_clock_ratio",
    "nvml_power_mean_w",
    "nvml_power_limit_w",
    "nvml_power_fraction",
    "nvml_throttle_reasons",
    "nvml_pcie_rx_mbps",
    "nvml_pcie_tx_mbps",
    "nvml_pcie_gen",
    "nvml_pcie_gen_max",
    "nvml_pcie_width",
    "nvml_pcie_width_max",
    "idle_dependency_fraction",
    "replay_step_time_ms",
    "replay_fit",
    "profiler_host_scale",
    "gpu_active_fraction",
    "collective_exposed_fraction",
    "copy_exposed_fraction",
    # the run the user pays for (issue 38): its steps timed without the profiler after start-up
    "run_mean_step_ms",
    "run_median_step_ms",
    "run_steps_timed",
    "run_stall_steps",
    "run_stall_steps_timed",
    "run_stall_period",
    "run_stall_excess_ms",
    "run_stall_cause",
    "run_stall_fraction",
    "startup_seconds",
    "step_times_disagree",
)

# The per-step table is the step model's (gpuadvisor/stepmodel/tables.py).
PER_STEP_COLUMNS = _tables.PER_STEP_COLUMNS

KERNEL_AGG_COLUMNS: tuple[str, ...] = (
    "name",
    "family",
    "count",
    "total_us",
    "mean_us",
    "median_us",
    "share",  # of total kernel time in the analyzed window
    "grid",  # most common "x,y,z"
    "block",
    "blocks",  # median blocks
    "blocks_per_sm",  # median
    "occupancy_pct",  # median
    "tensor_core",  # True / False / None (not a matmul/conv or unknown)
)

OP_AGG_COLUMNS: tuple[str, ...] = (
    "name",
    "count",
    "total_us",
    "self_us",  # total minus time covered by child ops on the same thread
    "input_dims",  # example (the most common)
    "input_types",  # example (the most common)
    "flops",  # sum
)

GAP_COLUMNS: tuple[str, ...] = ("step", "start", "end", "dur", "cause")

GAP_CAUSES: tuple[str, ...] = ("data_loading", "host_sync", "launch_overhead", "other")


class Metrics:
    """See the module docstring; `window` keys are `WINDOW_KEYS` (every key always present).

    `kernels`, `ops`, `gaps` and `busy_classes` are given as tables or as functions that make them:
    only the terminal, Markdown and HTML outputs show them, so `--format json` (and every rule, which
    reads the step model, not these) never pays for them. A function is called once, at the first read;
    what it reads is fixed when it is made (the step model's tables are read-only)."""

    def __init__(
        self,
        window: dict[str, WindowValue],
        per_step: pd.DataFrame,
        kernels: pd.DataFrame | Callable[[], pd.DataFrame],
        ops: pd.DataFrame | Callable[[], pd.DataFrame],
        gaps: pd.DataFrame | Callable[[], pd.DataFrame],
        gpu_peak: GpuPeak | None = None,
        notes: list[str] | None = None,
        model: StepModel | None = None,  # the step model the metrics were computed from
        # kernel time per class per analyzed step and its distance to the roofline
        # (gpuadvisor.stepmodel.kernels.BY_CLASS_COLUMNS); None without GPU kernels
        busy_classes: pd.DataFrame | Callable[[], pd.DataFrame | None] | None = None,
    ) -> None:
        self.window = window
        self.per_step = per_step
        self.gpu_peak = gpu_peak
        self.notes: list[str] = [] if notes is None else notes
        self.model = model
        self._tables: dict[str, Any] = {"kernels": kernels, "ops": ops, "gaps": gaps, "busy_classes": busy_classes}

    def _table(self, key: str) -> Any:
        value = self._tables[key]
        if callable(value):
            value = self._tables[key] = value()
        return value

    @property
    def kernels(self) -> pd.DataFrame:
        """Aggregate by kernel name (KERNEL_AGG_COLUMNS), sorted by total time."""
        out: pd.DataFrame = self._table("kernels")
        return out

    @property
    def ops(self) -> pd.DataFrame:
        """Aggregate of cpu ops by name (OP_AGG_COLUMNS), sorted by self time."""
        out: pd.DataFrame = self._table("ops")
        return out

    @property
    def gaps(self) -> pd.DataFrame:
        """Every GPU idle gap inside an analyzed step with its cause (GAP_COLUMNS)."""
        out: pd.DataFrame = self._table("gaps")
        return out

    @property
    def busy_classes(self) -> pd.DataFrame | None:
        """Kernel time by class and its distance to the roofline; None without GPU kernels."""
        out: pd.DataFrame | None = self._table("busy_classes")
        return out

    def get(self, key: str) -> Any:
        return self.window.get(key)


# ---- interval helpers (vectorized) -----------------------------------------------------------------

TINY_COPY_BYTES = _intervals.TINY_COPY_BYTES  # a DtoH copy this small is a scalar read


# The interval algebra lives in the step model (one implementation for the whole analysis).
union_intervals = _intervals.union_intervals
covered = _intervals.covered


def _f(x: Any) -> float | None:
    """JSON-safe float (None for NaN/inf/None)."""
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _i(x: Any) -> int | None:
    v = _f(x)
    return int(v) if v is not None else None


# ---- compute_metrics -------------------------------------------------------------------------------


def _empty(cols: tuple[str, ...]) -> pd.DataFrame:
    # lazy: pandas stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import pandas as pd

    df: pd.DataFrame = pd.DataFrame({c: pd.Series([], dtype=object) for c in cols})
    return df


def _op_self_times(ops: pd.DataFrame) -> Any:
    """Self time of each cpu op: its duration minus its direct children's (same thread, nested).

    Ops sorted by (thread, start, longest first); an op's parent is the latest op before it on its
    thread that is still open at its start. Vectorized: an op's nesting depth is the ops of its thread
    started before it minus those ended by its start (exact when the thread's ops nest, as the
    profiler's do), and its parent is the latest op one level up. Threads whose ops do not nest that
    way (a count that would go negative) take the stack walk of `_op_self_times_walk`."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    n = len(ops)
    self_t = ops["dur"].to_numpy(dtype=np.float64).copy()
    if n == 0:
        return self_t
    order = np.lexsort((-ops["dur"].to_numpy(), ops["ts"].to_numpy(), ops["tid"].fillna(-1).to_numpy()))
    ts = ops["ts"].to_numpy(dtype=np.float64)[order]
    en = ops["end"].to_numpy(dtype=np.float64)[order]
    du = ops["dur"].to_numpy(dtype=np.float64)[order]
    tid = ops["tid"].fillna(-1).to_numpy()[order]
    bounds = np.flatnonzero(np.r_[True, tid[1:] != tid[:-1], True])
    parent = np.full(n, -1, dtype=np.int64)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        p = _parents_nested(ts[a:b], en[a:b])
        if p is None:
            return _op_self_times_walk(ops, order, self_t)
        parent[a:b] = np.where(p >= 0, p + a, -1)
    has = parent >= 0
    children = np.bincount(parent[has], weights=du[has], minlength=n)
    self_t[order] -= children
    return np.clip(self_t, 0.0, None)


def _parents_nested(ts: Any, en: Any) -> Any:
    """Parent index of each op of one thread (sorted by start, longest first), -1 at the top, as the
    stack walk finds it; None when the ops do not nest (an op that outlasts its parent), where only
    the walk is right.

    An op's ancestors are the earlier ops still open at its start: depth = earlier ops - earlier ops
    ended by its start. Ops ended by a start are counted over all ops, less the zero-length ops at that
    same start that sort at or after it (the only later ops that can have ended by then)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    m = len(ts)
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    idx = np.arange(m)
    ended_any = np.searchsorted(np.sort(en), ts, side="right")
    zero = (en <= ts).astype(np.int64)
    first_of_ts = np.r_[0, np.flatnonzero(ts[1:] != ts[:-1]) + 1]
    group = np.repeat(np.arange(len(first_of_ts)), np.diff(np.r_[first_of_ts, m]))
    csum = np.cumsum(zero)
    group_end_sum = csum[np.r_[first_of_ts[1:] - 1, m - 1]][group]
    later_zero = group_end_sum - csum + zero  # zero-length ops at this start, from this op on
    depth = idx - (ended_any - later_zero)
    if depth.min() < 0:
        return None
    parent = np.full(m, -1, dtype=np.int64)
    for d in range(1, int(depth.max()) + 1):
        last_up = np.maximum.accumulate(np.where(depth == d - 1, idx, -1))
        sel = depth == d
        parent[sel] = last_up[sel]
    has = parent >= 0
    p = parent[has]
    # nesting: each parent is open at its child's start and the child ends within it
    if not (bool(np.all(p >= 0)) and bool(np.all(en[p] > ts[has])) and bool(np.all(en[has] <= en[p]))):
        return None
    return parent


def _op_self_times_walk(ops: pd.DataFrame, order: Any, self_t: Any) -> Any:
    """The stack walk `_op_self_times` falls back to (ops that do not nest)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    n = len(ops)
    ts = ops["ts"].to_numpy()[order].tolist()
    en = ops["end"].to_numpy()[order].tolist()
    du = ops["dur"].to_numpy()[order].tolist()
    tid = ops["tid"].fillna(-1).to_numpy()[order].tolist()
    pos = order.tolist()
    stack: list[int] = []  # indices into the sorted arrays
    cur_tid: Any = None
    for j in range(n):
        if tid[j] != cur_tid:
            stack.clear()
            cur_tid = tid[j]
        while stack and en[stack[-1]] <= ts[j]:
            stack.pop()
        if stack:
            self_t[pos[stack[-1]]] -= du[j]
        stack.append(j)
    return np.clip(self_t, 0.0, None)


def compute_metrics(
    trace: TraceModel, run: RunInfo | None = None, model: StepModel | None = None
) -> Metrics:
    """Every metric of docs/metrics.md, a projection of the step model (built here unless given): its
    per-step table and window kernels, with the run's memory, NVML samples and host-timed steps.
    Never raises for missing inputs: values become None."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if model is None:
        model = build_step_model(trace, run)
    gpu_name, num_sms = model.gpu_name, model.sm_count
    peak = gpu_peak_for(gpu_name, num_sms)
    per_step = model.per_step
    A = per_step[per_step["analyzed"].to_numpy(dtype=bool)]
    w: dict[str, WindowValue] = {key: None for key in WINDOW_KEYS}
    w.update(
        step_source=trace.step_source,
        steps_total=len(per_step),
        steps_analyzed=len(A),
        gpu_name=gpu_name,
        num_sms=num_sms,
        kernels_total=len(trace.kernels),
        trace_span_ms=_f(trace.meta.trace_span_us / 1e3),
    )
    total_t = float(A["step_time_us"].sum())
    if len(A) and total_t > 0:
        w.update(_step_metrics(A, total_t, trace.has_gpu_activity))
        if np.nansum(model.op_flops) > 0:
            # a host that ran ahead of the GPU timed shorter steps than the GPU ran them: the rate is
            # over the GPU's pace (the step without the profiler, which the GPU's work explains)
            rate_t = total_t
            if model.host_ran_ahead and model.unprofiled_step_ms:
                rate_t = max(total_t, len(A) * model.unprofiled_step_ms * 1e3)
            w["achieved_tflops"] = _f(float(A["flops"].sum()) / (rate_t * 1e-6) / 1e12)
        if trace.has_gpu_activity:
            # (A trace without kernels is already explained by the loader's warning.)
            dependency = model.idle[(model.idle["cause"] == sb.IDLE_DEPENDENCY) & model.idle["seg"].isin(A.index)]
            w["idle_dependency_fraction"] = _f(float(dependency["dur"].sum()) / total_t)

    # --- kernels in the analyzed window: aggregate, SM use, occupancy, tensor cores, MFU
    lo, hi = (float(A["start"].min()), float(A["end"].max())) if len(A) else (-np.inf, np.inf)
    kw = trace.kernel_ops()
    if len(kw):  # a slice of the time-sorted kernels, no copy of their 27 columns (5M events: ~300 MB)
        ts = kw["ts"].to_numpy()
        kw = rows_where(kw, (ts >= lo) & (ts < hi))
    settings = run.settings if run is not None else {}
    fp32_peak = peak.peak("fp32") if peak else None
    tc = classify_tensor_core(kw, settings, fp32_peak) if len(kw) else _empty(("name", "tensor_core", "basis"))
    tc_map = dict(zip(tc["name"], tc["tensor_core"], strict=True))
    w.update(_kernel_metrics(kw, tc_map, num_sms))
    if trace.has_gpu_activity:
        w["kernels_per_step"] = _f(model.kernels_per_step)
    w.update(_mfu(peak, w, trace.cpu_ops.assign(flops=model.op_flops), settings))

    w.update(_memory_metrics(trace, run))
    if run is not None and run.nvml is not None:
        _nvml_metrics(run, w)
    if run is not None:
        _profiler_overhead(run, w)
    _run_steps(model, w)
    if model.program.steps:
        w["replay_step_time_ms"] = _f(model.baseline.period_us / 1e3)
        w["replay_fit"] = _f(model.replay_fit)
        w["profiler_host_scale"] = _f(model.host_scale)
    # the tables only the terminal, Markdown and HTML outputs show: made when first read, from the
    # inputs fixed here
    cpu_ops, idle, steps = trace.cpu_ops, model.idle, trace.steps
    has_window_kernels = len(model.window_kernels) > 0
    return Metrics(
        window=w,
        per_step=per_step,
        kernels=lambda: _kernel_agg(kw, tc_map),
        ops=lambda: _ops_agg(cpu_ops, lo, hi),
        gaps=lambda: _gaps(idle, steps),
        gpu_peak=peak,
        notes=[],
        model=model,
        busy_classes=(lambda: model.busy_by_class) if has_window_kernels else None,
    )


# Window fractions: the share of the analyzed steps' time, from the per-step column.
_FRACTIONS: tuple[tuple[str, str], ...] = (
    ("gpu_busy_fraction", "gpu_busy_us"),  # compute only (issue 30): collectives and copies apart
    ("gpu_idle_fraction", "gpu_idle_us"),
    ("gpu_active_fraction", "gpu_active_us"),  # any GPU work (what gpu_busy_fraction was before)
    ("collective_exposed_fraction", "collective_exposed_us"),
    ("copy_exposed_fraction", "copy_exposed_us"),
    ("compute_fraction", "compute_us"),
    ("collective_fraction", "collective_us"),
    ("memset_fraction", "memset_us"),
    ("copy_fraction", "copy_us"),
    ("copy_htod_fraction", "copy_htod_us"),
    ("copy_dtoh_fraction", "copy_dtoh_us"),
    ("copy_dtod_fraction", "copy_dtod_us"),
    ("copy_pageable_fraction", "copy_pageable_us"),
    ("copy_pinned_fraction", "copy_pinned_us"),
    ("idle_data_loading_fraction", "idle_data_loading_us"),
    ("idle_host_sync_fraction", "idle_host_sync_us"),
    ("idle_launch_overhead_fraction", "idle_launch_overhead_us"),
    ("idle_other_fraction", "idle_other_us"),
)


def _step_metrics(A: pd.DataFrame, total_t: float, gpu_activity: bool) -> dict[str, WindowValue]:
    """The window's step time and its split, over the analyzed rows `A` of the per-step table."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    st = A["step_time_us"].to_numpy()
    med = float(np.median(st))
    w: dict[str, WindowValue] = {
        "step_time_ms": _f(med / 1e3),
        "step_time_mean_ms": _f(st.mean() / 1e3),
        "step_time_p90_ms": _f(np.percentile(st, 90) / 1e3),
        "step_time_spread": _f((np.percentile(st, 90) - np.percentile(st, 10)) / med) if med > 0 else None,
        "dataloader_wait_ms": _f(float(A["dataloader_wait_us"].median()) / 1e3),
        "dataloader_wait_fraction": _f(float(A["dataloader_wait_us"].sum()) / total_t),
        "sync_blocked_ms": _f(float(A["sync_blocked_us"].median()) / 1e3),
        "sync_blocked_fraction": _f(float(A["sync_blocked_us"].sum()) / total_t),
        "scalar_reads_per_step": _f(float(A["scalar_reads"].mean())),
    }
    if gpu_activity:
        w["gpu_busy_ms"] = _f(float(A["gpu_busy_us"].median()) / 1e3)
        w.update({key: _f(float(A[col].sum()) / total_t) for key, col in _FRACTIONS})
    return w


def _kernel_metrics(kw: pd.DataFrame, tc_map: Mapping[str, Any], num_sms: int | None) -> dict[str, WindowValue]:
    """SM use, occupancy, matmul and tensor-core shares and the median duration of the window's kernels."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    w: dict[str, WindowValue] = {}
    if len(kw) == 0:
        return w
    d = kw["dur"].to_numpy(dtype=np.float64)
    w["sm_use"] = _f(sm_use(kw, num_sms))
    occ = kw["occupancy_pct"].to_numpy(dtype=np.float64)
    fam = kw["family"].astype(str).to_numpy()
    # Persistent Hopper GEMMs / attention kernels report 0 by design (docs/trace-inputs.md, "Facts from real traces"): leave them out.
    persistent = (occ == 0) & np.isin(fam, list(MATMUL_FAMILIES))
    okc = ~np.isnan(occ) & ~persistent
    if okc.any() and d[okc].sum() > 0:
        w["occupancy_weighted_pct"] = _f(float((occ[okc] * d[okc]).sum() / d[okc].sum()))
    mm = np.isin(fam, list(MATMUL_FAMILIES))
    total_k = float(d.sum())
    mm_t = float(d[mm].sum())
    w["matmul_fraction"] = _f(mm_t / total_k) if total_k > 0 else None
    if mm_t > 0:
        verdict = kw["name"].astype(str).map(tc_map).to_numpy(dtype=object)
        w["tensor_core_fraction"] = _f(float(d[mm & (verdict == True)].sum()) / mm_t)  # noqa: E712
        w["fp32_matmul_fraction"] = _f(float(d[mm & (verdict == False)].sum()) / mm_t)  # noqa: E712
    w["kernel_median_us"] = _f(float(np.median(d)))
    return w


def _mfu(
    peak: GpuPeak | None, w: Mapping[str, WindowValue], ops: pd.DataFrame, settings: dict[str, Any]
) -> dict[str, WindowValue]:
    """MFU: the achieved TFLOP/s over the peak of the dtype the matmul ops ran in (`ops` with `flops`)."""
    if peak is None or w["achieved_tflops"] is None:
        return {}
    dtype_settings = settings
    if not settings and w["tensor_core_fraction"] is not None:
        # raw trace: no captured TF32 flag; FP32 ops whose GEMMs ran on tensor cores ran in TF32
        dtype_settings = {"allow_tf32_matmul": float(w["tensor_core_fraction"]) > 0.5}
    dtype = _dominant_dtype(ops, dtype_settings)
    pk = peak.peak(dtype) if dtype else None
    out: dict[str, WindowValue] = {"peak_dtype": dtype, "peak_tflops": pk}
    if pk:
        out["mfu"] = _f(float(w["achieved_tflops"]) / pk)  # type: ignore[arg-type]
    return out


def _memory_metrics(trace: TraceModel, run: RunInfo | None) -> dict[str, WindowValue]:
    """Peak memory (environment.json of a run) against the GPU's capacity (the run's, else the trace's)."""
    peak_bytes: int | None = None
    capacity: int | None = None
    if run is not None:
        mem = run.environment.get("memory") if isinstance(run.environment.get("memory"), dict) else {}
        assert isinstance(mem, dict)
        peak_bytes = _i(mem.get("peak_reserved_bytes", mem.get("peak_allocated_bytes")))
        cap = mem.get("total_bytes")
        if cap is None:
            g = run.gpu(0)
            cap = g.get("total_memory_bytes") if g else None
        capacity = _i(cap)
    if capacity is None:
        dev = trace.meta.device(0)
        capacity = _i(dev.get("totalGlobalMem")) if dev else None
    return {
        "peak_memory_bytes": peak_bytes,
        "memory_capacity_bytes": capacity,
        "peak_memory_fraction": _f(float(peak_bytes) / float(capacity)) if peak_bytes is not None and capacity else None,
    }


def _gaps(idle: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The model's idle intervals with their causes, by step number (GAP_COLUMNS)."""
    if len(idle) == 0:
        return _empty(GAP_COLUMNS)
    gaps: pd.DataFrame = (
        idle[["seg", "start", "end", "dur", "cause"]]
        .rename(columns={"seg": "step"})
        .assign(step=lambda df: steps["step"].to_numpy()[df["step"].to_numpy()])
    )
    return gaps


def _kernel_agg(kw: pd.DataFrame, tc_map: dict[str, Any]) -> pd.DataFrame:
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if len(kw) == 0:
        return _empty(KERNEL_AGG_COLUMNS)
    total = float(kw["dur"].sum())
    grid_code, grid_text = _dims_codes(kw, "grid")
    block_code, block_text = _dims_codes(kw, "block")
    # one group per distinct name, numbered in sorted order: every grouping below is on that number,
    # not on the name's text (a million distinct names are hashed once, in the loader)
    group, names = sorted_name_groups(kw["name"])
    df = kw.assign(_group=np.where(group >= 0, group, np.nan), _fam=kw["family"].astype(str))
    g = df.groupby("_group", sort=True)
    agg = g.agg(
        family=("_fam", "first"),
        count=("dur", "size"),
        total_us=("dur", "sum"),
        mean_us=("dur", "mean"),
        median_us=("dur", "median"),
        blocks=("blocks", "median"),
        blocks_per_sm=("blocks_per_sm", "median"),
        occupancy_pct=("occupancy_pct", "median"),
    )
    out = agg.reset_index()
    out["name"] = [names[int(i)] for i in out["_group"].tolist()]
    out["share"] = out["total_us"] / total if total > 0 else np.nan
    grids = group_modes(df["_group"], grid_code)
    blocks = group_modes(df["_group"], block_code)
    out["grid"] = [str(grid_text[grids[i]]) if i in grids else "<NA>" for i in out["_group"].tolist()]
    out["block"] = [str(block_text[blocks[i]]) if i in blocks else "<NA>" for i in out["_group"].tolist()]
    out["tensor_core"] = out["name"].map(lambda n: tc_map.get(n)).astype(object)
    out = out.sort_values(["total_us", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)
    result: pd.DataFrame = out[list(KERNEL_AGG_COLUMNS)]
    return result


def _dims_codes(kw: pd.DataFrame, what: str) -> tuple[Any, list[str]]:
    """Each kernel's launch dimensions `what` ("grid" or "block") as a code into distinct texts "x,y,z"
    ("<NA>" for a dimension the kernel does not carry: graph replays, ROCm kernels): the text is made
    once per distinct triple, not once per kernel."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    keys = []
    for axis in "xyz":
        v = kw[f"{what}_{axis}"].to_numpy(dtype=np.float64)
        ok = ~np.isnan(v) & (np.abs(v) < float(1 << 53))
        # the integer shown, or one below every shown value for "<NA>"
        keys.append(np.where(ok, np.trunc(np.where(ok, v, 0.0)), -float(1 << 53)).astype(np.int64))
    codes = np.zeros(len(kw), dtype=np.int64)
    for k in keys:  # re-coded after each axis: the packed key stays below len(kw) ** 2
        c = np.asarray(pd.factorize(k)[0], dtype=np.int64)
        codes = np.asarray(pd.factorize(codes * (int(c.max()) + 1 if len(c) else 1) + c)[0], dtype=np.int64)
    first = np.full(int(codes.max()) + 1 if len(codes) else 0, -1, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1, dtype=np.int64)
    texts = [",".join("<NA>" if k[i] == -(1 << 53) else str(int(k[i])) for k in keys) for i in first.tolist()]
    return pd.Series(codes, index=kw.index), texts


def _dominant_dtype(ops: pd.DataFrame, settings: dict[str, Any]) -> str | None:
    """The matmul dtype that carried most FLOPs: bf16, fp16, fp8, tf32 (fp32 inputs, TF32 allowed) or fp32."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if len(ops) == 0:
        return None
    f = ops[ops["flops"].notna() & (ops["flops"] > 0)]
    if len(f) == 0:
        return None
    weights: dict[str, float] = {}
    for types, fl in zip(
        f["input_types"].tolist(), f["flops"].to_numpy(dtype=np.float64).tolist(), strict=True
    ):
        t = types if isinstance(types, str) else ""
        if "Float8" in t:
            key = "fp8"
        elif "BFloat16" in t:
            key = "bf16"
        elif "Half" in t:
            key = "fp16"
        elif "float" in t:
            key = "tf32" if _tf32_allowed(settings, "gemm") else "fp32"
        else:
            continue
        weights[key] = weights.get(key, 0.0) + fl
    if not weights:
        return None
    return max(sorted(weights), key=lambda k: weights[k])


def _ops_agg(ops: pd.DataFrame, lo: float, hi: float) -> pd.DataFrame:
    # lazy: pandas stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import pandas as pd

    if len(ops) == 0:
        return _empty(OP_AGG_COLUMNS)
    self_t = _op_self_times(ops)
    inside = ((ops["ts"] >= lo) & (ops["ts"] < hi)).to_numpy()
    df = ops[inside].assign(_self=self_t[inside])
    if len(df) == 0:
        return _empty(OP_AGG_COLUMNS)
    # group on the name's category codes (no per-row str conversion), one row per name seen
    codes = df["name"].cat.codes.to_numpy() if isinstance(df["name"].dtype, pd.CategoricalDtype) else None
    key = pd.Series(codes, index=df.index) if codes is not None else df["name"].astype(str)
    g = df.assign(_key=key).groupby("_key", sort=False)
    out = g.agg(count=("dur", "size"), total_us=("dur", "sum"), self_us=("_self", "sum"))
    out["flops"] = g["flops"].sum(min_count=1)  # NaN for a name none of whose ops carries FLOPs
    out = out.reset_index()
    cats = df["name"].cat.categories if codes is not None else None
    out["name"] = [str(cats[c]) for c in out["_key"]] if cats is not None else out["_key"].astype(str)
    dims = group_modes(key, df["input_dims"])
    types = group_modes(key, df["input_types"])
    out["input_dims"] = pd.Series([dims.get(k) for k in out["_key"]], dtype=object).to_numpy()
    out["input_types"] = pd.Series([types.get(k) for k in out["_key"]], dtype=object).to_numpy()
    out = out.sort_values(["self_us", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)
    result: pd.DataFrame = out[list(OP_AGG_COLUMNS)]
    return result


# NVML clocks event reasons (nvmlClocksEventReason*, nvml.h)
_THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


def throttle_reason_names(mask: int) -> list[str]:
    return [name for bit, name in _THROTTLE_BITS if mask & bit]


def _nvml_metrics(run: RunInfo, w: dict[str, WindowValue]) -> None:
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    df = run.nvml
    if df is None or len(df) == 0:
        return
    g = run.gpu(0)
    uuid = g.get("uuid") if g else None
    if uuid is not None and (df["gpu_uuid"] == uuid).any():
        d = df[df["gpu_uuid"] == uuid]
    else:
        d = df[df["gpu_index"] == df["gpu_index"].min()]
    cap = run.manifest.get("capture") if isinstance(run.manifest.get("capture"), dict) else {}
    assert isinstance(cap, dict)
    ws, we = _f(cap.get("window_start_unix_s")), _f(cap.get("window_end_unix_s"))
    win = (
        d[(d["t_unix_s"] >= ws) & (d["t_unix_s"] <= we)] if ws is not None and we is not None else d.iloc[0:0]
    )
    view = win if len(win) else d

    def mean(frame: Any, col: str) -> float | None:
        v = frame[col].to_numpy(dtype=np.float64)
        v = v[~np.isnan(v)]
        return _f(v.mean()) if len(v) else None

    def mx(frame: Any, col: str) -> float | None:
        v = frame[col].to_numpy(dtype=np.float64)
        v = v[~np.isnan(v)]
        return _f(v.max()) if len(v) else None

    w["nvml_util_mean_pct"] = mean(d, "util_gpu_pct")
    w["nvml_util_window_mean_pct"] = mean(win, "util_gpu_pct") if len(win) else None
    w["nvml_sm_clock_mean_mhz"] = mean(view, "sm_clock_mhz")
    w["nvml_sm_clock_max_mhz"] = mx(d, "sm_clock_max_mhz")
    if w["nvml_sm_clock_mean_mhz"] is not None and w["nvml_sm_clock_max_mhz"]:
        w["nvml_sm_clock_ratio"] = _f(float(w["nvml_sm_clock_mean_mhz"]) / float(w["nvml_sm_clock_max_mhz"]))
    w["nvml_power_mean_w"] = mean(view, "power_w")
    w["nvml_power_limit_w"] = mx(d, "power_limit_w")
    if w["nvml_power_mean_w"] is not None and w["nvml_power_limit_w"]:
        w["nvml_power_fraction"] = _f(float(w["nvml_power_mean_w"]) / float(w["nvml_power_limit_w"]))
    tr = view["throttle_reasons"].to_numpy(dtype=np.float64)
    tr = tr[~np.isnan(tr)]
    if len(tr):
        mask = 0
        for v in np.unique(tr.astype(np.int64)).tolist():
            mask |= int(v)
        w["nvml_throttle_reasons"] = ",".join(throttle_reason_names(mask & ~0x1))  # idle is not a throttle
    for key, col in (("nvml_pcie_rx_mbps", "pcie_rx_kbps"), ("nvml_pcie_tx_mbps", "pcie_tx_kbps")):
        v = mean(view, col)
        w[key] = _f(v / 1e3) if v is not None else None
    for key, col in (("nvml_pcie_gen", "pcie_gen"), ("nvml_pcie_width", "pcie_width")):
        v = view[col].to_numpy(dtype=np.float64)
        v = v[~np.isnan(v)]
        w[key] = _i(v.min()) if len(v) else None
    for key, col in (("nvml_pcie_gen_max", "pcie_gen_max"), ("nvml_pcie_width_max", "pcie_width_max")):
        w[key] = _i(mx(d, col))


def _run_steps(model: StepModel, w: dict[str, WindowValue]) -> None:
    """The run's steps as the user pays for them (`StepModel.run_timing`): the mean step with stalls and
    costs between steps, the median beside it, the stall pattern, start-up seconds; and whether the
    profiled and unprofiled steps disagree (`StepModel.step_times_agree`)."""
    agree = model.step_times_agree
    w["step_times_disagree"] = None if agree is None else not agree
    timing = model.run_timing
    if timing is None:
        return
    w["run_mean_step_ms"] = _f(timing.mean_step_ms)
    w["run_median_step_ms"] = _f(timing.typical_step_ms)
    w["run_steps_timed"] = timing.steps_timed
    st = timing.stalls
    if st is not None:
        w["run_stall_steps"] = st.pattern.count
        w["run_stall_steps_timed"] = st.steps_timed
        w["run_stall_period"] = st.pattern.period
        w["run_stall_excess_ms"] = _f(st.pattern.mean_excess_ms)
        w["run_stall_cause"] = st.cause
        w["run_stall_fraction"] = _f(st.per_step_ms / timing.mean_step_ms) if timing.mean_step_ms > 0 else None
    if timing.startup is not None:
        w["startup_seconds"] = _f(timing.startup.seconds)


def _profiler_overhead(run: RunInfo, w: dict[str, WindowValue]) -> None:
    """How much slower a step was inside the profiler window than outside it, host-measured.

    torch.profiler with record_shapes adds CPU time to every op; in a run whose pace is set by the
    CPU (launch-bound, small batch), that shows up in the trace as extra GPU idle time that does not
    exist without the profiler. Rules that estimate host-side idle subtract this overhead."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    unprofiled, profiled = host_step_durations(run.record.capture)
    if len(unprofiled) < 2 or len(profiled) < 2:
        return
    u = float(np.median(unprofiled))
    pr = float(np.median(profiled))
    w["unprofiled_step_time_ms"] = _f(u)
    w["profiled_step_time_ms"] = _f(pr)
    w["profiler_overhead_ms"] = _f(max(0.0, pr - u))
    w["profiler_overhead_fraction"] = _f(max(0.0, pr - u) / pr) if pr > 0 else None
