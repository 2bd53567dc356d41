from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold


class ExposedHostCopies(Rule):
    """Host<->device copies sit on the critical path: the GPU computes nothing while they run.

    Why it matters
    --------------
    A copy engine can move the next batch while the SMs compute the current one, but only when the
    copy is asynchronous (pinned source, `non_blocking=True`) and issued ahead of time. A copy that
    runs while no kernel runs adds its full duration to every step; a copy the host waits for
    (`x.cuda()` from pageable memory: `cudaMemcpyAsync` then `cudaStreamSynchronize`) also drains
    the GPU queue.

    How it is detected
    ------------------
    Host-to-device and device-to-host copies of at least `min_copy_bytes` inside the analyzed
    steps; the part of their time not overlapped by any kernel is "exposed". Impact = exposed copy
    time / step time (the upper bound of what overlapping them would save). Blocking copies are
    counted from a `cudaStreamSynchronize` issued by the copy op itself. Tiny copies belong to
    GA201 (scalar reads).

    How to fix
    ----------
    Pin the source, copy asynchronously, and issue the copy before it is needed. Before::

        loader = DataLoader(ds, batch_size=256)
        for x, y in loader:
            x, y = x.cuda(), y.cuda()

    After::

        loader = DataLoader(ds, batch_size=256, pin_memory=True, num_workers=8)
        for x, y in loader:
            x = x.cuda(non_blocking=True)
            y = y.cuda(non_blocking=True)
    """

    id = "GA102"
    name = "exposed-host-copies"
    category = Category.HOST_DEVICE_TRANSFER
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_impact": Threshold(
            0.03, "report when exposed copy time is at least this share of step time", "fraction"
        ),
        "min_copy_bytes": Threshold(
            65536,
            "copies smaller than this are latency-bound scalar reads, not transfers (Nsight uses 64 KiB)",
            "bytes",
        ),
    }
    references = ("https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        copies = ctx.trace.copies
        if len(copies) == 0:
            return
        direction = copies["direction"].astype(str)
        big = copies["bytes"].fillna(0) >= ctx.threshold("min_copy_bytes")
        stats = hs.copy_stats(ctx, direction.isin(["HtoD", "DtoH"]) & big)
        win = stats.window
        if win.count == 0 or stats.exposed_us <= 0:
            return
        impact = stats.exposed_us / win.total_us
        if impact < ctx.threshold("min_impact"):
            return
        c = stats.copies
        by_dir = {
            str(d): float(g["exposed_us"].sum())
            for d, g in c.groupby(c["direction"].astype(str), observed=True)
        }
        att = hs.attribute_idle(ctx)
        blocking = att.calls_by_kind["blocking_htod"]
        sites = [
            s for s in hs.callsites(ctx, "host_to_device") if not s.get("non_blocking") or not s.get("pinned")
        ]
        locations = [
            hs.site_location(s, "pinned", "non_blocking", "per_step")
            for s in sites
        ] or [Location(op=str(n)) for n in sorted(set(c["name"].astype(str)))]
        pageable = bool((c["src_kind"].astype(str) == "Pageable").any())
        parts = [f"{d} {hs.fmt_ms(att.per_step(us))}" for d, us in sorted(by_dir.items())]
        msg = (
            f"{len(c)} copies of {stats.bytes / len(c) / 2**20:.1f} MiB on average in {win.count} analyzed steps; "
            f"{hs.fmt_ms(att.per_step(stats.exposed_us))} per step ran while no kernel ran ({', '.join(parts)}): "
            f"{hs.fmt_pct(impact)} of the {hs.fmt_ms(win.median_step_us)} step."
        )
        if blocking:
            msg += f" {blocking} copies were blocking (the host waited for them: {att.per_step(blocking):.1f} per step)."
        where = "; ".join(f"{loc.label()} `{loc.code}`" for loc in locations if loc.file)[:400]
        rec = (
            "Overlap the copies with compute: "
            + ("pin the source (DataLoader pin_memory=True) and " if pageable else "")
            + "copy with `.to(device, non_blocking=True)`"
            + (f" at {where}" if where else "")
            + "; issue the next batch's copy before the current step's compute (a prefetcher on a side "
            "CUDA stream), or move preprocessing to the GPU so less data crosses PCIe. "
            f"Expected gain: up to {hs.fmt_ms(att.per_step(stats.exposed_us))} per step ({hs.fmt_pct(impact)})."
        )
        yield self.finding(
            impact=impact,
            title=f"Host<->device copies on the critical path: {hs.fmt_pct(impact)} of step time",
            message=msg,
            evidence={
                "copies": len(c),
                "bytes_per_step": stats.bytes / win.count,
                "copy_ms_per_step": stats.total_us / win.count / 1000,
                "exposed_ms_per_step": stats.exposed_us / win.count / 1000,
                "exposed_ms_per_step_by_direction": {d: us / win.count / 1000 for d, us in by_dir.items()},
                "blocking_copies": blocking,
                "pageable_source": pageable,
                "step_time_ms": win.median_step_us / 1000,
            },
            recommendation=rec,
            locations=locations,
            impact_explanation="Copy time (copies >= min_copy_bytes) not overlapped by any kernel, divided by the total step time.",
        )
