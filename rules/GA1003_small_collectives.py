"""GA1003 small-collectives: many tiny all-reduces per step, each paying the collective's latency."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor import multirank as mr
from gpuadvisor.rulekit.hostside import fmt_ms, fmt_pct
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold


def _fmt_bytes(n: float) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


class SmallCollectives(Rule):
    """Many small collectives per step: each one pays a fixed latency, whatever its size.

    Why it matters
    --------------
    A collective costs a fixed latency (tens of microseconds for NCCL on one node, more across
    nodes) plus its bytes over the bandwidth. Hundreds of small all-reduces per step (per-parameter
    all-reduce, a tiny DDP `bucket_cap_mb`, manual `dist.all_reduce` in a loop) pay that latency
    hundreds of times, and each one also interrupts the compute stream.

    How it is detected
    ------------------
    The collective calls the host issued per analyzed step (`c10d::allreduce_`, `record_param_comms`,
    or the backend's `nccl:*` / `gloo:*` spans), with the message size from their Input Dims and dtype.
    Reported when there are at least `min_calls` per step and their median size is below
    `max_bytes`. Impact = (calls - the calls that 25 MiB buckets would need) x `latency_us`, capped by
    the measured communication time (exposed time when NCCL kernels are recorded), / step time.

    How to fix
    ----------
    Let DDP bucket the gradients (or enlarge the buckets) instead of reducing each tensor. Before::

        for p in model.parameters():
            dist.all_reduce(p.grad)

    After::

        model = DDP(model, device_ids=[rank], bucket_cap_mb=50)
        # or, by hand: flatten first
        flat = torch.cat([p.grad.flatten() for p in model.parameters()]); dist.all_reduce(flat)
    """

    id = "GA1003"
    name = "small-collectives"
    category = Category.COMMUNICATION
    requires = frozenset({Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_calls": Threshold(16, "report from this many collective calls per step", "calls"),
        "max_bytes": Threshold(
            1 << 20, "report when the median message is smaller than this (1 MiB)", "bytes"
        ),
        "latency_us": Threshold(
            20.0, "fixed cost of one collective (NCCL ring, one node: about 10-30 us)", "us"
        ),
        "bucket_bytes": Threshold(25 << 20, "DDP's default bucket size (bucket_cap_mb=25)", "bytes"),
        "min_impact": Threshold(0.01, "report when the estimated saving is at least this share", "fraction"),
    }
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html",
        "https://pytorch.org/docs/stable/notes/ddp.html",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        # lazy: numpy stays out of `gpuadvisor rules`
        import numpy as np

        r = mr.summary_of(ctx)
        steps = r.analyzed
        if not steps:
            return
        calls = float(np.median([s.collectives for s in steps]))
        if calls < ctx.threshold("min_calls") or not r.collective_bytes:
            return
        med_bytes = float(np.median(r.collective_bytes))
        if med_bytes >= ctx.threshold("max_bytes"):
            return
        bytes_per_step = float(sum(r.collective_bytes)) / len(steps)
        ideal = max(1, math.ceil(bytes_per_step / ctx.threshold("bucket_bytes")))
        step_us = r.median("step_time_us") or 0.0
        if step_us <= 0:
            return
        comm_us = r.median("exposed_comm_us") if r.comm_source == "nccl_kernels" else r.median("comm_us")
        saving = max(0.0, calls - ideal) * ctx.threshold("latency_us")
        measured = comm_us is not None and r.comm_source != "none"
        if measured:
            saving = min(saving, float(comm_us or 0.0))
        impact = saving / step_us
        if impact < ctx.threshold("min_impact"):
            return
        kinds = ", ".join(f"{n} {k}" for k, n in r.collective_kinds.items())
        yield self.finding(
            impact=impact,
            title=f"{calls:.0f} small collectives per step (median {_fmt_bytes(med_bytes)})",
            message=(
                f"Rank {r.rank} issued {calls:.0f} collective calls per step ({kinds} in the analyzed steps), "
                f"median message {_fmt_bytes(med_bytes)}, {_fmt_bytes(bytes_per_step)} per step in all: "
                f"{ideal} bucket(s) of {_fmt_bytes(ctx.threshold('bucket_bytes'))} would carry it."
            ),
            evidence={
                "rank": r.rank,
                "collectives_per_step": calls,
                "median_message_bytes": med_bytes,
                "bytes_per_step": bytes_per_step,
                "calls_needed_with_buckets": ideal,
                "latency_us_assumed": ctx.threshold("latency_us"),
                "comm_ms_per_step_measured": None if comm_us is None else comm_us / 1000,
                "comm_source": r.comm_source,
                "by_kind": r.collective_kinds,
            },
            recommendation=(
                "Reduce gradients in buckets: wrap the model in DistributedDataParallel (default "
                "bucket_cap_mb=25; raise it, e.g. bucket_cap_mb=50, when the model has many small parameters) "
                "instead of calling dist.all_reduce per tensor, or flatten tensors before one collective. "
                f"Expected gain: up to {fmt_ms(saving)} per step ({fmt_pct(impact)})."
            ),
            locations=[Location(op="c10d::allreduce_", detail={"calls_per_step": calls})],
            impact_explanation=(
                "(collective calls per step - calls needed with 25 MiB buckets) x assumed latency per call, "
                "capped by the measured communication time per step, / median step time."
            ),
        )
