"""GA701 fp32-matmul: matrix and convolution time in plain FP32 on a GPU with tensor cores."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold

# Dense FP32 (CUDA-core, no tensor core) peak TFLOP/s by compute capability: an FP32 SIMT GEMM cannot
# run faster than this, so a "fp32-looking" kernel that does is on tensor cores (TF32).
# H100 SXM 67, A100 19.5 (NVIDIA datasheets); other parts are lower.
_FP32_PEAK_TFLOPS = {9.0: 67.0, 8.0: 19.5}


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
    Matmul/conv/attention kernels (by the trace's family label or by name) in the analyzed steps are
    classified by name: tensor-core names (`nvjet_*`, `*tensorop*`, `*16816*`, `hmma`/`gmma`, bf16,
    fp16, tf32) versus FP32 CUDA-core names (`*simt_sgemm*`, `sgemm`, and `xmma_gemm_f32f32_f32f32_f32_*ffma*`:
    it says xmma but computes with FFMA). Names that say neither are judged by the launching op's
    input dtypes (all `float` -> FP32 unless TF32 was enabled). A kernel classified FP32 whose
    achieved TFLOP/s (from the op's FLOP count) beats the GPU's FP32 CUDA-core peak is moved to tensor
    core (the name list drifted). Fires when the FP32 matmul time is at least `min_fp32_fraction` of
    the step on a GPU of compute capability >= 8.0.

    Impact = the time BF16 autocast would save on those kernels, over the step time. Each kernel's
    expected speed-up follows from its achieved FLOP/s (FLOPs of the launching op over its time): its
    share of the FP32 CUDA-core peak x the BF16/FP32 peak ratio (~15x on Hopper) x
    `tensor_core_efficiency`, at least `min_autocast_speedup` (a memory-bound GEMM still moves half the
    bytes) and at most `max_autocast_speedup`; kernels without a FLOP count (convolutions in torch 2.11
    traces) get `autocast_speedup`. TF32 alone, `tf32_speedup`, is quoted in the message.

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
        "autocast_speedup": Threshold(
            3.0, "speed-up under BF16 autocast assumed for kernels whose FLOP/s is unknown", "x"
        ),
        "min_autocast_speedup": Threshold(
            2.0, "speed-up of memory-bound FP32 GEMMs under BF16 (half the bytes)", "x"
        ),
        "max_autocast_speedup": Threshold(8.0, "cap on the expected BF16 speed-up of one kernel", "x"),
        "tensor_core_efficiency": Threshold(
            0.5, "share of the BF16 tensor-core peak a compute-bound GEMM is expected to reach", "fraction"
        ),
        "tf32_speedup": Threshold(2.0, "conservative speed-up of those kernels with TF32 enabled", "x"),
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
        window = gw.step_window(ctx)
        if window.count == 0 or window.total_us <= 0:
            return
        kernels = gw.window_kernels(ctx, window)
        if len(kernels) == 0:
            return
        k = ctx.trace.kernel_ops().loc[kernels.index]
        names = k["name"].astype(str)
        families = k["family"].astype(object)
        is_mm = [
            gw.is_matmul_kernel(n, f if isinstance(f, str) else None)
            for n, f in zip(names, families, strict=True)
        ]
        mm = k[is_mm]
        if len(mm) == 0:
            return
        settings = gw.settings(ctx)
        tf32_on = settings.get("allow_tf32_matmul") is True or settings.get("float32_matmul_precision") in (
            "high",
            "medium",
        )
        peak = _FP32_PEAK_TFLOPS.get(9.0 if cc >= 9.0 else 8.0) if cc < 10.0 else None
        rows: list[dict[str, Any]] = []
        for kname, group in mm.groupby(mm["name"].astype(str), sort=True):
            name = str(kname)
            math_kind = gw.matmul_math(name)
            types = group["op_input_types"].dropna().astype(str)
            dtype = types.mode().iloc[0] if len(types) else None
            basis = "name"
            if math_kind == "unknown" and dtype is not None:
                fp32_inputs = "float" in dtype and "BFloat16" not in dtype and "Half" not in dtype
                math_kind = "fp32" if fp32_inputs and not tf32_on else "tensor_core"
                basis = "input dtype"
            dur = float(group["dur"].sum())
            flops = float(group["op_flops"].sum(min_count=1)) if group["op_flops"].notna().any() else None
            tflops = flops / dur / 1e6 if flops and dur > 0 else None
            if math_kind == "fp32" and tflops is not None and peak is not None and tflops > peak * 1.05:
                math_kind, basis = "tensor_core", "achieved TFLOP/s above the FP32 peak"
            ops = group["op_name"].dropna().astype(str)
            rows.append(
                {
                    "name": name,
                    "math": math_kind,
                    "basis": basis,
                    "time_us": dur,
                    "count_per_step": len(group) / window.count,
                    "op": ops.mode().iloc[0] if len(ops) else None,
                    "input_types": dtype,
                    "achieved_tflops": tflops,
                }
            )
        mm_us = sum(r["time_us"] for r in rows)
        fp32 = sorted((r for r in rows if r["math"] == "fp32"), key=lambda r: (-r["time_us"], r["name"]))
        tc_us = sum(r["time_us"] for r in rows if r["math"] == "tensor_core")
        fp32_us = sum(r["time_us"] for r in fp32)
        fp32_fraction = fp32_us / window.total_us
        if not fp32 or fp32_fraction < ctx.threshold("min_fp32_fraction"):
            return
        # Expected BF16 speed-up per kernel, from how hard it already drives the CUDA cores: an FP32 GEMM
        # near the FP32 peak is compute-bound and gains up to the tensor-core/FP32 peak ratio (at
        # `tensor_core_efficiency` of the tensor-core peak); a GEMM far below it is bound by memory or
        # launches and gains about 2x (half the bytes). Kernels without a FLOP count get
        # `autocast_speedup`.
        gpu_peak = getattr(ctx.metrics, "gpu_peak", None)
        bf16_peak = gpu_peak.peak("bf16") if gpu_peak is not None else None
        ratio = bf16_peak / peak if bf16_peak and peak else None
        saved_us = 0.0
        for r in fp32:
            if r["achieved_tflops"] is not None and ratio is not None and peak:
                use = min(1.0, r["achieved_tflops"] / peak)
                s_k = use * ratio * ctx.threshold("tensor_core_efficiency")
                s_k = min(ctx.threshold("max_autocast_speedup"), max(ctx.threshold("min_autocast_speedup"), s_k))
            else:
                s_k = ctx.threshold("autocast_speedup")
            r["expected_speedup"] = s_k
            saved_us += r["time_us"] * (1.0 - 1.0 / s_k)
        speedup = fp32_us / (fp32_us - saved_us) if fp32_us > saved_us else ctx.threshold("max_autocast_speedup")
        tf32_speedup = ctx.threshold("tf32_speedup")
        impact = saved_us / window.total_us
        autocast_used = gw.setting_used(ctx, "autocast")
        evidence = {
            "compute_capability": cc,
            "matmul_time_fraction": mm_us / window.total_us,
            "fp32_matmul_fraction": fp32_fraction,
            "fp32_share_of_matmul_time": fp32_us / mm_us if mm_us else None,
            "tensor_core_share_of_matmul_time": tc_us / mm_us if mm_us else None,
            "fp32_kernels": [{k: v for k, v in r.items() if k != "math"} for r in fp32[:5]],
            "allow_tf32_matmul": settings.get("allow_tf32_matmul"),
            "float32_matmul_precision": settings.get("float32_matmul_precision"),
            "autocast_used": autocast_used,
            "fp32_peak_tflops": peak,
            "expected_speedup_autocast": speedup,
            "assumed_speedup_tf32": tf32_speedup,
        }
        top = fp32[0]
        message = (
            f"{gw.pct(fp32_fraction)} of the step is matmul/conv work in plain FP32 on CUDA cores "
            f"({gw.pct(fp32_us / mm_us if mm_us else None)} of matmul time) on a compute capability {cc:.1f} "
            f"GPU with tensor cores. Largest: {gw.short_kernel_name(top['name'], 90)} "
            f"({gw.us(top['time_us'] / window.count)} per step"
            + (f", inputs {top['input_types']}" if top["input_types"] else "")
            + (f", {top['achieved_tflops']:.1f} TFLOP/s" if top["achieved_tflops"] else "")
            + ")."
        )
        if settings:
            message += (
                f" Settings: allow_tf32={settings.get('allow_tf32_matmul')}, "
                f"float32_matmul_precision={settings.get('float32_matmul_precision')!r}, "
                f"autocast {'used' if autocast_used else 'not used'}."
            )
        rec = (
            'Wrap the forward pass and the loss in `with torch.autocast("cuda", dtype=torch.bfloat16):` '
            "(weights and optimizer stay FP32; no GradScaler needed for bf16, only for float16). "
            "Minimal change: `torch.backends.cuda.matmul.allow_tf32 = True` (or "
            '`torch.set_float32_matmul_precision("high")`) and `torch.backends.cudnn.allow_tf32 = True`, '
            f"expected ~{tf32_speedup:g}x on these kernels vs ~{speedup:.1f}x for bf16. Numerics: TF32 and "
            "BF16 round matmul inputs to 10/7 mantissa bits; check the loss curve against an FP32 run."
        )
        if all(_is_attention(r["name"]) for r in fp32):
            rec = (
                "The FP32 time is in attention kernels (memory-efficient attention in float32), which TF32 "
                'does not cover: run the model under `with torch.autocast("cuda", dtype=torch.bfloat16):` so '
                "scaled_dot_product_attention uses the flash/bf16 kernels (no GradScaler needed for bf16). "
                "Numerics: BF16 rounds inputs to 7 mantissa bits; check the loss curve against an FP32 run."
            )
        if autocast_used:
            rec = (
                "Autocast was used, yet these matmuls still ran in FP32: they are outside the autocast "
                "region or forced to float (e.g. .float() inputs, custom ops). Move them inside autocast. "
            ) + rec
        yield self.finding(
            impact=impact,
            title=f"FP32 matmuls on a tensor-core GPU: {gw.pct(fp32_fraction)} of the step",
            message=message,
            evidence=evidence,
            recommendation=rec,
            locations=[
                Location(
                    op=r["op"],
                    kernel=gw.short_kernel_name(r["name"]),
                    detail={
                        "dtype": r["input_types"],
                        "count_per_step": r["count_per_step"],
                        "basis": r["basis"],
                    },
                )
                for r in fp32[:5]
            ],
            impact_explanation=(
                f"FP32 matmul/conv time share ({gw.pct(fp32_fraction)}) x (1 - 1/{speedup:.1f}): the time "
                f"saved if these kernels ran {speedup:.1f}x faster on tensor cores under BF16 autocast (per kernel: "
                "from its achieved share of the FP32 peak)."
            ),
        )


def _is_attention(name: str) -> bool:
    lowered = name.lower()
    return any(key in lowered for key in ("fmha", "flash", "attention"))
