from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rulekit import transfers as tr
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel.transforms import pinned_gbps
from gpuadvisor.words import apart


class PageableHostCopies(Rule):
    """Host-to-device copies read pageable (unpinned) memory: slower, and they cannot overlap compute.

    Why it matters
    --------------
    The GPU's DMA engine can only read page-locked (pinned) host memory. From pageable memory the
    driver first copies into a pinned staging buffer, chunk by chunk, which roughly halves the
    bandwidth (about 12 GB/s pageable against 25+ GB/s pinned on recent PCIe) and makes
    `non_blocking=True` copies synchronous for the host.

    How it is detected
    ------------------
    `Memcpy HtoD (Pageable -> Device)` copies of at least `min_copy_bytes` in the analyzed steps, with
    their bandwidth (bytes / duration). Impact: the step time recovered in a replay of the analyzed
    steps in which these copies come from pinned memory with `non_blocking=True`: they run at the
    pinned bandwidth (measured on pinned copies of the same run, else typical for the PCIe generation
    NVML reported), their launch returns at once and the host no longer waits for them. Overlapping
    them with compute (GA102) and narrower inputs (GA103) act on the same copies: the findings share a
    group and a combined prediction.

    How to fix
    ----------
    Let the DataLoader pin batches (its pin thread reuses page-locked buffers), then copy
    asynchronously. Before::

        loader = DataLoader(ds, batch_size=256, num_workers=8)
        for x, y in loader:
            x = x.to("cuda")

    After::

        loader = DataLoader(ds, batch_size=256, num_workers=8, pin_memory=True)
        for x, y in loader:
            x = x.to("cuda", non_blocking=True)
    """

    id = "GA101"
    name = "pageable-host-copies"
    category = Category.HOST_DEVICE_TRANSFER
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_impact": Threshold(
            0.02, "report when the faster copy would save at least this share of step time", "fraction"
        ),
        "min_copy_bytes": Threshold(
            65536, "ignore smaller copies: they are latency-bound, pinning does not speed them up", "bytes"
        ),
    }
    references = ("https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        win = model.window
        copies = tr.window_copies(model, ctx.threshold("min_copy_bytes"), ("HtoD",))
        pageable = copies[copies["src_kind"].astype(str) == "Pageable"]
        if win.count == 0 or len(pageable) == 0:
            return
        stats = tr.copy_stats(model, pageable)
        bw_pageable = stats.gbps() or 0.0
        bw_pinned, pinned_basis = pinned_gbps(model)
        if bw_pinned <= bw_pageable * 1.05:
            return  # pinning would not be faster on this machine
        pred = ctx.predict(RemedyId.PINNED_ASYNC_COPIES, min_bytes=ctx.threshold("min_copy_bytes"))
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            return
        group = tr.group_prediction(ctx)
        env = ctx.run.environment if ctx.run is not None else {}
        loaders = [d for d in env.get("dataloaders") or [] if isinstance(d, dict) and not d.get("pin_memory")]
        sites = [s for s in hs.callsites(ctx, "host_to_device") if s.get("pinned") is False]
        locations = [
            loc
            for d in loaders
            if (loc := cm.location_of(d, pin_memory=d.get("pin_memory"), num_workers=d.get("num_workers")))
            is not None
        ] + [
            Location(
                file=str(s.get("file")),
                line=s.get("line"),
                code=s.get("code"),
                function=s.get("function"),
                detail={"non_blocking": s.get("non_blocking"), "bytes_per_call": s.get("bytes_per_call")},
            )
            for s in sites
            if s.get("file")
        ]
        if not locations:
            locations = [Location(op="Memcpy HtoD (Pageable -> Device)")]
        per_step_ms = win.per_step(stats.total_us) / 1000
        dl = "; ".join(
            f"DataLoader at {loc.label()}: add pin_memory=True"
            for loc in locations
            if loc.detail.get("pin_memory") is False
        )
        tos = "; ".join(
            f"{loc.label()} `{loc.code}`: add non_blocking=True"
            for loc in locations
            if "non_blocking" in loc.detail and not loc.detail.get("non_blocking")
        )
        # two numbers compared: with the digits that tell them apart ("0.02 ms instead of 0.02 ms" and
        # "2 GB/s instead of 2.0 GB/s" say nothing)
        pinned, now = cm.ms_pair(1000 * per_step_ms * bw_pageable / bw_pinned, 1000 * per_step_ms)
        fast, slow = apart(bw_pinned, bw_pageable, 1)
        faster = (
            f"At {fast} GB/s instead of {slow} GB/s the copies take {pinned} instead of {now} per step. "
            if pinned != now
            else f"At {fast} GB/s instead of {slow} GB/s the copies take less than the {now} per step they take now. "
        )
        rec = " ".join(
            x
            for x in (
                (dl + ".")
                if dl
                else "Pin the batches: DataLoader(..., pin_memory=True) (or reuse one pinned buffer; do not "
                "call .pin_memory() on a fresh tensor every step).",
                (tos + ".") if tos else "Copy with .to(device, non_blocking=True).",
                faster + cm.gain(pred, impact),
            )
            if x
        )
        mib = stats.bytes / win.count / 2**20
        yield self.finding(
            impact=impact,
            title=f"Pageable host-to-device copies run at {bw_pageable:.1f} GB/s ({mib:.0f} MiB per step)",
            message=(
                f"{stats.count} pageable HtoD copies in {win.count} analyzed steps move {mib:.1f} MiB per step "
                f"in {per_step_ms:.2f} ms ({bw_pageable:.1f} GB/s); {cm.ms(win.per_step(stats.exposed_us))} "
                f"per step of it runs while no kernel runs, and the host waits for each. Pinned copies reach "
                f"{bw_pinned:.1f} GB/s here ({pinned_basis}). "
                + cm.prediction_sentence(pred, "pinned, asynchronous copies")
                + tr.group_sentence(group)
                + cm.note_uncorrected(pred)
            ),
            evidence={
                "pageable_copies": stats.count,
                "pageable_bytes_per_step": stats.bytes / win.count,
                "pageable_ms_per_step": per_step_ms,
                "pageable_exposed_ms_per_step": win.per_step(stats.exposed_us) / 1000,
                "pageable_gbps": bw_pageable,
                "pinned_gbps": bw_pinned,
                "pinned_gbps_basis": pinned_basis,
                "step_time_ms": pred.baseline_step_ms,
                "predicted_step_time_ms": pred.predicted_step_ms,
            },
            recommendation=rec,
            locations=locations,
            impact_explanation=cm.impact_explanation(pred, "the copies pinned and asynchronous"),
            remedy=RemedyId.PINNED_ASYNC_COPIES,
            prediction=tr.with_group(pred, group),
            group=tr.GROUP,
        )
