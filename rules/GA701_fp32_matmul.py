"""GA701 fp32-matmul: matrix and convolution time in plain FP32 on a GPU with tensor cores."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from gpuadvisor.hardware import low_precision_data
from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import busy as kb
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold

# Dense FP32 (CUDA-core, no tensor core) peak TFLOP/s by compute capability: an FP32 SIMT GEMM cannot
# run faster than this, so a "fp32-looking" kernel that does is on tensor cores (TF32).
# H100 SXM 67, A100 19.5 (NVIDIA datasheets); other parts are lower.


class Fp32Matmul(Rule):
    """Matrix multiplications and convolutions run in plain FP32 on a GPU with tensor cores.

    Why it matters
    --------------
    From Ampere (compute capability 8.0) on, matmul and convolution throughput lives in the tensor
    cores: an H100 does ~67 TFLOP/s of dense FP32 on its CUDA cores but ~495 TFLOP/s in TF32 and
    ~990 TFLOP/s in BF16 on its tensor cores. A model left in FP32 with TF32 disabled (PyTorch's
    default for matmuls) runs its GEMMs on the CUDA cores: often several times slower end to end.

    How it is detected
    ------------------
    Matmul/conv/attention kernels of the analyzed steps are classified (the step model's
    `matmul_math`): by name first (tensor-core names such as `nvjet_*`, `*tensorop*`, `*16816*`,
    `hmma`/`gmma`, bf16, fp16, tf32 against FP32 CUDA-core names such as `*simt_sgemm*`, `sgemm`, and
    `xmma_gemm_f32f32_f32f32_f32_*ffma*`: it says xmma but computes with FFMA), then by the launching
    op's input dtypes with the captured TF32 settings, and a kernel "FP32" by name whose achieved
    TFLOP/s beats the FP32 CUDA-core peak is moved to tensor core (the name list drifted). Fires when
    the FP32 matmul time is at least `min_fp32_fraction` of the step on a GPU of compute capability
    >= 8.0.

    Impact: the step time recovered in a replay of the analyzed steps under bf16 autocast. Each FP32
    matmul kernel's speed-up follows from its achieved FLOP/s: its share of the FP32 CUDA-core peak x
    the bf16/fp32 peak ratio x the tensor-core efficiency of the step model, within bounds (a
    memory-bound GEMM still moves half the bytes; kernels without a FLOP count get a default), and
    the forward/backward elementwise kernels move half the bytes. TF32 alone is replayed too and
    quoted. The location is where the fix goes: the framework's switch (HF `TrainingArguments`,
    Lightning `Trainer`) or the user's model call, captured at run time.

    How to fix
    ----------
    Run the forward pass and the loss under BF16 autocast (no GradScaler needed for bf16; it is for
    fp16), or, as the minimal change, allow TF32 for FP32 matmuls.

        # before
        out = model(x)
        loss = loss_fn(out, y)

        # after (BF16 autocast: weights stay FP32, matmuls run on tensor cores)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
            loss = loss_fn(out, y)

        # or, minimal: TF32 tensor cores for FP32 matmuls (10-bit mantissa inputs)
        torch.backends.cuda.matmul.allow_tf32 = True   # or torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True
    """

    id = "GA701"
    name = "fp32-matmul"
    category = Category.FP32_MATH
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS, Requirement.NVIDIA_GPU})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_fp32_fraction": Threshold(
            0.05, "FP32 matmul/conv kernel time as a share of the step worth reporting", "fraction"
        ),
        "min_impact": Threshold(0.02, "smallest predicted gain worth a finding", "fraction"),
        "min_compute_capability": Threshold(8.0, "first compute capability with TF32/BF16 tensor cores", ""),
    }
    references = (
        "https://pytorch.org/docs/stable/amp.html",
        "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        cc = gw.compute_capability(ctx)
        if cc is None or cc < ctx.threshold("min_compute_capability"):
            return  # unknown GPU or no TF32/BF16 tensor cores: nothing to recommend with confidence
        model = ctx.model
        win = model.window
        if win.count == 0 or win.total_us <= 0:
            return
        kernels = model.window_kernels
        if len(kernels) == 0:
            return
        math_of = model.matmul_math()
        mm = kernels[kernels["name"].astype(str).isin(list(math_of)).to_numpy(dtype=bool)]
        if len(mm) == 0:
            return
        rows = _matmul_rows(mm, math_of, win.count)
        mm_us = sum(r["time_us"] for r in rows)
        # CUDA-core kernels on bf16/fp16 data are not FP32 math: autocast would not change them
        fp32 = sorted(
            (
                r
                for r in rows
                if r["tensor_core"] is False and not low_precision_data(r["name"], r["input_types"])
            ),
            key=lambda r: (-r["time_us"], r["name"]),
        )
        tc_us = sum(r["time_us"] for r in rows if r["tensor_core"] is True)
        fp32_us = sum(r["time_us"] for r in fp32)
        # shares of the replayed step, at most 1 (kb.step_share): a GPU-bound trace whose host ran ahead
        # puts more kernel time in its steps than their CPU time (compiled_vit read "148% of the step")
        fp32_fraction = kb.step_share(ctx, fp32_us / win.count)
        if not fp32 or fp32_fraction < ctx.threshold("min_fp32_fraction"):
            return
        pred = ctx.predict(RemedyId.BF16_AUTOCAST)
        tf32 = ctx.predict(RemedyId.TF32)
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            return
        settings = gw.settings(ctx)
        autocast_used = gw.setting_used(ctx, "autocast")
        fw = cm.framework(ctx)
        evidence = {
            "compute_capability": cc,
            "matmul_time_fraction": kb.step_share(ctx, mm_us / win.count),
            "fp32_matmul_fraction": fp32_fraction,
            "fp32_share_of_matmul_time": fp32_us / mm_us if mm_us else None,
            "tensor_core_share_of_matmul_time": tc_us / mm_us if mm_us else None,
            "fp32_kernels": [{k: v for k, v in r.items() if k != "tensor_core"} for r in fp32[:5]],
            "allow_tf32_matmul": settings.get("allow_tf32_matmul"),
            "float32_matmul_precision": settings.get("float32_matmul_precision"),
            "autocast_used": autocast_used,
            "step_time_ms": pred.baseline_step_ms,
            "predicted_step_time_ms_bf16": pred.predicted_step_ms,
            "predicted_step_time_ms_tf32": tf32.predicted_step_ms,
            "predicted_speedup_tf32": tf32.speedup,
            "framework": fw.name,
        }
        message = _message(
            cc, fp32, fp32_fraction, fp32_us / mm_us if mm_us else None, win, pred, tf32
        )
        message += _settings_sentence(settings, autocast_used)
        locations = _locations(ctx, fw, fp32)
        yield self.finding(
            impact=impact,
            title=(
                f"FP32 matmuls on a tensor-core GPU ({cm.pct(fp32_fraction)} of the {cm.ms(kb.step_us(ctx))} replayed step): "
                f"bf16 for them and the elementwise kernels is predicted to save {cm.saves(pred, impact)}"
            ),
            message=message,
            evidence=evidence,
            recommendation=_recommendation(fw, locations, fp32, autocast_used, pred, tf32),
            locations=locations,
            impact_explanation=cm.impact_explanation(
                pred,
                "the FP32 matmul/conv kernels in bf16 (each kernel's speed-up from its achieved share of the "
                "FP32 peak) and the forward/backward elementwise kernels moving half the bytes",
            ),
            remedy=RemedyId.BF16_AUTOCAST,
            prediction={
                **pred.to_dict(),
                "tf32_speedup": round(tf32.speedup, 4),
                "tf32_recovered_fraction": round(tf32.recovered_fraction, 4),
            },
        )


def _matmul_rows(mm: Any, math_of: Mapping[str, bool | None], steps: int) -> list[dict[str, Any]]:
    """One row per matmul/conv/attention kernel name of the window: tensor cores or not, time, launches
    per step, its most common op and input types, and its achieved TFLOP/s when the op's FLOPs are known."""
    rows: list[dict[str, Any]] = []
    for kname, group in mm.groupby(mm["name"].astype(str), sort=True):
        name = str(kname)
        types = group["op_input_types"].dropna().astype(str)
        dur = float(group["dur"].sum())
        flops = float(group["op_flops"].sum(min_count=1)) if group["op_flops"].notna().any() else None
        ops = group["op_name"].dropna().astype(str)
        rows.append(
            {
                "name": name,
                "tensor_core": math_of.get(name),
                "time_us": dur,
                "count_per_step": len(group) / steps,
                "op": ops.mode().iloc[0] if len(ops) else None,
                "input_types": types.mode().iloc[0] if len(types) else None,
                "achieved_tflops": flops / dur / 1e6 if flops and dur > 0 else None,
            }
        )
    return rows


def _message(
    cc: float,
    fp32: list[dict[str, Any]],
    fp32_fraction: float,
    share_of_matmul: float | None,
    win: Any,
    pred: Any,
    tf32: Any,
) -> str:
    top = fp32[0]
    steps = win.count
    return (
        f"{cm.pct(fp32_fraction)} of the replayed step is matmul/conv work in plain FP32 on "
        "CUDA cores "
        f"({gw.pct(share_of_matmul)} of matmul time) on a compute capability {cc:.1f} "
        f"GPU with tensor cores. Largest: {gw.short_kernel_name(top['name'], 90)} "
        f"({gw.us(top['time_us'] / steps)} per step"
        + (f", inputs {top['input_types']}" if top["input_types"] else "")
        + (f", {top['achieved_tflops']:.1f} TFLOP/s" if top["achieved_tflops"] else "")
        + "). "
        + cm.prediction_sentence(pred, "bf16 autocast")
        + f" TF32 alone: {cm.times(tf32.speedup)}."
        + cm.note_uncorrected(pred)
    )


def _settings_sentence(settings: Mapping[str, Any], autocast_used: bool) -> str:
    if not settings:
        return ""
    return (
        f" Settings: allow_tf32={settings.get('allow_tf32_matmul')}, "
        f"float32_matmul_precision={settings.get('float32_matmul_precision')!r}, "
        f"autocast {'used' if autocast_used else 'not used'}."
    )


def _locations(ctx: RuleContext, fw: Any, fp32: list[dict[str, Any]]) -> list[Location]:
    locations: list[Location] = []
    if fw.call_site is not None and (fw.is_hf or fw.is_lightning):
        locations.append(fw.call_site)
    locations += cm.model_call_locations(ctx)[:2]
    return locations + [
        Location(
            op=r["op"],
            kernel=gw.short_kernel_name(r["name"]),
            detail={"dtype": r["input_types"], "count_per_step": r["count_per_step"]},
        )
        for r in fp32[:5]
    ]


def _framework_change(fw: Any, locations: list[Location]) -> str:
    """The change that turns on bf16 (or TF32) in the words of the run's framework."""
    if fw.is_hf:
        return (
            "Set bf16=True in your TrainingArguments"
            + (f" ({fw.call_site.label()})" if fw.call_site else "")
            + " (mixed precision: weights and optimizer stay FP32); tf32=True is the minimal change."
        )
    if fw.is_lightning:
        return (
            'Pass precision="bf16-mixed" to the Trainer'
            + (f" ({fw.call_site.label()})" if fw.call_site else "")
            + '; or, minimal, torch.set_float32_matmul_precision("high") before fit (TF32).'
        )
    if fw.name == cm.HF_ACCELERATE:
        return 'Create the Accelerator with mixed_precision="bf16" (weights and optimizer stay FP32).'
    call = next((loc for loc in locations if loc.file), None)
    return (
        'Wrap the forward pass and the loss in `with torch.autocast("cuda", dtype=torch.bfloat16):`'
        + (f" (the model call at {call.label()}: `{call.code}`)" if call and call.code else "")
        + " (weights and optimizer stay FP32; no GradScaler needed for bf16, only for float16). "
        "Minimal change: `torch.backends.cuda.matmul.allow_tf32 = True` (or "
        '`torch.set_float32_matmul_precision("high")`) and `torch.backends.cudnn.allow_tf32 = True`.'
    )


def _recommendation(
    fw: Any, locations: list[Location], fp32: list[dict[str, Any]], autocast_used: bool, pred: Any, tf32: Any
) -> str:
    rec = _framework_change(fw, locations)
    if all(_is_attention(r["name"]) for r in fp32):
        rec = (
            "The FP32 time is in attention kernels (memory-efficient attention in float32), which TF32 "
            "does not cover: run the model under bf16 autocast"
            + (" (TrainingArguments(bf16=True))" if fw.is_hf else "")
            + " so scaled_dot_product_attention uses the flash/bf16 kernels."
        )
    if autocast_used:
        rec = (
            "Autocast was used, yet these matmuls still ran in FP32: they are outside the autocast "
            "region or forced to float (e.g. .float() inputs, custom ops). Move them inside autocast. "
        ) + rec
    gains = f" Predicted: {cm.times(pred.speedup)} with bf16, {cm.times(tf32.speedup)} with TF32 alone."
    numerics = (
        " Numerics: TF32 and BF16 round matmul inputs to 10/7 mantissa bits; check the loss curve against "
        "an FP32 run."
    )
    return rec + gains + numerics


def _is_attention(name: str) -> bool:
    lowered = name.lower()
    return any(key in lowered for key in ("fmha", "flash", "attention"))
