"""GA502 unfused-optimizer: the optimizer step launches a few kernels per parameter tensor."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold

_OPT_SPAN = re.compile(r"^Optimizer\.step#(?P<cls>[^.]+)\.step")
_FUSED_CAPABLE = ("Adam", "AdamW", "SGD", "Adagrad", "Adamax", "NAdam", "RAdam")


class UnfusedOptimizer(Rule):
    """The optimizer step runs per parameter tensor: hundreds of tiny kernels instead of a few fused ones.

    Why it matters
    --------------
    With foreach=False (or a hand-written loop over parameters) an Adam step issues about ten small
    elementwise kernels per parameter tensor: a model with 150 parameter tensors launches ~1500
    kernels, each shorter than its launch cost, so the step is bound by the CPU. The multi-tensor
    (foreach) implementation processes lists of tensors per launch and the fused implementation does
    the whole update in one kernel per chunk of parameters. Multi-tensor kernels launch at most 320
    blocks per launch by design: that is not low occupancy.

    How it is detected
    ------------------
    The `Optimizer.step#<Class>.step` annotation spans of the analyzed steps; the kernels launched
    inside a span are the optimizer's. Fires when the optimizer takes at least
    `min_optimizer_fraction` of the step, launches at least `min_kernels_per_step` kernels per step,
    and fewer than half of them are multi-tensor/fused kernels (a per-tensor update). A run that
    already uses foreach (multi-tensor kernels) but not fused=True, with an optimizer share of at
    least `min_foreach_fraction`, gets a smaller finding recommending fused=True. The optimizer call
    site, its foreach/fused flags and its parameter tensor count come from environment.json.

    The optimizer's share of the step is what it costs the GPU timeline: the GPU time of its own
    kernels plus the GPU idle time inside the update (host span start to its last kernel's end) while
    the host issues it, less the profiler's own per-op overhead measured outside the capture window.
    The span's length alone is not a cost: in a GPU-bound run the update's kernels queue behind the
    backward pass while the GPU stays busy.

    Impact = optimizer share of the step x (1 - 1/expected speed-up): `per_tensor_speedup` for a
    per-tensor update (multi-tensor kernels cut launches by more than 10x; 5x is conservative),
    `foreach_to_fused_speedup` for foreach -> fused.

    How to fix
    ----------
    Use the fused implementation (CUDA tensors, Adam/AdamW/SGD/Adagrad...), or at least foreach.

        # before
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)

        # after
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    """

    id = "GA502"
    name = "unfused-optimizer"
    category = Category.LAUNCH_OVERHEAD
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS, Requirement.TRAINING})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_optimizer_fraction": Threshold(
            0.05, "optimizer step share of the step worth reporting", "fraction"
        ),
        "min_kernels_per_step": Threshold(
            30.0, "optimizer kernels per step from which launches dominate a per-tensor update", "kernels"
        ),
        "per_tensor_speedup": Threshold(
            5.0, "conservative optimizer speed-up of foreach/fused over a per-tensor update", "x"
        ),
        "min_foreach_fraction": Threshold(
            0.10, "optimizer share from which foreach -> fused is worth reporting", "fraction"
        ),
        "foreach_to_fused_speedup": Threshold(1.5, "conservative speed-up of fused over foreach", "x"),
    }
    references = ("https://pytorch.org/docs/stable/optim.html#algorithms",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        import numpy as np

        window = gw.step_window(ctx)
        ann = ctx.trace.annotations
        if window.count == 0 or window.total_us <= 0 or len(ann) == 0:
            return
        names = ann["name"].astype(str)
        spans = ann[names.str.match(_OPT_SPAN) & ~ann["on_gpu"].astype(bool)]
        spans = spans[window.mask(spans["ts"])].sort_values("ts")
        if len(spans) == 0:
            return
        kl = ctx.trace.kernel_launches()
        kl = kl[kl["launch_ts"].notna()].sort_values("launch_ts")
        launch_ts = kl["launch_ts"].to_numpy(dtype="float64")
        s_ts = spans["ts"].to_numpy(dtype="float64")
        s_end = spans["end"].to_numpy(dtype="float64")
        # Kernels whose launch call lies inside an optimizer span (spans do not overlap each other).
        idx = np.searchsorted(s_ts, launch_ts, side="right") - 1
        inside = (idx >= 0) & (launch_ts < s_end[np.maximum(idx, 0)])
        opt_k = kl[inside]
        span_of = idx[inside]
        if len(opt_k) == 0:
            return
        # What the optimizer costs the GPU timeline: its own kernels' GPU time, plus the GPU idle time
        # inside its interval (host span start to the later of span end and last kernel end), when the
        # GPU ran dry while the host was still issuing the update. The interval's length alone is
        # not a cost: in a GPU-bound run the update's kernels queue behind earlier work while the GPU
        # stays busy, and a fused update would not shorten the step by that queueing.
        from gpuadvisor.metrics import covered, union_intervals

        last_end = np.full(len(spans), -np.inf)
        np.maximum.at(last_end, span_of, opt_k["end"].to_numpy(dtype="float64"))
        interval_end = np.maximum(s_end, last_end)
        occupied = interval_end - s_ts
        act = gw.gpu_activity(ctx, window)
        a_s, a_e = union_intervals(act["ts"].to_numpy(dtype="float64"), act["end"].to_numpy(dtype="float64"))
        idle_in_span = np.clip(occupied - covered(a_s, a_e, s_ts, interval_end), 0.0, None)
        k_s, k_e = union_intervals(opt_k["ts"].to_numpy(dtype="float64"), opt_k["end"].to_numpy(dtype="float64"))
        opt_kernel_us = float(np.sum(k_e - k_s))
        idle_fraction, deflation = gw.deflate_host_idle(ctx, float(idle_in_span.sum()) / window.total_us, window)
        kernel_fraction = opt_kernel_us / window.total_us
        opt_fraction = kernel_fraction + idle_fraction
        kernels_per_step = len(opt_k) / len(spans)
        multi = opt_k["name"].astype(str).map(gw.is_multi_tensor_kernel)
        multi_share = float(multi.mean())
        cls_match = _OPT_SPAN.match(str(spans["name"].iloc[0]))
        opt_class = cls_match.group("cls") if cls_match else "optimizer"
        optimizer = self._optimizer_entry(ctx, opt_class)
        param_tensors = optimizer.get("param_tensors") if optimizer else None
        fused = optimizer.get("fused") if optimizer else None
        foreach = optimizer.get("foreach") if optimizer else None
        if opt_fraction < ctx.threshold("min_optimizer_fraction") or fused is True:
            return
        per_tensor = multi_share < 0.5 and kernels_per_step >= ctx.threshold("min_kernels_per_step")
        if per_tensor:
            speedup = ctx.threshold("per_tensor_speedup")
        elif multi_share >= 0.5 and opt_fraction >= ctx.threshold("min_foreach_fraction"):
            if opt_class not in _FUSED_CAPABLE:
                return
            speedup = ctx.threshold("foreach_to_fused_speedup")
        else:
            return
        impact = opt_fraction * (1.0 - 1.0 / speedup)
        evidence: dict[str, Any] = {
            "optimizer_class": opt_class,
            "optimizer_steps": len(spans),
            "optimizer_fraction": opt_fraction,
            "optimizer_kernel_fraction": kernel_fraction,
            "optimizer_idle_fraction": idle_fraction,
            "optimizer_interval_per_step_ms": float(occupied.mean()) / 1000.0,
            "optimizer_kernels_per_step": kernels_per_step,
            "multi_tensor_kernel_share": multi_share,
            "optimizer_kernel_median_us": float(opt_k["dur"].median()),
            "param_tensors": param_tensors,
            "foreach": foreach,
            "fused": fused,
            "assumed_speedup": speedup,
            **deflation,
        }
        if isinstance(param_tensors, int) and param_tensors > 0:
            evidence["kernels_per_param_tensor"] = kernels_per_step / param_tensors
        locations: list[Location] = []
        if optimizer:
            locations.append(
                Location(
                    file=optimizer.get("file"),
                    line=optimizer.get("line"),
                    code=optimizer.get("code"),
                    detail={
                        "class": opt_class,
                        "foreach": foreach,
                        "fused": fused,
                        "param_tensors": param_tensors,
                    },
                )
            )
        top = opt_k["name"].astype(str).value_counts().head(2)
        for kname, count in top.items():
            locations.append(
                Location(
                    op=f"Optimizer.step#{opt_class}.step",
                    kernel=gw.short_kernel_name(str(kname)),
                    detail={"count_per_step": float(count) / len(spans)},
                )
            )
        where = f" ({optimizer.get('file')}:{optimizer.get('line')})" if optimizer else ""
        fused_ok = opt_class in _FUSED_CAPABLE
        if per_tensor:
            title = f"Per-tensor optimizer: {kernels_per_step:.0f} kernels per {opt_class}.step, {gw.pct(opt_fraction)} of the step"
            message = (
                f"{opt_class}.step launches {kernels_per_step:.0f} kernels per step (median "
                f"{gw.us(evidence['optimizer_kernel_median_us'])}), only {gw.pct(multi_share)} of them "
                f"multi-tensor kernels"
                + (
                    f"; {kernels_per_step / param_tensors:.1f} kernels per parameter tensor ({param_tensors} tensors)"
                    if isinstance(param_tensors, int) and param_tensors > 0
                    else ""
                )
                + f". The update costs {gw.pct(opt_fraction)} of the step ({gw.pct(kernel_fraction)} in its "
                f"kernels, {gw.pct(idle_fraction)} of GPU idle while the host issues them)"
                + (" and was created with foreach=False." if foreach is False else ".")
            )
            rec = (
                f"Create the optimizer{where} with fused=True"
                if fused_ok
                else f"Create the optimizer{where} with foreach=True (no fused variant for {opt_class})"
            )
            rec += (
                " (all parameters on CUDA, floating point); foreach=True is the fallback. If the loop over "
                "parameters is hand-written, use torch._foreach_* ops or a torch.optim optimizer instead. "
                "Results are numerically equivalent up to float rounding."
            )
        else:
            title = f"{opt_class} uses foreach but not fused: {gw.pct(opt_fraction)} of the step"
            message = (
                f"{opt_class}.step costs {gw.pct(opt_fraction)} of the step ({gw.pct(kernel_fraction)} in "
                f"its kernels, {gw.pct(idle_fraction)} of GPU idle while the host issues them) with "
                "multi-tensor (foreach) "
                f"kernels ({kernels_per_step:.0f} per step); the fused implementation does the update in "
                "fewer, larger kernels."
            )
            rec = (
                f"Pass fused=True to {opt_class}{where} (all parameters must be floating-point CUDA "
                "tensors; it works with GradScaler). Results match foreach up to float rounding."
            )
        yield self.finding(
            impact=impact,
            title=title,
            message=message,
            evidence=evidence,
            recommendation=rec,
            locations=locations,
            impact_explanation=(
                f"Optimizer cost share of the step ({gw.pct(opt_fraction)}: its kernels' GPU time plus GPU "
                f"idle inside the update, less the profiler's own overhead) x (1 - 1/{speedup:g}), the "
                "assumed conservative speed-up of the fused update."
            ),
        )

    @staticmethod
    def _optimizer_entry(ctx: RuleContext, opt_class: str) -> dict[str, Any] | None:
        entries = gw.env_list(ctx, "optimizers")
        same = [o for o in entries if o.get("class") == opt_class]
        pool = same or entries
        if not pool:
            return None
        return max(pool, key=lambda o: int(o.get("steps") or 0))
