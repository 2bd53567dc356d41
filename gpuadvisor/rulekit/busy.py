"""Pieces the kernel_efficiency rules share (GA11xx): the run's command line words, the framework's
switches for bf16 and channels_last, and time sums over the step model's kernel table.

Heavy imports are inside functions: rule files are imported by `gpuadvisor rules`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuadvisor.hardware import low_precision_data

if TYPE_CHECKING:
    from gpuadvisor.rules_api import RuleContext

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
