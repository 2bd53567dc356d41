from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold


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
    `Memcpy HtoD (Pageable -> Device)` copies of at least `min_copy_bytes` in the analyzed steps.
    Their bandwidth is measured from the trace (bytes / duration); the pinned bandwidth is measured
    from pinned HtoD copies of the same trace when there are any, else `assumed_pinned_gbps`.
    Impact = exposed pageable copy time (not overlapped by kernels) x (1 - pageable / pinned
    bandwidth) / step time: what the faster copy alone would save. Overlapping the copies
    (GA102) can save more.

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
        "assumed_pinned_gbps": Threshold(
            25.0,
            "pinned HtoD bandwidth assumed when the trace has no pinned copy to measure (PCIe gen4 x16 reaches ~25 GB/s)",
            "GB/s",
        ),
    }
    references = ("https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        copies = ctx.trace.copies
        if len(copies) == 0:
            return
        htod = copies["direction"].astype(str) == "HtoD"
        big = copies["bytes"].fillna(0) >= ctx.threshold("min_copy_bytes")
        src = copies["src_kind"].astype(str)
        pageable = hs.copy_stats(ctx, htod & big & (src == "Pageable"))
        win = pageable.window
        if win.count == 0 or pageable.total_us <= 0:
            return
        bw_pageable = hs.gbps(pageable.bytes, pageable.total_us) or 0.0
        pinned = copies[htod & big & (src == "Pinned")]
        measured = None
        if len(pinned):
            rates = (
                pinned["bytes"].to_numpy("float64") / pinned["dur"].clip(lower=1e-3).to_numpy("float64") / 1e3
            )
            measured = float(sorted(rates)[len(rates) // 2])
        bw_pinned = measured if measured is not None else ctx.threshold("assumed_pinned_gbps")
        if bw_pinned <= bw_pageable * 1.05:
            return  # pinning would not be faster on this machine
        saved_us = pageable.exposed_us * (1 - bw_pageable / bw_pinned)
        impact = saved_us / win.total_us
        if impact < ctx.threshold("min_impact"):
            return
        env = ctx.run.environment if ctx.run is not None else {}
        loaders = [d for d in env.get("dataloaders") or [] if isinstance(d, dict) and not d.get("pin_memory")]
        sites = [s for s in hs.callsites(ctx, "host_to_device") if s.get("pinned") is False]
        locations = [
            Location(
                file=str(d.get("file")),
                line=d.get("line"),
                code=d.get("code"),
                detail={"pin_memory": d.get("pin_memory"), "num_workers": d.get("num_workers")},
            )
            for d in loaders
            if d.get("file")
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
        per_step_ms = pageable.total_us / win.count / 1000
        src_text = (
            "measured on pinned copies in this trace"
            if measured is not None
            else "assumed (no pinned copy in this trace to measure)"
        )
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
        rec = " ".join(
            x
            for x in (
                (dl + ".")
                if dl
                else "Pin the batches: DataLoader(..., pin_memory=True) (or reuse one pinned buffer; do not call .pin_memory() on a fresh tensor every step).",
                (tos + ".") if tos else "Copy with .to(device, non_blocking=True).",
                f"At {bw_pinned:.0f} GB/s instead of {bw_pageable:.1f} GB/s the copies take "
                f"{per_step_ms * bw_pageable / bw_pinned:.2f} ms instead of {per_step_ms:.2f} ms per step "
                f"(saves up to {hs.fmt_ms(saved_us / win.count)} per step, {hs.fmt_pct(impact)}); overlapping them with compute (GA102) can save the rest.",
            )
            if x
        )
        yield self.finding(
            impact=impact,
            title=f"Pageable host-to-device copies run at {bw_pageable:.1f} GB/s ({pageable.bytes / win.count / 2**20:.0f} MiB per step)",
            message=(
                f"{len(pageable.copies)} pageable HtoD copies in {win.count} analyzed steps move "
                f"{pageable.bytes / win.count / 2**20:.1f} MiB per step in {per_step_ms:.2f} ms ({bw_pageable:.1f} GB/s); "
                f"{hs.fmt_ms(pageable.exposed_us / win.count)} per step of it runs while no kernel runs. Pinned copies "
                f"reach {bw_pinned:.1f} GB/s here ({src_text})."
            ),
            evidence={
                "pageable_copies": len(pageable.copies),
                "pageable_bytes_per_step": pageable.bytes / win.count,
                "pageable_ms_per_step": per_step_ms,
                "pageable_exposed_ms_per_step": pageable.exposed_us / win.count / 1000,
                "pageable_gbps": bw_pageable,
                "pinned_gbps": bw_pinned,
                "pinned_gbps_measured": measured is not None,
                "step_time_ms": win.median_step_us / 1000,
            },
            recommendation=rec,
            locations=locations,
            impact_explanation=(
                "Exposed pageable copy time x (1 - pageable/pinned bandwidth), divided by the total step time: "
                "the saving from faster copies alone."
            ),
        )
