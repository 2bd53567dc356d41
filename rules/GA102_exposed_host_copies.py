from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rulekit import transfers as tr
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel import build as sb
from gpuadvisor.words import of_base


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
    steps; the part of their time not overlapped by any kernel is "exposed", and copies the host
    waited for are counted from the step model's waits. Impact: the step time recovered in a replay
    of the analyzed steps in which the host-to-device copies come from pinned memory, do not block
    the host, and run on a side stream one step ahead (no compute waits for them; the copy engine
    still moves every byte each step, so copies longer than the compute keep the step at their
    length). Tiny copies belong to GA201 (scalar reads). GA101 and GA103 act on the same copies: the
    findings share a group and a combined prediction.

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
        model = ctx.model
        win = model.window
        copies = tr.window_copies(model, ctx.threshold("min_copy_bytes"))
        if win.count == 0 or len(copies) == 0:
            return
        stats = tr.copy_stats(model, copies)
        if stats.exposed_us <= 0:
            return
        pred = ctx.predict(RemedyId.PREFETCH_COPIES, min_bytes=ctx.threshold("min_copy_bytes"))
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            return
        group = tr.group_prediction(ctx)
        blocking = cm.wait_stats(ctx, sb.BLOCKING_COPY)
        sites = [
            s for s in hs.callsites(ctx, "host_to_device") if not s.get("non_blocking") or not s.get("pinned")
        ]
        locations = [hs.site_location(s, "pinned", "non_blocking", "per_step") for s in sites] or [
            Location(op=str(n)) for n in sorted(set(copies["name"].astype(str)))
        ]
        pageable = bool((copies["src_kind"].astype(str) == "Pageable").any())
        parts = [f"{d} {cm.ms(win.per_step(us))}" for d, us in sorted(stats.by_direction_exposed_us.items())]
        msg = (
            f"{stats.count} copies of {stats.bytes / stats.count / 2**20:.1f} MiB on average in {win.count} "
            f"analyzed steps; {cm.ms(win.per_step(stats.exposed_us))} per step ran while no kernel ran "
            f"({', '.join(parts)}): {cm.of_profiled_step(win.share(stats.exposed_us), win.median_step_us)}."
        )
        if blocking.count and impact > 2 * win.share(stats.exposed_us):
            # the predicted gain is not the exposed copy time: the replay also drops the host's waits
            msg += (
                f" The predicted gain below is larger: it is a share {of_base(cm.step_base(pred))}, and the "
                "replay also takes out the host's waits for the blocking copies, not only the copy time."
            )
        if blocking.count:
            msg += f" {blocking.count} copies were blocking (the host waited for them: {blocking.per_step:.1f} per step)."
        msg += " " + cm.prediction_sentence(
            pred, "the input copies pinned, asynchronous and issued a step ahead"
        )
        msg += tr.group_sentence(group) + cm.note_uncorrected(pred)
        where = "; ".join(f"{loc.label()} `{loc.code}`" for loc in locations if loc.file)[:400]
        rec = (
            "Overlap the copies with compute: "
            + ("pin the source (DataLoader pin_memory=True) and " if pageable else "")
            + "copy with `.to(device, non_blocking=True)`"
            + (f" at {where}" if where else "")
            + "; issue the next batch's copy before the current step's compute (a prefetcher on a side "
            "CUDA stream), or move preprocessing to the GPU so less data crosses PCIe. "
            + cm.gain(pred, impact)
        )
        yield self.finding(
            impact=impact,
            title=f"Host<->device copies on the critical path: overlapping them saves {cm.saves(pred, impact)}",
            message=msg,
            evidence={
                "copies": stats.count,
                "bytes_per_step": stats.bytes / win.count,
                "copy_ms_per_step": win.per_step(stats.total_us) / 1000,
                "exposed_ms_per_step": win.per_step(stats.exposed_us) / 1000,
                "exposed_fraction": win.share(stats.exposed_us),
                "exposed_ms_per_step_by_direction": {
                    d: win.per_step(us) / 1000 for d, us in stats.by_direction_exposed_us.items()
                },
                "blocking_copies": blocking.count,
                "pageable_source": pageable,
                "step_time_ms": pred.baseline_step_ms,
                "predicted_step_time_ms": pred.predicted_step_ms,
            },
            recommendation=rec,
            locations=locations,
            impact_explanation=cm.impact_explanation(
                pred, "the input copies pinned, asynchronous and prefetched on a side stream"
            ),
            remedy=RemedyId.PREFETCH_COPIES,
            prediction=tr.with_group(pred, group),
            group=tr.GROUP,
        )
