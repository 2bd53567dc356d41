from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold

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
    In the trace: `aten::_local_scalar_dense` (`.item()`) or a device-to-host copy followed by
    `cudaStreamSynchronize`. Each GPU idle gap of the analyzed steps that such a blocking call
    overlaps, and that began while the host was already waiting, is charged to it (minus any time the
    host spent in the DataLoader during that gap). Impact = that idle time / step time: the cost is
    the bubble after the wait, not the wait itself (a wait for work that is queued anyway costs
    nothing extra). The call sites come from callsites.json when the run recorded them. Quiet when
    reads are rare (fewer than `min_reads_per_step`) or the bubbles cost less than `min_impact`.

    How to fix
    ----------
    Keep values on the GPU and read them rarely: accumulate detached tensors and read once per
    logging interval. Before::

        for x, y in loader:
            loss = model(x).loss_fn(y)
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
        att = hs.attribute_idle(ctx)
        win = att.window
        if win.count == 0:
            return
        reads = att.calls_by_kind["scalar_read"]
        per_step = att.per_step(reads)
        idle_us = att.by_kind_us["scalar_read"]
        impact = att.share(idle_us)
        if per_step < ctx.threshold("min_reads_per_step") or impact < ctx.threshold("min_impact"):
            return
        sites = hs.callsites(ctx, "host_sync", SCALAR_CALLS)
        locations = [
            hs.site_location(s, "call", "per_step", "count")
            for s in sites
            if float(s.get("per_step") or 0) >= ctx.threshold("min_reads_per_step")
        ]
        if not locations:
            locations = [Location(op="aten::_local_scalar_dense", detail={"per_step": round(per_step, 2)})]
        blocked_us = att.blocked_by_kind_us["scalar_read"]
        where = (
            "; ".join(f"{loc.label()} `{loc.code}`" if loc.code else loc.label() for loc in locations[:3])
            if sites
            else "call sites not captured (raw trace): look for .item(), .cpu(), .tolist(), .numpy(), "
            "print(tensor) and `if tensor:` in the training loop"
        )
        message = (
            f"{per_step:.1f} blocking GPU->host reads per step ({reads} in {win.count} analyzed steps). "
            f"The host waited {hs.fmt_ms(att.per_step(blocked_us))} per step in them, and the GPU then sat "
            f"idle {hs.fmt_ms(att.per_step(idle_us))} per step until the host refilled its queue: "
            f"{hs.fmt_pct(impact)} of the {hs.fmt_ms(win.median_step_us)} step."
        )
        recommendation = (
            f"Stop reading GPU values every step ({where}). Accumulate on the GPU "
            "(`total += loss.detach()`) and call `.item()` once every N steps or at the end of the "
            "epoch; log with `loss.detach()` kept in a list and `torch.stack(...).tolist()` later; "
            "replace `if tensor:` checks with tensor ops (`torch.where`). Expected gain: up to "
            f"{hs.fmt_ms(att.per_step(idle_us))} per step ({hs.fmt_pct(impact)})."
        )
        yield self.finding(
            impact=impact,
            title=f"{per_step:.1f} blocking .item()/.cpu() reads per step leave the GPU idle {hs.fmt_pct(impact)} of the step",
            message=message,
            evidence={
                "reads_per_step": per_step,
                "reads": reads,
                "steps_analyzed": win.count,
                "host_blocked_ms_per_step": att.per_step(blocked_us) / 1000,
                "gpu_idle_after_reads_ms_per_step": att.per_step(idle_us) / 1000,
                "step_time_ms": win.median_step_us / 1000,
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
            impact_explanation=(
                "GPU idle time in the analyzed steps that followed a blocking read (the queue drained while "
                "the host waited and refilled only after), divided by the total step time."
            ),
        )
