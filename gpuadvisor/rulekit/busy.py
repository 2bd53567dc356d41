"""Pieces the kernel_efficiency rules share (GA11xx): the run's command line words, the framework's
switches for bf16 and channels_last, and time sums over the step model's kernel table.

Heavy imports are inside functions: rule files are imported by `gpuadvisor rules`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuadvisor.hardware import low_precision_data
from gpuadvisor.model import Finding, Severity
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit.gpuwork import pct
from gpuadvisor.words import Base, of_base

if TYPE_CHECKING:
    from gpuadvisor.rules_api import Rule, RuleContext
    from gpuadvisor.stepmodel.model import Prediction

CONV_CLASSES = ("conv_fprop", "conv_dgrad", "conv_wgrad")


def command_line(ctx: RuleContext) -> str:
    """The recorded command line (manifest argv), "" for a raw trace."""
    manifest = ctx.run.manifest if ctx.run is not None else None
    if not isinstance(manifest, Mapping):
        return ""
    argv = manifest.get("argv") or manifest.get("command")
    if isinstance(argv, list):
        return " ".join(str(a) for a in argv)
    return str(argv) if isinstance(argv, str) else ""


def is_timm(ctx: RuleContext) -> bool:
    """timm's training script drives the run (its path or module name on the command line)."""
    cmd = command_line(ctx).lower()
    return "timm" in cmd or "pytorch-image-models" in cmd


def class_time_us(ctx: RuleContext, classes: tuple[str, ...], dtypes: tuple[str, ...] | None = None) -> float:
    """Kernel time per analyzed step of these kernel classes (and dtypes)."""
    t = ctx.model.kernel_table
    steps = max(1, ctx.model.window.count)
    if len(t) == 0:
        return 0.0
    sel = t["class"].isin(list(classes))
    if dtypes is not None:
        sel &= t["dtype"].isin(list(dtypes))
    return float(t.loc[sel, "dur"].sum()) / steps


def step_us(ctx: RuleContext) -> float:
    """The step a busy-time share is taken of: the replayed step (the one every impact is a share of:
    steady state, the profiler's host cost removed), else the window's median step (no replay).

    Not the trace's CPU-to-CPU step: a GPU-bound run whose host ran ahead of the device shows CPU steps
    shorter than the GPU work each launched (kernel time per step over that step read 169% in one such
    trace, issue 41)."""
    model = ctx.model
    replayed = model.baseline_step_ms * 1000.0 if model.program.steps else 0.0
    return replayed if replayed > 0 else model.window.median_step_us


def step_base(ctx: RuleContext) -> Base:
    """What `step_us` is: the replayed step, else (no replay) the profiled step."""
    return Base.REPLAYED_STEP if ctx.model.program.steps and ctx.model.baseline_step_ms > 0 else Base.PROFILED_STEP


def of_step(ctx: RuleContext, us_per_step: float) -> str:
    """"41% of the replayed step": kernel time per analyzed step as a share of `step_us`, with its base."""
    return f"{cm.pct(step_share(ctx, us_per_step))} {of_base(step_base(ctx))}"


def step_share(ctx: RuleContext, us_per_step: float) -> float:
    """Kernel time per analyzed step as a share of the step (`step_us`), at most 1: kernels of several
    streams can overlap, and one step cannot hold more than all of itself."""
    step = step_us(ctx)
    if step <= 0 or us_per_step <= 0:
        return 0.0
    return us_per_step / max(step, us_per_step)


def mask_time_us(ctx: RuleContext, mask: Any) -> float:
    t = ctx.model.kernel_table
    if len(t) == 0:
        return 0.0
    return float(t["dur"].to_numpy()[mask].sum()) / max(1, ctx.model.window.count)


def plain_fp32_matmul_us(ctx: RuleContext) -> float:
    """Per analyzed step: matmul/conv/attention kernel time in plain FP32 on CUDA cores, as GA701 counts it
    (the step model's `matmul_math` False, data not bf16/fp16)."""
    model = ctx.model
    k = model.window_kernels
    if len(k) == 0:
        return 0.0
    math_of = model.matmul_math()
    fp32 = {n for n, v in math_of.items() if v is False}
    if not fp32:
        return 0.0
    names = k["name"].astype(str)
    sel = names.isin(list(fp32)).to_numpy(dtype=bool)
    sub = k[sel]
    types = sub["op_input_types"].astype(object).where(sub["op_input_types"].notna(), None)
    low = [
        low_precision_data(n, t if isinstance(t, str) else None)
        for n, t in zip(sub["name"].astype(str), types, strict=True)
    ]
    # lazy: numpy stays out of `gpuadvisor rules`
    import numpy as np

    dur = sub["dur"].to_numpy(dtype=np.float64)[~np.asarray(low, dtype=bool)] if len(sub) else np.zeros(0)
    return float(dur.sum()) / max(1, model.window.count)


def unpriced_on_raw_trace(
    rule: Rule, ctx: RuleContext, pred: Prediction, saving_us: float, what: str, min_impact: float
) -> Finding | None:
    """An info finding for a busy-time pattern that a raw trace cannot price, else None.

    A raw torch.profiler trace has no step time from outside the profiler: the host work it shows
    carries the profiler's own cost, which only a reference step can remove (docs/model.md, "The
    profiler's own cost"). When the replayed step is then set by that host and not by the GPU, a remedy
    that shortens kernels predicts (almost) nothing, though its kernels' saving, `saving_us` per step,
    is a real share of the GPU's time (issue 41: a GPT-2-vocabulary model's padding finding, 35% under
    `gpuadvisor profile`, was absent on a plain trace of the same script). The finding says what the
    pattern is worth on the GPU and what is missing to price it."""
    model = ctx.model
    base = model.baseline
    work = base.gpu_busy_us  # the GPU's own work per step (its busiest stream)
    if pred.profiler_corrected or saving_us <= 0 or work <= 0:
        return None
    if base.host_period_us < 0.99 * base.period_us or work >= base.period_us:
        return None  # the GPU sets the replayed pace: the prediction stands as it is
    gpu_share = min(1.0, saving_us / work)
    if gpu_share < min_impact:
        return None
    return rule.finding(
        impact=None,
        severity=Severity.INFO,
        title=f"{what}: {pct(gpu_share)} of the GPU's time per step, not priced on this raw trace",
        message=(
            f"{what}: the remedy would save about {saving_us / 1000.0:.2f} ms of GPU time per step "
            f"({pct(gpu_share)} of the {work / 1000.0:.2f} ms the GPU works per step). In this trace the host sets "
            f"the replayed step ({base.host_period_us / 1000.0:.2f} ms per step), and a raw trace cannot tell the profiler's own host cost from the script's (no step "
            "time measured outside the profiler): whether the step would shrink is not known from it."
        ),
        evidence={
            "gpu_saving_per_step_us": saving_us,
            "gpu_saving_share": gpu_share,
            "replayed_host_period_us": base.host_period_us,
            "gpu_work_per_step_us": work,
            "profiler_corrected": False,
        },
        recommendation=(
            "Give the step time a plain run of the script measured: `gpuadvisor analyze TRACE --step-time-ms MS` "
            "prices it against that step; or record the run with `gpuadvisor profile`, which measures it."
        ),
        impact_explanation="Not priced: the replayed step of a raw trace is set by host work that includes the "
        "profiler's own cost.",
    )
