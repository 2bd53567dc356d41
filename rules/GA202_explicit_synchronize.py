from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel import build as sb
from gpuadvisor.words import plural

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
    In the step model: host waits on the device that no tensor read, copy or data-dependent op
    issued (`cudaDeviceSynchronize`, `cudaEventSynchronize`, a bare `cudaStreamSynchronize`), inside
    the analyzed steps; the GPU idle time behind them is attributed to them. Impact: the step time
    recovered in a replay of the analyzed steps without these waits (a wait for work the host would
    wait for anyway costs nothing). Call sites come from callsites.json (`torch.cuda.synchronize`).
    Quiet when the calls are rarer than `min_calls_per_step` or the replay recovers less than
    `min_impact`.

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
        win = ctx.model.window
        if win.count == 0:
            return
        st = cm.wait_stats(ctx, sb.EXPLICIT)
        if st.per_step < ctx.threshold("min_calls_per_step"):
            return
        pred = ctx.predict(RemedyId.REMOVE_HOST_SYNCS, kinds=(sb.EXPLICIT,))
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            return
        sites = hs.callsites(ctx, "host_sync", SYNC_CALLS)
        locations = [hs.site_location(s, "call", "per_step") for s in sites] or [
            Location(op="cudaDeviceSynchronize", detail={"per_step": round(st.per_step, 2)})
        ]
        where = (
            "; ".join(f"{loc.label()} `{loc.code}`" if loc.code else loc.label() for loc in locations[:3])
            if sites
            else "call sites not captured: search the loop for torch.cuda.synchronize(), "
            "stream.synchronize() and event.synchronize()"
        )
        yield self.finding(
            impact=impact,
            title=(
                f"{plural(round(st.per_step, 1), 'explicit synchronize call')} per step: removing them saves "
                f"{cm.saves(pred, impact)}"
            ),
            message=(
                f"{plural(st.count, 'synchronize call')} in {plural(win.count, 'analyzed step')} "
                f"({cm.count(st.per_step)} per step). The host blocked {cm.ms(st.blocked_us_per_step)} per step in "
                f"them and the GPU idled {cm.ms(st.idle_us_per_step)} per step behind them "
                f"({cm.of_profiled_step(st.idle_fraction, win.median_step_us)}). "
                + cm.prediction_sentence(pred, "the synchronizes removed")
                + cm.note_uncorrected(pred)
            ),
            evidence={
                "calls": st.count,
                "calls_per_step": st.per_step,
                "steps_analyzed": win.count,
                "host_blocked_ms_per_step": st.blocked_us_per_step / 1000,
                "gpu_idle_after_sync_ms_per_step": st.idle_us_per_step / 1000,
                "step_time_ms": pred.baseline_step_ms,
                "predicted_step_time_ms": pred.predicted_step_ms,
            },
            recommendation=(
                f"Remove the synchronize calls from the loop ({where}). For timing, record "
                "`torch.cuda.Event(enable_timing=True)` pairs and read `elapsed_time` after the loop; "
                "keep one `torch.cuda.synchronize()` before stopping a wall-clock timer at the end. "
                + cm.gain(pred, impact)
            ),
            locations=locations,
            impact_explanation=cm.impact_explanation(pred, "the explicit synchronizes removed"),
            remedy=RemedyId.REMOVE_HOST_SYNCS,
            prediction=pred,
            group="host_sync",
        )
