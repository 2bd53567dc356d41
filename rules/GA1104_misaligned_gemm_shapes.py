"""GA1104 misaligned-gemm-shapes: bf16/fp16 matmuls whose dimensions are not multiples of 8."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import busy as kb
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel.busy import odd_gemms


class MisalignedGemmShapes(Rule):
    """bf16/fp16 matmuls with dimensions that are not multiples of 8, or a tiny inner dimension.

    Why it matters
    --------------
    Tensor-core GEMM kernels load operands in 16-byte vectors (8 bf16/fp16 values) and tile M, N and K
    in multiples of 8-64. A dimension like 50257 (GPT-2's vocabulary), 1001 classes or a hidden size
    of 100 forces cuBLAS onto narrow-alignment kernels (`align1`/`align2` tiles) or a CUDA-core
    fallback, and a K below 16 leaves the tensor cores mostly idle: the same FLOPs run several times
    slower than in the run's aligned GEMMs.

    How it is detected
    ------------------
    GEMM kernels of the kernel table in bf16/fp16 whose op's recorded shapes (`record_shapes`) give
    M, K or N not a multiple of `align`, or K < `min_k`. Fires when they take at least
    `min_gemm_fraction` of the step and the replay recovers at least `min_impact`.

    Impact: the replay with each misaligned GEMM doing the FLOPs of its padded shape at the roofline
    fraction this run's aligned bf16/fp16 GEMMs reach (never slower than now).

    How to fix
    ----------
    Pad the dimension to a multiple of 8 (64 is better still): the vocabulary of an embedding/LM head
    (`vocab_size = 50304` instead of 50257, as nanoGPT does), the number of classes, hidden and head
    sizes. Extra logits of a padded vocabulary are never targets; mask them if you sample.
    """

    id = "GA1104"
    name = "misaligned-gemm-shapes"
    category = Category.KERNEL_EFFICIENCY
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_gemm_fraction": Threshold(
            0.05, "misaligned GEMM time as a share of the step worth reporting", "fraction"
        ),
        "min_impact": Threshold(0.02, "smallest predicted gain worth a finding", "fraction"),
    }
    references = (
        "https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html#requirements-tc",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        win = model.window
        if win.count == 0:
            return
        odd = odd_gemms(model)
        if odd is None:
            return
        share = kb.step_share(ctx, odd.time_per_step_us)
        if share < ctx.threshold("min_gemm_fraction"):
            return
        pred = ctx.predict(RemedyId.PAD_GEMM_SHAPES)
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            note = kb.unpriced_on_raw_trace(
                self, ctx, pred, odd.time_per_step_us - odd.predicted_per_step_us, "Misaligned matmul shapes", ctx.threshold("min_impact")
            )
            if note is not None:
                yield note
            return
        shapes = "; ".join(
            f"M={s['m']} K={s['k']} N={s['n']}"
            + (f" x{s['batch']}" if s["batch"] > 1 else "")
            + f" ({cm.ms(s['time_per_step_us'])})"
            for s in odd.shapes[:3]
        )
        odd_dims = sorted(
            {d for s in odd.shapes for d in (s["m"], s["k"], s["n"]) if d % 8},
            reverse=True,
        )
        message = (
            f"bf16/fp16 matmuls with dimensions that are not multiples of 8 take {cm.ms(odd.time_per_step_us)} per "
            f"step ({kb.of_step(ctx, odd.time_per_step_us)}): {shapes}. Padded, they would run at the "
            f"{cm.pct(odd.reference_fraction)} of their roofline this run's aligned GEMMs reach: about "
            f"{cm.ms(odd.predicted_per_step_us)} per step. "
            + cm.prediction_sentence(pred, "the shapes padded to multiples of 8")
            + cm.note_uncorrected(pred)
        )
        t = model.kernel_table
        top = t[odd.kernels].groupby("name")["dur"].sum().sort_values(ascending=False)
        ops = t[odd.kernels]["op_name"].dropna().astype(str)
        locations: list[Location] = [
            Location(
                kernel=str(name)[:120],
                op=ops.mode().iloc[0] if len(ops) else None,
                detail={"time_per_step_us": round(float(us) / win.count, 1)},
            )
            for name, us in top.head(3).items()
        ]
        rec = (
            "Pad the odd dimension"
            + (f" ({', '.join(str(d) for d in odd_dims[:4])})" if odd_dims else "")
            + " to a multiple of 8 (64 is better): the vocabulary of the embedding/LM head (e.g. 50304 for 50257), "
            "the number of classes, hidden or head sizes. Padded logits are never targets; mask them when sampling."
        )
        yield self.finding(
            impact=impact,
            title=f"Misaligned matmul shapes ({kb.of_step(ctx, odd.time_per_step_us)}): padding saves {cm.saves(pred, impact)}",
            message=message,
            evidence={
                "misaligned_time_per_step_us": odd.time_per_step_us,
                "misaligned_fraction": share,
                "padded_time_per_step_us": odd.predicted_per_step_us,
                "aligned_roofline_fraction": odd.reference_fraction,
                "shapes": odd.shapes,
                "step_time_ms": pred.baseline_step_ms,
                "predicted_step_time_ms": pred.predicted_step_ms,
            },
            recommendation=rec,
            locations=locations,
            impact_explanation=cm.impact_explanation(
                pred,
                "each misaligned GEMM at its padded FLOPs and the roofline fraction of the run's aligned GEMMs",
            ),
            remedy=RemedyId.PAD_GEMM_SHAPES,
            prediction=pred.to_dict(),
        )
