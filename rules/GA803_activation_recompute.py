"""GA803 activation-recompute: forward work recomputed in the backward (activation checkpointing) while
memory is to spare."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location, Severity
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import busy as kb
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel.recompute import recomputed


class ActivationRecompute(Rule):
    """The backward recomputes the forward (activation checkpointing) while GPU memory is to spare.

    Why it matters
    --------------
    `torch.utils.checkpoint` (and `gradient_checkpointing=True` in Hugging Face, `checkpoint_sequential`,
    FSDP's activation checkpointing) keeps a block's inputs instead of its activations and runs the
    block's forward again inside the backward: a second forward per checkpointed block, typically a
    third more work per step when every block is checkpointed. It is the right trade when memory is
    short; with a large GPU half empty it only costs time. It is among the most copied settings of
    fine-tuning recipes.

    How it is detected
    ------------------
    Forward ops running inside the autograd engine's backward (`autograd::engine::evaluate_function`
    spans): ops that record autograd nodes (they carry a sequence number, which the backward formulas'
    own ops do not) and that ran with the same input shapes in the step's forward
    (gpuadvisor.stepmodel.recompute). Their kernels are the recomputation's GPU time; fires when it
    takes at least `min_recompute_fraction` of the step. The activations checkpointing keeps out of
    memory are estimated from the recomputed ops' first inputs (what autograd saves for each). The
    memory headroom is the run's peak allocated memory (environment.json) against the GPU's total: the
    remedy is priced for the share of the recomputation whose saved activations fit under
    `max_memory_fraction` of the GPU (all of it: no checkpointing; part of it: checkpoint fewer blocks);
    without room, no finding. Without a recorded peak (a raw trace) the headroom is unknown: the finding
    says so and is rated at most medium.

    Impact: the replay with the recomputed kernels and their host work removed (that share of them).

    How to fix
    ----------
    Checkpoint fewer blocks, or none, while the peak memory stays below the GPU's::

        # before
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)

        # after: no recomputation (or checkpoint every other block)
        for block in self.blocks:
            x = block(x)

    Hugging Face: `gradient_checkpointing=False` in `TrainingArguments` (or
    `model.gradient_checkpointing_disable()`). `gpuadvisor verify --only no_activation_checkpointing`
    runs the script with the checkpointed functions called directly and reports the peak memory it
    reached.
    """

    id = "GA803"
    name = "activation-recompute"
    category = Category.MEMORY
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_recompute_fraction": Threshold(
            0.05, "recomputed forward kernel time as a share of the step worth reporting", "fraction"
        ),
        "max_memory_fraction": Threshold(
            0.9,
            "peak allocated memory after the change at most this share of the GPU (the caching allocator "
            "reserves more than it allocates, and fragments)",
            "fraction",
        ),
        "min_impact": Threshold(0.02, "smallest predicted gain worth a finding", "fraction"),
    }
    references = (
        "https://pytorch.org/docs/stable/checkpoint.html",
        "https://huggingface.co/docs/transformers/perf_train_gpu_one#gradient-checkpointing",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        if model.window.count == 0:
            return
        rc = recomputed(model)
        if rc is None:
            return
        share = kb.step_share(ctx, rc.time_per_step_us)
        if share < ctx.threshold("min_recompute_fraction"):
            return
        mem = gw.memory_info(ctx)
        saved = rc.saved_bytes_per_step
        fraction = 1.0
        room: float | None = None
        if mem.peak_allocated is not None and mem.capacity:
            room = ctx.threshold("max_memory_fraction") * mem.capacity - mem.peak_allocated
            if room <= 0:
                return  # no headroom: recomputation is what makes the run fit
            if saved > room:
                fraction = room / saved
        pred = ctx.predict(RemedyId.DROP_ACTIVATION_CHECKPOINTING, fraction=round(fraction, 3))
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            return
        unknown = room is None
        ops = ", ".join(f"{op} {cm.ms(us)}" for op, us in list(rc.ops.items())[:5])
        message = (
            f"The backward recomputes the forward: {cm.count(rc.regions_per_step)} checkpointed ops per step run "
            f"again inside the backward, {cm.ms(rc.time_per_step_us)} of kernels per step "
            f"({kb.of_step(ctx, rc.time_per_step_us)}) and {cm.ms(rc.host_per_step_us)} of host time"
            + (f" ({ops})" if ops else "")
            + f". Their saved activations would take about {gw.gib(saved)} (estimated from the recomputed ops' "
            "inputs). "
        )
        if unknown:
            message += (
                "The run's peak memory is not recorded (a raw trace): whether they fit is unknown. "
                + cm.prediction_sentence(pred, "no recomputation")
            )
        else:
            after = (mem.peak_allocated or 0.0) + min(saved, room or 0.0)
            message += (
                f"Peak allocated memory {gw.gib(mem.peak_allocated)} of {gw.gib(mem.capacity)}: "
                + (
                    f"without checkpointing about {gw.gib(after)}, it fits. "
                    if fraction >= 1.0
                    else f"only {cm.pct(fraction)} of them fit below {cm.pct(ctx.threshold('max_memory_fraction'))} "
                    f"of the GPU (about {gw.gib(after)}): stop checkpointing that share of the blocks. "
                )
                + cm.prediction_sentence(
                    pred, "no recomputation" if fraction >= 1.0 else f"{cm.pct(fraction)} of the recomputation gone"
                )
            )
        message += cm.note_uncorrected(pred)
        fw = cm.framework(ctx)
        what = "Stop checkpointing" if fraction >= 1.0 else "Checkpoint fewer blocks"
        if fw.is_hf:
            rec = (
                f"{what}: `gradient_checkpointing=False` in TrainingArguments (or "
                "`model.gradient_checkpointing_disable()`)"
                + ("" if fraction >= 1.0 else f", or keep it on about {cm.pct(1.0 - fraction)} of the layers")
                + "."
            )
        else:
            rec = (
                f"{what}: call the blocks directly instead of through `torch.utils.checkpoint.checkpoint`"
                + (" (all of them)" if fraction >= 1.0 else f" for about {cm.pct(fraction)} of them (e.g. every other block)")
                + "."
            )
        rec += (
            " Measure it first: `gpuadvisor verify --only no_activation_checkpointing` runs the script with the "
            "checkpointed functions called directly and reports the peak memory it reached."
        )
        severity = Severity.from_impact(impact)
        if unknown and severity.rank > Severity.MEDIUM.rank:
            severity = Severity.MEDIUM
        locations: list[Location] = cm.model_call_locations(ctx)[:1] + [
            Location(op=op, detail={"time_per_step_us": round(us, 1), "recomputed": True})
            for op, us in list(rc.ops.items())[:3]
        ]
        yield self.finding(
            impact=impact,
            severity=severity,
            title=(
                f"Activation checkpointing recomputes {kb.of_step(ctx, rc.time_per_step_us)}"
                + (" with memory to spare" if not unknown and fraction >= 1.0 else "")
                + f": {'dropping it' if fraction >= 1.0 else 'checkpointing fewer blocks'} saves "
                + ("up to " if unknown else "")
                + cm.saves(pred, impact)
            ),
            message=message,
            evidence={
                "recompute_time_per_step_us": rc.time_per_step_us,
                "recompute_fraction": share,
                "recompute_host_per_step_us": rc.host_per_step_us,
                "recomputed_ops_per_step": rc.regions_per_step,
                "forward_match": rc.forward_match,
                "saved_activation_bytes": saved,
                "peak_allocated_bytes": mem.peak_allocated,
                "memory_capacity_bytes": mem.capacity,
                "recompute_removed_fraction": fraction,
                "memory_known": not unknown,
                "step_time_ms": pred.baseline_step_ms,
                "predicted_step_time_ms": pred.predicted_step_ms,
            },
            recommendation=rec,
            locations=locations,
            impact_explanation=cm.impact_explanation(
                pred,
                "the forward work recomputed in the backward removed"
                + ("" if fraction >= 1.0 else f" for the {cm.pct(fraction)} of it whose activations fit"),
            ),
            remedy=RemedyId.DROP_ACTIVATION_CHECKPOINTING,
            prediction=pred.to_dict(),
        )
