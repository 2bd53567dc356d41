"""GA1106 unfused-elementwise-chains: hand-written elementwise code, one memory-bound kernel per operator."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import busy as kb
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel.busy import memory_chains


class UnfusedElementwiseChains(Rule):
    """Chains of memory-bound kernels from hand-written elementwise code (LayerNorm, GELU, scaling by hand).

    Why it matters
    --------------
    Eager PyTorch launches one kernel per operator: a LayerNorm written as mean, subtract, square,
    mean, add, sqrt, divide, scale, shift reads and writes the whole activation nine times, where
    `nn.LayerNorm`'s kernel (or a compiler's fused kernel) reads it once and writes it once. Each of
    those kernels is memory-bound; their bytes, not the GEMMs, can dominate a step in which the GPU is
    never idle.

    How it is detected
    ------------------
    Runs of at least 4 consecutive kernels on one stream, each launched by a primitive aten arithmetic
    op (add, sub, mul, div, pow, sqrt, tanh, mean, sum, where, casts...; library ops that are already
    one kernel, such as native_layer_norm, gelu or softmax, break a chain, except inside a hand-written
    attention (GA1101's pattern), whose scale, mask, casts and softmax are one chain to a compiler),
    outside the optimizer and outside a hand-written FP32 loss over a large vocabulary (GA1105 prices
    that one, with its own fix; written after the model's call, compiling the model does not reach it),
    with their bytes known from the recorded shapes (gpuadvisor.stepmodel.busy.memory_chains). Fires on a
    GPU-bound step (idle launch overhead under `max_launch_idle_fraction`: GA501 prices the rest) with at
    least `min_chains_per_step` chains (a model's code repeats per layer) taking at least
    `min_chain_fraction` of the step, or fewer chains taking at least `min_one_off_fraction` (a loss or
    transform written by hand once per step: a squared error upcast to FP32 over a wide output, whose
    passes over the output can take a third of the step), and a replayed gain of at least `min_impact`.
    Fewer chains are not repeated per layer: they are usually outside the model's layers, where
    compiling the model may not reach them, so the fix names the function to compile.

    Impact: the replay with each chain as one fused kernel that moves the bytes of the chain's largest
    member (one read of its input, one write of its output) at the bandwidth the chain reaches now:
    chain time x max(bytes) / sum(bytes). torch.compile in its default mode (no CUDA graphs).

    How to fix
    ----------
    `model = torch.compile(model)` fuses each chain (Inductor). Or use the library modules, each one
    kernel: `nn.LayerNorm`/`F.layer_norm` for a hand-written LayerNorm, `F.gelu(x, approximate="tanh")`
    for the tanh GELU formula, `F.rms_norm`. A chain run once per step outside the model (a hand-written
    loss after the model's call): compile that function, `loss_fn = torch.compile(loss_fn)`.
    """

    id = "GA1106"
    name = "unfused-elementwise-chains"
    category = Category.KERNEL_EFFICIENCY
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_chain_fraction": Threshold(
            0.10, "chain kernel time as a share of the step worth reporting", "fraction"
        ),
        "min_chains_per_step": Threshold(
            4, "chains per step (hand-written model code repeats per layer)", "chains"
        ),
        "min_one_off_fraction": Threshold(
            0.25, "chain kernel time as a share of the step above which fewer chains are reported", "fraction"
        ),
        "max_launch_idle_fraction": Threshold(
            0.10, "GPU idle waiting for launches above which the step is launch-bound (GA501's)", "fraction"
        ),
        "min_impact": Threshold(0.02, "smallest predicted gain worth a finding", "fraction"),
    }
    references = (
        "https://pytorch.org/docs/stable/generated/torch.compile.html",
        "https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        win = model.window
        if win.count == 0:
            return
        chains = memory_chains(model)
        if chains is None:
            return
        share = kb.step_share(ctx, chains.time_per_step_us)
        repeated = chains.chains_per_step >= ctx.threshold("min_chains_per_step")
        if share < ctx.threshold("min_chain_fraction" if repeated else "min_one_off_fraction"):
            return
        if model.idle_share("launch_overhead") >= ctx.threshold("max_launch_idle_fraction"):
            return  # launch-bound: GA501 prices torch.compile with CUDA graphs
        pred = ctx.predict(RemedyId.TORCH_COMPILE, mode="default")
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            note = kb.unpriced_on_raw_trace(
                self, ctx, pred, chains.time_per_step_us - chains.predicted_per_step_us, "Unfused elementwise chains", ctx.threshold("min_impact")
            )
            if note is not None:
                yield note
            return
        ops = ", ".join(f"{op} {cm.ms(us)}" for op, us in list(chains.ops.items())[:6])
        message = (
            f"{chains.chains_per_step:g} chains per step of memory-bound kernels from primitive operators or a "
            f"hand-written attention's scale/mask/softmax (up to "
            f"{chains.longest} in a row) take {cm.ms(chains.time_per_step_us)} per step "
            f"({kb.of_step(ctx, chains.time_per_step_us)}): {ops}. Fused, each chain moves the bytes of its "
            f"largest kernel once: about {cm.ms(chains.predicted_per_step_us)} per step. "
            + cm.prediction_sentence(pred, "torch.compile fusing each chain")
            + cm.note_uncorrected(pred)
            + " The trace records the aten ops, not the source lines of the hand-written code."
        )
        call = next((loc for loc in cm.model_call_locations(ctx) if loc.file), None)
        if repeated:
            rec = (
                "Compile the model: `model = torch.compile(model)`"
                + (f" before the call at {call.label()}" if call else "")
                + " (Inductor fuses each chain into a few kernels). Or replace the hand-written code with library "
                'ops that are one kernel each: `nn.LayerNorm`/`F.layer_norm`, `F.gelu(x, approximate="tanh")`, `F.rms_norm`.'
            )
        else:
            first = ", ".join(list(chains.ops)[:4])
            rec = (
                f"Compile the function that runs these ops ({first}): {chains.chains_per_step:g} chain"
                f"{'s' if chains.chains_per_step != 1 else ''} a step, not repeated per layer, is most often a loss "
                "or a transform written by hand outside the model's layers"
                + (f" (after the model's call at {call.label()})" if call else "")
                + ", which `torch.compile(model)` does not reach: `loss_fn = torch.compile(loss_fn)` (Inductor "
                "fuses it into one kernel forward and one backward), or compile a function that calls the model and "
                "the loss. A hand-written normalization or activation: the library op (`F.layer_norm`, `F.gelu`)."
            )
        locations: list[Location] = ([call] if call else []) + [
            Location(op=op, detail={"time_per_step_us": round(us, 1)})
            for op, us in list(chains.ops.items())[:4]
        ]
        yield self.finding(
            impact=impact,
            title=(
                f"Unfused elementwise chains ({kb.of_step(ctx, chains.time_per_step_us)}): "
                f"torch.compile saves {cm.saves(pred, impact)}"
            ),
            message=message,
            evidence={
                "chains_per_step": chains.chains_per_step,
                "longest_chain": chains.longest,
                "chain_time_per_step_us": chains.time_per_step_us,
                "chain_fraction": share,
                "fused_time_per_step_us": chains.predicted_per_step_us,
                "ops_us": {k: round(v, 1) for k, v in list(chains.ops.items())[:8]},
                "step_time_ms": pred.baseline_step_ms,
                "predicted_step_time_ms": pred.predicted_step_ms,
            },
            recommendation=rec,
            locations=locations,
            impact_explanation=cm.impact_explanation(
                pred,
                "each chain as one fused kernel moving its largest member's bytes at the chain's bandwidth",
            ),
            remedy=RemedyId.TORCH_COMPILE,
            prediction=pred.to_dict(),
        )
