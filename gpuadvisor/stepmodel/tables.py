"""The step model's per-step table: what each segmented step spent its wall time on (docs/model.md).

`per_step_table(model)` is computed from the model's own tables, once (`StepModel.per_step`): the GPU
busy time (the model's busy intervals: a scalar read's few-byte copy is not GPU work), the union of
each kind of GPU work, the idle time by cause (the model's attribution), the host's waits for data and
for the device, the kernels and the FLOPs. `gpuadvisor.metrics` projects it onto the window metrics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuadvisor.stepmodel import build as sb
from gpuadvisor.trace.model import analyzed_mask

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.stepmodel.model import StepModel

__all__ = ["PER_STEP_COLUMNS", "blocks_per_sm", "per_step_table", "sm_use"]

# One row per segmented step (the outlier first step included, `analyzed` says which steps the window
# medians read). Stable: add columns at the end.
PER_STEP_COLUMNS: tuple[str, ...] = (
    "step",
    "start",
    "end",
    "outlier",
    "step_time_us",
    "gpu_busy_us",
    "gpu_idle_us",
    "compute_us",
    "collective_us",
    "memset_us",
    "copy_us",
    "copy_htod_us",
    "copy_dtoh_us",
    "copy_dtod_us",
    "copy_pageable_us",
    "copy_pinned_us",
    "idle_data_loading_us",
    "idle_host_sync_us",
    "idle_launch_overhead_us",
    "idle_other_us",
    "dataloader_wait_us",
    "sync_blocked_us",
    "scalar_reads",
    "kernels",
    "kernel_median_us",
    "flops",
    "analyzed",  # bool: one of the analyzed steps (gpuadvisor.trace.model.analyzed_mask)
    "gpu_active_us",  # any GPU work; gpu_busy_us is compute only (kernels and memsets, not NCCL)
    "collective_exposed_us",  # collectives running with no compute beside them
    "copy_exposed_us",  # copies with no kernel beside them
)


def _union_in(df: pd.DataFrame, mask: Any, starts: Any, ends: Any) -> Any:
    """Per step: the time covered by the union of the intervals of `df[mask]`."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if len(df) == 0:
        return np.zeros(len(starts))
    sub = df[mask] if mask is not None else df
    ms, me = sb.union_intervals(sub["ts"].to_numpy(), sub["end"].to_numpy())
    return sb.covered(ms, me, starts, ends)


def _count_in(ts: Any, starts: Any, ends: Any) -> Any:
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    ts = np.sort(np.asarray(ts, dtype=np.float64))
    return np.searchsorted(ts, ends, side="left") - np.searchsorted(ts, starts, side="left")


def _sum_in(ts: Any, values: Any, starts: Any, ends: Any) -> Any:
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    ts = np.asarray(ts, dtype=np.float64)
    order = np.argsort(ts, kind="stable")
    ts = ts[order]
    cum = np.r_[0.0, np.cumsum(np.nan_to_num(np.asarray(values, dtype=np.float64)[order]))]
    return cum[np.searchsorted(ts, ends, side="left")] - cum[np.searchsorted(ts, starts, side="left")]


def _gpu_work(model: StepModel, starts: Any, ends: Any) -> dict[str, Any]:
    """Per step: busy time and the union of each kind of GPU work."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    o = model.ops
    n = len(o)
    kind = o["kind"].to_numpy(dtype=object) if n else np.zeros(0, dtype=object)
    coll = o["is_collective"].to_numpy(dtype=bool) if n else np.zeros(0, dtype=bool)
    cdir = o["direction"].astype(str).to_numpy() if n else np.zeros(0, dtype=object)
    csrc = o["src_kind"].astype(str).to_numpy() if n else np.zeros(0, dtype=object)
    cdst = o["dst_kind"].astype(str).to_numpy() if n else np.zeros(0, dtype=object)
    is_kernel, is_copy = kind == "kernel", kind == "copy"
    bs, be = model.busy
    active = sb.covered(bs, be, starts, ends)  # any GPU work
    # "busy" is compute only; collectives and copies not under compute are their own time (issue 30)
    by_work = sb.work_time_by_class(o, starts, ends)
    return {
        "gpu_busy_us": by_work[sb.WORK_COMPUTE],
        "gpu_idle_us": np.clip((ends - starts) - active, 0.0, None),
        "gpu_active_us": active,
        "collective_exposed_us": by_work[sb.WORK_COLLECTIVE],
        "copy_exposed_us": by_work[sb.WORK_COPY],
        "compute_us": _union_in(o, is_kernel & ~coll, starts, ends),
        "collective_us": _union_in(o, is_kernel & coll, starts, ends),
        "memset_us": _union_in(o, kind == "memset", starts, ends),
        "copy_us": _union_in(o, is_copy, starts, ends),
        "copy_htod_us": _union_in(o, is_copy & (cdir == "HtoD"), starts, ends),
        "copy_dtoh_us": _union_in(o, is_copy & (cdir == "DtoH"), starts, ends),
        "copy_dtod_us": _union_in(o, is_copy & (cdir == "DtoD"), starts, ends),
        "copy_pageable_us": _union_in(o, is_copy & ((csrc == "Pageable") | (cdst == "Pageable")), starts, ends),
        "copy_pinned_us": _union_in(o, is_copy & ((csrc == "Pinned") | (cdst == "Pinned")), starts, ends),
    }


def _idle_by_cause(model: StepModel, count: int) -> dict[str, Any]:
    """Per step: the idle time of each cause (the model's attribution)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    idle = model.idle
    by: dict[str, Any] = {cause: np.zeros(count) for cause in sb.IDLE_CAUSES}
    if len(idle):
        seg = idle["seg"].to_numpy(dtype=np.int64)
        ok = seg >= 0
        for cause in sb.IDLE_CAUSES:
            sel = ok & (idle["cause"].to_numpy() == cause)
            by[cause] = 1.0 * np.bincount(seg[sel], weights=idle["dur"].to_numpy()[sel], minlength=count)
    return {
        "idle_data_loading_us": by[sb.IDLE_DATA],
        "idle_host_sync_us": by[sb.IDLE_SYNC],
        "idle_launch_overhead_us": by[sb.IDLE_LAUNCH],
        "idle_other_us": by[sb.IDLE_OTHER] + by[sb.IDLE_DEPENDENCY],
    }


def _host_waits(model: StepModel, starts: Any, ends: Any) -> dict[str, Any]:
    """Per step: the host waiting for data, blocked on the device, and its scalar reads."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    host = model.host
    waits = host[(host["kind"] == sb.SYNC) | host["blocking"].astype(bool)] if len(host) else host
    if len(waits):
        ws, we = sb.union_intervals(waits["ts"].to_numpy(), waits["end"].to_numpy())
        sync_blocked = sb.covered(ws, we, starts, ends)
        reads = waits[waits["sync_kind"] == sb.SCALAR_READ]
        scalar_reads = _count_in(reads["ts"].to_numpy(), starts, ends)
    else:
        sync_blocked = np.zeros(len(starts))
        scalar_reads = np.zeros(len(starts), dtype=int)
    data = model.data_spans
    return {
        "dataloader_wait_us": data.covered(starts, ends) if data.count else np.zeros(len(starts)),
        "sync_blocked_us": sync_blocked,
        "scalar_reads": np.asarray(scalar_reads, dtype=np.int64),
    }


def _kernels(model: StepModel, starts: Any, ends: Any) -> dict[str, Any]:
    """Per step: the kernels it launched and their median duration (a kernel belongs to the step whose
    host code launched it, as every op of the model: `ops.seg`), and the cpu ops' FLOPs."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    ops = model.trace.cpu_ops
    o = model.ops
    k = o[(o["kind"] == "kernel") & (o["seg"] >= 0)] if len(o) else o
    if len(k) and "launch_ts" in k and k["launch_ts"].notna().any():
        # Kernels whose launch the trace lost (a truncated trace keeps GPU activities whose runtime call
        # was cut) would count in the step they *ran* in; where launches are known, count those only.
        k = k[k["launch_ts"].notna()]
    seg = k["seg"].to_numpy(dtype=np.int64) if len(k) else np.zeros(0, dtype=np.int64)
    kmed = np.full(len(starts), np.nan)
    if len(seg):
        med = pd.Series(k["dur"].to_numpy(dtype=np.float64)).groupby(seg).median()
        kmed[med.index.to_numpy()] = med.to_numpy()
    return {
        "kernels": np.bincount(seg, minlength=len(starts)).astype(np.int64),
        "kernel_median_us": kmed,
        "flops": _sum_in(ops["ts"].to_numpy(), model.op_flops, starts, ends) if len(ops) else np.zeros(len(starts)),
    }


def per_step_table(model: StepModel) -> pd.DataFrame:
    """The per-step table of `model` (columns PER_STEP_COLUMNS), one row per segmented step."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    steps = model.trace.steps
    starts, ends = model.segments.starts, model.segments.ends
    same = len(steps) == len(starts)
    outlier = steps["outlier"].to_numpy(dtype=bool) if same else np.zeros(len(starts), dtype=bool)
    columns: dict[str, Any] = {
        "step": steps["step"].to_numpy(),
        "start": starts,
        "end": ends,
        "outlier": outlier,
        "step_time_us": ends - starts,
        **_gpu_work(model, starts, ends),
        **_idle_by_cause(model, len(starts)),
        **_host_waits(model, starts, ends),
        **_kernels(model, starts, ends),
        "analyzed": analyzed_mask(steps) if same else ~outlier,
    }
    table: pd.DataFrame = pd.DataFrame(columns)[list(PER_STEP_COLUMNS)]
    return table


def blocks_per_sm(kernels: pd.DataFrame, sms: int | None) -> pd.Series:
    """Blocks per SM for each kernel: the trace's `blocks per SM` arg (what the profiler recorded),
    else blocks / SM count."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    bps = kernels["blocks_per_sm"].astype("float64")
    if sms:
        derived = kernels["blocks"].astype("float64") / float(sms)
        bps = bps.where(bps.notna(), derived)
    out: pd.Series = bps.replace([np.inf, -np.inf], np.nan)
    return out


def sm_use(kernels: pd.DataFrame, sms: int | None) -> float | None:
    """Duration-weighted min(blocks per SM, 1) of `kernels`: the share of SMs they keep busy while
    running (the one definition: the `sm_use` metric and GA401 read it). Kernels without grid
    information are left out; None when none has it."""
    if len(kernels) == 0:
        return None
    bps = blocks_per_sm(kernels, sms)
    known = bps.notna()
    dur = kernels["dur"].astype("float64")[known]
    if dur.sum() <= 0:
        return None
    return float((bps[known].clip(upper=1.0) * dur).sum() / dur.sum())
