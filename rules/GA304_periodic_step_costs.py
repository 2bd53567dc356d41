from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel import periodic as pc
from gpuadvisor.stepmodel.saves import background_save, kept_per_step_ms
from gpuadvisor.words import change

# cause -> (remedy id or None, what to change)
_REMEDIES: Mapping[str, tuple[RemedyId | None, str]] = {
    pc.EVALUATION: (
        RemedyId.EVALUATE_LESS_OFTEN,
        "Evaluate less often (a larger evaluation interval) or on fewer batches (e.g. nanoGPT's eval_interval / "
        "eval_iters), or run the evaluation asynchronously on a copy of the weights.",
    ),
    pc.CHECKPOINT: (
        RemedyId.ASYNC_CHECKPOINT,
        "Save checkpoints less often, or in the background: copy the state to CPU and write it from another "
        "thread (torch.distributed.checkpoint.async_save, or a thread that calls torch.save on a CPU copy).",
    ),
    pc.GC: (
        None,
        "Freeze the long-lived objects after set-up (`gc.freeze()` once the model and data are built) or collect "
        "at a point of your choosing (`gc.disable()` in the loop, `gc.collect()` every N steps); the gain is "
        "not modeled.",
    ),
    pc.UNKNOWN: (
        None,
        "Find what the script does every N steps (evaluation, checkpoint saving, logging that reads GPU "
        "tensors, a learning-rate schedule that rebuilds state) and make it cheaper or rarer; re-record with "
        "this gpuadvisor to have the cause named. The gain is not modeled.",
    ),
}


class PeriodicStepCosts(Rule):
    """The training loop stops every N steps for evaluation, checkpoint saving or other work.

    Why it matters
    --------------
    An evaluation pass, a `torch.save` of the model and optimizer, or a full garbage-collector pass that
    comes every N steps blocks the training loop for far longer than a step. A window of 10 steps
    rarely holds one and its median never shows it, yet over the run it can cost more than any
    per-step problem: 2 x 200 forward passes every 250 steps, a multi-gigabyte checkpoint every 100.

    How it is detected
    ------------------
    From the run as the capture timed it step by step (docs/capture.md, "Costs between steps"): the
    evaluation passes (model calls under `no_grad` / `inference_mode` / `model.eval()` while the script
    trains), each `torch.save`, and full garbage-collector passes, with their measured duration
    (`manifest.capture.step_events`); in runs recorded before those were, periodic slow steps of
    unrecorded cause. Impact: the cost's time spread over its period, against the run's mean step
    (the typical step plus every cost between steps, amortized). Reported only when it came at least twice in the observed steps
    (its period observed) and costs at least `min_impact`; an evaluation seen once (nanoGPT's at
    iteration 0) is shown in the run summary with its cost, not as a finding. A checkpoint seen once,
    in the step of an evaluation whose period is known, takes that period (scripts save after
    evaluating: nanoGPT saves 1.5 GB after each evaluation, 2.4 s every 50 steps). Causes without a
    modeled remedy (garbage collection, unknown) are reported with the measured share, "gain not
    modeled".

    A checkpoint's remedy, a save in the background, is priced as what it still costs the loop
    (gpuadvisor.stepmodel.saves): the copy of the saved GPU tensors (recorded by the capture; else the
    file's size, an upper bound) to pinned memory at the pinned copy rate stays on the step, the rest
    of the save runs while the next steps do, and a write longer than the steps until the next save
    makes that save wait. The finding's impact is that gain; not saving at all is quoted beside it.

    How to fix
    ----------
    Evaluate less often or on fewer batches; save checkpoints less often or asynchronously. Before::

        if step % 50 == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, "ckpt.pt")

    After::

        import torch.distributed.checkpoint as dcp
        if step % 500 == 0:
            pending = dcp.async_save({"model": model.state_dict(), "opt": opt.state_dict()},
                                     checkpoint_id="ckpt")
    """

    id = "GA304"
    name = "periodic-step-costs"
    category = Category.PERIODIC_COST
    requires = frozenset({Requirement.STEPS})  # and a run directory's timed steps (none: no finding)
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_impact": Threshold(
            0.03,
            "report a cost between steps when it takes at least this share of the observed run (3%)",
            "fraction",
        ),
    }
    references = ("https://pytorch.org/docs/stable/distributed.checkpoint.html#torch.distributed.checkpoint.async_save",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        timing = ctx.model.run_timing
        if timing is None:
            return
        for cost in timing.costs:
            # twice seen, or dated by a first occurrence before the first step (start-up, not priced: an
            # evaluation at iteration 0 and one at step 50 are every 50 steps)
            dated = cost.period_source == "observed" and bool(cost.detail.get("before_first_step_ms"))
            # a checkpoint saved in an evaluation's step comes with the evaluations (their period)
            with_eval = cost.period_source == "with_evaluation"
            if cost.cause not in _REMEDIES or (cost.count < 2 and not (dated or with_eval)) or cost.period_steps is None:
                continue
            if cost.share < ctx.threshold("min_impact"):
                continue
            remedy, fix = _REMEDIES[cost.cause]
            d = cost.detail
            steps = ", ".join("before the first step" if s is None else str(s) for s in cost.steps[:6])
            if cost.count > 6:
                steps += f" and {cost.count - 6} more"
            what = {
                pc.EVALUATION: (
                    f"An evaluation pass ({d.get('forward_calls_each')} model calls without gradients) takes "
                    f"{cm.ms(cost.each_ms * 1000)}"
                ),
                pc.CHECKPOINT: (
                    f"torch.save takes {cm.ms(cost.each_ms * 1000)}"
                    + (f" for {d['bytes_each'] / 1e6:.1f} MB" if isinstance(d.get("bytes_each"), int) else "")
                ),
                pc.GC: f"A full garbage-collector pass takes {cm.ms(cost.each_ms * 1000)}",
                pc.UNKNOWN: f"A slow step costs {cm.ms(cost.each_ms * 1000)} more than the typical step",
            }[cost.cause]
            if dated:
                steps += (
                    f"; the one before the first step ({cm.ms(float(cost.detail['before_first_step_ms']) * 1000)}) "
                    "is start-up, not counted here"
                )
            if with_eval:
                steps += ", each after an evaluation: the saves come with the evaluations, seen once in the run"
            message = (
                f"{what}, every {cost.period_steps} steps (at steps {steps}). Over the {timing.steps_observed} "
                f"steps the capture timed (typical step {cm.ms(timing.typical_step_ms * 1000)}) that is "
                f"{cm.pct(cost.share)} of the run."
            )
            for note in timing.window_notes:
                if pc.CAUSE_EVENTS[cost.cause] in note:
                    message += f" Note: {note}."
            loc = cm.location_of(d) if cost.cause == pc.CHECKPOINT else None
            locations: list[Location] = [loc] if loc is not None else []
            evidence = {
                "cause": cost.cause,
                "each_ms": round(cost.each_ms, 3),
                "occurrences": cost.count,
                "steps": cost.steps,
                "period_steps": cost.period_steps,
                "share_of_run": round(cost.share, 4),
                "steps_observed": timing.steps_observed,
                "typical_step_ms": round(timing.typical_step_ms, 3),
                "measured_by": cost.measured_by,
                **{k: v for k, v in d.items() if k in ("forward_calls_each", "bytes_each")},
            }
            if remedy is None:
                yield self.finding(
                    impact=cost.share,
                    title=f"{pc.CAUSE_LABELS[cost.cause].capitalize()}: {cm.pct(cost.share)} of the run (gain not modeled)",
                    message=message + " No modeled remedy removes it: the share is what it costs now.",
                    evidence={**evidence, "gain_modeled": False},
                    recommendation=fix,
                    locations=locations,
                    impact_explanation="The measured share of the run; the gain of a remedy is not modeled.",
                )
                continue
            removal = ctx.model.predict_without(cost, remedy.value)
            price = background_save(ctx.model, cost) if cost.period_steps else None
            if price is None:
                pred = removal
                message += (
                    f" Without it: {change(pred.baseline_step_ms, pred.predicted_step_ms, 'ms')} per {cm.step_base(pred).value} "
                    f"({cm.times(pred.speedup)}); doing it half as often recovers half of that."
                )
                explanation = (
                    f"The measured {pc.CAUSE_LABELS[cost.cause]} time ({cm.ms(cost.each_ms * 1000)} every "
                    f"{cost.period_steps} steps) against the run's mean step ({pred.baseline_step_ms:.2f} ms, from the "
                    f"{timing.steps_observed} timed steps): what not doing it at all recovers (an upper bound)."
                )
                rec = fix + f" Removing it entirely gains {cm.pct(pred.recovered_fraction)} of the run."
            else:
                pred = ctx.model.predict_without(
                    cost, remedy.value, kept_per_step_ms=kept_per_step_ms(ctx.model, cost)
                )
                what_bytes = "its GPU tensors" if price.bytes_basis == "gpu_tensors" else "the saved file's size"
                message += (
                    f" Saved in the background, the copy to pinned memory stays on the step: {price.bytes_copied / 1e9:.2f} GB "
                    f"({what_bytes}) at {price.pinned_gbps:.0f} GB/s ({price.pinned_gbps_source}), about "
                    f"{cm.ms(price.copy_ms * 1000)} per save; the rest (pickling and writing, at most "
                    f"{cm.ms(price.write_ms * 1000)}) runs during the {cost.period_steps} steps until the next save "
                    f"({cm.ms(price.window_ms * 1000)})"
                    + (
                        f", {cm.ms(price.wait_ms * 1000)} too long: the next save waits for it"
                        if price.wait_ms > 0
                        else ""
                    )
                    + f". That makes {change(pred.baseline_step_ms, pred.predicted_step_ms, 'ms')} per {cm.step_base(pred).value} "
                    f"({cm.times(pred.speedup)}); not saving at all: {change(removal.baseline_step_ms, removal.predicted_step_ms, 'ms')} "
                    f"({cm.times(removal.speedup)}). The background write's use of the CPU is not modeled."
                )
                explanation = (
                    f"The measured save ({cm.ms(cost.each_ms * 1000)} every {cost.period_steps} steps) against the run's "
                    f"mean step ({pred.baseline_step_ms:.2f} ms, from the {timing.steps_observed} timed steps), with what "
                    "an asynchronous save still costs the loop: the copy to pinned memory, and the wait for a write "
                    "longer than the steps between saves."
                )
                rec = (
                    fix + f" In the background it gains {cm.pct(pred.recovered_fraction)} of the run; not saving at all "
                    f"{cm.pct(removal.recovered_fraction)}."
                )
                evidence["async_save"] = price.to_dict()
            yield self.finding(
                impact=pred.recovered_fraction,
                title=f"{pc.CAUSE_LABELS[cost.cause].capitalize()} every {cost.period_steps} steps: {cm.pct(cost.share)} of the run",
                message=message,
                evidence={**evidence, "gain_modeled": True},
                recommendation=rec,
                locations=locations,
                impact_explanation=explanation,
                remedy=remedy,
                prediction=pred,
            )
