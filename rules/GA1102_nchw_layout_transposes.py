"""GA1102 nchw-layout-transposes: a conv net in NCHW, with cuDNN transposing every activation around
its NHWC kernels."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import busy as kb
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel.busy import layout_transposes
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
    `min_transpose_fraction` of the step and the replay without them recovers at least `min_impact`.

    Impact: the replay of the analyzed steps without those transposes and with the normalization
    kernels of the 4-D activations (BatchNorm, GroupNorm) as their channels-last versions: bound by
    their per-element work, they stream the FP32-equivalent bytes at half the memory bandwidth, never
    slower than now (the NCHW kernels of a bf16 net ran at a tenth of it on the H200; docs/model.md,
    "Busy-time transforms"). When the convolutions run in FP32/TF32 the message also quotes bf16
    autocast and the pair together (GA1103 owns the bf16 finding; both rank by the pair, applied
    together).

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
        step_us = win.median_step_us
        if conv_us <= 0 or step_us <= 0 or transpose_us / step_us < ctx.threshold("min_transpose_fraction"):
            return
        pred = ctx.predict(RemedyId.CHANNELS_LAST)
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            return
        fp32_conv_us = kb.class_time_us(ctx, kb.CONV_CLASSES, ("tf32", "fp32"))
        message = (
            f"The convolutions run in NCHW: cuDNN's layout transposes around its NHWC kernels take "
            f"{cm.ms(transpose_us)} per step ({cm.pct(transpose_us / step_us)} of the step; the convolutions "
            f"themselves {cm.ms(conv_us)}). "
        )
        norm = model.kernel_table["class"].to_numpy(dtype=object) == "normalization"
        norm_us = kb.mask_time_us(ctx, norm)
        if norm_us > 0.05 * step_us:
            roof = model.kernel_table.loc[norm, ["roofline_fraction", "dur"]].dropna()
            frac = (
                float((roof["roofline_fraction"] * roof["dur"]).sum() / roof["dur"].sum())
                if len(roof)
                else None
            )
            message += (
                f"Normalization kernels take {cm.ms(norm_us)} per step"
                + (f" at {cm.pct(frac)} of their memory roofline" if frac is not None else "")
                + "; in channels_last they run PyTorch's channels-last kernels. "
            )
        message += cm.prediction_sentence(pred, "the model and input in channels_last")
        evidence: dict[str, object] = {
            "transpose_time_per_step_us": transpose_us,
            "normalization_time_per_step_us": norm_us,
            "transpose_fraction": transpose_us / step_us,
            "conv_time_per_step_us": conv_us,
            "fp32_or_tf32_conv_time_per_step_us": fp32_conv_us,
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
        top = model.kernel_table[mask].groupby("name")["dur"].sum().sort_values(ascending=False)
        locations: list[Location] = cm.model_call_locations(ctx)[:1] + [
            Location(
                kernel=str(name)[:120],
                op="aten::convolution_backward / aten::cudnn_convolution",
                detail={"time_per_step_us": round(float(us) / win.count, 1)},
            )
            for name, us in top.head(2).items()
        ]
        yield self.finding(
            impact=impact,
            title=(
                f"NCHW convolutions with layout transposes ({cm.pct(transpose_us / step_us)} of the step): "
                f"channels_last saves {cm.pct(impact)}"
            ),
            message=message,
            evidence=evidence,
            recommendation=rec,
            locations=locations,
            impact_explanation=cm.impact_explanation(
                pred,
                "cuDNN's NCHW<->NHWC layout transposes removed and the normalization kernels of the 4-D "
                "activations at their channels-last speed",
            ),
            remedy=RemedyId.CHANNELS_LAST,
            prediction=pred.to_dict(),
        )
