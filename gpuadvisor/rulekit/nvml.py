"""NVML sample helpers for the gpu_health rules (GA901, GA902)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.rules_api import RuleContext

# NVML clocks event reasons (nvmlClocksEventReason*): bits that mean the clock was held down.
# 0x1 (GPU idle) is not throttling; 0x2 (application clocks) and 0x10 (sync boost) are settings.
THROTTLE_BITS: dict[int, str] = {
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake",
}
THROTTLE_MASK = sum(THROTTLE_BITS)

# Per-lane PCIe data rate in GB/s after encoding overhead (gen1/2: 8b/10b, gen3+: 128b/130b).
PCIE_LANE_GBPS: dict[int, float] = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def window_samples(ctx: RuleContext) -> pd.DataFrame | None:
    """NVML rows inside the capture window (manifest capture.window_start/end_unix_s) when known,
    else all rows; None when the run has no NVML samples."""
    if ctx.run is None or ctx.run.nvml is None or len(ctx.run.nvml) == 0:
        return None
    df: pd.DataFrame = ctx.run.nvml
    capture = ctx.run.manifest.get("capture")
    if isinstance(capture, dict):
        start, end = capture.get("window_start_unix_s"), capture.get("window_end_unix_s")
        if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end > start:
            inside: pd.DataFrame = df[(df["t_unix_s"] >= start) & (df["t_unix_s"] <= end)]
            if len(inside):
                return inside
    return df


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in sorted(THROTTLE_BITS.items()) if mask & bit]


def link_gbps(gen: float, width: float) -> float | None:
    rate = PCIE_LANE_GBPS.get(int(gen))
    return rate * width if rate is not None and width > 0 else None
