from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold

SYNC_CALLS = ("torch.cuda.synchronize",)


class ExplicitSynchronize(Rule):
    """`torch.cuda.synchronize()` (or a stream/event synchronize) inside the training loop drains the GPU queue.

    Why it matters
    --------------
    `torch.cuda.synchronize()` blocks the host until every queued kernel has finished. Inside the
    loop it throws away the host's head start: the GPU runs out of work, then idles while Python
    launches the next kernels. It is usually left over from timing code or debugging, and PyTorch
    never needs it for correctness within one stream.

    How it is detected
    ------------------
    `cudaDeviceSynchronize`, `cudaEventSynchronize`, or a `cudaStreamSynchronize` that no tensor read,
    copy or data-dependent op issued, inside the analyzed steps. The GPU idle gaps that such a call
    overlaps, and that began while the host was already waiting, are charged to it (minus DataLoader
    time in the gap). Impact = that idle time / step time. Call sites come from callsites.json
    (`torch.cuda.synchronize`). Quiet when the calls are rarer than `min_calls_per_step` or cost
    less than `min_impact`.

    How to fix
    ----------
    Remove the call from the loop; time with CUDA events and read them once. Before::

        for x, y in loader:
            t0 = time.time()
            step(x, y)
            torch.cuda.synchronize()
            times.append(time.time() - t0)

    After::

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for x, y in loader:
            step(x, y)
        end.record()
        torch.cuda.synchronize()          # once, after the loop
        print(start.elapsed_time(end) / n_steps, "ms/step")
    """

    id = "GA202"
    name = "explicit-synchronize"
    category = Category.HOST_SYNC
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_impact": Threshold(
            0.02,
            "report only when the idle time the syncs cause is at least this share of step time",
            "fraction",
        ),
        "min_calls_per_step": Threshold(
            0.2, "report only when syncs happen at least this often (0.2 = once every 5 steps)", "calls/step"
        ),
    }
    references = ("https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        att = hs.attribute_idle(ctx)
        win = att.window
        if win.count == 0:
            return
        calls = att.calls_by_kind["explicit"]
        per_step = att.per_step(calls)
        idle_us = att.by_kind_us["explicit"]
        impact = att.share(idle_us)
        if per_step < ctx.threshold("min_calls_per_step") or impact < ctx.threshold("min_impact"):
            return
        sites = hs.callsites(ctx, "host_sync", SYNC_CALLS)
        locations = [
            hs.site_location(s, "call", "per_step")
            for s in sites
        ] or [Location(op="cudaDeviceSynchronize", detail={"per_step": round(per_step, 2)})]
        where = (
            "; ".join(f"{loc.label()} `{loc.code}`" if loc.code else loc.label() for loc in locations[:3])
            if sites
            else "call sites not captured: search the loop for torch.cuda.synchronize(), "
            "stream.synchronize() and event.synchronize()"
        )
        blocked = att.blocked_by_kind_us["explicit"]
        yield self.finding(
            impact=impact,
            title=f"{per_step:.1f} explicit synchronize calls per step leave the GPU idle {hs.fmt_pct(impact)} of the step",
            message=(
                f"{calls} synchronize calls in {win.count} analyzed steps ({per_step:.1f} per step). The host "
                f"blocked {hs.fmt_ms(att.per_step(blocked))} per step in them and the GPU then idled "
                f"{hs.fmt_ms(att.per_step(idle_us))} per step until new work arrived: {hs.fmt_pct(impact)} of "
                f"the {hs.fmt_ms(win.median_step_us)} step."
            ),
            evidence={
                "calls": calls,
                "calls_per_step": per_step,
                "steps_analyzed": win.count,
                "host_blocked_ms_per_step": att.per_step(blocked) / 1000,
                "gpu_idle_after_sync_ms_per_step": att.per_step(idle_us) / 1000,
                "step_time_ms": win.median_step_us / 1000,
            },
            recommendation=(
                f"Remove the synchronize calls from the training loop ({where}). For timing, record "
                "`torch.cuda.Event(enable_timing=True)` pairs and read `elapsed_time` after the loop; "
                "keep one `torch.cuda.synchronize()` before stopping a wall-clock timer at the end. "
                f"Expected gain: up to {hs.fmt_ms(att.per_step(idle_us))} per step ({hs.fmt_pct(impact)})."
            ),
            locations=locations,
            impact_explanation=(
                "GPU idle time in the analyzed steps that followed an explicit synchronize (the queue drained "
                "while the host waited), divided by the total step time."
            ),
        )
