"""GA501 launch-bound: many tiny kernels; the CPU issuing them sets the pace."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold


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
    Over the analyzed steps: at least `min_kernels_per_step` kernels per step, a median kernel
    duration at or below `max_median_kernel_us` (the order of one launch), and GPU idle time in which
    the host was launching (a gap before a kernel whose launch call started only after the GPU had
    gone idle, no synchronize or DataLoader wait overlapping it, gap at most `max_gap_us`) of at least
    `min_launch_idle_fraction` of the step. The idle attribution comes from gpuadvisor.metrics
    (`idle_launch_overhead_fraction`) when available. Host-bound idle has two causes the trace
    shows alike, too many kernels (this rule) and too little work per kernel (GA401 small-batch): the
    kernel count per step apportions it, from half at 150 kernels per step or fewer to all of it at
    600 or more (linear between). Runs that already use torch.compile or CUDA
    graphs and have small gaps stay quiet; a run that uses them but is still launch-bound is reported
    with advice for that case (graph breaks, mode).

    Impact = launch-bound GPU idle time / step time: what removing launch cost entirely would
    recover (upper bound; CUDA graphs come close for static shapes). The profiler adds CPU time to
    every op, which in a launch-bound run becomes extra idle time: for a run captured by
    `gpuadvisor profile`, the idle time per step is reduced by the measured profiler overhead (steps
    timed outside the capture window) and divided by the unprofiled step time.

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
        "min_launch_idle_fraction": Threshold(
            0.10, "launch-bound GPU idle share of the step worth reporting", "fraction"
        ),
        "max_gap_us": Threshold(
            200.0,
            "longest idle gap counted as launch cost (longer gaps are other host work: logging, data "
            "preparation); used only when gpuadvisor.metrics gives no idle attribution",
            "us",
        ),
    }
    references = (
        "https://pytorch.org/docs/stable/generated/torch.compile.html",
        "https://pytorch.org/blog/accelerating-pytorch-with-cuda-graphs/",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        window = gw.step_window(ctx)
        if window.count == 0 or window.total_us <= 0:
            return
        kernels = gw.window_kernels(ctx, window)
        if len(kernels) == 0:
            return
        kernels_per_step = len(kernels) / window.count
        median_us = float(kernels["dur"].median())
        if kernels_per_step < ctx.threshold("min_kernels_per_step"):
            return
        if median_us > ctx.threshold("max_median_kernel_us"):
            return
        launch_idle = gw.window_metric(ctx, "idle_launch_overhead_fraction")
        source = "metrics"
        gaps = None
        if launch_idle is None:
            idle_us, gaps = gw.launch_bound_idle_us(ctx, window, ctx.threshold("max_gap_us"))
            launch_idle = idle_us / window.total_us
            source = "rulekit"
        launch_idle, deflation = gw.deflate_host_idle(ctx, launch_idle, window)
        share = gw.launch_share(kernels_per_step)
        impact = launch_idle * share
        if impact < ctx.threshold("min_launch_idle_fraction"):
            return

        compiled = gw.setting_used(ctx, "torch_compile")
        graphs = gw.setting_used(ctx, "cuda_graphs")
        busy = gw.gpu_busy_fraction(ctx, window)
        kernel_us_per_step = float(kernels["dur"].sum()) / window.count
        evidence = {
            "steps_analyzed": window.count,
            "step_time_ms": window.median_step_us / 1000.0,
            "kernels_per_step": kernels_per_step,
            "kernel_median_us": median_us,
            "kernel_time_per_step_ms": kernel_us_per_step / 1000.0,
            "gpu_busy_fraction": busy,
            "launch_idle_fraction": launch_idle,
            "launch_idle_source": source,
            "launch_share_of_host_idle": share,
            "launch_bound_gaps": gaps,
            "torch_compile_used": compiled,
            "cuda_graphs_used": graphs,
            **deflation,
        }
        top = (
            kernels.groupby(kernels["name"].astype(str), observed=True)["dur"]
            .agg(["count", "median"])
            .sort_values(["count", "median"], ascending=[False, True])
            .head(3)
        )
        locations = [
            Location(
                kernel=gw.short_kernel_name(name),
                detail={
                    "count_per_step": float(row["count"]) / window.count,
                    "median_us": float(row["median"]),
                },
            )
            for name, row in top.iterrows()
        ]
        message = (
            f"{kernels_per_step:.0f} kernels per step with a median duration of {gw.us(median_us)}: the GPU "
            f"is idle {gw.pct(launch_idle)} of the {gw.us(window.median_step_us)} step waiting for the host "
            f"to launch the next kernel (kernels themselves run {gw.us(kernel_us_per_step)} per step)."
        )
        if not deflation.get("profiler_overhead_corrected"):
            message += gw.UNCORRECTED_PROFILER_NOTE
        if compiled or graphs:
            used = " and ".join(n for n, u in (("torch.compile", compiled), ("CUDA graphs", graphs)) if u)
            message += f" The run uses {used}, yet launches still dominate."
            rec = (
                "The compiled region does not cover the hot loop or is not captured as a graph: check for "
                "graph breaks (TORCH_LOGS=graph_breaks), compile the whole training step "
                '(forward, loss, backward) rather than one module, use mode="reduce-overhead" for CUDA '
                "graphs (static shapes, no CPU syncs inside), and a fused optimizer (fused=True)."
            )
        else:
            rec = (
                "Fuse and batch the launches: wrap the model in torch.compile(model) (fuses elementwise "
                'chains; mode="max-autotune-no-cudagraphs" also autotunes), or '
                'torch.compile(model, mode="reduce-overhead") to replay the step as CUDA graphs (one '
                "launch per graph; needs static shapes and no .item()/sync inside). For a hand-written "
                "loop with static shapes, torch.cuda.CUDAGraph capture does the same. Use fused=True on "
                "the optimizer (see GA502). Side effects: compilation time on the first steps, and "
                "recompilation when shapes change (mark dynamic dims or pad)."
            )
        yield self.finding(
            impact=impact,
            title=f"Launch-bound: {kernels_per_step:.0f} tiny kernels per step, GPU idle {gw.pct(launch_idle)} waiting for launches",
            message=message,
            evidence=evidence,
            recommendation=rec,
            locations=locations,
            impact_explanation=(
                f"GPU idle time during which the host was still launching the next kernel "
                f"({gw.pct(launch_idle)} of the step, less the profiler's own overhead when measured) x "
                f"{share:.2f}, the share attributed to the number of launches ({kernels_per_step:.0f} per "
                "step; with few kernels per step the batch size is the larger cause, see GA401): recovered "
                "if launches cost nothing (upper bound; CUDA graphs come close)."
            ),
        )
