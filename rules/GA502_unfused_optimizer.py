"""GA502 unfused-optimizer: the optimizer step launches a few kernels per parameter tensor."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.namepattern import NamePattern
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold

# torch.optim classes with a fused=True implementation (Adamax, NAdam, RAdam, RMSprop... have none:
# fused=True raises a TypeError there)
_FUSED_CAPABLE = ("Adam", "AdamW", "SGD", "Adagrad")
# kernels of torch's fused optimizers (fused=True): multi_tensor_apply_kernel<FusedOptimizerTensorListMetadata<4>,
# ...FusedAdamMathFunctor...>, and apex/DeepSpeed fused_adam kernels
_FUSED_KERNEL = NamePattern(r"FusedOptimizer|Fused\w*MathFunctor|fused_adam|fused_sgd|_fused_")


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
    The `Optimizer.step#<Class>.step` spans of the analyzed steps; the kernels launched inside a span
    are the optimizer's. A span that holds the model's forward and backward (`optimizer.step(closure)`,
    as PyTorch Lightning steps) starts after the backward: the closure's work is the model's. A per-tensor update: fewer than half of them are multi-tensor kernels and
    there are at least `min_kernels_per_step` per step. A foreach update (multi-tensor kernels) of a
    class that has a fused implementation gets a smaller finding for fused=True. Already fused
    (`multi_tensor_apply_kernel<FusedOptimizerTensorListMetadata...>`, `fused_adam...` kernels, or the
    captured fused=True): quiet. The optimizer call site, its foreach/fused flags and its parameter
    tensor count come from environment.json.

    Impact: the step time recovered in a replay of the analyzed steps with the update fused: its host
    time per step from the first launch to the last becomes a base cost plus a small cost per
    parameter tensor (never more than now; the Python before the first launch stays),
    and its GPU time shrinks (by `per_tensor_to_fused_gpu` from a per-tensor update; from foreach, by
    the ratio of tensor passes of the fused update to the foreach one for the optimizer's class: Adam
    7/19, AdamW 7/21, SGD with momentum 5/8, else `foreach_to_fused_gpu`; docs/model.md). Only
    Adam, AdamW, SGD and Adagrad have fused=True in torch.optim. In a GPU-bound run the update queues behind
    the backward pass and fusing it gains little: the replay says so.

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
        "min_kernels_per_step": Threshold(
            30.0, "optimizer kernels per step from which launches dominate a per-tensor update", "kernels"
        ),
        "min_impact": Threshold(0.03, "smallest predicted gain worth a finding", "fraction"),
    }
    references = ("https://pytorch.org/docs/stable/optim.html#algorithms",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        # lazy: numpy stays out of `gpuadvisor rules`
        import numpy as np

        model = ctx.model
        win = model.window
        spans = model.optimizer_spans
        if win.count == 0 or win.total_us <= 0 or spans.count == 0:
            return
        o = model.window_ops
        opt_k = o[(o["kind"] == "kernel") & o["in_optimizer"].astype(bool)]
        if len(opt_k) == 0:
            return
        names = opt_k["name"].astype(str)
        if names.map(lambda n: _FUSED_KERNEL.matches(n)).mean() >= 0.5:
            return  # the fused implementation already runs (multi_tensor_apply with FusedOptimizer... kernels)
        steps_with = max(1, len(np.unique(opt_k["step"].to_numpy())))
        kernels_per_step = len(opt_k) / steps_with
        multi_share = float(names.map(gw.is_multi_tensor_kernel).mean())
        opt_class = model.optimizer_class or "optimizer"
        optimizer = cm.main_optimizer(ctx, opt_class)
        param_tensors = optimizer.get("param_tensors") if optimizer else None
        fused = optimizer.get("fused") if optimizer else None
        foreach = optimizer.get("foreach") if optimizer else None
        if fused is True:
            return
        per_tensor = multi_share < 0.5 and kernels_per_step >= ctx.threshold("min_kernels_per_step")
        if not per_tensor and multi_share < 0.5:
            return  # a handful of kernels: nothing to fuse
        if not per_tensor and opt_class not in _FUSED_CAPABLE:
            return
        pred = ctx.predict(
            RemedyId.FUSED_OPTIMIZER,
            per_tensor=per_tensor,
            param_tensors=int(param_tensors) if isinstance(param_tensors, int) else None,
        )
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            return
        k_us = float(opt_k["dur"].sum())
        span_us = float(spans.covered(win.starts, win.ends).sum())
        fw = cm.framework(ctx)
        evidence: dict[str, Any] = {
            "optimizer_class": opt_class,
            "optimizer_kernels_per_step": kernels_per_step,
            "optimizer_kernel_ms_per_step": win.per_step(k_us) / 1000.0,
            "optimizer_host_span_ms_per_step": win.per_step(span_us) / 1000.0,
            "multi_tensor_kernel_share": multi_share,
            "optimizer_kernel_median_us": float(opt_k["dur"].median()),
            "param_tensors": param_tensors,
            "foreach": foreach,
            "fused": fused,
            "per_tensor": per_tensor,
            "step_time_ms": pred.baseline_step_ms,
            "predicted_step_time_ms": pred.predicted_step_ms,
            "framework": fw.name,
            **cm.profiler_evidence(ctx),
        }
        if isinstance(param_tensors, int) and param_tensors > 0:
            evidence["kernels_per_param_tensor"] = kernels_per_step / param_tensors
        locations: list[Location] = []
        loc = (
            cm.location_of(
                optimizer,
                **{"class": opt_class, "foreach": foreach, "fused": fused, "param_tensors": param_tensors},
            )
            if optimizer
            else None
        )
        if fw.is_hf and fw.call_site is not None:
            locations.append(fw.call_site)
        if loc is not None:
            locations.append(loc)
        for kname, count in names.value_counts().head(2).items():
            locations.append(
                Location(
                    op=f"Optimizer.step#{opt_class}.step",
                    kernel=gw.short_kernel_name(str(kname)),
                    detail={"count_per_step": float(count) / steps_with},
                )
            )
        where = f" ({loc.label()})" if loc is not None else ""
        fused_ok = opt_class in _FUSED_CAPABLE
        described = (
            f"{opt_class}.step launches {kernels_per_step:.0f} kernels per step (median "
            f"{gw.us(evidence['optimizer_kernel_median_us'])}; {cm.ms(win.per_step(k_us))} of GPU time and "
            f"{cm.ms(win.per_step(span_us))} of host time per step)"
        )
        if per_tensor:
            title = f"Per-tensor optimizer: {kernels_per_step:.0f} kernels per {opt_class}.step; fusing saves {cm.saves(pred, impact)}"
            message = (
                described
                + (
                    ", none of them multi-tensor kernels"
                    if multi_share == 0
                    else f", only {gw.pct(multi_share)} of them multi-tensor kernels"
                )
                + (
                    f"; {kernels_per_step / param_tensors:.1f} kernels per parameter tensor ({param_tensors} tensors)"
                    if isinstance(param_tensors, int) and param_tensors > 0
                    else ""
                )
                + (" (created with foreach=False)." if foreach is False else ".")
            )
        else:
            title = f"{opt_class} runs foreach, not fused: fusing saves {cm.saves(pred, impact)}"
            message = (
                described
                + " with multi-tensor (foreach) kernels; the fused implementation does the update in fewer kernels and less host time."
            )
        message += " " + cm.prediction_sentence(pred, "the fused update") + cm.note_uncorrected(pred)
        if fw.is_hf:
            rec = (
                'Set optim="adamw_torch_fused" in your TrainingArguments'
                + (f" ({fw.call_site.label()})" if fw.call_site else "")
                + "."
            )
        elif fused_ok:
            rec = (
                f"Create the optimizer{where} with fused=True"
                + (" (in configure_optimizers)" if fw.is_lightning else "")
                + " (all parameters on CUDA, floating point; it works with GradScaler); foreach=True is the fallback."
            )
        else:
            rec = f"Create the optimizer{where} with foreach=True (no fused variant for {opt_class})."
        if per_tensor:
            rec += " If the loop over parameters is hand-written, use torch._foreach_* ops or a torch.optim optimizer instead."
        rec += " Results match up to float rounding. " + cm.gain(pred, impact)
        yield self.finding(
            impact=impact,
            title=title,
            message=message,
            evidence=evidence,
            recommendation=rec,
            locations=locations,
            impact_explanation=cm.impact_explanation(pred, "the optimizer update fused"),
            remedy=RemedyId.FUSED_OPTIMIZER,
            prediction=pred,
        )
