"""GA1002 straggler-rank: one rank arrives late at every collective and the others wait for it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor import multirank as mr
from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rulekit.hostside import fmt_ms, fmt_pct
from gpuadvisor.rulekit.hostwork import ExtraHostWork, extra_host_work
from gpuadvisor.rules_api import (
    Category,
    Finding,
    Location,
    Requirement,
    Rule,
    RuleContext,
    Severity,
    Threshold,
)

_WHY = {
    "data_wait": "it waits longer for its input batches (DataLoader __next__)",
    "compute": "it computes longer per step (more or slower GPU work)",
    "communication": "neither its data wait nor its compute explains it: its collectives start late "
    "for another reason (host-side delays, CPU contention, a slower link or GPU)",
    "host_work": "its host works longer before each collective than the others' (not its data wait, not "
    "its GPU compute)",
    "host_compute": "it works longer per step outside collectives and data waits (no GPU kernels in this "
    "job: its compute is host work)",
}
# The straggler's own host work explains its lateness when its extra time to the batch copy (or, without
# batch copies, its extra CPU operator time) is at least this share of its extra host time per step.
HOST_WORK_EXPLAINS = 0.5


def _explains(work: ExtraHostWork, extra_host_us: float) -> bool:
    seen = work.preparation_extra_us if work.preparation_extra_us is not None else work.us_per_step
    return extra_host_us > 0 and seen >= HOST_WORK_EXPLAINS * extra_host_us


class StragglerRank(Rule):
    """One rank is late at every collective: all the other ranks wait for it.

    Why it matters
    --------------
    A collective completes only when every rank has joined it. When one rank reaches the all-reduce
    later than the others (a slower input pipeline, more work, a throttled GPU, a busy CPU), every
    other rank spins inside the collective until it arrives: the whole job runs at the pace of its
    slowest rank.

    How it is detected
    ------------------
    Ranks are aligned by ProfilerStep number, not by clock. In each step present on every rank, the
    rank with the least time inside collectives arrived last: the others' extra collective time is
    the wait for it. The rank that is last most often is the straggler; how late it is = the others'
    median collective time minus its own, averaged over the steps. Its data wait and compute time are
    compared with the other ranks' to say why. Impact = lateness / median step time.

    The capture times every step outside the profiler too (the ranks step in lockstep, so rank 0's
    unprofiled step is the job's). When the profiled step exceeds that by at least the lateness, the
    profiler's own overhead on that rank can explain it (seen on 2x H200: 7-16 ms per step, only inside
    the window, following one physical GPU): the finding is then info, "profiler-induced", with the
    numbers, and no gain is claimed. A raw trace has no unprofiled steps: the verdict stands unchecked.

    Where: when the lateness is host time, the straggler's top-level CPU operators are compared with
    the other ranks' per step; those it runs more of (a per-sample transform shows as thousands of
    `aten::mean`/`aten::div_` on CPU tensors) are named with their time, and when most of that time runs
    before the step's batch is copied to the GPU, the location is that copy's line (callsites of the
    straggler's rank): the work is the batch's preparation, just above it. `evidence.cause` says which
    explanation holds: `data_wait`, `compute` (`host_compute` in a job without GPU kernels), `host_work`
    (the extra host work above), or `communication` (none of them).

    How to fix
    ----------
    Give every rank the same work and the same input speed; what to change depends on the cause the
    finding names. A longer data wait: more DataLoader workers, pinned memory, persistent workers on
    that rank, and shards of equal size (`DistributedSampler(ds, drop_last=True)`, variable-length
    samples bucketed). Longer compute: equal batch sizes and pipeline stages, and a check of that GPU's
    clocks (`nvidia-smi -q -d PERFORMANCE`). Host work only that rank does: move it out of the training
    loop (into DataLoader workers, or every rank's own equal share), vectorize a per-sample Python loop,
    or leave logging, evaluation and checkpoints to after the collective.
    """

    id = "GA1002"
    name = "straggler-rank"
    category = Category.COMMUNICATION
    requires = frozenset({Requirement.MULTI_RANK, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_impact": Threshold(
            mr.STRAGGLER_MIN_LATE_FRACTION,
            "report when the straggler is late by at least this share of the step time",
            "fraction",
        ),
        "min_consistency": Threshold(
            mr.STRAGGLER_MIN_CONSISTENCY,
            "the straggler must be the last rank in at least this share of the compared steps (a real "
            "straggler is late nearly every step; run-to-run jitter is not)",
            "fraction",
        ),
    }
    references = ("https://pytorch.org/docs/stable/notes/ddp.html",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        cr = mr.cross_rank_of(ctx)
        # The verdict GA1001 uses too (with these thresholds' defaults), so both name the same rank.
        verdict = mr.straggler_verdict(
            cr,
            min_consistency=ctx.threshold("min_consistency"),
            min_late_fraction=ctx.threshold("min_impact"),
            unprofiled_step_us=mr.unprofiled_step_us(ctx),
        )
        if verdict is None:
            return
        s = verdict.straggler
        step_us = verdict.step_us
        impact = verdict.late_fraction
        detail = s.cause_detail
        if verdict.profiler_induced:
            overhead = verdict.profiler_overhead_us or 0.0
            yield self.finding(
                impact=None,
                title=(
                    f"Rank {s.rank} is late {fmt_ms(s.late_us_per_step)} per step inside the profiled window "
                    "only: the profiler's own overhead explains it"
                ),
                message=(
                    f"Inside the window rank {s.rank} was last at the collectives in {s.steps_last} of "
                    f"{s.steps_compared} steps, {fmt_ms(s.late_us_per_step)} per step late. Without the profiler "
                    f"the job's step is {fmt_ms(verdict.unprofiled_step_us or 0.0)} ({fmt_ms(overhead)} less than the "
                    f"{fmt_ms(step_us)} profiled step), and a rank that late would make every step at least the "
                    "lateness plus the other ranks' own compute: outside the window rank "
                    f"{s.rank} can be late by at most {fmt_ms(verdict.late_outside_us or 0.0)}, less than half the "
                    "step, the share a healthy job's host overhead and timing noise can leave. The lateness in the "
                    "window is the profiler's cost on that rank (its GPU, its CPU); a straggler of at most that "
                    "size outside it cannot be told from this run."
                ),
                evidence={
                    "straggler_rank": s.rank,
                    "late_ms_per_step": s.late_us_per_step / 1000,
                    "profiled_step_ms": step_us / 1000,
                    "unprofiled_step_ms": (verdict.unprofiled_step_us or 0.0) / 1000,
                    "profiler_overhead_ms_per_step": overhead / 1000,
                    "max_late_ms_per_step_outside_window": (verdict.late_outside_us or 0.0) / 1000,
                    "steps_last": s.steps_last,
                    "steps_compared": s.steps_compared,
                },
                recommendation=(
                    "Nothing to fix from this run. If you suspect a real straggler, compare the ranks' step "
                    "times without the profiler (e.g. time each rank's steps with torch.cuda.Event), or record "
                    "again with a shorter window (--active-steps 3) to lower the profiler's cost."
                ),
                locations=[Location(function=f"rank {s.rank}", detail={"rank": s.rank, "cause": "profiler"})],
                severity=Severity.INFO,
            )
            return
        has_kernels = all(r.has_kernels for r in cr.ranks)
        if s.cause == "data_wait":
            rec = (
                f"Rank {s.rank} waits {fmt_ms(detail['data_wait'])} per step longer for data than the others: "
                "give its DataLoader more workers, pin_memory=True, persistent_workers=True, and check that "
                "its shard of the data is not larger or slower to read (DistributedSampler, drop_last=True)."
            )
        elif s.cause == "compute":
            rec = (
                f"Rank {s.rank} computes {fmt_ms(max(detail['compute'], detail['host']))} per step longer than "
                "the others: give every rank the same work (equal batch sizes, bucketed sequence lengths, "
                "equal pipeline stages)"
                + (" and check its GPU for throttling (nvidia-smi -q -d PERFORMANCE)." if has_kernels else ".")
            )
        else:
            rec = (
                f"Rank {s.rank}'s collectives start late without a longer data wait or compute: look for "
                "host-side work only that rank does (logging, checkpointing, evaluation on rank 0), CPU "
                "contention (pin each rank's threads: OMP_NUM_THREADS, torchrun --nproc-per-node), or a slower "
                "GPU or link on its host."
            )
        work = self._extra_host_work(ctx, cr, s.rank) if s.cause != "data_wait" else None
        where_text = ""
        copy_site: Location | None = None
        if work is not None and work.ops and _explains(work, detail["host"]):
            copy_site = self._batch_copy_site(ctx, s.rank) if work.preparation_extra_us is not None else None
            ops = ", ".join(f"{o.name} x{o.calls_per_step:,.0f}" for o in work.ops)
            if copy_site is not None and work.preparation_extra_us is not None:
                outside = max(0.0, work.preparation_extra_us - work.us_per_step)
                where_text = (
                    f" Rank {s.rank} takes {fmt_ms(work.preparation_extra_us)} per step longer than the others "
                    f"from the step's start to its batch's copy to the GPU at {copy_site.label()} "
                    f"(`{copy_site.code}`): the batch's preparation, in the lines above it. In that time it runs "
                    f"CPU operators the others do not ({ops} per step: {fmt_ms(work.us_per_step)})"
                    + (f"; {fmt_ms(outside)} ran outside any recorded operator (Python code, waits)." if outside else ".")
                )
                what = f"the preparation of its batch before {copy_site.label()}"
            else:
                where_text = (
                    f" Rank {s.rank} runs {fmt_ms(work.us_per_step)} per step of CPU operators the others do not "
                    f"({ops} per step)."
                )
                what = f"the host work the others do not do ({ops} per step)"
            rec = (
                f"Rank {s.rank} is slow in {what}: move that work out of the training loop (into DataLoader "
                "workers), vectorize a per-sample Python loop, or give every rank the same share of it."
            )
        why = "host_work" if where_text else ("host_compute" if s.cause == "compute" and not has_kernels else s.cause)
        late_us = s.late_us_per_step
        bounded = ""
        if verdict.late_outside_us is not None and verdict.unprofiled_step_us and verdict.late_outside_us < late_us:
            # inside the window the profiler's cost on that rank inflates the lateness; the unprofiled
            # steps bound what it can be without the profiler
            late_us = verdict.late_outside_us
            impact = late_us / verdict.unprofiled_step_us
            bounded = (
                f" Without the profiler the job's step is {fmt_ms(verdict.unprofiled_step_us)}: there rank "
                f"{s.rank} can be late by at most {fmt_ms(late_us)} ({fmt_pct(impact)} of that step); the rest of "
                "the lateness in the window is the profiler's cost on it."
            )
        rec += (
            f" Expected gain: up to {fmt_ms(late_us)} per step ({fmt_pct(impact)}), the time the "
            "other ranks wait for it."
        )
        per_rank = {
            str(r.rank): {
                "step_time_ms": (r.median("step_time_us") or 0.0) / 1000,
                "comm_ms_per_step": (r.median("comm_us") or 0.0) / 1000,
                "dataloader_wait_ms_per_step": (r.median("dataloader_wait_us") or 0.0) / 1000,
                "compute_ms_per_step": None
                if r.median("compute_us") is None
                else (r.median("compute_us") or 0.0) / 1000,
            }
            for r in cr.ranks
        }
        yield self.finding(
            impact=impact,
            title=f"Rank {s.rank} is a straggler: the others wait up to {fmt_ms(late_us)} per step for it",
            message=(
                f"In {s.steps_last} of {s.steps_compared} steps compared, rank {s.rank} spent the least time "
                f"inside collectives: the other ranks waited there {fmt_ms(s.late_us_per_step)} per step on "
                f"average ({fmt_pct(verdict.late_fraction)} of the {fmt_ms(step_us)} profiled step, the median over ranks). "
                f"Why: {_WHY[why]}.{where_text}{bounded}"
            ),
            evidence={
                "straggler_rank": s.rank,
                "late_ms_per_step": late_us / 1000,
                "late_ms_per_step_in_window": s.late_us_per_step / 1000,
                "unprofiled_step_ms": None if verdict.unprofiled_step_us is None else verdict.unprofiled_step_us / 1000,
                "cause": why,
                "extra_ms_per_step": {k: v / 1000 for k, v in sorted(detail.items())},
                **(work.to_evidence() if where_text and work is not None else {}),
                "steps_last": s.steps_last,
                "steps_compared": s.steps_compared,
                "step_time_spread": cr.step_time_spread,
                "ranks": per_rank,
            },
            recommendation=rec,
            locations=[
                *([copy_site] if copy_site is not None else []),
                Location(function=f"rank {s.rank}", detail={"rank": s.rank, "cause": why}),
            ],
            impact_explanation=(
                "Mean over the steps of (median collective time of the other ranks - the straggler's "
                "collective time), divided by the median step time over ranks."
            ),
        )

    @staticmethod
    def _extra_host_work(ctx: RuleContext, cr: mr.CrossRank, rank: int) -> ExtraHostWork | None:
        traces = {t.rank: t for t in (tuple(ctx.traces) or (ctx.trace,))}
        return extra_host_work(traces, cr, rank)

    @staticmethod
    def _batch_copy_site(ctx: RuleContext, rank: int) -> Location | None:
        """The straggler rank's per-step host-to-device copy that moves the most bytes (its batch)."""
        if ctx.run is None:
            return None
        sites = [
            c
            for c in ctx.run.rank_callsites(rank)
            if c.get("kind") == "host_to_device" and float(c.get("per_step") or 0) >= hs.MIN_CALLS_PER_STEP
        ]
        if not sites:
            return None
        best = max(sites, key=lambda c: (float(c.get("bytes_per_call") or 0) * float(c.get("per_step") or 0)))
        return hs.site_location(best, "call")
