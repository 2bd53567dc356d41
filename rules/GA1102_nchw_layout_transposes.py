"""GA1102 nchw-layout-transposes: a conv net in NCHW, with cuDNN transposing every activation around
its NHWC kernels."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location, Severity
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import busy as kb
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel.layout import (
    FAMILY_LABELS,
    STRUCTURAL,
    ChannelsLastPlan,
    channels_last_plan,
    layout_transposes,
)
from gpuadvisor.stepmodel.predict import predict_combined
from gpuadvisor.words import change


class NchwLayoutTransposes(Rule):
    """Convolutions in NCHW: cuDNN transposes the activations to NHWC and back around its kernels.

    Why it matters
    --------------
    cuDNN's fast convolution kernels on tensor cores work on NHWC (channels-last) data. Given a model
    and input in PyTorch's default NCHW layout, cuDNN converts each activation and gradient with
    `nchwToNhwcKernel` before the convolution and `nhwcToNchwKernel` after it: memory-bound kernels
    that read and write every activation again, in both passes; and PyTorch's NCHW BatchNorm/GroupNorm
    kernels run far from the memory bandwidth. With the model and its input in `torch.channels_last`
    the convolutions read the activations directly and the normalization runs its channels-last
    kernels. bf16 without channels_last gains
    little on a conv net (docs/trace-inputs.md): the transposes and memory-bound kernels stay.

    How it is detected
    ------------------
    The step model's kernel table classes cuDNN's `nchwToNhwcKernel` / `nhwcToNchwKernel` (and other
    transposes launched by a convolution op) as `layout_transpose`. Fires when they take at least
    `min_transpose_fraction` of the step and the replay of the conversion recovers at least `min_impact`.

    Impact: the replay of the analyzed steps with every kernel on a 4-D activation scaled as
    channels_last changes it, by op family (convolutions, depthwise and grouped convolutions, BatchNorm,
    GroupNorm, LayerNorm over channels, InstanceNorm, pooling, upsampling, elementwise ops,
    concatenation) and dtype: the ratio the NHWC table measured on a GPU (`benchmarks/nhwc_table.py`,
    shipped as gpuadvisor/data/nhwc_table.json; docs/model.md, "channels_last and the NHWC table"),
    at the measured shape nearest each op's activation, slower families included, so a model whose time
    is in families that run slower in channels_last gets no advice. What the user's own trace shows
    wins over the table for the convolutions: cuDNN's transposes go (its NHWC kernels are the ones it
    runs), and BatchNorm in such a net runs its channels-last kernels at the calibrated bytes model. A
    family that gives back NCHW on the GPU (GroupNorm, InstanceNorm: PyTorch runs them on a contiguous
    NCHW copy) ends the channels_last activations: the ops after it run as now, and each convolution
    it feeds pays PyTorch's conversion of its input (forward) and of its input gradient (backward) at the
    table's measured cost instead of cuDNN's transposes. A family the table does not hold keeps its
    time, unknown: when that time could cancel the predicted saving (a family that converts back to
    NCHW inside costs about twice its time), the finding says the gain is unproven and is rated at most
    medium: `gpuadvisor verify --only channels_last` measures it. When the convolutions
    run in FP32/TF32 the message also quotes bf16 autocast and the pair together (GA1103 owns the bf16
    finding; both rank by the pair, applied together).

    How to fix
    ----------
        model = model.to(memory_format=torch.channels_last)
        ...
        x = x.to("cuda", memory_format=torch.channels_last, non_blocking=True)   # 4-D inputs only

    timm's train.py: `--channels-last`. Lightning and the HF Trainer have no switch: convert the model
    in your LightningModule's `setup`/`configure_model` (or before `Trainer`) and the batch in the
    training step.
    """

    id = "GA1102"
    name = "nchw-layout-transposes"
    category = Category.KERNEL_EFFICIENCY
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_transpose_fraction": Threshold(
            0.03, "cuDNN layout-transpose time as a share of the step worth reporting", "fraction"
        ),
        "min_impact": Threshold(0.02, "smallest predicted gain worth a finding", "fraction"),
    }
    references = (
        "https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html",
        "https://docs.nvidia.com/deeplearning/performance/dl-performance-convolutional/index.html#tensor-layout",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        win = model.window
        if win.count == 0 or win.total_us <= 0 or len(model.kernel_table) == 0:
            return
        mask = layout_transposes(model)
        transpose_us = kb.mask_time_us(ctx, mask)
        conv_us = kb.class_time_us(ctx, kb.CONV_CLASSES)
        if conv_us <= 0 or kb.step_share(ctx, transpose_us) < ctx.threshold("min_transpose_fraction"):
            return
        pred = ctx.predict(RemedyId.CHANNELS_LAST)
        impact = pred.recovered_fraction
        plan = channels_last_plan(model)
        if impact < ctx.threshold("min_impact"):
            note = kb.unpriced_on_raw_trace(
                self, ctx, pred, plan.saving_us, "NCHW convolutions with layout transposes", ctx.threshold("min_impact")
            )
            if note is not None:
                yield note
            return
        # the kernels' saving, in the trace's time as the unmeasured families' (the prediction's step times
        # are the run's mean step)
        unproven = plan.unproven(plan.saving_us)
        fp32_conv_us = kb.class_time_us(ctx, kb.CONV_CLASSES, ("tf32", "fp32"))
        message = (
            f"The convolutions run in NCHW: cuDNN's layout transposes around its NHWC kernels take "
            f"{cm.ms(transpose_us)} per step ({kb.of_step(ctx, transpose_us)}; the "
            f"convolutions themselves {cm.ms(conv_us)}). "
            + _families_sentence(plan)
            + cm.prediction_sentence(pred, "the model and input in channels_last")
        )
        if unproven:
            message += (
                f" Unproven: {cm.ms(plan.unmeasured_us)} per step is in op families whose channels_last speed "
                f"was never measured ({', '.join(f.label for f in plan.unmeasured[:4])}), enough to cancel the "
                "saving if they convert back to NCHW inside; `gpuadvisor verify --only channels_last` measures it."
            )
        evidence: dict[str, object] = {
            "transpose_time_per_step_us": transpose_us,
            "transpose_fraction": kb.step_share(ctx, transpose_us),
            "conv_time_per_step_us": conv_us,
            "fp32_or_tf32_conv_time_per_step_us": fp32_conv_us,
            "families": [f.to_dict() for f in plan.families],
            "unmeasured_time_per_step_us": plan.unmeasured_us,
            "unproven": unproven,
            "nhwc_table": plan.table.where or plan.table.problem or "",
            "step_time_ms": pred.baseline_step_ms,
            "predicted_step_time_ms": pred.predicted_step_ms,
        }
        if fp32_conv_us > 0.1 * conv_us:
            bf16 = ctx.predict(RemedyId.BF16_AUTOCAST)
            pair = predict_combined(model, [(RemedyId.CHANNELS_LAST, {}), (RemedyId.BF16_AUTOCAST, {})])
            message += (
                f" The convolutions are in FP32/TF32 ({cm.pct(fp32_conv_us / conv_us)} of their time): bf16 autocast "
                f"alone is replayed at {cm.times(bf16.speedup)}, channels_last with bf16 at "
                f"{cm.times(pair.speedup)} ({change(pair.baseline_step_ms, pair.predicted_step_ms, 'ms')})."
            )
            evidence.update(
                predicted_speedup_bf16=bf16.speedup,
                predicted_speedup_channels_last_bf16=pair.speedup,
                predicted_step_time_ms_channels_last_bf16=pair.predicted_step_ms,
            )
        message += cm.note_uncorrected(pred)
        fw = cm.framework(ctx)
        if kb.is_timm(ctx):
            rec = "Add `--channels-last` to timm's train.py command line (with `--amp --amp-dtype bfloat16` for bf16)."
        else:
            rec = (
                "Convert the model once, `model = model.to(memory_format=torch.channels_last)`, and each 4-D input "
                'batch, `x = x.to("cuda", memory_format=torch.channels_last, non_blocking=True)`'
            )
            if fw.is_lightning:
                rec += " (Lightning has no switch for it: convert the model in `setup`/`configure_model`, the batch in `training_step`)"
            elif fw.is_hf:
                rec += (
                    " (the Trainer has no switch for it: convert the model before passing it to the Trainer)"
                )
            rec += "."
        rec += " Check the loss curve as usual; the layout does not change the math."
        if unproven:
            rec += " Measure it first: `gpuadvisor verify --only channels_last` runs the script both ways."
        top = model.kernel_table[mask].groupby("name")["dur"].sum().sort_values(ascending=False)
        locations: list[Location] = cm.model_call_locations(ctx)[:1] + [
            Location(
                kernel=str(name)[:120],
                op="aten::convolution_backward / aten::cudnn_convolution",
                detail={"time_per_step_us": round(float(us) / win.count, 1)},
            )
            for name, us in top.head(2).items()
        ]
        saves = f"channels_last saves up to {cm.saves(pred, impact)} (unproven)" if unproven else f"channels_last saves {cm.saves(pred, impact)}"
        severity = Severity.from_impact(impact)
        if unproven and severity.rank > Severity.MEDIUM.rank:
            severity = Severity.MEDIUM
        yield self.finding(
            impact=impact,
            severity=severity,
            title=(
                f"NCHW convolutions with layout transposes ({kb.of_step(ctx, transpose_us)}): "
                + saves
            ),
            message=message,
            evidence=evidence,
            recommendation=rec,
            locations=locations,
            impact_explanation=cm.impact_explanation(
                pred,
                "every kernel on a 4-D activation at its op family's channels_last speed (the NHWC table's "
                "measured ratio; unmeasured families: cuDNN's transposes removed, BatchNorm at its channels-last "
                "speed, the rest unchanged)",
            ),
            remedy=RemedyId.CHANNELS_LAST,
            prediction=pred.to_dict(),
        )


def _families_sentence(plan: ChannelsLastPlan) -> str:
    """The op families on 4-D activations and what channels_last does to each, largest first."""
    parts = []
    for f in plan.families[:5]:
        if f.time_per_step_us <= 0:
            continue
        if f.status == STRUCTURAL:
            how = f"{cm.ms(f.predicted_per_step_us)} in channels_last (by construction)"
        elif f.ratio is not None:
            how = f"measured {f.ratio:.2f}x the NCHW time in channels_last ({f.dtype})"
        else:
            how = "channels_last speed not measured"
        if f.nchw_share >= 0.05:
            how += f"; {cm.pct(f.nchw_share)} of it after a family that gives back NCHW"
        parts.append(f"{f.label} {cm.ms(f.time_per_step_us)} ({how})")
    if not parts:
        return ""
    where = f" (NHWC table: {plan.table.where})" if plan.table.where else ""
    text = "Per step, by op family" + where + ": " + "; ".join(parts) + ". "
    if plan.breakers:
        labels = " and ".join(FAMILY_LABELS.get(b, b) for b in sorted(plan.breakers))
        nchw_us = sum(f.time_per_step_us * f.nchw_share for f in plan.families)
        text += (
            f"{labels} give back NCHW tensors on the GPU (PyTorch converts a channels_last input back): after "
            f"them {cm.ms(nchw_us)} per step would still run in NCHW, and the convolutions they feed would "
            f"convert their inputs to channels_last and back for the gradients ({cm.ms(plan.conversion_us)} "
            "per step at the table's conversion cost, instead of cuDNN's transposes). "
        )
    return text
