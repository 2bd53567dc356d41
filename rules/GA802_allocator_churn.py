"""GA802 allocator-churn: cudaMalloc/cudaFree calls in steady-state steps."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold

_ALLOC_RE = re.compile(
    r"^(cudaMalloc|cudaFree|cudaMallocAsync|cudaFreeAsync|cuMemAlloc|cuMemFree|cudaHostAlloc|"
    r"cudaMallocHost|cudaFreeHost|cuMemHostAlloc|cuMemCreate|cuMemMap|cuMemUnmap|cuMemRelease)"
)
_HOST_RE = re.compile(r"Host")


class AllocatorChurn(Rule):
    """cudaMalloc / cudaFree (or pinned host allocations) run in every step: the caching allocator churns.

    Why it matters
    --------------
    PyTorch's caching allocator should reach a steady state after the first steps: later steps reuse
    cached blocks and never call cudaMalloc. cudaFree synchronizes the device, and cudaMalloc /
    cudaHostAlloc cost tens of microseconds to milliseconds each. Calls in steady state mean the cache
    is being emptied (torch.cuda.empty_cache() in the loop), memory is so close to full that the
    allocator frees and retries, shapes vary every step (fragmentation), caching is disabled
    (PYTORCH_NO_CUDA_MEMORY_CACHING), or tensors are pinned afresh every step (.pin_memory()).

    How it is detected
    ------------------
    cudaMalloc/cudaFree/cudaHostAlloc/cudaFreeHost (and driver equivalents) runtime calls inside the
    analyzed steps (the first, warm-up step is excluded), present in at least `min_step_share` of
    the steps, costing at least `min_fraction` of step time.

    Impact: the step time recovered in a replay of the analyzed steps without these calls (their host
    time gone, and cudaFree no longer waiting for the device): what a steady-state cache, e.g. with
    `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` and no empty_cache() in the loop, gives.

    How to fix
    ----------
        # before
        for x, y in loader:
            x = x.pin_memory().cuda(non_blocking=True)
            ...
            torch.cuda.empty_cache()

        # after
        loader = DataLoader(ds, batch_size=64, pin_memory=True)   # pinned by the loader's thread
        for x, y in loader:
            x = x.cuda(non_blocking=True)
            ...
    """

    id = "GA802"
    name = "allocator-churn"
    category = Category.MEMORY
    requires = frozenset({Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_step_share": Threshold(
            0.5, "share of analyzed steps with allocation calls (steady state)", "fraction"
        ),
        "min_fraction": Threshold(
            0.01, "allocation call time as a share of step time worth reporting", "fraction"
        ),
    }
    references = ("https://pytorch.org/docs/stable/notes/cuda.html#memory-management",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        # lazy: numpy stays out of `gpuadvisor rules`
        import numpy as np

        window = ctx.model.window
        rt = ctx.trace.runtime
        if window.count == 0 or window.total_us <= 0 or len(rt) == 0:
            return
        calls = rt[rt["name"].astype(str).str.match(_ALLOC_RE) & window.mask(rt["ts"])]
        if len(calls) == 0:
            return
        steps_with = len(np.unique(window.step_index(calls["ts"])))
        step_share = steps_with / window.count
        fraction = float(calls["dur"].sum()) / window.total_us
        if step_share < ctx.threshold("min_step_share") or fraction < ctx.threshold("min_fraction"):
            return
        by_name = calls.groupby(calls["name"].astype(str), observed=True)["dur"].agg(["count", "sum"])
        per_step = {str(n): float(r["count"]) / window.count for n, r in by_name.iterrows()}
        host = any(_HOST_RE.search(n) for n in per_step)
        device = any(not _HOST_RE.search(n) for n in per_step)
        causes = []
        if device:
            causes.append(
                "device allocations: remove torch.cuda.empty_cache() from the loop, keep shapes static "
                "(pad variable lengths to a few buckets), check PYTORCH_NO_CUDA_MEMORY_CACHING is unset, "
                "and if memory is near full (GA801) free headroom; "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces fragmentation"
            )
        if host:
            causes.append(
                "pinned host allocations: do not call .pin_memory() on fresh tensors each step; use "
                "DataLoader(pin_memory=True) or reuse one pinned buffer"
            )
        pred = ctx.predict(RemedyId.EXPANDABLE_SEGMENTS)
        # a raw trace without launch threads (CPU-only) has nothing to replay: the calls' own time is the cost
        impact = pred.recovered_fraction if ctx.model.program.steps else fraction
        yield self.finding(
            impact=impact,
            remedy=RemedyId.EXPANDABLE_SEGMENTS,
            prediction=pred if ctx.model.program.steps else None,
            title=f"Allocator churn: {sum(per_step.values()):.1f} allocation calls per step ({gw.pct(fraction, 1)} of step time)",
            message=(
                "Memory allocation calls in steady-state steps: "
                + ", ".join(f"{n} {c:.1f}/step" for n, c in sorted(per_step.items()))
                + f", in {steps_with} of {window.count} analyzed steps, {gw.us(float(calls['dur'].sum()) / window.count)} "
                "of host time per step."
            ),
            evidence={
                "calls_per_step": per_step,
                "steps_with_calls": steps_with,
                "steps_analyzed": window.count,
                "alloc_time_fraction": fraction,
            },
            recommendation="Fix the source of " + "; and of ".join(causes) + ".",
            locations=[Location(function=n, detail={"per_step": c}) for n, c in sorted(per_step.items())],
            impact_explanation=cm.impact_explanation(
                pred, "the allocation calls gone from steady-state steps"
            ),
        )
