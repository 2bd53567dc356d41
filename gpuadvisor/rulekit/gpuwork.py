"""Facts the GPU-work rules GA4xx-GA9xx (small batch, launch overhead, occupancy, FP32 math, memory,
GPU health) share: SM count and fill, compute capability, memory, captured settings, kernel-name
predicates and number formats. The analyzed window, GPU busy/idle time and impacts come from the step
model (gpuadvisor.stepmodel), never from here.

Heavy imports (numpy, pandas) happen inside the functions: rules are imported by `gpuadvisor rules`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuadvisor.namepattern import NamePattern
from gpuadvisor.stepmodel.tables import blocks_per_sm as blocks_per_sm
from gpuadvisor.stepmodel.tables import sm_use as sm_use

if TYPE_CHECKING:

    from gpuadvisor.rules_api import RuleContext


def sm_count(ctx: RuleContext) -> int | None:
    """Streaming multiprocessors of the traced GPU (`StepModel.sm_count`, defined once)."""
    return ctx.model.sm_count


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


# ---------------------------------------------------------------------------------------------
# Kernel names
# ---------------------------------------------------------------------------------------------

# Cached per distinct name: rules call it once per kernel row, a trace holds few distinct names.
_NAME_CACHE_SIZE = 1 << 16
_MULTI_TENSOR_RE = NamePattern(r"multi_tensor_apply|fused_adam|fusedadam|_fused_sgd|foreach")


@functools.lru_cache(maxsize=_NAME_CACHE_SIZE)
def is_multi_tensor_kernel(name: str) -> bool:
    """Multi-tensor (foreach/fused optimizer) kernels: at most 320 blocks per launch by design."""
    return _MULTI_TENSOR_RE.matches(name)


def short_kernel_name(name: str, limit: int = 120) -> str:
    """A kernel name for a title: at most `limit` characters, a cut one ending in "…" (never in "...",
    which `kernel_base_name` would strip as trailing dots)."""
    text = str(name)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


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
