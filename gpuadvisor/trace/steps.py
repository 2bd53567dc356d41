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
  * end = the next step's CPU start; for the last step, its CPU end under `ProfilerStep#N` (the step
    boundary: what follows is the profiler's stop, whose device synchronize waits for the GPU's
    backlog, and the export: never the script's cost), else the later of its CPU end and its GPU end.
  Steps therefore tile the window without overlap and without holes, so per-step sums add up to the
  window, and the median step time is the steady-state period (CPU start to CPU start) that a
  training loop runs at. GPU work of step N that drains during step N+1's CPU span counts as busy in
  step N+1: the question asked per interval is "was the GPU busy during this wall time".
  * For the fallbacks: optimizer steps run from the previous optimizer step's end (the trace's first
    CPU event for the first one) to this one's end; DataLoader steps from one `__next__` start to
    the next (the last one to the trace's end).
  * A step's GPU span (gpu_start/gpu_end), when there is no GPU annotation, is the span of the GPU
    activities (kernels, copies, memsets) whose launch call started inside the step's CPU span.

A truncated file (cut short, its complete part salvaged: `TraceModel.truncated`) lost its last events.
Kineto writes every CPU op first and the runtime calls and GPU activities after them in time order, so
a cut in that second part silently empties the later steps of their launches and kernels; other
writers lose everything after the cut. The steps the cut ran through are left out (with a warning;
when that is every step, they are kept and `TraceModel.all_steps_cut` is set: the analysis then stops
with a clear error):
a step is kept only when it ends before the cut frontier (the earliest of the last timestamps of CPU
ops, runtime calls and kernels, the event families every training step has) and none of its kernel
launches, copies or memsets lost its GPU activity.

Outliers: the first recorded step often pays one-time costs (allocator growth, cudnn autotuning,
profiler start). With 3 or more steps it is marked `outlier` and window medians exclude it; with 1
or 2 steps nothing is excluded (there would be nothing left to compare).

Which steps are analyzed is defined once, next to the steps table: `trace.model.analyzed_mask`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpuadvisor.trace.kind import ENQUEUE_WITH_GPU_WORK
from gpuadvisor.trace.model import (
    STEP_COLUMNS,
    STEP_SOURCE_DATALOADER,
    STEP_SOURCE_NONE,
    STEP_SOURCE_OPTIMIZER,
    STEP_SOURCE_PROFILER,
    STEP_SOURCE_WHOLE_TRACE,
)
from gpuadvisor.words import plural

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
    # lazy: pandas stays out of `import gpuadvisor.api` and the trace-split worker
    import pandas as pd

    df: pd.DataFrame = pd.DataFrame({c: pd.Series([], dtype="float64") for c in STEP_COLUMNS})
    df["step"] = df["step"].astype("int64")
    df["outlier"] = df["outlier"].astype(bool)
    return df


def _gpu_events(
    model: TraceModel,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(launch_ts, gpu_start, gpu_end) of every GPU activity with a known launch call, sorted by launch_ts."""
    # lazy: numpy and pandas stay out of `import gpuadvisor.api` and the trace-split worker
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
    # lazy: numpy stays out of `import gpuadvisor.api` and the trace-split worker
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
    *,
    cpu_only_tail: bool = False,
) -> pd.DataFrame:
    # lazy: numpy and pandas stay out of `import gpuadvisor.api` and the trace-split worker
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
        if cpu_only_tail:
            # The last step ends where its CPU span ends: the step boundary, as every other step's.
            # What follows is not the script's: the profiler's stop synchronizes the device (its
            # `cudaDeviceSynchronize` waits for the GPU's backlog, up to a few hundred ms) and exports.
            tail = cpu_end[-1]
        else:
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


# Runtime calls that enqueue GPU work (each has a GPU activity with its correlation id when recorded).


def _cut_frontier(model: TraceModel) -> tuple[float, npt.NDArray[np.float64]]:
    """(the time after which a truncated trace may have lost events, launch times whose GPU work was lost)."""
    # lazy: numpy stays out of `import gpuadvisor.api` and the trace-split worker
    import numpy as np

    lasts = [float(df["ts"].max()) for df in (model.cpu_ops, model.runtime, model.kernels) if len(df)]
    frontier = min(lasts) if lasts else float("inf")
    rt = model.runtime
    if not len(rt):
        return frontier, np.zeros(0, dtype=np.float64)
    names = rt["name"].astype(str)
    enqueue = names.str.contains(ENQUEUE_WITH_GPU_WORK).to_numpy(dtype=bool) & ~names.str.contains("Graph").to_numpy(
        dtype=bool
    )
    ran: set[int] = set()
    for df in (model.kernels, model.copies, model.memsets):
        if len(df):
            ran.update(int(c) for c in df["correlation"].dropna().tolist())
    corr = rt["correlation"]
    lost = np.array([c is not None and c == c and int(c) not in ran for c in corr.tolist()], dtype=bool)
    return frontier, rt["ts"].to_numpy(dtype=np.float64)[enqueue & lost]


def _leave_out_cut_steps(model: TraceModel, steps: pd.DataFrame) -> pd.DataFrame:
    """Drop the steps of a truncated trace whose events the cut lost (see the module docstring)."""
    # lazy: numpy stays out of `import gpuadvisor.api` and the trace-split worker
    import numpy as np

    if not model.truncated or len(steps) == 0:
        return steps
    frontier, orphans = _cut_frontier(model)
    start = steps["start"].to_numpy(dtype=np.float64)
    end = steps["end"].to_numpy(dtype=np.float64)
    orphaned = np.zeros(len(steps), dtype=bool)
    if len(orphans):
        orphans = np.sort(orphans)
        lo = np.searchsorted(orphans, start, side="left")
        hi = np.searchsorted(orphans, end, side="left")
        orphaned = hi > lo
    keep = (end <= frontier) & ~orphaned
    ids = steps["step"].tolist()
    cut = [str(s) for s, k in zip(ids, keep.tolist(), strict=True) if not k]
    if not cut:
        return steps
    if not keep.any():
        # Nothing complete is left: keep the steps (the loader salvages what it can); the analysis
        # refuses to draw numbers from them (`TraceModel.all_steps_cut`).
        model.all_steps_cut = True
        model.warnings.append(
            f"The truncation cut through every step ({len(cut)}): their launches, kernels or ops after the cut "
            "were lost."
        )
        return steps
    model.warnings.append(
        f"The truncation cut through step{'s' if len(cut) > 1 else ''} {', '.join(cut)} (their launches, "
        f"kernels or ops after the cut were lost): left out; {int(keep.sum())} complete step"
        f"{'s' if keep.sum() != 1 else ''} analyzed."
    )
    kept: pd.DataFrame = steps[keep].reset_index(drop=True)
    if kept["outlier"].all():
        kept["outlier"] = False  # the first step is all that is left: analyze it rather than nothing
    return kept


# Step numbers fit an int64 column; ProfilerStep#N past it is not a step any profiler counted.
_MAX_STEP_NUMBER = (1 << 63) - 1


def _step_numbers_in_range(model: TraceModel, numbers: pd.Series) -> npt.NDArray[np.bool_]:
    """Which `ProfilerStep#N` numbers fit an int64 (each distinct number read once); the others are not
    step markers, said in a note."""
    # lazy: numpy stays out of `import gpuadvisor.api` and the trace-split worker
    import numpy as np

    too_big = {t for t in set(numbers.dropna()) if len(t) >= 19 and int(t) > _MAX_STEP_NUMBER}
    if not too_big:
        return np.ones(len(numbers), dtype=bool)
    bad = numbers.isin(too_big).to_numpy(dtype=bool)
    example = min(too_big, key=lambda t: (len(t), t))
    shown = example if len(example) <= 30 else f"{example[:12]}...{example[-6:]} ({len(example)} digits)"
    model.warnings.append(
        f"{plural(int(bad.sum()), 'ProfilerStep annotation')} carry a step number beyond 64 bits "
        f"(ProfilerStep#{shown}): not read as step markers."
    )
    return ~bad


def segment_steps(model: TraceModel) -> tuple[pd.DataFrame, str]:
    """Segment `model` into steps. Returns (steps DataFrame with STEP_COLUMNS, step_source)."""
    steps, source = _segment(model)
    if source != STEP_SOURCE_WHOLE_TRACE:
        steps = _leave_out_cut_steps(model, steps)
    return steps, source


def _segment(model: TraceModel) -> tuple[pd.DataFrame, str]:
    # lazy: numpy stays out of `import gpuadvisor.api` and the trace-split worker
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
            is_ps = is_ps & _step_numbers_in_range(model, num)
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
                        cpu_only_tail=True,
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
