from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel import build as sb

SITE_CALLS = ("Tensor.nonzero",)


class DataDependentShapeOps(Rule):
    """Ops whose output shape depends on GPU data (`nonzero`, boolean-mask indexing, `masked_select`, `unique`) hide a sync in every step.

    Why it matters
    --------------
    To allocate the output of `x[mask]`, `torch.nonzero`, `masked_select` or `unique`, PyTorch must
    know how many elements pass, and that count is on the GPU: the op copies it to the host and
    waits. It is a `.item()` in disguise: the GPU queue drains and the GPU idles until the host
    launches the next kernels.

    How it is detected
    ------------------
    In the step model: host waits on the device issued inside `aten::nonzero`, `aten::masked_select`,
    `aten::unique*`, `aten::repeat_interleave`, `aten::bincount` (boolean indexing runs
    `aten::nonzero` inside `aten::index`); the GPU idle time behind them is attributed to them.
    Impact: the step time recovered in a replay of the analyzed steps without these waits (the ops
    themselves keep their GPU work). Quiet when the ops run less often than `min_calls_per_step` or the
    replay recovers less than `min_impact`.

    How to fix
    ----------
    Keep shapes static: mask with arithmetic or `torch.where` instead of selecting. Before::

        valid = scores > 0.5
        loss = losses[valid].mean()           # boolean indexing -> nonzero -> sync

    After::

        valid = (scores > 0.5).float()
        loss = (losses * valid).sum() / valid.sum().clamp(min=1)   # no sync
        # or: torch.where(valid, losses, 0.0); torch.nonzero_static(mask, size=k) for a fixed size
    """

    id = "GA203"
    name = "data-dependent-shape-ops"
    category = Category.HOST_SYNC
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_impact": Threshold(
            0.02,
            "report only when the idle time these ops cause is at least this share of step time",
            "fraction",
        ),
        "min_calls_per_step": Threshold(
            0.2, "report only when such ops sync at least this often (0.2 = once every 5 steps)", "calls/step"
        ),
    }
    references = ("https://pytorch.org/docs/stable/generated/torch.nonzero_static.html",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        win = model.window
        if win.count == 0:
            return
        st = cm.wait_stats(ctx, sb.DATA_DEPENDENT)
        if st.per_step < ctx.threshold("min_calls_per_step"):
            return
        pred = ctx.predict(RemedyId.STATIC_SHAPES)
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            return
        ops = ctx.trace.cpu_ops
        names = ops["name"].astype(str)
        in_win = win.contains(ops["ts"].to_numpy("float64"))
        counts = names[in_win & names.isin(sb.DATA_DEPENDENT_OPS).to_numpy()].value_counts()
        op_locations = [
            Location(op=str(op), detail={"per_step": round(int(n) / win.count, 2)})
            for op, n in sorted(counts.items(), key=lambda kv: (-int(kv[1]), str(kv[0])))
            if int(n) > 0
        ]
        sites = hs.callsites(ctx, "host_sync", SITE_CALLS)
        site_locations = [hs.site_location(s, "call", "per_step") for s in sites]
        locations = site_locations + op_locations
        op_list = (
            ", ".join(f"{loc.op} ({loc.detail['per_step']}/step)" for loc in op_locations[:4])
            or "unknown ops"
        )
        where = (
            "; ".join(
                f"{loc.label()} `{loc.code}`" if loc.code else loc.label() for loc in site_locations[:3]
            )
            if site_locations
            else "boolean-mask indexing (`x[mask]`) and nonzero/masked_select/unique calls in the step"
        )
        yield self.finding(
            impact=impact,
            title=(
                f"Data-dependent ops sync {cm.count(st.per_step)} times per step: static shapes save "
                f"{cm.saves(pred, impact)}"
            ),
            message=(
                f"{st.count} syncs inside data-dependent ops in {win.count} analyzed steps: {op_list}. Each "
                f"waits for the GPU to count the selected elements; the GPU idled {cm.ms(st.idle_us_per_step)} "
                f"per step behind them ({cm.of_profiled_step(st.idle_fraction, win.median_step_us)}). "
                + cm.prediction_sentence(pred, "these waits removed")
                + cm.note_uncorrected(pred)
            ),
            evidence={
                "syncs": st.count,
                "syncs_per_step": st.per_step,
                "steps_analyzed": win.count,
                "ops_per_step": {str(op): int(n) / win.count for op, n in counts.items() if int(n) > 0},
                "gpu_idle_ms_per_step": st.idle_us_per_step / 1000,
                "step_time_ms": pred.baseline_step_ms,
                "predicted_step_time_ms": pred.predicted_step_ms,
            },
            recommendation=(
                f"Keep shapes static in the step ({where}): multiply by the mask or use "
                "`torch.where(mask, x, 0)` instead of `x[mask]`; compute masked means as "
                "`(x * m).sum() / m.sum()`; use `torch.nonzero_static(mask, size=k)` when a fixed upper "
                "bound exists. " + cm.gain(pred, impact)
            ),
            locations=locations,
            impact_explanation=cm.impact_explanation(pred, "the data-dependent waits removed"),
            remedy=RemedyId.STATIC_SHAPES,
            prediction=pred,
            group="host_sync",
        )
