"""GA501 launch-bound: many tiny kernels; the CPU issuing them sets the pace."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location, Severity
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel import build as sb
from gpuadvisor.stepmodel import transforms as tf
from gpuadvisor.stepmodel.predict import predict_combined


class LaunchBound(Rule):
    """Many tiny kernels per step: the GPU waits while the CPU launches the next one.

    Why it matters
    --------------
    Every eager PyTorch op costs the host roughly 5-20 microseconds (Python, dispatcher, the
    cudaLaunchKernel call itself) before its kernel can start. When kernels run for only a few
    microseconds, the GPU finishes each one before the CPU has issued the next: the GPU queue runs
    dry and the step takes as long as the CPU needs to launch, however fast the GPU is.

    How it is detected
    ------------------
    Over the analyzed steps: at least `min_kernels_per_step` kernels per step (the median over the steps
    of the kernels each step launches) with a median duration at
    or below `max_median_kernel_us` (the order of one launch), and a step model whose replay is paced by
    the host (its host period at least `min_host_bound` of the step: the GPU waits for launches, not the
    other way round), and a replay of the steps with their host launch cost removed (CUDA graphs, the
    profiler's own per-op cost taken out first) recovers at least `min_launch_gain`. Impact: the step time
    recovered in a replay in which the forward and backward
    run as torch.compile would run them with mode="reduce-overhead": chains of PyTorch elementwise
    kernels fused (each chain's time `fusion_factor` of its sum, one launch), and the host work between
    launches replaced by CUDA graph replays (a small host cost per step plus the copy of each input
    that is new every step into the graph's static buffer, kernels back to back; the launch-bound test
    above leaves those copies out). The
    optimizer step is left to GA502 and waits on the device to GA2xx: the replay keeps them. The calls
    inside nn.LSTM/GRU/RNN ops stay eager too (Dynamo breaks the graph at those modules:
    `torch._dynamo.config.allow_rnn` is off by default); the message says how many. The
    profiler's own per-op cost is removed before (steps timed outside the capture window). Runs that
    already use torch.compile or CUDA graphs and are still launch-bound are replayed with graphs only
    and advised for that case (graph breaks, mode). When the kernels a step launches change from step
    to step (`StepModel.launch_patterns`: another grid or kernel set per step, i.e. the batches change
    shape), the finding is info with no gain: reduce-overhead would record a CUDA graph and memory pool
    per shape (it ran out of memory on the project's variable-length and multi-scale benchmarks) and
    compiling without graphs measured -13% to +18% there; the advice is a few fixed shapes first.

    How to fix
    ----------
    Fuse the small ops and launch the step as few large calls: torch.compile fuses elementwise
    chains into Triton kernels; mode="reduce-overhead" also captures CUDA graphs (one launch for
    the whole graph, needs static shapes); mode="max-autotune-no-cudagraphs" fuses and autotunes
    without graphs. Use a fused/foreach optimizer (see GA502).

        # before
        model = Net().cuda()
        for x, y in loader:
            loss = loss_fn(model(x), y)

        # after
        model = torch.compile(Net().cuda(), mode="reduce-overhead")   # CUDA graphs, static shapes
        for x, y in loader:
            loss = loss_fn(model(x), y)
    """

    id = "GA501"
    name = "launch-bound"
    category = Category.LAUNCH_OVERHEAD
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS, Requirement.STEADY_STATE})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_kernels_per_step": Threshold(
            50.0,
            "kernels per step from which launch cost can dominate (50 x ~10 us = 0.5 ms of host time)",
            "kernels",
        ),
        "max_median_kernel_us": Threshold(
            10.0, "median kernel duration at or below the cost of one launch (~5-10 us)", "us"
        ),
        "min_host_bound": Threshold(
            0.9, "host period / step period in the replay from which the host sets the pace", "fraction"
        ),
        "min_launch_gain": Threshold(
            0.10,
            "smallest share of the step the host's launch cost alone must take (CUDA graphs replayed, the "
            "profiler's own cost removed) for the run to count as launch-bound",
            "fraction",
        ),
        "min_impact": Threshold(0.05, "smallest predicted gain worth a finding", "fraction"),
    }
    references = (
        "https://pytorch.org/docs/stable/generated/torch.compile.html",
        "https://pytorch.org/blog/accelerating-pytorch-with-cuda-graphs/",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        win = model.window
        if win.count == 0 or win.total_us <= 0:
            return
        kernels = model.window_kernels
        if len(kernels) == 0:
            return
        kernels_per_step = model.kernels_per_step or 0.0
        median_us = float(kernels["dur"].median())
        if kernels_per_step < ctx.threshold("min_kernels_per_step"):
            return
        if median_us > ctx.threshold("max_median_kernel_us"):
            return
        base = model.baseline
        if base.period_us <= 0 or base.host_period_us < ctx.threshold("min_host_bound") * base.period_us:
            return  # the GPU, not the host, sets the pace: fewer launches would not shorten the step
        compiled = gw.setting_used(ctx, "torch_compile")
        graphs = gw.setting_used(ctx, "cuda_graphs")
        already = bool(compiled or graphs)
        # Launch overhead is what CUDA graphs remove: the host's cost between launches. Unless that alone
        # is worth it (the profiler's own per-op cost taken out), the run is not launch-bound.
        # A wait for a data-dependent size inside the model (nonzero, boolean masks) breaks the graph
        # and no CUDA graph can hold it: the shapes must become static first (GA203), then compile.
        dd_per_step = tf.data_dependent_syncs_in_model(model.program) / max(1, model.program.steps)
        first: list[tuple[RemedyId, dict[str, object]]] = (
            [(RemedyId.STATIC_SHAPES, {})] if dd_per_step else []
        )
        # (the launch cost itself: without the copies of new inputs that graphs add, which the impact counts)
        launch_cost = predict_combined(model, [*first, (RemedyId.CUDA_GRAPHS, {"input_copies": False})])
        if launch_cost.recovered_fraction < ctx.threshold("min_launch_gain"):
            return
        if model.shapes_vary and not dd_per_step:
            yield self._shapes_vary(ctx, kernels_per_step, median_us, launch_cost.recovered_fraction)
            return
        # With data-dependent waits the first change is static shapes (then compile): name that remedy.
        remedy = RemedyId.CUDA_GRAPHS if already else RemedyId.STATIC_SHAPES if first else RemedyId.TORCH_COMPILE
        pred = (
            launch_cost
            if already
            else predict_combined(model, [*first, (RemedyId.TORCH_COMPILE, {"fusion": True})])
        )
        impact = pred.recovered_fraction
        idle_launch = model.idle_share(sb.IDLE_LAUNCH)
        inference = cm.is_inference(ctx)
        fw = cm.framework(ctx)
        kernel_us_per_step = float(kernels["dur"].sum()) / win.count
        evidence = {
            "steps_analyzed": win.count,
            "step_time_ms": pred.baseline_step_ms,
            "predicted_step_time_ms": pred.predicted_step_ms,
            "kernels_per_step": kernels_per_step,
            "kernel_median_us": median_us,
            "kernel_time_per_step_ms": kernel_us_per_step / 1000.0,
            "gpu_idle_waiting_for_launches_fraction": idle_launch,
            "host_period_ms": base.host_period_us / 1000.0,
            "gpu_period_ms": base.gpu_period_us / 1000.0,
            "torch_compile_used": compiled,
            "cuda_graphs_used": graphs,
            "inference": inference,
            "framework": fw.name,
            "predicted_gain_cuda_graphs_alone": launch_cost.recovered_fraction,
            "data_dependent_waits_in_model_per_step": dd_per_step,
            **cm.profiler_evidence(ctx),
        }
        top = (
            kernels.groupby(kernels["name"].astype(str), observed=True)["dur"]
            .agg(["count", "median"])
            .sort_values(["count", "median"], ascending=[False, True])
            .head(3)
        )
        locations = cm.model_call_locations(ctx)[:1]
        if fw.call_site is not None and (fw.is_hf or fw.is_lightning):
            locations.insert(0, fw.call_site)
        locations += [
            Location(
                kernel=gw.short_kernel_name(str(name)),
                detail={"count_per_step": float(row["count"]) / win.count, "median_us": float(row["median"])},
            )
            for name, row in top.iterrows()
        ]
        message = (
            f"{kernels_per_step:.0f} kernels per step with a median duration of {gw.us(median_us)} "
            f"({gw.us(kernel_us_per_step)} of kernel time per step): the host, not the GPU, sets the pace; "
            f"the GPU idles {cm.of_profiled_step(idle_launch, win.median_step_us)} waiting for the next launch. "
            + cm.prediction_sentence(
                pred,
                "CUDA graph replay"
                if already
                else 'torch.compile(mode="reduce-overhead") (fusion + CUDA graphs)',
            )
            + cm.note_uncorrected(pred)
        )
        rnn_note = next((n for n in pred.notes if n.endswith(tf.RNN_EAGER_NOTE)), None)
        if rnn_note:
            message += f" Left out of the prediction: {rnn_note}."
        if dd_per_step:
            message += (
                f" The model waits for a data-dependent size {dd_per_step:.1f} times per step (nonzero, boolean "
                "masks: GA203): torch.compile breaks its graph at each and no CUDA graph can hold a wait, so "
                "the prediction is for static shapes first, then compiled."
            )
        if already:
            used = " and ".join(n for n, u in (("torch.compile", compiled), ("CUDA graphs", graphs)) if u)
            message += f" The run uses {used}, yet launches still dominate."
            rec = (
                "The compiled region does not cover the hot loop or is not captured as a graph: check for "
                "graph breaks (TORCH_LOGS=graph_breaks), compile the whole step "
                '(forward, loss, backward) rather than one module, use mode="reduce-overhead" for CUDA '
                "graphs (static shapes, no CPU syncs inside), and a fused optimizer (fused=True)."
            )
        elif fw.is_hf:
            rec = (
                'Set torch_compile=True and torch_compile_mode="reduce-overhead" in your TrainingArguments'
                + (f" ({fw.call_site.label()})" if fw.call_site else "")
                + ": the model's forward and backward then run as fused kernels replayed as CUDA graphs."
            )
        else:
            call = locations[0] if locations and locations[0].file else None
            rec = (
                "First make the shapes static where the model selects by value (GA203: capacity-based "
                "routing, `torch.where` or a multiplied mask instead of `x[mask]`/`nonzero`), so that "
                "nothing in the forward waits for the GPU. Then c"
                if dd_per_step
                else "C"
            ) + (
                'ompile the model: `model = torch.compile(model, mode="reduce-overhead")`'
                + (f" before the call at {call.label()}" if call else "")
                + (" (before `trainer.fit(model)`)" if fw.is_lightning else "")
                + ": elementwise chains fuse into few kernels and the step replays as CUDA graphs (one launch "
                "per graph; needs static shapes and no .item()/sync inside). For a hand-written loop with static "
                "shapes, torch.cuda.CUDAGraph capture does the same."
                + ("" if inference else " Use fused=True on the optimizer too (see GA502).")
                + " Side effects: compilation time on the first steps, and recompilation when shapes change "
                "(mark dynamic dims or pad)."
            )
        rec += " " + cm.gain(pred, impact)
        yield self.finding(
            impact=impact,
            title=(
                f"Launch-bound: {kernels_per_step:.0f} tiny kernels per step; "
                + ("static shapes, then compiling, save" if dd_per_step and not already else "compiling saves")
                + f" {cm.saves(pred, impact)}"
            ),
            message=message,
            evidence=evidence,
            recommendation=rec,
            locations=locations,
            impact_explanation=cm.impact_explanation(
                pred,
                "the forward and backward replayed as CUDA graphs"
                + ("" if already else " and their elementwise kernels fused"),
            ),
            remedy=remedy,
            prediction=pred,
        )

    def _shapes_vary(
        self, ctx: RuleContext, kernels_per_step: float, median_us: float, graphs_gain: float
    ) -> Finding:
        """Launch-bound, but the step's kernels change with its input shapes: no compile gain is claimed."""
        model = ctx.model
        patterns, steps = model.launch_patterns
        idle_launch = model.idle_share(sb.IDLE_LAUNCH)
        locations = cm.model_call_locations(ctx)[:1]
        return self.finding(
            impact=None,
            severity=Severity.INFO,
            title=(
                f"Launch-bound ({kernels_per_step:.0f} tiny kernels per step), but the input shapes change "
                "between steps: no compile gain is predicted"
            ),
            message=(
                f"{kernels_per_step:.0f} kernels per step with a median duration of {gw.us(median_us)}: the host "
                f"sets the pace and the GPU idles {cm.of_profiled_step(idle_launch, model.window.median_step_us)} waiting for launches. The "
                f"kernels launched differ from step to step ({patterns} launch patterns in {steps} analyzed "
                "steps: the batches have different shapes, e.g. variable sequence lengths or image sizes). "
                'torch.compile(mode="reduce-overhead") records a CUDA graph, with its own memory pool, for '
                "every new shape, and compiling recompiles for new shapes (then traces them dynamically), so "
                "what compiling gains here depends on how many shapes there are and how much memory is free. "
                "No gain is predicted."
            ),
            evidence={
                "kernels_per_step": kernels_per_step,
                "kernel_median_us": median_us,
                "launch_patterns": patterns,
                "steps_analyzed": steps,
                "gpu_idle_waiting_for_launches_fraction": idle_launch,
                "predicted_gain_cuda_graphs_if_shapes_were_static": graphs_gain,
            },
            recommendation=(
                "Give the batches a few fixed shapes first: pad sequences to a multiple of 64 or to a few "
                "length buckets, train on a few fixed resolutions. Then compile the model with "
                '`torch.compile(model, mode="reduce-overhead")` (one CUDA graph per bucket) and profile again; '
                "with many shapes left, `torch.compile(model, dynamic=True)` fuses without graphs."
            ),
            locations=locations,
            impact_explanation="no gain is predicted: the step's kernels change with its input shapes",
        )
