"""GA801 near-oom: peak reserved memory close to the device capacity."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Severity
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold


class NearOom(Rule):
    """Peak reserved GPU memory is close to the device capacity: one longer batch away from OOM.

    Why it matters
    --------------
    The caching allocator reserves memory in segments; when a request does not fit it frees its
    cache and retries (slow: it synchronizes the device), and then raises an out-of-memory error. A run
    whose peak reserved memory is within a few percent of capacity fails on the first longer sequence
    or larger batch, and allocator retries can cost time before that.

    How it is detected
    ------------------
    environment.json memory: peak reserved (else allocated) bytes / device total bytes at least
    `min_reserved_fraction`; severity low from `low_severity_fraction`, else info. No time cost is
    measured (impact unmeasured): this is a risk, not a slowdown.

    How to fix
    ----------
    Reduce activation memory or fragmentation.

        # before
        out = model(x)

        # after: recompute activations in backward; fewer fragmented segments
        from torch.utils.checkpoint import checkpoint
        out = checkpoint(model.block, x, use_reentrant=False)
        # and: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py
    """

    id = "GA801"
    name = "near-oom"
    category = Category.MEMORY
    requires = frozenset({Requirement.SETTINGS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_reserved_fraction": Threshold(
            0.90, "peak reserved / capacity from which the run is close to out-of-memory", "fraction"
        ),
        "low_severity_fraction": Threshold(
            0.97, "peak reserved / capacity reported as low instead of info", "fraction"
        ),
    }
    references = ("https://pytorch.org/docs/stable/notes/cuda.html#memory-management",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        mem = gw.memory_info(ctx)
        frac = mem.reserved_fraction
        basis = "reserved"
        if frac is None:
            frac, basis = mem.allocated_fraction, "allocated"
        if frac is None or frac < ctx.threshold("min_reserved_fraction"):
            return
        severity = Severity.LOW if frac >= ctx.threshold("low_severity_fraction") else Severity.INFO
        peak = mem.peak_reserved if basis == "reserved" else mem.peak_allocated
        gap = ""
        if mem.peak_reserved is not None and mem.peak_allocated is not None and mem.peak_reserved > 0:
            unused = 1.0 - mem.peak_allocated / mem.peak_reserved
            if unused > 0.1:
                gap = (
                    f" {gw.pct(unused)} of the reserved memory was never allocated at the peak: fragmentation; "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces it."
                )
        yield self.finding(
            impact=None,
            severity=severity,
            title=f"Near out-of-memory: peak {basis} memory is {gw.pct(frac)} of the GPU",
            message=(
                f"Peak {basis} memory {gw.gib(peak)} of {gw.gib(mem.capacity)} ({gw.pct(frac)}); peak "
                f"allocated {gw.gib(mem.peak_allocated)}.{gap}"
            ),
            evidence={
                "peak_allocated_bytes": mem.peak_allocated,
                "peak_reserved_bytes": mem.peak_reserved,
                "memory_capacity_bytes": mem.capacity,
                "peak_fraction": frac,
                "basis": basis,
            },
            recommendation=(
                "Leave headroom: activation checkpointing (torch.utils.checkpoint, use_reentrant=False) on "
                "the largest blocks, bf16 autocast (halves activation memory), a smaller micro-batch with "
                "gradient accumulation (same effective batch, no learning-rate change), and "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation."
            ),
            impact_explanation="No time cost measured: an out-of-memory risk, reported as advice.",
        )
