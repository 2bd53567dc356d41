"""GA1103 tf32-where-bf16: convolutions and matmuls on tensor cores in TF32, where bf16 doubles the peak
and halves the bytes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import busy as kb
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel.layout import layout_transposes

_MATH = (*kb.CONV_CLASSES, "gemm")


class Tf32WhereBf16(Rule):
    """FP32 model whose convolutions and matmuls run on tensor cores in TF32: bf16 doubles the peak.

    Why it matters
    --------------
    cuDNN runs FP32 convolutions in TF32 on tensor cores by default (`torch.backends.cudnn.allow_tf32`
    is True), and `torch.set_float32_matmul_precision("high")` (or `allow_tf32`) does the same for
    matmuls: the run "uses tensor cores", yet bf16 autocast doubles their peak again and halves the
    bytes every kernel moves (the BatchNorm and elementwise kernels around the convolutions are
    memory-bound). On a conv net in NCHW much of that gain is behind cuDNN's layout transposes: see
    GA1102.

    Ownership: GA701 owns plain FP32 math on CUDA cores (TF32 off); this rule fires only when that
    time is under GA701's `min_fp32_fraction`, so one finding per run names bf16_autocast.

    How it is detected
    ------------------
    The step model's kernel table gives each convolution and GEMM kernel its math dtype: FP32 data on
    tensor cores (TF32 in the name, or the tensor-core verdict of `matmul_math`) is `tf32`. Fires when
    those kernels take at least `min_tf32_fraction` of the step, the ones whose roofline the recorded
    shapes give make up at least `min_known_fraction` of that time (the prediction prices only what it
    can see: TF32 GEMMs inside an opaque library call such as cuDNN's RNN have no shapes, and a
    finding built on them would be a guess), plain-FP32 matmul time (GA701's) is under
    `max_fp32_fraction`, and the bf16 replay recovers at least `min_impact`.

    Impact: the replay under bf16 autocast: each TF32 kernel's time at its roofline halves (its
    roofline fraction r: time x (1 - r/2); the rest of its time, latency and tails, stays), the FP32
    elementwise kernels gain the same way by their own roofline fraction, and normalization kernels and
    the ops autocast keeps in float32 (softmax, layer_norm, losses...) keep their time (docs/model.md,
    "Busy-time transforms"). In NCHW that leaves most of a conv net's time where it was: measured on
    ResNet-50 (H200), bf16 alone 1.09x, with channels_last 2.02x.

    How to fix
    ----------
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
            loss = loss_fn(out, y)

    timm: `--amp --amp-dtype bfloat16`; Lightning: `Trainer(precision="bf16-mixed")`; HF Trainer:
    `TrainingArguments(bf16=True)`. A conv net also wants channels_last (GA1102).
    """

    id = "GA1103"
    name = "tf32-where-bf16"
    category = Category.KERNEL_EFFICIENCY
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS, Requirement.NVIDIA_GPU})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_tf32_fraction": Threshold(
            0.10, "TF32 convolution/matmul time as a share of the step worth reporting", "fraction"
        ),
        "min_known_fraction": Threshold(
            0.5, "share of the TF32 time whose work (FLOPs, bytes) the recorded shapes give", "fraction"
        ),
        "max_fp32_fraction": Threshold(
            0.05, "plain-FP32 matmul time above which GA701 owns the bf16 finding", "fraction"
        ),
        "min_impact": Threshold(0.02, "smallest predicted gain worth a finding", "fraction"),
        "min_compute_capability": Threshold(8.0, "first compute capability with bf16 tensor cores", ""),
    }
    references = (
        "https://pytorch.org/docs/stable/amp.html",
        "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        cc = gw.compute_capability(ctx)
        if cc is None or cc < ctx.threshold("min_compute_capability"):
            return
        model = ctx.model
        win = model.window
        if win.count == 0 or len(model.kernel_table) == 0:
            return
        step_us = kb.step_us(ctx)
        tf32_us = kb.class_time_us(ctx, _MATH, ("tf32",))
        fp32_us = kb.plain_fp32_matmul_us(ctx)
        if step_us <= 0 or tf32_us / step_us < ctx.threshold("min_tf32_fraction"):
            return
        if kb.step_share(ctx, fp32_us) >= ctx.threshold("max_fp32_fraction"):
            return  # GA701's (its measure: plain-FP32 time as a share of the step)
        table = model.kernel_table
        tf32 = table[table["class"].isin(list(_MATH)) & (table["dtype"] == "tf32")]
        known_us = float(tf32.loc[tf32["roofline_us"].notna(), "dur"].sum()) / win.count
        if known_us < ctx.threshold("min_known_fraction") * tf32_us:
            return  # mostly opaque (no shapes): nothing to price with confidence
        pred = ctx.predict(RemedyId.BF16_AUTOCAST)
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            return
        memory_us = kb.class_time_us(ctx, ("normalization", "elementwise", "reduction_softmax"), ("fp32",))
        transpose_us = kb.mask_time_us(ctx, layout_transposes(model))
        roof = float((tf32["roofline_fraction"].fillna(0.0) * tf32["dur"]).sum() / tf32["dur"].sum())
        message = (
            f"{kb.of_step(ctx, tf32_us)} is convolutions/matmuls on tensor cores in TF32 "
            f"({cm.ms(tf32_us)} per step, at {cm.pct(roof)} of their roofline on average); FP32 normalization, "
            f"elementwise and reduction kernels take {cm.ms(memory_us)} more. bf16 doubles the tensor-core peak "
            "and halves the bytes. " + cm.prediction_sentence(pred, "bf16 autocast")
        )
        if transpose_us > 0.03 * step_us:
            message += (
                f" The convolutions are in NCHW ({cm.ms(transpose_us)} of layout transposes per step): bf16 "
                "without channels_last keeps them; GA1102 gives the pair."
            )
        message += cm.note_uncorrected(pred)
        fw = cm.framework(ctx)
        if kb.is_timm(ctx):
            rec = "Add `--amp --amp-dtype bfloat16` to timm's train.py command line (and `--channels-last` for a conv net)."
        elif fw.is_hf:
            rec = (
                "Set `bf16=True` in your TrainingArguments"
                + (f" ({fw.call_site.label()})" if fw.call_site else "")
                + "."
            )
        elif fw.is_lightning:
            rec = (
                'Pass `precision="bf16-mixed"` to the Trainer'
                + (f" ({fw.call_site.label()})" if fw.call_site else "")
                + "."
            )
        else:
            call = next((loc for loc in cm.model_call_locations(ctx) if loc.file), None)
            rec = (
                'Run the forward pass and the loss under `with torch.autocast("cuda", dtype=torch.bfloat16):`'
                + (f" (the model call at {call.label()}: `{call.code}`)" if call and call.code else "")
                + "; weights and optimizer stay FP32, no GradScaler for bf16."
            )
        rec += " Numerics: bf16 keeps 7 mantissa bits; compare the loss curve with the FP32 run."
        top = tf32.groupby("name")["dur"].sum().sort_values(ascending=False)
        locations: list[Location] = []
        if fw.call_site is not None and (fw.is_hf or fw.is_lightning):
            locations.append(fw.call_site)
        locations += cm.model_call_locations(ctx)[:1]
        locations += [
            Location(
                kernel=gw.short_kernel_name(str(name)),
                detail={"time_per_step_us": round(float(us) / win.count, 1), "dtype": "tf32"},
            )
            for name, us in top.head(3).items()
        ]
        yield self.finding(
            impact=impact,
            title=f"TF32 convolutions/matmuls ({kb.of_step(ctx, tf32_us)}): bf16 saves {cm.saves(pred, impact)}",
            message=message,
            evidence={
                "tf32_time_per_step_us": tf32_us,
                "tf32_fraction": kb.step_share(ctx, tf32_us),
                "tf32_roofline_fraction": roof,
                "tf32_known_time_per_step_us": known_us,
                "fp32_memory_bound_time_per_step_us": memory_us,
                "layout_transpose_time_per_step_us": transpose_us,
                "plain_fp32_matmul_time_per_step_us": fp32_us,
                "autocast_used": gw.setting_used(ctx, "autocast"),
                "step_time_ms": pred.baseline_step_ms,
                "predicted_step_time_ms": pred.predicted_step_ms,
                "framework": fw.name,
            },
            recommendation=rec,
            locations=locations,
            impact_explanation=cm.impact_explanation(
                pred,
                "bf16 autocast: each TF32 kernel's roofline time halved, FP32 elementwise/reduction kernels moving "
                "half the bytes",
            ),
            remedy=RemedyId.BF16_AUTOCAST,
            prediction=pred.to_dict(),
        )
