"""Shared computations for the GPU-work rules GA4xx-GA9xx (small batch, launch overhead, occupancy,
FP32 math, memory, GPU health).

Everything is computed from the trace tables of `gpuadvisor.trace.model.TraceModel` over the
*analyzed* steps (the segmented steps minus the outlier first step), so a rule's evidence can be
re-derived from the trace alone. Where `gpuadvisor.metrics` already provides a value (idle
attribution), the rules prefer it; these helpers are the fallback and the per-kernel detail.

Heavy imports (numpy, pandas) happen inside the functions: rules are imported by `gpuadvisor rules`.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.rules_api import RuleContext


# ---------------------------------------------------------------------------------------------
# The analyzed window
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepWindow:
    """The analyzed steps: their [start, end) intervals (us) and total duration."""

    starts: Any  # numpy float64 array
    ends: Any
    total_us: float
    count: int

    @property
    def median_step_us(self) -> float:
        import numpy as np

        return float(np.median(self.ends - self.starts)) if self.count else 0.0

    def mask(self, ts: pd.Series) -> pd.Series:
        """True for rows whose start time `ts` lies inside one of the analyzed steps."""
        import numpy as np
        import pandas as pd

        values = ts.to_numpy(dtype="float64", na_value=np.nan)
        if self.count == 0 or len(values) == 0:
            empty: pd.Series = pd.Series(False, index=ts.index, dtype=bool)
            return empty
        idx = np.searchsorted(self.starts, values, side="right") - 1
        ok = idx >= 0
        safe = np.where(ok, idx, 0)
        inside = ok & (values < self.ends[safe]) & ~np.isnan(values)
        out: pd.Series = pd.Series(inside, index=ts.index, dtype=bool)
        return out

    def step_index(self, ts: pd.Series) -> Any:
        """Index (0..count-1) of the analyzed step holding each `ts`, -1 outside the window."""
        import numpy as np

        values = ts.to_numpy(dtype="float64", na_value=np.nan)
        if self.count == 0:
            return np.full(len(values), -1, dtype=np.int64)
        idx = np.searchsorted(self.starts, values, side="right") - 1
        safe = np.where(idx >= 0, idx, 0)
        inside = (idx >= 0) & (values < self.ends[safe]) & ~np.isnan(values)
        return np.where(inside, idx, -1).astype(np.int64)


def step_window(ctx: RuleContext) -> StepWindow:
    """The analyzed steps: non-outlier steps when any remain, else all steps (sorted, non-overlapping)."""
    import numpy as np

    steps = ctx.trace.steps
    if len(steps) == 0:
        empty = np.zeros(0, dtype="float64")
        return StepWindow(empty, empty, 0.0, 0)
    chosen = steps[~steps["outlier"].astype(bool)] if "outlier" in steps.columns else steps
    if len(chosen) == 0:
        chosen = steps
    chosen = chosen.sort_values("start")
    starts = chosen["start"].to_numpy(dtype="float64")
    ends = chosen["end"].to_numpy(dtype="float64")
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    return StepWindow(starts, ends, float((ends - starts).sum()), len(starts))


def window_metric(ctx: RuleContext, key: str) -> float | None:
    """A numeric window metric from gpuadvisor.metrics, or None when absent/unset/not finite."""
    value = ctx.metrics.window.get(key) if ctx.metrics is not None else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def union_length(starts: Any, ends: Any) -> float:
    """Total length of the union of intervals (gpuadvisor.metrics' interval algebra)."""
    from gpuadvisor.metrics import union_intervals

    s, e = union_intervals(starts, ends)
    return float((e - s).sum())


def gpu_activity(ctx: RuleContext, window: StepWindow) -> pd.DataFrame:
    """Kernels, copies and memsets inside the window as one table [ts, end, kind], clipped to steps."""
    import pandas as pd

    parts = []
    for kind, source in (
        ("kernel", ctx.trace.kernels),
        ("copy", ctx.trace.copies),
        ("memset", ctx.trace.memsets),
    ):
        if len(source):
            sel = source[window.mask(source["ts"])]
            parts.append(
                pd.DataFrame(
                    {"ts": sel["ts"].astype("float64"), "end": sel["end"].astype("float64"), "kind": kind}
                )
            )
    table: pd.DataFrame
    if parts:
        table = pd.concat(parts, ignore_index=True)
    else:
        table = pd.DataFrame(
            {
                "ts": pd.Series(dtype="float64"),
                "end": pd.Series(dtype="float64"),
                "kind": pd.Series(dtype=object),
            }
        )
    return table


def gpu_busy_fraction(ctx: RuleContext, window: StepWindow) -> float | None:
    """Union of GPU activity inside the analyzed steps / window time (metrics value when available)."""
    value = window_metric(ctx, "gpu_busy_fraction")
    if value is not None:
        return max(0.0, min(1.0, value))
    if window.total_us <= 0:
        return None
    act = gpu_activity(ctx, window)
    if len(act) == 0:
        return 0.0
    import numpy as np

    idx = window.step_index(act["ts"])
    end = np.minimum(act["end"].to_numpy(), window.ends[np.maximum(idx, 0)])
    return min(1.0, union_length(act["ts"].to_numpy(), end) / window.total_us)


def window_kernels(ctx: RuleContext, window: StepWindow) -> pd.DataFrame:
    """Kernels launched inside the analyzed steps (collectives included)."""
    k = ctx.trace.kernels
    return k[window.mask(k["ts"])] if len(k) else k


def sm_count(ctx: RuleContext) -> int | None:
    """Streaming multiprocessors of the traced GPU: trace deviceProperties, else environment.json."""
    n = ctx.trace.meta.num_sms
    if n:
        return n
    if ctx.run is not None:
        gpu = ctx.run.gpu(0)
        value = gpu.get("sm_count") if gpu else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return int(value)
    value2 = window_metric(ctx, "num_sms")
    return int(value2) if value2 else None


def blocks_per_sm(kernels: pd.DataFrame, sms: int | None) -> pd.Series:
    """Blocks per SM for each kernel: the trace's `blocks per SM` arg, else blocks / SM count."""
    import numpy as np

    bps = kernels["blocks_per_sm"].astype("float64")
    if sms:
        derived = kernels["blocks"].astype("float64") / float(sms)
        bps = bps.where(bps.notna(), derived)
    out: pd.Series = bps.replace([np.inf, -np.inf], np.nan)
    return out


def sm_use(kernels: pd.DataFrame, sms: int | None) -> float | None:
    """Duration-weighted min(blocks per SM, 1): the share of SMs that kernels keep busy while running.
    Kernels without grid information are left out; None when none has it."""
    if len(kernels) == 0:
        return None
    bps = blocks_per_sm(kernels, sms)
    known = bps.notna()
    dur = kernels["dur"].astype("float64")[known]
    if dur.sum() <= 0:
        return None
    return float((bps[known].clip(upper=1.0) * dur).sum() / dur.sum())


def compute_capability(ctx: RuleContext) -> float | None:
    """Compute capability as major + minor/10 (9.0 for H100), from the trace or environment.json."""
    props = ctx.trace.meta.device(0)
    if props:
        major = props.get("computeMajor")
        minor = props.get("computeMinor", 0)
        if isinstance(major, (int, float)) and major > 0:
            return float(major) + float(minor or 0) / 10.0
    if ctx.run is not None:
        gpu = ctx.run.gpu(0)
        cc = gpu.get("compute_capability") if gpu else None
        if cc is not None:
            try:
                return float(str(cc))
            except ValueError:
                return None
    return None


@dataclass(frozen=True)
class MemoryInfo:
    peak_allocated: float | None
    peak_reserved: float | None
    capacity: float | None

    @property
    def allocated_fraction(self) -> float | None:
        if self.peak_allocated is None or not self.capacity:
            return None
        return self.peak_allocated / self.capacity

    @property
    def reserved_fraction(self) -> float | None:
        if self.peak_reserved is None or not self.capacity:
            return None
        return self.peak_reserved / self.capacity


def memory_info(ctx: RuleContext) -> MemoryInfo:
    """Peak allocated/reserved bytes (environment.json memory) and device capacity (environment, gpus,
    or the trace's totalGlobalMem)."""

    def num(value: Any) -> float | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value) if value > 0 else None

    mem: dict[str, Any] = {}
    capacity: float | None = None
    if ctx.run is not None:
        raw = ctx.run.environment.get("memory")
        mem = raw if isinstance(raw, dict) else {}
        capacity = num(mem.get("total_bytes"))
        if capacity is None:
            gpu = ctx.run.gpu(0)
            capacity = num(gpu.get("total_memory_bytes")) if gpu else None
    if capacity is None:
        props = ctx.trace.meta.device(0)
        capacity = num(props.get("totalGlobalMem")) if props else None
    return MemoryInfo(num(mem.get("peak_allocated_bytes")), num(mem.get("peak_reserved_bytes")), capacity)


def settings(ctx: RuleContext) -> dict[str, Any]:
    """environment.json settings ({} for a raw trace)."""
    return ctx.run.settings if ctx.run is not None else {}


def setting_used(ctx: RuleContext, key: str) -> bool | None:
    """settings[key]["used"] (torch_compile, cuda_graphs, autocast, grad_scaler), None when unknown."""
    value = settings(ctx).get(key)
    if isinstance(value, dict) and isinstance(value.get("used"), bool):
        return bool(value["used"])
    return None


def env_list(ctx: RuleContext, key: str) -> list[dict[str, Any]]:
    """environment.json list of dicts (dataloaders, optimizers); [] when absent."""
    if ctx.run is None:
        return []
    value = ctx.run.environment.get(key)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


# ---------------------------------------------------------------------------------------------
# Kernel names
# ---------------------------------------------------------------------------------------------

# Matmul / convolution / attention kernels (the work tensor cores do).
_MATMUL_RE = re.compile(
    r"gemm|gemv|nvjet|xmma|cutlass|cublas|sgemm|hgemm|convolve|conv2d|conv3d|fprop|dgrad|wgrad|"
    r"implicit_gemm|winograd|fmha|flash|attention|_mma_|wgmma",
    re.IGNORECASE,
)
# FP32 math on the CUDA cores. `xmma_gemm_f32f32_f32f32_f32_*ffma*` says xmma but its math is ffma
# (FIELD_NOTES: the trap that made the TensorBoard plugin report tensor-core use on an FP32 model).
_FP32_RE = re.compile(
    r"simt|sgemm|_ffma|ffma_|f32f32_f32f32_f32|gemv2t|gemvx|gemv_kernel|gemvnsp|"
    r"implicit_convolve_sgemm|precomputed_convolve|fmha_cutlassf_f32|fmha_cutlassb_f32|_f32_aligned",
    re.IGNORECASE,
)
# Tensor-core math (half/bf16/tf32/int8/fp8 MMA instructions or libraries that only use them).
_TENSOR_CORE_RE = re.compile(
    r"nvjet|tensorop|hmma|gmma|wgmma|imma|h884|s884|h1688|s1688|i8816|16816|16832|bf16|fp16|f16f16|_h_|half|"
    r"tf32|e4m3|e5m2|fp8|"
    r"flash_fwd|flash_bwd|flash::|fmha_cutlassf_bf16|fmha_cutlassf_f16|fmha_cutlassb_bf16|fmha_cutlassb_f16",
    re.IGNORECASE,
)
# A tf32 marker wins over an f32f32 marker: `..._f32f32_tf32f32_...` runs on tensor cores.
_TF32_RE = re.compile(r"tf32|1688gemm|s1688|s16816", re.IGNORECASE)

MATMUL_FAMILIES = frozenset({"gemm", "conv", "attention"})


# The name predicates below are cached per distinct name: rules call them once per kernel row
# (hundreds of thousands on a large trace) but a trace holds only a few thousand distinct kernel
# names, and these case-insensitive alternations over long templated names cost ~25 us each.
_NAME_CACHE_SIZE = 1 << 16


def is_matmul_kernel(name: str, family: str | None = None) -> bool:
    """A GEMM, convolution or attention kernel (by the trace's family label or by name)."""
    if family in MATMUL_FAMILIES:
        return True
    return _is_matmul_name(name)


@functools.lru_cache(maxsize=_NAME_CACHE_SIZE)
def _is_matmul_name(name: str) -> bool:
    return bool(_MATMUL_RE.search(name))


@functools.lru_cache(maxsize=_NAME_CACHE_SIZE)
def matmul_math(name: str) -> str:
    """How a matmul/conv kernel does its math, from its name: "tensor_core", "fp32" or "unknown"."""
    if _TF32_RE.search(name):
        return "tensor_core"
    if _FP32_RE.search(name):
        return "fp32"
    if _TENSOR_CORE_RE.search(name):
        return "tensor_core"
    return "unknown"


# Persistent / warp-specialized kernels that fill the GPU with one block per SM by design and report
# 0 estimated occupancy (FIELD_NOTES), plus library kernels that intentionally cap their grid.
_PERSISTENT_RE = re.compile(
    r"nvjet|warpspecialized|warp_specialized|_ws_|persistent|coop|cooperative|flash|fmha",
    re.IGNORECASE,
)
_MULTI_TENSOR_RE = re.compile(r"multi_tensor_apply|fused_adam|fusedadam|_fused_sgd|foreach", re.IGNORECASE)
_COLLECTIVE_RE = re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter", re.IGNORECASE)


@functools.lru_cache(maxsize=_NAME_CACHE_SIZE)
def is_persistent_kernel(name: str) -> bool:
    return bool(_PERSISTENT_RE.search(name))


@functools.lru_cache(maxsize=_NAME_CACHE_SIZE)
def is_multi_tensor_kernel(name: str) -> bool:
    """Multi-tensor (foreach/fused optimizer) kernels: at most 320 blocks per launch by design."""
    return bool(_MULTI_TENSOR_RE.search(name))


@functools.lru_cache(maxsize=_NAME_CACHE_SIZE)
def is_collective_kernel(name: str) -> bool:
    return bool(_COLLECTIVE_RE.search(name))


def short_kernel_name(name: str, limit: int = 120) -> str:
    """A kernel name for a title: templates cut, at most `limit` characters."""
    text = str(name)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def pct(fraction: float | None, digits: int = 0) -> str:
    if fraction is None or not math.isfinite(fraction):
        return "n/a"
    return f"{fraction * 100:.{digits}f}%"


def us(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    if value >= 1000.0:
        return f"{value / 1000.0:.2f} ms"
    return f"{value:.1f} us"


def gib(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value / 2**30:.1f} GiB"


def finite(value: Any) -> float | None:
    """float(value) when it is a finite number (numpy and pandas scalars included), else None."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


# ---------------------------------------------------------------------------------------------
# Launch-bound idle (fallback when gpuadvisor.metrics has no idle attribution)
# ---------------------------------------------------------------------------------------------

_BLOCKING_RUNTIME_RE = re.compile(
    r"synchronize|^cudaMemcpy$|^cudaMemcpy2D$|^cudaMemset$|^cuMemcpyDtoH|^cuMemcpyHtoD$", re.IGNORECASE
)
_DATALOADER_RE = re.compile(r"DataLoader", re.IGNORECASE)


def launch_bound_idle_us(ctx: RuleContext, window: StepWindow, max_gap_us: float) -> tuple[float, int]:
    """GPU idle time inside the analyzed steps during which the host was issuing the next launch.

    A gap before a kernel counts when (1) the GPU had finished all earlier work, (2) the kernel's
    launch call started only after that (the queue ran dry: the CPU, not the GPU, set the pace),
    (3) the gap is at most `max_gap_us` (longer gaps are host work other than launching), and
    (4) no blocking call (synchronize, blocking memcpy) and no DataLoader wait overlaps it (those have
    their own rules). Returns (idle microseconds, number of such gaps).
    """
    import numpy as np

    kl = ctx.trace.kernel_launches()
    if len(kl) == 0 or window.count == 0:
        return 0.0, 0
    kl = kl[window.mask(kl["ts"])].sort_values("ts")
    if len(kl) < 2:
        return 0.0, 0
    ts = kl["ts"].to_numpy(dtype="float64")
    end = kl["end"].to_numpy(dtype="float64")
    launch = kl["launch_ts"].to_numpy(dtype="float64", na_value=np.nan)
    step = window.step_index(kl["ts"])
    prev_end = np.concatenate(([-np.inf], np.maximum.accumulate(end)[:-1]))
    gap_start = np.maximum(prev_end, window.starts[np.maximum(step, 0)])
    gap = ts - gap_start
    # 1 us tolerance: launch timestamps and GPU timestamps come from different clocks.
    candidate = (
        (gap > 0) & (gap <= max_gap_us) & ~np.isnan(launch) & (launch >= gap_start - 1.0) & (step >= 0)
    )
    if not candidate.any():
        return 0.0, 0
    blockers_s: list[Any] = []
    blockers_e: list[Any] = []
    rt = ctx.trace.runtime
    if len(rt):
        blocking = rt[rt["name"].astype(str).str.contains(_BLOCKING_RUNTIME_RE)]
        blockers_s.append(blocking["ts"].to_numpy(dtype="float64"))
        blockers_e.append(blocking["end"].to_numpy(dtype="float64"))
    ann = ctx.trace.annotations
    if len(ann):
        dl = ann[ann["name"].astype(str).str.contains(_DATALOADER_RE) & ~ann["on_gpu"].astype(bool)]
        blockers_s.append(dl["ts"].to_numpy(dtype="float64"))
        blockers_e.append(dl["end"].to_numpy(dtype="float64"))
    if blockers_s:
        bs = np.concatenate(blockers_s)
        be = np.concatenate(blockers_e)
        if len(bs):
            order = np.argsort(bs, kind="stable")
            bs, be = bs[order], np.maximum.accumulate(be[order])
            idx = np.searchsorted(bs, ts, side="left") - 1
            blocked = (idx >= 0) & (be[np.maximum(idx, 0)] > gap_start)
            candidate &= ~blocked
    return float(gap[candidate].sum()), int(candidate.sum())


def deflate_host_idle(ctx: RuleContext, idle_fraction: float, window: StepWindow) -> tuple[float, dict[str, Any]]:
    """Remove the profiler's own overhead from a host-side idle share (launch-bound, small batch).

    Inside the capture window every op pays the profiler's per-op CPU cost; when the CPU sets the
    pace, that cost appears in the trace as GPU idle time that the unprofiled run does not have.
    `gpuadvisor profile` times the steps outside the window (metrics `profiler_overhead_ms`,
    `unprofiled_step_time_ms`): the idle time per step minus that overhead, over the unprofiled step
    time, is the share the user's real run loses. Raw traces have no such reference: the share is
    returned unchanged (an upper bound) and the evidence says so.
    """
    overhead = window_metric(ctx, "profiler_overhead_ms")
    unprofiled = window_metric(ctx, "unprofiled_step_time_ms")
    step_ms = window.median_step_us / 1000.0
    if overhead is None or unprofiled is None or unprofiled <= 0 or step_ms <= 0:
        return idle_fraction, {"profiler_overhead_corrected": False}
    idle_ms = idle_fraction * step_ms
    corrected = max(0.0, idle_ms - overhead) / unprofiled
    return min(1.0, corrected), {
        "profiler_overhead_corrected": True,
        "profiler_overhead_ms": overhead,
        "unprofiled_step_time_ms": unprofiled,
        "idle_fraction_under_profiler": idle_fraction,
    }


# Host-bound idle (the GPU waits while the CPU prepares the next kernel) has two textbook causes that
# the same trace shows alike: too little work per kernel (small batch: few kernels per step, each
# tiny; a larger batch amortizes the fixed per-step CPU cost) and too many kernels (launch overhead:
# hundreds to thousands of launches per step; fusion or CUDA graphs remove them). The kernel count per
# step says which dominates: up to FEW_KERNELS_PER_STEP the idle is attributed to the batch size,
# from MANY_KERNELS_PER_STEP on to the launches, linearly between; each rule reports its full share
# and at least half of the idle (both fixes recover some of it).
FEW_KERNELS_PER_STEP = 150.0
MANY_KERNELS_PER_STEP = 600.0


def launch_share(kernels_per_step: float) -> float:
    """Weight (0.5..1) of host-bound idle attributed to launch overhead; small batch gets
    `1.5 - launch_share(n)` (also 0.5..1)."""
    span = MANY_KERNELS_PER_STEP - FEW_KERNELS_PER_STEP
    s = min(1.0, max(0.0, (kernels_per_step - FEW_KERNELS_PER_STEP) / span))
    return 0.5 + 0.5 * s


UNCORRECTED_PROFILER_NOTE = (
    " Measured under the profiler, whose per-op CPU cost inflates host-side idle; this trace has no "
    "step times from outside the profiler to correct it (`gpuadvisor profile` records them), so the "
    "estimate is an upper bound."
)
