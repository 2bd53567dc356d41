"""Step segmentation: which time intervals of the trace are training steps.

Sources, in order of preference (`TraceModel.step_source`):
  1. `profiler_step`: `ProfilerStep#N` annotations. Kineto writes each step twice: a `user_annotation`
     (the CPU span) and a `gpu_user_annotation` (the GPU span, often much longer because the GPU runs
     behind the CPU).
  2. `optimizer_step`: `Optimizer.step#...` annotations (traces without a profiler schedule).
  3. `dataloader`: DataLoader `__next__` annotations (inference / no optimizer).
  4. `whole_trace`: the whole trace is one step. `none` when the trace holds no events at all.

The analysis interval of a step, [start, end):
  * start = the step's CPU start;
  * end = the next step's CPU start; for the last step, the later of its CPU end and its GPU end.
  Steps therefore tile the window without overlap and without holes, so per-step sums add up to the
  window, and the median step time is the steady-state period (CPU start to CPU start) that a
  training loop runs at. GPU work of step N that drains during step N+1's CPU span counts as busy in
  step N+1: the question asked per interval is "was the GPU busy during this wall time".
  * For the fallbacks: optimizer steps run from the previous optimizer step's end (the trace's first
    CPU event for the first one) to this one's end; DataLoader steps from one `__next__` start to
    the next (the last one to the trace's end).
  * A step's GPU span (gpu_start/gpu_end), when there is no GPU annotation, is the span of the GPU
    activities (kernels, copies, memsets) whose launch call started inside the step's CPU span.

Outliers: the first recorded step often pays one-time costs (allocator growth, cudnn autotuning,
profiler start). With 3 or more steps it is marked `outlier` and window medians exclude it; with 1
or 2 steps nothing is excluded (there would be nothing left to compare).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpuadvisor.trace.model import (
    STEP_COLUMNS,
    STEP_SOURCE_DATALOADER,
    STEP_SOURCE_NONE,
    STEP_SOURCE_OPTIMIZER,
    STEP_SOURCE_PROFILER,
    STEP_SOURCE_WHOLE_TRACE,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd

    from gpuadvisor.trace.model import TraceModel

# As HTA reads it (hta/common/trace.py add_iteration): "ProfilerStep#15", spaces tolerated.
_PROFILER_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"
# enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ / _MultiProcessingDataLoaderIter.__next__
DATALOADER_NEXT = re.compile(r"DataLoader.*__next__")

MIN_STEPS_FOR_OUTLIER = 3


def empty_steps() -> pd.DataFrame:
    import pandas as pd

    df: pd.DataFrame = pd.DataFrame({c: pd.Series([], dtype="float64") for c in STEP_COLUMNS})
    df["step"] = df["step"].astype("int64")
    df["outlier"] = df["outlier"].astype(bool)
    return df


def _gpu_events(
    model: TraceModel,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(launch_ts, gpu_start, gpu_end) of every GPU activity with a known launch call, sorted by launch_ts."""
    import numpy as np
    import pandas as pd

    parts = []
    for df in (model.kernels, model.copies, model.memsets):
        if len(df) and len(model.runtime):
            rt = model.runtime[model.runtime["correlation"].notna()].drop_duplicates("correlation")
            lts = df["correlation"].map(rt.set_index("correlation")["ts"]).astype("float64")
            parts.append(
                pd.DataFrame({"l": lts.to_numpy(), "s": df["ts"].to_numpy(), "e": df["end"].to_numpy()})
            )
    if not parts:
        z = np.zeros(0, dtype=np.float64)
        return z, z, z
    allp = pd.concat(parts).dropna().sort_values("l")
    return (
        allp["l"].to_numpy(dtype=np.float64),
        allp["s"].to_numpy(dtype=np.float64),
        allp["e"].to_numpy(dtype=np.float64),
    )


def _derive_gpu_spans(
    model: TraceModel, cpu_start: npt.NDArray[np.float64], cpu_end: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """GPU span of the activities launched inside each CPU span (NaN when none)."""
    import numpy as np

    lts, gs, ge = _gpu_events(model)
    n = len(cpu_start)
    out_s = np.full(n, np.nan)
    out_e = np.full(n, np.nan)
    if len(lts) == 0:
        return out_s, out_e
    lo = np.searchsorted(lts, cpu_start, side="left")
    hi = np.searchsorted(lts, cpu_end, side="left")
    # prefix min/max via reduceat over non-empty ranges
    for i in np.nonzero(hi > lo)[0]:
        out_s[i] = gs[lo[i] : hi[i]].min()
        out_e[i] = ge[lo[i] : hi[i]].max()
    return out_s, out_e


def _finish(
    model: TraceModel,
    step: npt.NDArray[np.int64],
    cpu_start: npt.NDArray[np.float64],
    cpu_end: npt.NDArray[np.float64],
    gpu_start: npt.NDArray[np.float64],
    gpu_end: npt.NDArray[np.float64],
    last_end: float | None = None,
) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    order = np.argsort(cpu_start, kind="stable")
    step, cpu_start, cpu_end = step[order], cpu_start[order], cpu_end[order]
    gpu_start, gpu_end = gpu_start[order], gpu_end[order]
    missing = np.isnan(gpu_start)
    if missing.any():
        ds, de = _derive_gpu_spans(model, cpu_start, cpu_end)
        gpu_start = np.where(missing, ds, gpu_start)
        gpu_end = np.where(missing, de, gpu_end)
    start = cpu_start.copy()
    end = np.empty_like(start)
    end[:-1] = cpu_start[1:]
    if len(end):
        tail = np.nanmax([cpu_end[-1], gpu_end[-1] if not np.isnan(gpu_end[-1]) else cpu_end[-1]])
        end[-1] = max(float(tail), last_end) if last_end is not None else float(tail)
    outlier = np.zeros(len(start), dtype=bool)
    if len(start) >= MIN_STEPS_FOR_OUTLIER:
        outlier[0] = True
    result: pd.DataFrame = pd.DataFrame(
        {
            "step": step.astype(np.int64),
            "cpu_start": cpu_start,
            "cpu_end": cpu_end,
            "gpu_start": gpu_start,
            "gpu_end": gpu_end,
            "start": start,
            "end": end,
            "outlier": outlier,
        }
    )[list(STEP_COLUMNS)]
    return result


def _trace_bounds(model: TraceModel) -> tuple[float, float] | None:
    starts = []
    ends = []
    for df in (model.cpu_ops, model.runtime, model.annotations, model.kernels, model.copies, model.memsets):
        if len(df):
            starts.append(float(df["ts"].min()))
            ends.append(float(df["end"].max()))
    if not starts:
        return None
    return min(starts), max(ends)


def segment_steps(model: TraceModel) -> tuple[pd.DataFrame, str]:
    """Segment `model` into steps. Returns (steps DataFrame with STEP_COLUMNS, step_source)."""
    import numpy as np

    ann = model.annotations
    bounds = _trace_bounds(model)
    if bounds is None:
        return empty_steps(), STEP_SOURCE_NONE
    names = ann["name"].astype(str) if len(ann) else None

    if names is not None:
        num = names.str.extract(_PROFILER_STEP, expand=False)
        is_ps = num.notna().to_numpy()
        if is_ps.any():
            ps = ann[is_ps].assign(step=num[is_ps].astype("int64").to_numpy())
            cpu = ps[~ps["on_gpu"]].groupby("step").agg(cs=("ts", "min"), ce=("end", "max"))
            gpu = ps[ps["on_gpu"]].groupby("step").agg(gs=("ts", "min"), ge=("end", "max"))
            if len(cpu):
                j = cpu.join(gpu, how="left")
                return (
                    _finish(
                        model,
                        j.index.to_numpy(dtype=np.int64),
                        j["cs"].to_numpy(dtype=np.float64),
                        j["ce"].to_numpy(dtype=np.float64),
                        j["gs"].to_numpy(dtype=np.float64),
                        j["ge"].to_numpy(dtype=np.float64),
                    ),
                    STEP_SOURCE_PROFILER,
                )

        cpu_ann = ann[~ann["on_gpu"].to_numpy()]
        cnames = cpu_ann["name"].astype(str)
        opt = cpu_ann[cnames.str.startswith(OPTIMIZER_STEP_PREFIX).to_numpy()].sort_values("ts")
        if len(opt):
            ends = opt["end"].to_numpy(dtype=np.float64)
            starts = np.concatenate([[bounds[0]], ends[:-1]])
            nan = np.full(len(ends), np.nan)
            df = _finish(model, np.arange(len(ends), dtype=np.int64), starts, ends, nan, nan.copy())
            # an optimizer step ends the step: the last step ends at its optimizer step's end (or GPU end)
            return df, STEP_SOURCE_OPTIMIZER
        dl = cpu_ann[cnames.str.contains(DATALOADER_NEXT).to_numpy()].sort_values("ts")
        if len(dl):
            starts = dl["ts"].to_numpy(dtype=np.float64)
            cends = np.concatenate([starts[1:], [bounds[1]]])
            nan = np.full(len(starts), np.nan)
            df = _finish(
                model, np.arange(len(starts), dtype=np.int64), starts, cends, nan, nan.copy(), bounds[1]
            )
            return df, STEP_SOURCE_DATALOADER

    one = np.array([bounds[0]], dtype=np.float64)
    two = np.array([bounds[1]], dtype=np.float64)
    nan1 = np.array([np.nan])
    df = _finish(model, np.array([0], dtype=np.int64), one, two, nan1, nan1.copy(), bounds[1])
    model.warnings.append(
        "No step markers (ProfilerStep, Optimizer.step or DataLoader annotations) were found: "
        "the whole trace is analyzed as one step."
    )
    return df, STEP_SOURCE_WHOLE_TRACE
