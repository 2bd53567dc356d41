"""GA401 small-batch: each step's GPU work is too small to fill the GPU."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold


class SmallBatch(Rule):
    """Each step's GPU work is too small to fill the GPU: a larger batch would use it.

    Why it matters
    --------------
    A GPU runs a kernel fast only when the kernel has enough independent blocks to cover every
    streaming multiprocessor (SM) several times. With a small batch, every kernel of the step is
    short (a few microseconds) and launches fewer blocks than the GPU has SMs, so most SMs sit idle
    while it runs; and between kernels the GPU waits for the CPU, whose per-step cost (Python,
    dispatch, launches, optimizer) does not shrink with the batch. The same kernel sequence on
    larger tensors amortizes that fixed per-step cost over more samples: time per sample drops until
    the GPU is full.

    How it is detected
    ------------------
    Over the analyzed steps: the median kernel duration is short (`max_median_kernel_us`) and the
    time the GPU is idle or under-filled is a real share of the step (`min_impact`). When the run
    captured peak memory, the batch multiplier that fits in `memory_target_fraction` of the device
    memory must be at least `min_batch_multiplier` (peak memory grows roughly linearly with the batch:
    activations; weights and optimizer state do not grow, so treating the whole peak as
    batch-proportional is conservative). Host-bound idle has two causes the trace shows alike: too
    little work per kernel (this rule) and too many kernels (GA501 launch-bound). The kernel count per
    step apportions it: all of it here at 150 kernels per step or fewer, half at 600 or more (linear
    between).

    Impact = (GPU idle share of the step, minus idle spent waiting for the DataLoader or in host
    syncs, which a larger batch does not fix, and minus the profiler's own per-op overhead measured
    outside the capture window) x that share + (compute-kernel share x (1 - SM use), when the
    duration-weighted SM use is below `max_sm_use`): the share of step time in which the GPU does
    nothing or leaves SMs empty, an upper bound on the per-sample time a larger batch recovers.

    How to fix
    ----------
    Raise the batch size at least by the step's host time over its GPU kernel time (the least growth
    that can make the GPU the bottleneck), within the memory headroom, and scale the learning rate
    with it (linear scaling for SGD, roughly square-root for Adam/AdamW, with warmup). If the
    effective batch must stay fixed (convergence), batch several small models/inputs per launch or
    use CUDA graphs (GA501) instead.

        # before
        loader = DataLoader(ds, batch_size=32, shuffle=True)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

        # after: 4x the batch (peak memory was under 20% of the GPU), learning rate scaled
        loader = DataLoader(ds, batch_size=128, shuffle=True)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4 * 2)   # sqrt(4) for Adam-type
    """

    id = "GA401"
    name = "small-batch"
    category = Category.SMALL_BATCH
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS, Requirement.STEADY_STATE})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "max_median_kernel_us": Threshold(
            20.0,
            "median kernel duration below which kernels are 'short' (a kernel that fills an H100 with "
            "several waves of blocks takes tens of microseconds at least)",
            "us",
        ),
        "max_sm_use": Threshold(
            0.5,
            "duration-weighted SM use (min(blocks/SMs, 1)) below which kernels under-fill the GPU",
            "fraction",
        ),
        "min_impact": Threshold(
            0.10, "smallest idle + under-filled share of the step worth reporting", "fraction"
        ),
        "memory_target_fraction": Threshold(
            0.8,
            "share of device memory a larger batch may use (room for fragmentation and spikes)",
            "fraction",
        ),
        "min_batch_multiplier": Threshold(
            2.0, "smallest batch multiplier the memory must allow for the finding to fire", "x"
        ),
        "max_batch_multiplier": Threshold(
            256.0, "largest batch multiplier recommended (the estimate host time / GPU time is capped here)", "x"
        ),
    }
    references = (
        "https://docs.nvidia.com/deeplearning/performance/dl-performance-gpu-background/index.html",
        "https://arxiv.org/abs/1706.02677",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        window = gw.step_window(ctx)
        if window.count == 0 or window.total_us <= 0:
            return
        kernels = gw.window_kernels(ctx, window)
        if len(kernels) == 0:
            return
        kernels = kernels[~kernels["name"].astype(str).map(gw.is_collective_kernel)]
        if len(kernels) == 0:
            return
        sms = gw.sm_count(ctx)
        median_us = float(kernels["dur"].median())
        sm_use = gw.sm_use(kernels, sms)
        busy = gw.gpu_busy_fraction(ctx, window)
        if sm_use is None or busy is None:
            return
        if median_us >= ctx.threshold("max_median_kernel_us"):
            return
        idle = 1.0 - busy
        idle_dataloader = gw.window_metric(ctx, "idle_data_loading_fraction") or 0.0
        # Idle time spent waiting for the DataLoader or in host syncs is not per-step launch cost: a
        # larger batch does not remove it (GA301 / GA2xx own it).
        idle_sync = gw.window_metric(ctx, "idle_host_sync_fraction") or 0.0
        idle_fixable, deflation = gw.deflate_host_idle(
            ctx, max(0.0, idle - idle_dataloader - idle_sync), window
        )
        # Under-filled SMs only matter while kernels run: copies and memsets do not use SMs.
        compute = gw.window_metric(ctx, "compute_fraction")
        kernel_busy = min(busy, compute) if compute is not None else busy
        underfill = kernel_busy * (1.0 - sm_use) if sm_use < ctx.threshold("max_sm_use") else 0.0
        kernels_per_step = len(kernels) / window.count
        share = 1.5 - gw.launch_share(kernels_per_step)
        impact = min(1.0, idle_fixable * share + underfill)
        if impact < ctx.threshold("min_impact"):
            return

        mem = gw.memory_info(ctx)
        raw_multiplier: float | None = None
        peak = mem.peak_reserved if mem.peak_reserved is not None else mem.peak_allocated
        if mem.peak_allocated is not None and mem.capacity:
            # Allocated (not reserved) grows with the batch; reserved includes cache the allocator reuses.
            raw_multiplier = ctx.threshold("memory_target_fraction") * mem.capacity / mem.peak_allocated
            if raw_multiplier < ctx.threshold("min_batch_multiplier"):
                return  # the GPU memory is already mostly used: a larger batch does not fit
        # The least batch growth that can make the GPU the bottleneck: the step's host time over its
        # GPU kernel time (kernel time grows at most linearly with the batch, the per-step host time
        # not at all). Under-filled kernels grow sublinearly, so this is a lower bound.
        host_ms = gw.window_metric(ctx, "unprofiled_step_time_ms") or window.median_step_us / 1000.0
        gpu_ms = kernel_busy * window.median_step_us / 1000.0
        needed = host_ms / gpu_ms if gpu_ms > 0 else float("inf")
        multiplier = 2 ** math.ceil(math.log2(max(2.0, min(needed, ctx.threshold("max_batch_multiplier")))))
        memory_bound = False
        if raw_multiplier is not None and multiplier > raw_multiplier:
            multiplier = 2 ** math.floor(math.log2(raw_multiplier))
            memory_bound = True

        loaders = gw.env_list(ctx, "dataloaders")
        loader = max(loaders, key=lambda d: int(d.get("iterations") or 0)) if loaders else None
        batch = loader.get("batch_size") if loader else None
        batch_size = int(batch) if isinstance(batch, int) and not isinstance(batch, bool) else None

        evidence = {
            "steps_analyzed": window.count,
            "step_time_ms": window.median_step_us / 1000.0,
            "kernels_per_step": kernels_per_step,
            "kernel_median_us": median_us,
            "sm_use": sm_use,
            "batch_share_of_host_idle": share,
            "num_sms": sms,
            "gpu_busy_fraction": busy,
            "gpu_idle_fraction": idle,
            "idle_data_loading_fraction": idle_dataloader,
            "idle_host_sync_fraction": idle_sync,
            "compute_fraction": kernel_busy,
            "peak_allocated_bytes": mem.peak_allocated,
            "peak_reserved_bytes": mem.peak_reserved,
            "memory_capacity_bytes": mem.capacity,
            "memory_multiplier_possible": raw_multiplier,
            "host_time_per_step_ms": host_ms,
            "gpu_kernel_time_per_step_ms": gpu_ms,
            "recommended_batch_multiplier": multiplier,
            "batch_size": batch_size,
            **deflation,
        }
        locations: list[Location] = []
        if loader is not None:
            locations.append(
                Location(
                    file=loader.get("file"),
                    line=loader.get("line"),
                    code=loader.get("code"),
                    detail={"batch_size": batch_size, "num_workers": loader.get("num_workers")},
                )
            )
        message = (
            f"Kernels are short and under-fill the GPU: median kernel {gw.us(median_us)}, "
            f"{kernels_per_step:.0f} kernels per step, duration-weighted SM use {gw.pct(sm_use)}"
            + (f" of {sms} SMs" if sms else "")
            + f"; the GPU is busy {gw.pct(busy)} of the {gw.us(window.median_step_us)} step."
        )
        if mem.peak_allocated is not None and mem.capacity:
            message += (
                f" Peak memory allocated is {gw.gib(mem.peak_allocated)} of {gw.gib(mem.capacity)} "
                f"({gw.pct(mem.allocated_fraction)})"
                + (f", reserved {gw.gib(peak)}" if mem.peak_reserved is not None else "")
                + "."
            )
        else:
            message += " Peak memory was not captured (raw trace), so the headroom is unknown."
        if not deflation.get("profiler_overhead_corrected"):
            message += gw.UNCORRECTED_PROFILER_NOTE
        if idle_dataloader > 0.05:
            message += f" {gw.pct(idle_dataloader)} of the step the GPU waits for the DataLoader (see GA301)."

        size_text = "the batch size"
        if loader is not None and batch_size is not None:
            size_text = f"batch_size={batch_size} ({loader.get('file')}:{loader.get('line')})"
        target = f" to {batch_size * multiplier}" if batch_size is not None else ""
        rec = (
            f"Raise {size_text} by at least {multiplier}x{target}: the GPU computes for "
            f"{gpu_ms:.2f} ms of each {host_ms:.2f} ms step; the rest is per-step host work that a larger "
            "batch spreads over more samples. "
        )
        if raw_multiplier is not None:
            rec += (
                f"Peak memory allows about {raw_multiplier:.0f}x within "
                f"{gw.pct(ctx.threshold('memory_target_fraction'))} of the GPU (activations grow linearly "
                "with the batch)" + (", which is the limit here. " if memory_bound else ". ")
            )
        else:
            rec += "Watch peak memory (torch.cuda.max_memory_allocated()): the headroom was not captured. "
        rec += "Keep doubling while samples/s still improves. "
        rec += (
            "Scale the learning rate with the batch (linear for SGD, about square-root for Adam/AdamW) "
            "and keep a warmup; re-check convergence. If the batch must stay fixed, remove the per-step "
            'CPU cost instead: torch.compile(mode="reduce-overhead") / CUDA graphs (see GA501).'
        )
        yield self.finding(
            impact=impact,
            title=f"Small batch: kernels fill {gw.pct(sm_use)} of the SMs and the GPU idles {gw.pct(idle)} of each step",
            message=message,
            evidence=evidence,
            recommendation=rec,
            locations=locations,
            impact_explanation=(
                f"GPU idle share not caused by the DataLoader or host syncs ({gw.pct(idle_fixable)}) x "
                f"{share:.2f} (the share attributed to too little work per kernel at {kernels_per_step:.0f} "
                "kernels per step; GA501 takes the rest) plus "
                + (
                    f"compute-kernel share x unused SMs ({gw.pct(kernel_busy)} x {gw.pct(1.0 - sm_use)})"
                    if underfill > 0
                    else "nothing for SM use (the kernels fill the SMs)"
                )
                + ": the step time a GPU kept full by a larger batch would recover per sample (upper bound)."
            ),
        )
