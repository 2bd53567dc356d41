"""GA1001 exposed-communication: collective (NCCL) time that no compute hides."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from gpuadvisor import multirank as mr
from gpuadvisor.rulekit.hostside import fmt_ms, fmt_pct
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold


class ExposedCommunication(Rule):
    """Collective communication (NCCL all-reduce, all-gather...) runs with no compute beside it.

    Why it matters
    --------------
    Data-parallel training exchanges gradients every step. DDP and FSDP are built to run those
    collectives while the backward pass still computes, so that communication costs nothing. When the
    collective kernels run alone, every microsecond of them adds to the step time of every rank.

    How it is detected
    ------------------
    Per rank and per analyzed step: the time covered by NCCL kernels (`ncclDevKernel_*`,
    `ncclKernel_*`) during which no other kernel of the same rank runs (exposed communication),
    against the whole collective time (the overlapped part is the difference). Works on one rank's
    trace as well as on a folder of per-rank traces. Impact = exposed time / step time, the median
    over ranks (ranks wait for each other, so a step costs the same on all of them).

    How to fix
    ----------
    Let DDP overlap the all-reduce with backward: no unused parameters, a static graph, buckets
    that fill early. Before::

        model = DDP(model, device_ids=[rank], find_unused_parameters=True)

    After::

        model = DDP(model, device_ids=[rank], static_graph=True, gradient_as_bucket_view=True)
        # halve the bytes on the wire when the link is the limit:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    """

    id = "GA1001"
    name = "exposed-communication"
    category = Category.COMMUNICATION
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_impact": Threshold(
            0.05,
            "report when exposed collective time is at least this share of the step time (5%: below "
            "it, communication is essentially hidden)",
            "fraction",
        ),
        "low_overlap": Threshold(
            0.25,
            "below this share of collective time hidden behind compute, communication is called "
            "'not overlapped' (all-reduce after backward instead of during it)",
            "fraction",
        ),
    }
    references = (
        "https://pytorch.org/docs/stable/notes/ddp.html",
        "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html",
        "https://pytorch.org/docs/stable/ddp_comm_hooks.html",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        import numpy as np

        ranks = mr.cross_rank_of(ctx).ranks if len(ctx.traces) > 1 else (mr.summary_of(ctx),)
        ranks = tuple(r for r in ranks if r.comm_source == "nccl_kernels")
        if not ranks:
            return
        per_rank: dict[str, dict[str, Any]] = {}
        shares: list[float] = []
        overlaps: list[float] = []
        for r in ranks:
            share = r.share("exposed_comm_us") or 0.0
            overlap = r.overlap_fraction()
            shares.append(share)
            if overlap is not None:
                overlaps.append(overlap)
            per_rank[str(r.rank)] = {
                "exposed_comm_ms_per_step": (r.median("exposed_comm_us") or 0.0) / 1000,
                "comm_ms_per_step": (r.median("comm_us") or 0.0) / 1000,
                "step_time_ms": (r.median("step_time_us") or 0.0) / 1000,
                "exposed_fraction": share,
                "overlapped_fraction_of_comm": overlap,
            }
        impact = float(np.median(shares))
        straggler = mr.cross_rank_of(ctx).straggler if len(ctx.traces) > 1 else None
        waited = ""
        if straggler is not None:
            # The other ranks' NCCL kernels also spin while they wait for the straggler (GA1002 reports
            # that wait); the straggler's own exposed time is the communication cost proper.
            for r, share in zip(ranks, shares, strict=True):
                if r.rank == straggler.rank:
                    impact = share
                    waited = f" Rank {r.rank} is a straggler (GA1002): the other ranks' extra wait is not counted here."
        if impact < ctx.threshold("min_impact"):
            return
        worst = ranks[int(np.argmax(shares))]
        if straggler is not None:
            worst = next((r for r in ranks if r.rank == straggler.rank), worst)
        overlap = float(np.median(overlaps)) if overlaps else 0.0
        kinds: dict[str, int] = {}
        for r in ranks:
            for k, n in r.collective_kinds.items():
                kinds[k] = kinds.get(k, 0) + n
        step_us = worst.median("step_time_us") or 0.0
        exposed_us = worst.median("exposed_comm_us") or 0.0
        multi = len(ranks) > 1
        where = f" (worst: rank {worst.rank}, {fmt_pct(max(shares))})" if multi else ""
        if overlap < ctx.threshold("low_overlap"):
            rec = (
                f"Only {fmt_pct(overlap)} of the collective time runs during compute: the all-reduce "
                "runs after the backward pass instead of during it. With DDP, drop "
                "find_unused_parameters=True (or set static_graph=True), make sure no parameter is "
                "used outside the forward pass, and keep the default bucketing (bucket_cap_mb=25) so that "
                "buckets fill while backward runs."
            )
        else:
            rec = (
                f"{fmt_pct(overlap)} of the collective time already overlaps compute; the rest is longer "
                "than the compute left to hide it. Reduce the bytes (bf16_compress_hook, or bf16 "
                "gradients with FSDP mixed precision), increase the work per step (a larger per-GPU "
                "batch, gradient accumulation under no_sync()), or use a faster interconnect (NVLink, "
                "NCCL_P2P/NCCL_IB settings)."
            )
        rec += (
            f" Expected gain: up to {fmt_ms(exposed_us)} per step ({fmt_pct(impact)}) when the "
            "communication is fully hidden."
        )
        yield self.finding(
            impact=impact,
            title=f"Communication not hidden by compute: {fmt_pct(impact)} of each step",
            message=(
                f"NCCL collectives ran {fmt_ms(worst.median('comm_us') or 0.0)} per step, of which "
                f"{fmt_ms(exposed_us)} with no compute kernel beside it ({fmt_pct(impact)} of the "
                f"{fmt_ms(step_us)} step{where}); {fmt_pct(overlap)} of the collective time was overlapped.{waited}"
            ),
            evidence={
                "exposed_fraction_median_over_ranks": impact,
                "overlapped_fraction_of_comm": overlap,
                "ranks": per_rank,
                "collective_calls_by_kind": dict(sorted(kinds.items())),
            },
            recommendation=rec,
            locations=_top_collective_kernels(ctx),
            impact_explanation=(
                "Time covered by collective kernels and by no other kernel of the same rank, summed over the "
                "analyzed steps and divided by their total time; the median over ranks."
            ),
        )


def _top_collective_kernels(ctx: RuleContext, limit: int = 3) -> list[Location]:
    """The collective kernels of the primary rank with the most time (where the time goes)."""
    k = ctx.trace.kernels
    if not len(k):
        return []
    coll = k[k["is_collective"].astype(bool)]
    if not len(coll):
        return []
    agg = (
        coll.groupby(coll["name"].astype(str))["dur"]
        .agg(["sum", "count"])
        .sort_values("sum", ascending=False)
    )
    return [
        Location(kernel=str(name), detail={"calls": int(row["count"]), "total_ms": float(row["sum"]) / 1000})
        for name, row in agg.head(limit).iterrows()
    ]
