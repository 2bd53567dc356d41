"""GA401 small-batch: each step's GPU work is too small to fill the GPU."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel import Prediction
from gpuadvisor.stepmodel.predict import larger_batch
from gpuadvisor.words import Base, of_base, share_of


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
    Over the analyzed steps: the kernels fill fewer than `max_sm_use` of the SMs (duration-weighted
    min(blocks / SMs, 1)); or, when their grids do cover the SMs (or the trace has no grid sizes), the
    whole step's GPU work is small: less than `max_gpu_ms_per_step` of kernel time, a median kernel
    shorter than `max_median_kernel_us` and a GPU busy less than `max_gpu_busy` of the replayed step
    (calibrated to the step time measured outside the profiler). Short kernels that fill the SMs with
    milliseconds of kernel time per step are not a small batch: the GPU idle between them waits for the
    host (launches, syncs, data), which GA501, GA2xx and GA301 report. Then the steps are replayed at a
    larger batch: host work per step is unchanged (the same ops are dispatched), time waiting for data
    grows with the samples, input copies grow linearly, optimizer kernels and collectives do not, a
    GEMM grows with its FLOPs at the larger of its current rate and `gemm_efficiency_at_scale` of the
    peak, and another kernel keeps its time until its grid fills the GPU (then grows with the work;
    a long kernel on a small grid grows linearly). The recommended multiplier is the smallest power of
    two after which doubling again gains less than `min_marginal_gain` per sample, within the memory
    headroom (peak allocated x multiplier <= `memory_target_fraction` of the device memory; activations
    grow with the batch, weights and optimizer state do not: conservative) and `max_batch_multiplier`.
    Impact: 1 - time per sample at that batch / time per sample now. Quiet when the memory allows less
    than `min_batch_multiplier`.

    How to fix
    ----------
    Raise the batch size by the recommended multiplier (at most `max_batch_multiplier` at once; keep
    doubling while samples/s still improves), within the memory headroom, and scale the learning rate
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
        "max_gpu_busy": Threshold(
            0.8,
            "GPU busy share of the replayed step below which the step may be too small to keep the GPU busy",
            "fraction",
        ),
        "max_sm_use": Threshold(
            0.8,
            "duration-weighted SM use (min(blocks/SMs, 1)) below which kernels under-fill the GPU (a "
            "fifth of the SMs idle while kernels run)",
            "fraction",
        ),
        "max_gpu_ms_per_step": Threshold(
            1.0,
            "kernel time per step below which a step's GPU work is small whatever its grids (a Python "
            "training step costs the host about that much on its own)",
            "ms",
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
            8.0,
            "largest batch multiplier recommended at once (a larger jump changes the optimization too much to "
            "advise blindly: re-measure after it)",
            "x",
        ),
        "min_marginal_gain": Threshold(
            0.05,
            "stop doubling the recommended batch when one more doubling gains less than this per sample",
            "fraction",
        ),
    }
    references = (
        "https://docs.nvidia.com/deeplearning/performance/dl-performance-gpu-background/index.html",
        "https://arxiv.org/abs/1706.02677",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        win = model.window
        if win.count == 0 or win.total_us <= 0:
            return
        kernels = model.window_kernels
        kernels = kernels[~kernels["is_collective"].astype(bool)]
        if len(kernels) == 0:
            return
        base = model.baseline
        if base.period_us <= 0:
            return
        work = _Work(
            busy=min(1.0, base.gpu_busy_us / base.period_us),
            sm_use=model.sm_use,
            sms=model.sm_count,
            median_us=float(kernels["dur"].median()),
            ms_per_step=float(kernels["dur"].sum()) / win.count / 1000.0,
            kernels_per_step=model.kernels_per_step or 0.0,
        )
        if not (work.underfilled(ctx) or work.little(ctx)):
            return
        mem = gw.memory_info(ctx)
        memory_limit = _memory_limit(ctx, mem)
        if memory_limit is not None and memory_limit < ctx.threshold("min_batch_multiplier"):
            return  # the GPU memory is already mostly used: a larger batch does not fit
        cap = ctx.threshold("max_batch_multiplier")
        if memory_limit is not None:
            cap = min(cap, 2 ** math.floor(math.log2(memory_limit)))
        # the smallest power of two after which doubling again gains little per sample
        pred = larger_batch(model, cap, ctx.threshold("min_marginal_gain"))
        if pred is None or pred.recovered_fraction < ctx.threshold("min_impact"):
            return
        m = pred.batch_multiplier
        inference = cm.is_inference(ctx)
        fw = cm.framework(ctx)
        loader = cm.main_dataloader(ctx)
        batch_size = _batch_size(fw, loader)
        evidence = {
            "steps_analyzed": win.count,
            "step_time_ms": pred.baseline_step_ms,
            "predicted_step_time_ms_at_multiplier": pred.predicted_step_ms,
            "kernels_per_step": work.kernels_per_step,
            "kernel_median_us": work.median_us,
            "kernel_ms_per_step": work.ms_per_step,
            "sm_use": work.sm_use,
            "num_sms": work.sms,
            "gpu_busy_fraction_replayed": work.busy,
            "peak_allocated_bytes": mem.peak_allocated,
            "peak_reserved_bytes": mem.peak_reserved,
            "memory_capacity_bytes": mem.capacity,
            "memory_multiplier_possible": memory_limit,
            "recommended_batch_multiplier": m,
            "samples_per_s_speedup": pred.speedup,
            "batch_size": batch_size,
            "inference": inference,
            "framework": fw.name,
            **cm.profiler_evidence(ctx),
        }
        yield self.finding(
            impact=pred.recovered_fraction,
            title=_title(ctx, work, pred),
            message=_message(work, mem, pred),
            evidence=evidence,
            recommendation=_recommendation(ctx, pred, fw, loader, batch_size, memory_limit, inference),
            locations=_locations(ctx, fw, loader, batch_size),
            impact_explanation=cm.impact_explanation(pred, f"{m:g}x the batch"),
            remedy=RemedyId.LARGER_BATCH,
            prediction=pred,
        )


@dataclass(frozen=True)
class _Work:
    """What a step's GPU work looks like (the step model's window and replay)."""

    busy: float  # replayed GPU busy share of the step
    sm_use: float | None
    sms: int | None
    median_us: float
    ms_per_step: float
    kernels_per_step: float

    def underfilled(self, ctx: RuleContext) -> bool:
        return self.sm_use is not None and self.sm_use < ctx.threshold("max_sm_use")

    def little(self, ctx: RuleContext) -> bool:
        # Kernels whose grids cover the SMs are too small only when the whole step's GPU work is: short
        # kernels on an idle GPU with milliseconds of kernel time per step wait for the host (launches,
        # syncs, data: GA501, GA2xx, GA301), not for work.
        return (
            self.busy < ctx.threshold("max_gpu_busy")
            and self.median_us < ctx.threshold("max_median_kernel_us")
            and self.ms_per_step < ctx.threshold("max_gpu_ms_per_step")
        )


def _memory_limit(ctx: RuleContext, mem: gw.MemoryInfo) -> float | None:
    """How many times the batch the GPU memory holds (within `memory_target_fraction`); None unknown."""
    if mem.peak_allocated is None or not mem.capacity:
        return None
    return ctx.threshold("memory_target_fraction") * mem.capacity / mem.peak_allocated


def _batch_size(fw: Any, loader: Mapping[str, Any] | None) -> int | None:
    batch = loader.get("batch_size") if loader else None
    if fw.is_hf and isinstance(fw.settings.get("per_device_train_batch_size"), int):
        batch = fw.settings.get("per_device_train_batch_size")
    return int(batch) if isinstance(batch, int) and not isinstance(batch, bool) else None


def _locations(ctx: RuleContext, fw: Any, loader: Mapping[str, Any] | None, batch_size: int | None) -> list[Location]:
    locations: list[Location] = []
    loc = cm.location_of(loader, batch_size=batch_size, num_workers=loader.get("num_workers") if loader else None)
    if fw.is_hf and fw.call_site is not None:
        locations.append(fw.call_site)
    if loc is not None:
        locations.append(loc)
    return locations + (cm.model_call_locations(ctx)[:1] if not locations else [])


def _message(work: _Work, mem: gw.MemoryInfo, pred: Prediction) -> str:
    m = pred.batch_multiplier
    message = (
        f"The GPU is busy {cm.pct(work.busy)} {of_base(Base.REPLAYED_STEP)}"
        + (
            f" and its kernels fill {cm.pct(work.sm_use)} of the {work.sms} SMs"
            if work.sm_use is not None and work.sms
            else ""
        )
        + f" ({work.kernels_per_step:.0f} kernels per step, median {gw.us(work.median_us)}): each step's work is too "
        "small to keep it busy, and the per-step host cost does not shrink with the batch. "
    )
    if mem.peak_allocated is not None and mem.capacity:
        message += (
            f"Peak memory allocated is {gw.gib(mem.peak_allocated)} of {gw.gib(mem.capacity)} "
            f"({gw.pct(mem.allocated_fraction)}). "
        )
    else:
        message += "Peak memory was not captured (raw trace), so the headroom is unknown. "
    return message + cm.prediction_sentence(pred, f"{m:g}x the batch") + cm.note_uncorrected(pred)


def _recommendation(
    ctx: RuleContext,
    pred: Prediction,
    fw: Any,
    loader: Mapping[str, Any] | None,
    batch_size: int | None,
    memory_limit: float | None,
    inference: bool,
) -> str:
    m = pred.batch_multiplier
    size_text = "the batch size"
    if fw.is_hf:
        size_text = (
            "per_device_train_batch_size" + (f"={batch_size}" if batch_size else "") + " in TrainingArguments"
        )
    elif loader is not None and batch_size is not None:
        size_text = f"batch_size={batch_size} ({loader.get('file')}:{loader.get('line')})"
    target = f" to {int(batch_size * m)}" if batch_size is not None else ""
    rec = (
        f"Raise {size_text} {m:g}x{target}: predicted {cm.times(pred.speedup)} the samples/s "
        f"({cm.pct(pred.recovered_fraction)} less time per sample). "
    )
    if memory_limit is not None:
        memory_bound = m * 2 > memory_limit and m * 2 <= ctx.threshold("max_batch_multiplier")
        rec += (
            f"Peak memory allows about {memory_limit:.0f}x within "
            f"{gw.pct(ctx.threshold('memory_target_fraction'))} of the GPU"
            + (", which is the limit here. " if memory_bound else ". ")
        )
    else:
        rec += "Watch peak memory (torch.cuda.max_memory_allocated()): the headroom was not captured. "
    if inference:
        return rec + (
            "Each request then waits for a larger batch: bound the batch by your latency target. For a "
            'fixed small batch, cut the per-batch CPU cost instead: torch.compile(mode="reduce-overhead") '
            "/ CUDA graphs (see GA501), under torch.inference_mode()."
        )
    return rec + (
        "Scale the learning rate with the batch (linear for SGD, about square-root for Adam/AdamW) "
        "and keep a warmup; re-check convergence. If the batch must stay fixed, remove the per-step "
        'CPU cost instead: torch.compile(mode="reduce-overhead") / CUDA graphs (see GA501).'
    )


def _title(ctx: RuleContext, work: _Work, pred: Prediction) -> str:
    m = pred.batch_multiplier
    if work.busy >= ctx.threshold("max_gpu_busy") and work.sm_use is not None:
        return (
            f"Small batch: kernels fill {cm.pct(work.sm_use)} of the SMs; {m:g}x the batch gives "
            f"{cm.times(pred.speedup)} the samples/s"
        )
    return (
        f"Small batch: the GPU is busy {share_of(work.busy, Base.REPLAYED_STEP)}; {m:g}x the batch gives "
        f"{cm.times(pred.speedup)} the samples/s"
    )

