"""GA901 clocks-throttled: SM clocks held down by power or thermal limits while the GPU is busy."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location, Severity
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rulekit import nvml as nv
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold


class ClocksThrottled(Rule):
    """SM clocks were held below their maximum by power or thermal limits while the GPU was busy.

    Why it matters
    --------------
    A GPU at its power cap or temperature limit lowers its SM clock; compute-bound kernels slow down
    in proportion. The cause is outside the script (cooling, a lowered power limit, a neighbour job,
    a failing fan or power supply) and is invisible in the trace: kernels simply take longer.

    How it is detected
    ------------------
    NVML samples inside the capture window with GPU utilization >= `min_util_pct`; a sample is
    throttled when its clocks event reasons hold SW power cap (0x4), HW slowdown (0x8), SW thermal
    (0x20), HW thermal (0x40) or HW power brake (0x80) (GPU idle, 0x1, is not throttling) and its SM
    clock is below `max_clock_ratio` of the maximum. Fires when at least `min_throttled_share` of the
    busy samples are throttled.

    Impact = GPU busy fraction x mean clock deficit (1 - clock / max clock) over the busy samples: the
    time compute-bound kernels lose to the lower clock (upper bound; memory-bound kernels lose less).
    Info when clocks were not reported, and when only the power cap acts with the power limit at the
    card's default (NVML's default limit when the capture recorded it, else the datasheet value for
    the card): a power-heavy load running into the designed limit is not a fault to fix.

    How to fix
    ----------
    Not a code change: check the power limit (`nvidia-smi -q -d POWER,PERFORMANCE`; restore the
    default with `nvidia-smi -pl <default>`), cooling and airflow, and other jobs on the node.

        # before: power limit lowered by an administrator to 500 W
        nvidia-smi -q -d POWER | grep "Power Limit"
        # after: default limit restored (needs root)
        sudo nvidia-smi -pl 700
    """

    id = "GA901"
    name = "clocks-throttled"
    category = Category.GPU_HEALTH
    requires = frozenset({Requirement.NVML})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_util_pct": Threshold(50.0, "NVML utilization from which a sample counts as busy", "%"),
        "max_clock_ratio": Threshold(0.95, "SM clock / max clock below which a sample is slowed", "fraction"),
        "min_throttled_share": Threshold(0.2, "share of busy samples throttled for a finding", "fraction"),
    }
    references = ("https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        df = nv.window_samples(ctx)
        if df is None:
            return
        busy_rows = df[df["util_gpu_pct"] >= ctx.threshold("min_util_pct")]
        if len(busy_rows) == 0:
            return
        reasons = busy_rows["throttle_reasons"].fillna(0).astype("int64")
        limited = (reasons & nv.THROTTLE_MASK) != 0
        ratio = busy_rows["sm_clock_mhz"] / busy_rows["sm_clock_max_mhz"]
        clock_known = bool(ratio.notna().any())
        throttled = limited & (ratio < ctx.threshold("max_clock_ratio")) if clock_known else limited
        share = float(throttled.mean())
        if share < ctx.threshold("min_throttled_share"):
            return
        mask = 0
        for value in reasons[throttled].unique():
            mask |= int(value)
        names = nv.reason_names(mask & nv.THROTTLE_MASK)
        impact = None
        deficit = None
        model = ctx.model
        busy = (
            model.busy_us() / model.window.total_us
            if len(ctx.trace.kernels) and model.window.total_us > 0
            else None
        )
        if busy is None:
            util_mean = gw.finite(busy_rows["util_gpu_pct"].mean())
            busy = util_mean / 100.0 if util_mean is not None else None
        if clock_known:
            deficit = float((1.0 - ratio.clip(upper=1.0)).where(throttled, 0.0).mean())
            impact = busy * deficit if busy is not None else None
        clock = gw.finite(busy_rows["sm_clock_mhz"][throttled].mean())
        cmax = gw.finite(busy_rows["sm_clock_max_mhz"].max())
        power = gw.finite(busy_rows["power_w"].mean())
        limit = gw.finite(busy_rows["power_limit_w"].mean())
        temp = gw.finite(busy_rows["temp_c"].max())
        gpus = sorted({int(g) for g in busy_rows["gpu_index"][throttled].dropna()})
        message = (
            f"{gw.pct(share)} of the busy NVML samples show {', '.join(names)}"
            + (f" with the SM clock at {clock:.0f} of {cmax:.0f} MHz" if clock and cmax else "")
            + (f"; power {power:.0f} W of a {limit:.0f} W limit" if power and limit else "")
            + (f"; up to {temp:.0f} C" if temp else "")
            + "."
        )
        power_cap = bool(mask & 0x4 or mask & 0x80)
        thermal = bool(mask & 0x20 or mask & 0x40 or mask & 0x8)
        default_limit = _default_power_limit_w(ctx)
        at_default = (
            power_cap
            and not thermal
            and limit is not None
            and default_limit is not None
            and limit >= 0.98 * default_limit
        )
        rec_parts = []
        if power_cap:
            rec_parts.append(
                "power: compare the limit with the board default (`nvidia-smi -q -d POWER`); a lowered limit "
                "is restored with `nvidia-smi -pl <W>` (root). At the default limit, the cap is the card's "
                "normal behaviour on power-heavy kernels"
            )
        if thermal:
            rec_parts.append(
                "thermal/HW slowdown: check cooling, airflow, fan and power-supply health "
                "(`nvidia-smi -q -d TEMPERATURE,PERFORMANCE`) and report it to the machine's administrator"
            )
        if at_default:
            message += (
                f" The power limit is the card's default ({default_limit:.0f} W): clocks dropping under a "
                "power-heavy load is the card working as designed, not a fault."
            )
        yield self.finding(
            impact=impact,
            severity=Severity.INFO if at_default else None,
            title=f"GPU clocks throttled ({', '.join(names)}) in {gw.pct(share)} of busy samples",
            message=message,
            evidence={
                "busy_samples": len(busy_rows),
                "throttled_share": share,
                "throttle_reasons_mask": mask,
                "throttle_reasons": names,
                "sm_clock_mean_mhz": clock,
                "sm_clock_max_mhz": cmax,
                "clock_deficit": deficit,
                "gpu_busy_fraction": busy,
                "power_mean_w": power,
                "power_limit_w": limit,
                "temp_max_c": temp,
            },
            recommendation="Not a code change. Check " + "; ".join(rec_parts) + ".",
            locations=[Location(function=f"GPU {g} (NVML index)") for g in gpus],
            impact_explanation=(
                "GPU busy fraction x mean SM clock deficit over busy samples: time compute-bound kernels lose "
                "to the lower clock (upper bound)."
                if impact is not None
                else "Clocks were not reported by NVML: the cost could not be measured."
            ),
        )


# Board default power limits (W) by device name, from the vendors' datasheets (first match wins); used
# when the capture did not record NVML's default limit.
_DEFAULT_POWER_W: tuple[tuple[str, float], ...] = (
    ("H200 NVL", 600.0),
    ("H200", 700.0),
    ("H100 NVL", 400.0),
    ("H100 PCIe", 350.0),
    ("H100", 700.0),
    ("A100-PCIE", 250.0),
    ("A100 PCIe", 300.0),
    ("A100", 400.0),
    ("L40S", 350.0),
    ("L40", 300.0),
    ("L4", 72.0),
    ("A10", 150.0),
    ("V100", 300.0),
    ("T4", 70.0),
)


def _default_power_limit_w(ctx: RuleContext) -> float | None:
    """The card's default power limit: environment.json (NVML's default limit) when recorded, else the
    datasheet value for its name."""
    if ctx.run is not None:
        g = ctx.run.gpu(0) or {}
        v = g.get("power_default_limit_w")
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v)
        name = str(g.get("name") or "")
    else:
        name = ""
    name = name or (ctx.trace.meta.gpu_name or "")
    for key, watts in _DEFAULT_POWER_W:
        if key.lower() in name.lower():
            return watts
    return None
