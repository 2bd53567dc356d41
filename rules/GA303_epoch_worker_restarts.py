from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel import periodic as pc
from gpuadvisor.words import change


class EpochWorkerRestarts(Rule):
    """The DataLoader's workers are started and stopped at every epoch (`persistent_workers=False`).

    Why it matters
    --------------
    Without `persistent_workers=True` (the default is False) every `for batch in loader` creates a new
    iterator: the worker processes are started again (fork or spawn, a copy of the dataset, the
    workers' own set-up) and the first batch of the epoch waits for them; at the end of the epoch they
    are shut down. With a short epoch (a small fine-tuning set, a validation set) that start-up recurs
    every few steps. It never shows in the median of a 10-step window: it sits in one slow step per
    epoch, outside or at the edge of the analyzed steps.

    How it is detected
    ------------------
    From the run as the capture timed it step by step (docs/capture.md, "Costs between steps"): each
    epoch's start until its first new worker was ready (the workers note it) and the previous epoch's
    end, as recorded by the capture (`manifest.capture.step_events`); the first batch made after that
    is not counted (persistent workers make it too). In runs recorded before those records, the
    periodic slow steps whose spacing is the loader's batches per epoch, scaled by the share of a
    restart step that the trace shows in the previous epoch's end and the new iterator's creation
    (the window holds one), else first batch included (an upper bound). Impact: a restart's measured time spread
    over its period, against the run's mean step (the typical step plus every cost between steps,
    amortized): what keeping the workers alive recovers (the first batch of an epoch still waits for
    one batch then: an upper bound). When only one restart was seen, the period is the loader's
    batches per epoch (`len(dataset) / batch_size`).

    How to fix
    ----------
    Before::

        loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=8)

    After::

        loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=8, persistent_workers=True)
    """

    id = "GA303"
    name = "epoch-worker-restarts"
    category = Category.DATA_LOADING
    requires = frozenset({Requirement.STEPS, Requirement.SETTINGS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_impact": Threshold(
            0.03,
            "report when the restarts cost at least this share of the observed run (3%)",
            "fraction",
        ),
    }
    references = (
        "https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader",
        "https://pytorch.org/docs/stable/data.html#multi-process-data-loading",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        timing = ctx.model.run_timing
        cost = timing.cost(pc.EPOCH_RESTART) if timing is not None else None
        if timing is None or cost is None or cost.share < ctx.threshold("min_impact"):
            return
        pred = ctx.model.predict_without(cost, RemedyId.PERSISTENT_WORKERS.value, {"persistent_workers": True})
        impact = pred.recovered_fraction
        d = cost.detail
        loc = cm.location_of(d, num_workers=d.get("num_workers"), persistent_workers=d.get("persistent_workers"))
        locations: list[Location] = [loc] if loc is not None else [Location(function="DataLoader.__iter__")]
        fw = cm.framework(ctx)
        steps = [s for s in cost.steps if s is not None]
        where = f"at steps {_steps(steps)}" if steps else ""
        if cost.period_source == "observed":
            period = f"every {cost.period_steps} steps (seen {cost.count} times {where})"
        else:
            period = (
                f"seen once {where}; every {cost.period_steps} steps by the loader's batches per epoch (its period "
                "was not observed)"
            )
        if cost.measured_by != "step_events" and isinstance(d.get("removable_share"), (int, float)):
            measured = (
                "the excess of the slow steps over the typical step (the run predates the capture's epoch "
                f"records); the recorded restart step spent {cm.pct(float(d['removable_share']))} of it in the "
                "previous epoch's end and the new iterator's creation, which persistent workers remove, the rest "
                "making the first batch, which they make too"
            )
        elif cost.measured_by != "step_events":
            measured = (
                "the excess of the slow steps over the typical step (the run predates the capture's epoch "
                "records: the first batch of each epoch, which persistent workers make too, is included, so the "
                "gain is an upper bound)"
            )
        elif d.get("worker_start_measured"):
            after = d.get("first_batch_after_start_ms")
            measured = (
                "each epoch's end and its start until the workers were started (the iterator's creation, or the first "
                "new worker ready when later), as recorded"
                + (
                    f" (the first batch then took {after:.1f} ms more to make: persistent workers make it too)"
                    if isinstance(after, (int, float))
                    else ""
                )
            )
        else:
            measured = (
                "each epoch's end, iterator creation and first batch, as recorded (the first batch's making, "
                "which persistent workers pay too, is included: an upper bound)"
            )
        message = (
            f"The DataLoader runs {d.get('num_workers')} workers with persistent_workers=False: they are started "
            f"again at every epoch and stopped at its end. That costs {cm.ms(cost.each_ms * 1000)} per epoch, "
            f"{period}; measured from {measured}. Over the {timing.steps_observed} steps the capture timed "
            f"(typical step {cm.ms(timing.typical_step_ms * 1000)}), the restarts take {cm.pct(cost.share)} of "
            f"the run. Keeping the workers alive: {change(pred.baseline_step_ms, pred.predicted_step_ms, 'ms')} "
            f"per {cm.step_base(pred).value} ({cm.times(pred.speedup)})."
        )
        for note in timing.window_notes:
            if pc.CAUSE_EVENTS[pc.EPOCH_RESTART] in note:
                message += f" Note: {note}."
        if fw.is_hf:
            rec = "Set dataloader_persistent_workers=True in your TrainingArguments"
            if fw.call_site is not None:
                rec += f" ({fw.call_site.label()})"
                locations.insert(0, fw.call_site)
            rec += "."
        else:
            rec = (
                f"Pass persistent_workers=True to the DataLoader{' at ' + loc.label() if loc is not None else ''}"
                " (workers then stay alive between epochs; with a Dataset that changes per epoch, set its state "
                "through a sampler or `worker_init_fn` rather than by re-creating the workers)."
            )
        rec += f" Predicted gain: {cm.pct(impact)} of the run ({cm.times(pred.speedup)})."
        yield self.finding(
            impact=impact,
            title=(
                f"DataLoader workers restart every epoch: {cm.pct(cost.share)} of the run, {cm.pct(impact)} "
                "recovered by persistent workers"
            ),
            message=message,
            evidence={
                "restart_ms_each": round(cost.each_ms, 3),
                "restarts_observed": cost.count,
                "restart_steps": cost.steps,
                "period_steps": cost.period_steps,
                "period_source": cost.period_source,
                "measured_by": cost.measured_by,
                "share_of_run": round(cost.share, 4),
                "removable_fraction": round(cost.removable_fraction, 4),
                "first_batch_after_start_ms": d.get("first_batch_after_start_ms"),
                "steps_observed": timing.steps_observed,
                "typical_step_ms": round(timing.typical_step_ms, 3),
                "mean_step_ms": round(timing.mean_step_ms, 3),
                "num_workers": d.get("num_workers"),
                "batches_per_epoch": d.get("batches_per_epoch"),
                "window_notes": list(timing.window_notes),
            },
            recommendation=rec,
            locations=locations,
            impact_explanation=(
                f"A restart's measured time ({cm.ms(cost.each_ms * 1000)}) every {cost.period_steps} steps against "
                f"the run's mean step ({pred.baseline_step_ms:.2f} ms: the typical step of the {timing.steps_observed} "
                "timed steps plus every cost between steps, amortized): what persistent workers recover, at most."
            ),
            remedy=RemedyId.PERSISTENT_WORKERS,
            prediction=pred,
        )


def _steps(steps: list[int]) -> str:
    shown = ", ".join(str(s) for s in steps[:6])
    return shown + (f" and {len(steps) - 6} more" if len(steps) > 6 else "")
