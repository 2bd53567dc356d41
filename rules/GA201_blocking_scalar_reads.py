from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel import build as sb
from gpuadvisor.words import plural

SCALAR_CALLS = (
    "Tensor.item",
    "Tensor.cpu",
    "Tensor.tolist",
    "Tensor.numpy",
    "Tensor.__repr__",
    "Tensor.__format__",
    "Tensor.__bool__",
)


class BlockingScalarReads(Rule):
    """The training loop reads GPU values on the host (`.item()`, `.cpu()`, `.tolist()`, printing) every step.

    Why it matters
    --------------
    CUDA work is queued: the host runs ahead of the GPU and keeps its queue full. Reading a value
    computed on the GPU (`loss.item()`, `acc.cpu()`, `print(loss)`, `if (x > 0).any():`) makes the
    host wait until the GPU has finished everything queued so far. The queue then runs empty, and the
    GPU stays idle while the host gets back to enqueueing the next step's work. One such read per
    step turns every step into "GPU works, then waits for Python".

    How it is detected
    ------------------
    In the step model: host waits on the device classified as scalar reads (`aten::_local_scalar_dense`
    / `aten::item` holding a device-to-host copy and `cudaStreamSynchronize`, or a blocking
    device-to-host copy). The GPU idle time they cause is attributed to them (an idle gap that began
    while the host was waiting, or a read loop's span). Impact: the step time recovered in a replay of
    the analyzed steps without these reads (their waits and their own host cost removed; the rest of
    the host work kept): a read that waits for work queued anyway costs nothing. The call sites come
    from callsites.json when the run recorded them. Quiet when reads are rare (fewer than
    `min_reads_per_step`) or the replay recovers less than `min_impact`.

    How to fix
    ----------
    Keep values on the GPU and read them rarely: accumulate detached tensors and read once per
    logging interval. Before::

        for x, y in loader:
            loss = loss_fn(model(x), y)
            ...
            total += loss.item()          # waits for the GPU every step

    After::

        total = torch.zeros((), device="cuda")
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            ...
            total += loss.detach()        # stays on the GPU, no wait
            if i % 100 == 0:
                print(total.item() / (i + 1))   # one wait per 100 steps
    """

    id = "GA201"
    name = "blocking-scalar-reads"
    category = Category.HOST_SYNC
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_impact": Threshold(
            0.02,
            "report only when the GPU idle time caused by the reads is at least this share of step time "
            "(below 2% the effect is within step-to-step noise)",
            "fraction",
        ),
        "min_reads_per_step": Threshold(
            0.2,
            "report only when blocking reads happen at least this often (0.2 = once every 5 steps); rarer "
            "reads are the recommended pattern (read every N steps)",
            "reads/step",
        ),
    }
    references = (
        "https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution",
        "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        win = model.window
        if win.count == 0:
            return
        waits = model.waits(sb.SCALAR_READ)
        reads = len(waits)
        per_step = win.per_step(reads)
        if per_step < ctx.threshold("min_reads_per_step"):
            return
        pred = ctx.predict(RemedyId.REMOVE_HOST_SYNCS, kinds=(sb.SCALAR_READ,))
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            return
        idle_us = model.idle_us(sb.IDLE_SYNC, sb.SCALAR_READ)
        blocked_us = float((waits["end"] - waits["ts"]).sum()) if reads else 0.0
        inference = cm.is_inference(ctx)
        sites = hs.callsites(ctx, "host_sync", SCALAR_CALLS)
        locations = [
            hs.site_location(s, "call", "per_step", "count")
            for s in sites
            if float(s.get("per_step") or 0) >= ctx.threshold("min_reads_per_step")
        ]
        if not locations:
            locations = [Location(op="aten::_local_scalar_dense", detail={"per_step": round(per_step, 2)})]
        where = (
            "; ".join(f"{loc.label()} `{loc.code}`" if loc.code else loc.label() for loc in locations[:3])
            if sites
            else "call sites not captured (raw trace): look for .item(), .cpu(), .tolist(), .numpy(), "
            "print(tensor) and `if tensor:` in the loop"
        )
        message = (
            f"{plural(round(per_step, 1), 'blocking read')} of device values per step ({reads} in "
            f"{plural(win.count, 'analyzed step')}). The host waited {cm.ms(win.per_step(blocked_us))} per step "
            f"in them, and the GPU sat idle {cm.ms(win.per_step(idle_us))} per step behind them "
            f"({cm.of_profiled_step(win.share(idle_us), win.median_step_us)}). "
            + cm.prediction_sentence(pred, "the reads taken out of the step")
            + cm.note_uncorrected(pred)
        )
        if inference:
            recommendation = (
                f"Stop copying results to the host batch by batch ({where}): keep predictions and scores "
                "on the GPU (append the tensors to a list, `torch.cat` them) and copy them back once, at "
                "the end or every N batches, with one `.cpu()`/`.tolist()`; compute metrics such as "
                "accuracy with tensor ops on the GPU. "
            )
        else:
            recommendation = (
                f"Stop reading GPU values every step ({where}). Accumulate on the GPU "
                "(`total += loss.detach()`) and call `.item()` once every N steps or at the end of the "
                "epoch; log with `loss.detach()` kept in a list and `torch.stack(...).tolist()` later; "
                "replace `if tensor:` checks with tensor ops (`torch.where`). "
            )
        recommendation += cm.gain(pred, impact)
        yield self.finding(
            impact=impact,
            title=(
                f"{plural(round(per_step, 1), 'blocking .item()/.cpu() read')} per step: removing them saves "
                f"{cm.saves(pred, impact)}"
            ),
            message=message,
            evidence={
                "reads_per_step": per_step,
                "reads": reads,
                "steps_analyzed": win.count,
                "host_blocked_ms_per_step": win.per_step(blocked_us) / 1000,
                "gpu_idle_after_reads_ms_per_step": win.per_step(idle_us) / 1000,
                "gpu_idle_after_reads_fraction": win.share(idle_us),
                "step_time_ms": pred.baseline_step_ms,
                "predicted_step_time_ms": pred.predicted_step_ms,
                "inference": inference,
                "callsites": [
                    {
                        "file": s.get("file"),
                        "line": s.get("line"),
                        "call": s.get("call"),
                        "per_step": s.get("per_step"),
                    }
                    for s in sites
                ],
            },
            recommendation=recommendation,
            locations=locations,
            impact_explanation=cm.impact_explanation(pred, "the scalar reads removed"),
            remedy=RemedyId.REMOVE_HOST_SYNCS,
            prediction=pred,
            group="host_sync",
        )
