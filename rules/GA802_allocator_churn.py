"""GA802 allocator-churn: cudaMalloc/cudaFree calls in steady-state steps."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel import build as sb
from gpuadvisor.words import Base, of_base

_ALLOC_RE = re.compile(
    r"^(cudaMalloc|cudaFree|cudaMallocAsync|cudaFreeAsync|cuMemAlloc|cuMemFree|cudaHostAlloc|"
    r"cudaMallocHost|cudaFreeHost|cuMemHostAlloc|cuMemCreate|cuMemMap|cuMemUnmap|cuMemRelease)"
)
_HOST_RE = re.compile(r"Host")
_FREE_RE = re.compile(r"^(cudaFree|cuMemFree|cuMemUnmap|cuMemRelease)(?!Host)")


def _outside_ops(ctx: RuleContext, frees: Any) -> float:
    """The share of the free calls' time spent outside every cpu op of their thread: freed from host code
    between ops (torch.cuda.empty_cache()), not by an op's allocation retry."""
    # lazy: numpy stays out of `gpuadvisor rules`
    import numpy as np

    if len(frees) == 0:
        return 0.0
    ops = ctx.trace.cpu_ops
    ts = frees["ts"].to_numpy(dtype=np.float64)
    dur = frees["dur"].to_numpy(dtype=np.float64)
    tid = frees["tid"].astype("float64").to_numpy()
    inside = np.zeros(len(frees), dtype=bool)
    if len(ops):
        o_ts = ops["ts"].to_numpy(dtype=np.float64)
        o_end = ops["end"].to_numpy(dtype=np.float64)
        o_tid = ops["tid"].astype("float64").to_numpy()
        for t in np.unique(tid).tolist():
            mine, on = tid == t, o_tid == t
            inside[mine] = sb.within(o_ts[on], o_end[on], ts[mine])
    total = float(dur.sum())
    return float(dur[~inside].sum()) / total if total > 0 else float((~inside).mean())


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

    Impact: the step time recovered in a replay of the analyzed steps without these calls: their driver
    time gone (a call's time beyond a typical call is the driver's, kept out of the profiler
    correction), and cudaFree no longer waiting for the device (the idle after it goes with it). The
    remedy named is the one the calls point to: frees outside any op (host code between ops: what
    `torch.cuda.empty_cache()` does) are removed by taking that call out of the loop
    (`remove_empty_cache`, which `gpuadvisor verify --only no_empty_cache` measures); frees inside ops
    (the allocator freeing its cache to retry a failed allocation, shapes that vary) by a steady cache,
    e.g. `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (`expandable_segments`).

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
        calls = rt[cm.names_matching(rt["name"], _ALLOC_RE) & window.mask(rt["ts"])]
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
        frees = calls[cm.names_matching(calls["name"], _FREE_RE)]
        outside = _outside_ops(ctx, frees)
        empty_cache = device and len(frees) > 0 and outside >= 0.5
        remedy = RemedyId.REMOVE_EMPTY_CACHE if empty_cache else RemedyId.EXPANDABLE_SEGMENTS
        if empty_cache:
            causes.insert(
                0,
                f"the cache emptied in the loop: {gw.pct(outside, 0)} of the cudaFree time runs outside any op, "
                "as torch.cuda.empty_cache() does: remove that call (the caching allocator reuses its blocks; "
                "each call frees them, synchronizing the device, and the next step allocates them again)",
            )
        pred = ctx.predict(remedy)
        # a raw trace without launch threads (CPU-only) has nothing to replay: the calls' own time is the cost
        impact = pred.recovered_fraction if ctx.model.program.steps else fraction
        yield self.finding(
            impact=impact,
            remedy=remedy,
            prediction=pred if ctx.model.program.steps else None,
            title=f"Allocator churn: {sum(per_step.values()):.1f} allocation calls per step ({gw.pct(fraction, 1)} {of_base(Base.PROFILED_STEP)})",
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
                "free_time_outside_ops_fraction": outside,
            },
            recommendation="Fix the source of " + "; and of ".join(causes) + ".",
            locations=[Location(function=n, detail={"per_step": c}) for n, c in sorted(per_step.items())],
            impact_explanation=cm.impact_explanation(
                pred,
                "the allocation calls gone from steady-state steps (their driver time and cudaFree's waits)"
                + (": torch.cuda.empty_cache() taken out of the loop" if empty_cache else ""),
            ),
        )
