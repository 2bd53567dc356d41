"""GA1105 fp32-vocab-loss: a large-vocabulary loss computed in FP32 in a bf16/fp16 run."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import busy as kb
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel.busy import vocab_loss


class Fp32VocabLoss(Rule):
    """The loss over a large vocabulary runs in FP32 while the model runs in bf16/fp16.

    Why it matters
    --------------
    An LM's logits are [tokens, vocab]: at 8k tokens and a 128k vocabulary that is a billion values.
    Cross-entropy on `logits.float()` (or autocast, which runs log_softmax/cross_entropy in float32)
    writes an FP32 copy of the logits, reads it for log_softmax, writes FP32 log-probabilities, and the
    backward walks them again: several passes of 4-byte values over the largest tensor of the step,
    all memory-bound. A fused cross-entropy reads the bf16 logits once and writes their gradient once.

    How it is detected
    ------------------
    The logits: a bf16/fp16 GEMM [rows, d] x [d, V] with V >= `min_vocab` (the LM head) in a run whose
    GEMM time is mostly bf16/fp16, followed by ops on FP32 [rows, V] tensors. The pattern is every
    non-GEMM kernel whose op reads a [rows, V] tensor (the upcast, the log-softmax, the gather/nll_loss
    and every backward). Only a cross-entropy is this pattern: the recorded ops over the logits must
    hold a log-softmax over the class axis V written by hand (an `exp` or `logsumexp` over the logits,
    or the log of their softmax; PyTorch's own log_softmax is one fused kernel with no separate exp).
    Another loss over a wide output (a squared error, a regression loss written by hand) is not a
    vocabulary loss and has another remedy. PyTorch's own `F.cross_entropy` under autocast (which runs
    log_softmax and nll_loss in float32 by policy, the documented mixed-precision recipe; an explicit
    `.float()` before it costs the same) is the standard path: the fused alternatives were not measured
    against it, so it is not reported. Fires when the pattern takes at least `min_loss_fraction` of the
    step and the replay recovers at least `min_impact`.

    Impact: the replay with those kernels shrunk to what `F.cross_entropy` on the bf16 logits moves:
    12 bytes per logit (log_softmax reads and writes them, its backward reads two and writes one,
    nll_loss's backward writes the gradient) at the achievable memory bandwidth, per LM-head GEMM.

    How to fix
    ----------
    Use a fused, chunked cross-entropy that never materializes FP32 logits: Liger Kernel's
    `LigerFusedLinearCrossEntropyLoss` (fuses the LM head too), or compute the loss in chunks of rows
    (`torch.compile` of the loss function also fuses the upcast and log_softmax). At least drop the
    explicit `.float()` before `F.cross_entropy`.
    """

    id = "GA1105"
    name = "fp32-vocab-loss"
    category = Category.KERNEL_EFFICIENCY
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_vocab": Threshold(16384, "smallest vocabulary (last dimension of the loss input)", "elements"),
        "min_loss_fraction": Threshold(
            0.05, "FP32 loss kernel time as a share of the step worth reporting", "fraction"
        ),
        "min_impact": Threshold(0.02, "smallest predicted gain worth a finding", "fraction"),
    }
    references = (
        "https://github.com/linkedin/Liger-Kernel",
        "https://pytorch.org/docs/stable/amp.html#cuda-ops-that-can-autocast-to-float32",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        win = model.window
        if win.count == 0:
            return
        v = vocab_loss(model, min_vocab=int(ctx.threshold("min_vocab")))
        if v is None:
            return
        share = kb.step_share(ctx, v.time_per_step_us)
        if share < ctx.threshold("min_loss_fraction"):
            return
        pred = ctx.predict(RemedyId.FUSED_CROSS_ENTROPY)
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            note = kb.unpriced_on_raw_trace(
                self, ctx, pred, v.time_per_step_us - v.predicted_per_step_us, "FP32 loss over a large vocabulary", ctx.threshold("min_impact")
            )
            if note is not None:
                yield note
            return
        ops = ", ".join(f"{op} {cm.ms(us)}" for op, us in list(v.ops.items())[:6])
        message = (
            f"The loss over [{v.rows}, {v.vocab}] logits runs in FP32 in a bf16/fp16 run: {cm.ms(v.time_per_step_us)} "
            f"of memory-bound kernels per step ({kb.of_step(ctx, v.time_per_step_us)}): {ops}. A fused "
            f"cross-entropy on the bf16 logits needs about {cm.ms(v.predicted_per_step_us)}. "
            + cm.prediction_sentence(pred, "a fused cross-entropy")
            + cm.note_uncorrected(pred)
        )
        locations: list[Location] = cm.model_call_locations(ctx)[:1] + [
            Location(op=op, detail={"shape": [v.rows, v.vocab], "time_per_step_us": round(us, 1)})
            for op, us in list(v.ops.items())[:3]
        ]
        yield self.finding(
            impact=impact,
            title=f"FP32 loss over a {v.vocab}-word vocabulary ({kb.of_step(ctx, v.time_per_step_us)}): a fused cross-entropy saves {cm.saves(pred, impact)}",
            message=message,
            evidence={
                "rows": v.rows,
                "vocab": v.vocab,
                "loss_time_per_step_us": v.time_per_step_us,
                "loss_fraction": share,
                "fused_time_per_step_us": v.predicted_per_step_us,
                "ops_us": {k: round(x, 1) for k, x in v.ops.items()},
                "step_time_ms": pred.baseline_step_ms,
                "predicted_step_time_ms": pred.predicted_step_ms,
            },
            recommendation=(
                "Compute the loss with a fused cross-entropy that never materializes FP32 logits (Liger Kernel's "
                "LigerFusedLinearCrossEntropyLoss, or the loss in chunks of rows; torch.compile of the loss function "
                "fuses the upcast and log_softmax). At least drop an explicit `.float()` before F.cross_entropy."
            ),
            locations=locations,
            impact_explanation=cm.impact_explanation(
                pred,
                "the FP32 loss kernels replaced by one read of the bf16 logits and one write of their gradient",
            ),
            remedy=RemedyId.FUSED_CROSS_ENTROPY,
            prediction=pred.to_dict(),
        )
