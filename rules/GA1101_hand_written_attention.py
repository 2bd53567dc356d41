"""GA1101 hand-written-attention: attention written as matmul -> mask/scale -> softmax -> matmul."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import busy as kb
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel.busy import attention_patterns


class HandWrittenAttention(Rule):
    """Attention computed by hand (q @ k^T, mask and scale, softmax, @ v) instead of a fused kernel.

    Why it matters
    --------------
    Written out, attention materializes the [batch, heads, T, S] score matrix and walks it several
    times in each direction: the scaling, the mask, the softmax (often upcast to float32), dropout, the
    second matmul, and all their backward kernels each read and write T x S values per head. At a long
    sequence that traffic dwarfs the matmuls' FLOPs. `F.scaled_dot_product_attention` runs a fused
    kernel (FlashAttention in bf16/fp16, the memory-efficient kernel in float32) that never writes the
    scores: the GPU stays as busy, it just has far less to do.

    How it is detected
    ------------------
    From the recorded op shapes (`record_shapes`): a softmax over 3-D/4-D scores [.., T, S] (T, S >= 32)
    together with the batched matmul that produced them (q [lead, T, d] x k^T [lead, d, S]) or the
    one that consumes them (attn [lead, T, S] x v [lead, S, d]). Every kernel whose op reads a
    [.., T, S] tensor of the same batch x heads (scale, mask, softmax, casts, dropout, attn @ v and
    the backward of each) and the q @ k^T matmul belong to the pattern. SDPA's own math backend
    (`aten::_safe_softmax`) is not reported. The step model's kernel table and
    gpuadvisor.stepmodel.busy.attention_patterns hold the details.

    Impact: the replay with the pattern's kernels shrunk to what the fused kernels need for the same
    work: per layer and direction, max(FLOPs at a realistic share of the dtype's peak, the bytes of
    q, k, v, the output and the gradients at the memory bandwidth) (docs/model.md, "Busy-time
    transforms"); a square mask counts as causal (half the FLOPs). Fires when the pattern is at least
    `min_pattern_fraction` of the step and the replay recovers at least `min_impact`.

    Where: the trace records the aten ops and their shapes, not the Python line of the attention
    module; the finding names the ops, the shapes and the model call, and says so.

    How to fix
    ----------
        # before
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att.float(), dim=-1).to(q.dtype)
        y = att @ v

        # after (causal; pass attn_mask= for other masks, dropout_p= for attention dropout in training)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)

    In float32 SDPA runs the memory-efficient kernel; under bf16 autocast it runs FlashAttention.
    Hugging Face models: `attn_implementation="sdpa"` in `from_pretrained`.
    """

    id = "GA1101"
    name = "hand-written-attention"
    category = Category.KERNEL_EFFICIENCY
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_pattern_fraction": Threshold(
            0.05, "kernel time of the hand-written attention as a share of the step", "fraction"
        ),
        "min_impact": Threshold(0.02, "smallest predicted gain worth a finding", "fraction"),
    }
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html",
        "https://arxiv.org/abs/2307.08691",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        win = model.window
        if win.count == 0 or win.total_us <= 0:
            return
        patterns = [p for p in attention_patterns(model) if p.predicted_per_step_us is not None]
        if not patterns:
            return
        pattern_us = sum(p.time_per_step_us for p in patterns)
        share = kb.step_share(ctx, pattern_us)
        if share < ctx.threshold("min_pattern_fraction"):
            return
        pred = ctx.predict(RemedyId.SDPA)
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            note = kb.unpriced_on_raw_trace(
                self, ctx, pred, pattern_us - sum(p.predicted_per_step_us or 0.0 for p in patterns), "Hand-written attention", ctx.threshold("min_impact")
            )
            if note is not None:
                yield note
            return
        top = patterns[0]
        fused_us = sum(p.predicted_per_step_us or 0.0 for p in patterns)
        fw = cm.framework(ctx)
        shapes = ", ".join(
            f"{p.shape} (head dim {p.head_dim}, {p.dtype or 'dtype unknown'}"
            + (", causal mask" if p.causal else "")
            + f", {p.forward_per_step:g} forward / {p.backward_per_step:g} backward per step)"
            for p in patterns[:3]
        )
        ops = ", ".join(f"{op} {cm.ms(us)}" for op, us in list(top.ops.items())[:6])
        fp32 = [p for p in patterns if p.dtype not in ("bf16", "fp16")]
        upcast = [p for p in patterns if p.dtype in ("bf16", "fp16") and p.softmax_dtype == "fp32"]
        message = (
            f"Attention is computed by hand: {cm.ms(pattern_us)} of kernels per step "
            f"({kb.of_step(ctx, pattern_us)}) materialize the scores [batch x heads, T, S] = {shapes}. "
            f"Largest ops of {top.shape}: {ops}. A fused kernel needs about {cm.ms(fused_us)} per step for the "
            "same work (FLOPs at a realistic share of the peak, q/k/v/output bytes only). "
            + cm.prediction_sentence(pred, "F.scaled_dot_product_attention")
            + cm.note_uncorrected(pred)
        )
        if upcast:
            message += " The softmax runs in float32 on bf16/fp16 scores (an upcast): SDPA keeps it inside the kernel."
        message += (
            " The trace records the aten ops and their shapes, not the source line of the attention module."
        )
        rec = (
            "Replace the hand-written attention (q @ k.transpose(-2, -1), scale, mask, softmax, @ v) with "
            "`torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)` (or "
            "`attn_mask=...` for another mask; `dropout_p=` for attention dropout in training)"
        )
        if fw.is_hf:
            rec = (
                'Load the model with `attn_implementation="sdpa"` (or "flash_attention_2") in from_pretrained; '
                "for your own modules: " + rec[0].lower() + rec[1:]
            )
        rec += "."
        if fp32:
            rec += (
                " In float32 SDPA runs the memory-efficient kernel (priced here); under bf16 autocast it runs "
                "FlashAttention, faster again."
            )
        locations: list[Location] = [
            Location(op=op, detail={"scores": p.shape, "time_per_step_us": round(us, 1)})
            for p in patterns[:2]
            for op, us in list(p.ops.items())[:3]
        ]
        locations = cm.model_call_locations(ctx)[:1] + locations
        evidence = {
            "pattern_time_per_step_us": pattern_us,
            "pattern_fraction": share,
            "fused_time_per_step_us": fused_us,
            "patterns": [
                {
                    "scores": [p.lead, p.t, p.s],
                    "head_dim": p.head_dim,
                    "dtype": p.dtype,
                    "softmax_dtype": p.softmax_dtype,
                    "causal": p.causal,
                    "forward_per_step": p.forward_per_step,
                    "backward_per_step": p.backward_per_step,
                    "time_per_step_us": p.time_per_step_us,
                    "fused_time_per_step_us": p.predicted_per_step_us,
                    "ops_us": {k: round(v, 1) for k, v in list(p.ops.items())[:8]},
                }
                for p in patterns[:4]
            ],
            "step_time_ms": pred.baseline_step_ms,
            "predicted_step_time_ms": pred.predicted_step_ms,
            "source_line_known": False,
            "framework": fw.name,
        }
        yield self.finding(
            impact=impact,
            title=(
                f"Hand-written attention ({kb.of_step(ctx, pattern_us)}): "
                f"scaled_dot_product_attention saves {cm.saves(pred, impact)}"
            ),
            message=message,
            evidence=evidence,
            recommendation=rec,
            locations=locations,
            impact_explanation=cm.impact_explanation(
                pred,
                "the hand-written attention's kernels shrunk to the time a fused attention kernel needs for "
                "the same shapes (FLOPs at the dtype's realistic flash share, q/k/v/output bytes at the "
                "memory bandwidth)",
            ),
            remedy=RemedyId.SDPA,
            prediction=pred.to_dict(),
        )
