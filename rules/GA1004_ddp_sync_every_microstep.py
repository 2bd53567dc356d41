"""GA1004 ddp-sync-every-microstep: gradient accumulation that all-reduces on every micro-step."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor import multirank as mr
from gpuadvisor.rulekit.hostside import fmt_ms, fmt_pct
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold


class DdpSyncEveryMicrostep(Rule):
    """Gradient accumulation with DDP all-reduces the gradients after every micro-batch.

    Why it matters
    --------------
    With gradient accumulation only the gradients of the last micro-batch before `optimizer.step()`
    need to be averaged across ranks. DDP cannot know that: unless the other micro-batches run under
    `model.no_sync()`, it all-reduces every backward pass, multiplying the communication by the
    number of micro-batches.

    How it is detected
    ------------------
    In the analyzed steps: the micro-batches (the outermost `DistributedDataParallel.forward` spans of
    a thread: a DDP module nested inside another one's forward is not another micro-batch), the
    `Optimizer.step#...` spans, and the micro-batches whose backward issued a gradient collective
    (all-reduce or reduce-scatter after the forward ended, before the next forward: collectives inside
    the forward, such as all-to-all of sharded embeddings, do not count). Reported when there are more
    micro-batches than optimizer steps (accumulation) and more synchronizing micro-batches than
    optimizer steps. Training runs only. Impact = the communication time of the extra rounds (exposed
    time when NCCL kernels are recorded) / step time.

    How to fix
    ----------
    Skip the all-reduce on all but the last micro-batch. Before::

        for i, (x, y) in enumerate(loader):
            loss_fn(model(x), y).backward()
            if (i + 1) % accum == 0:
                opt.step(); opt.zero_grad()

    After::

        import contextlib
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % accum == 0
            with contextlib.nullcontext() if last else model.no_sync():
                loss_fn(model(x), y).backward()
            if last:
                opt.step(); opt.zero_grad()
    """

    id = "GA1004"
    name = "ddp-sync-every-microstep"
    category = Category.COMMUNICATION
    requires = frozenset({Requirement.STEPS, Requirement.TRAINING})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_extra_rounds": Threshold(
            1.5, "report when synchronizing micro-batches per optimizer step reach this", "rounds"
        ),
    }
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html"
        "#torch.nn.parallel.DistributedDataParallel.no_sync",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        r = mr.summary_of(ctx)
        steps = r.analyzed
        forwards = sum(s.forwards for s in steps)
        opt_steps = sum(s.optimizer_steps for s in steps)
        rounds = sum(s.comm_rounds for s in steps)
        if opt_steps == 0 or forwards <= opt_steps:
            return  # no gradient accumulation seen
        if rounds / opt_steps < ctx.threshold("min_extra_rounds"):
            return
        kernels = r.comm_source == "nccl_kernels"
        comm_total = r.total("exposed_comm_us" if kernels else "comm_us") or 0.0
        total_us = r.total("step_time_us") or 0.0
        if total_us <= 0:
            return
        extra = rounds - opt_steps
        impact: float | None = comm_total * extra / rounds / total_us if comm_total > 0 and rounds else None
        per_opt = rounds / opt_steps
        micro = forwards / opt_steps
        gain = (
            f" Expected gain: up to {fmt_ms(comm_total * extra / rounds / len(steps))} per step "
            f"({fmt_pct(impact)})."
            if impact is not None
            else " (The trace holds no collective timing to estimate the gain.)"
        )
        yield self.finding(
            impact=impact,
            title=f"DDP all-reduces on every micro-batch ({per_opt:.1f} rounds per optimizer step)",
            message=(
                f"Rank {r.rank}: {forwards} DDP forwards and {opt_steps} optimizer steps in the analyzed steps "
                f"({micro:.1f} micro-batches per optimizer step), and {rounds} of the micro-batches were "
                "followed by a collective: gradients are all-reduced before every accumulation, not only "
                "before optimizer.step()."
            ),
            evidence={
                "rank": r.rank,
                "ddp_forwards": forwards,
                "optimizer_steps": opt_steps,
                "synchronizing_microbatches": rounds,
                "micro_batches_per_optimizer_step": micro,
                "comm_ms_total": comm_total / 1000,
                "comm_source": r.comm_source,
            },
            recommendation=(
                "Run every micro-batch but the last of each accumulation under `with model.no_sync():` so "
                "that DDP all-reduces once per optimizer step." + gain
            ),
            locations=[Location(function=mr.DDP_FORWARD, detail={"micro_batches_per_step": micro})],
            impact_explanation=(
                "Communication time (exposed when NCCL kernels are recorded) per synchronizing micro-batch x "
                "the micro-batches that need not synchronize, / total step time."
            ),
        )
