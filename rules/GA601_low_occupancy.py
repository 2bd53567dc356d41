"""GA601 low-occupancy-kernels: kernels with a real share of GPU time that leave SMs or warps idle."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from gpuadvisor.stepmodel import build as sb

if TYPE_CHECKING:
    from gpuadvisor.stepmodel import Prediction

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold

# Per-SM limits used when the trace's deviceProperties lack them (H100/H200 values).
_DEFAULT_LIMITS = {"regs": 65536, "smem": 233472, "threads": 2048, "blocks": 32}


class LowOccupancyKernels(Rule):
    """Kernels with a real share of GPU time leave most SMs or warps idle.

    Why it matters
    --------------
    A kernel whose grid has fewer blocks than the GPU has SMs runs on a fraction of the chip, however
    long it takes: on a 132-SM H100 a 16-block kernel uses 12% of it. A kernel with enough blocks
    but very few resident warps per SM (too many registers per thread, too much shared memory per
    block) cannot hide memory latency. Either way the time it takes is mostly waste.

    How it is detected
    ------------------
    Per kernel name over the analyzed steps, for kernels whose launch configuration the user sets:
    custom kernels (user Triton kernels, CUDA extensions). cuBLAS/cuDNN/CUTLASS/flash-attention
    kernels, PyTorch's own kernels and torch.compile's generated kernels size their grids from the
    tensor shapes: when they under-fill the GPU the lever is the batch, the shapes or the dtype
    (GA401, GA701), not the grid, so they are not reported here; neither are multi-tensor optimizer
    kernels (at most 320 blocks per launch by design; see GA502) and NCCL kernels. A kernel is
    under-filling when its median blocks per SM (grid blocks / SM count) is below `max_blocks_per_sm`,
    or when its estimated achieved occupancy (the trace's `est. achieved occupancy %`) is below
    `max_occupancy_pct` with a full grid; reported when it takes at least `min_kernel_share` of GPU
    kernel time. The limiting factor (grid, registers, shared memory, threads per block) is computed
    from the kernel's registers per thread, shared memory and block size against the SM limits.

    Impact: the step time recovered in a replay of the analyzed steps in which the kernel fills the
    GPU: its time x max(blocks / SMs, 1 / `max_grid_speedup` of the step model) for a small grid, or x
    occupancy / target for low occupancy. The rest of the step stays as it is (Amdahl).

    How to fix
    ----------
    Give the kernel more parallel work per launch: a larger grid (split rows/columns or the
    reduction dimension over more blocks; in Triton, launch more programs with a smaller BLOCK),
    batch several small launches into one, pick a different op variant, or reduce registers/shared
    memory per block (smaller tiles, num_warps/num_stages in Triton).

        # before (Triton): one program per 4096-row tile -> 8 programs on 132 SMs
        grid = (triton.cdiv(n_rows, 4096),)
        kernel[grid](x, y, n_rows, BLOCK=4096)

        # after: one program per 128 rows -> 256 programs
        grid = (triton.cdiv(n_rows, 128),)
        kernel[grid](x, y, n_rows, BLOCK=128)
    """

    id = "GA601"
    name = "low-occupancy-kernels"
    category = Category.LOW_OCCUPANCY
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS, Requirement.NVIDIA_GPU})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_kernel_share": Threshold(
            0.05, "share of GPU kernel time for a kernel to be reported", "fraction"
        ),
        "max_blocks_per_sm": Threshold(
            1.0, "blocks per SM below which the grid leaves SMs empty", "blocks/SM"
        ),
        "max_occupancy_pct": Threshold(
            20.0, "estimated achieved occupancy below which a full-grid kernel cannot hide latency", "%"
        ),
        "min_impact": Threshold(0.01, "smallest predicted gain worth a finding", "fraction"),
    }
    references = (
        "https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#occupancy",
        "https://docs.nvidia.com/deeplearning/performance/dl-performance-gpu-background/index.html",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        # lazy: pandas stays out of `gpuadvisor rules`
        import pandas as pd

        model = ctx.model
        win = model.window
        if win.count == 0 or win.total_us <= 0:
            return
        kernels = model.window_kernels
        if len(kernels) == 0:
            return
        total_kernel_us = float(kernels["dur"].sum())
        if total_kernel_us <= 0:
            return
        sms = gw.sm_count(ctx)
        k = kernels.assign(bps=gw.blocks_per_sm(kernels, sms), kname=kernels["name"].astype(str))
        # Only a custom kernel with a real share can be reported: the other names are left out before
        # the per-name work (a trace can hold a million distinct names); the share is checked again below.
        first = k.drop_duplicates("kname")
        custom = set(first["kname"][first["origin"].astype(str).to_numpy() == sb.ORIGIN_CUSTOM])
        time_by_name = k.groupby("kname", sort=False)["dur"].sum()
        big = set(time_by_name.index[time_by_name.to_numpy() >= ctx.threshold("min_kernel_share") * total_kernel_us * (1 - 1e-9)])
        k = k[k["kname"].isin(custom & big)]
        rows: list[dict[str, Any]] = []
        for kname, group in k.groupby("kname", sort=True):
            name = str(kname)
            origin = str(group["origin"].iloc[0])
            if origin != sb.ORIGIN_CUSTOM:
                # cuBLAS/cuDNN/PyTorch/compiler kernels: their grid follows the tensor sizes; the lever
                # the user has is the batch, shapes or dtype (GA401, GA701), not the grid
                continue
            dur = float(group["dur"].sum())
            share = dur / total_kernel_us
            bps = gw.finite(group["bps"].median())
            occ = gw.finite(group["occupancy_pct"].median())
            reason: str | None = None
            if bps is not None and bps < ctx.threshold("max_blocks_per_sm"):
                reason = "grid"
            elif occ is not None and 0.0 < occ < ctx.threshold("max_occupancy_pct"):
                reason = "occupancy"
            if reason is None or share < ctx.threshold("min_kernel_share"):
                continue
            first = group.iloc[0]
            ops = group["op_name"].dropna().astype(str)
            rows.append(
                {
                    "name": name,
                    "reason": reason,
                    "share": share,
                    "time_per_step_us": dur / win.count,
                    "count_per_step": len(group) / win.count,
                    "blocks_per_sm": bps,
                    "occupancy_pct": occ,
                    "grid": _dims(first, "grid"),
                    "block": _dims(first, "block"),
                    "registers_per_thread": gw.finite(first["registers_per_thread"]),
                    "shared_memory": gw.finite(first["shared_memory"]),
                    "threads_per_block": gw.finite(first["threads_per_block"]),
                    "op": ops.mode().iloc[0] if len(ops) else None,
                    "family": str(first["family"]) if pd.notna(first["family"]) else None,
                }
            )
        for r in rows:
            pred = ctx.predict(RemedyId.FIX_KERNEL_GRID, kernels=(r["name"],))
            r["impact"] = pred.recovered_fraction
            if pred.recovered_fraction >= ctx.threshold("min_impact"):
                yield self._one(ctx, r, sms, pred)

    def _limiting_factor(self, ctx: RuleContext, r: dict[str, Any], sms: int | None) -> str:
        if r["reason"] == "grid":
            blocks = (r["blocks_per_sm"] or 0.0) * (sms or 0)
            return (
                f"grid too small: about {blocks:.0f} blocks for {sms} SMs"
                if sms
                else "grid smaller than the SM count"
            )
        props = ctx.trace.meta.device(0) or {}
        limits = {
            "registers": float(props.get("regsPerMultiprocessor") or _DEFAULT_LIMITS["regs"]),
            "shared memory": float(props.get("sharedMemPerMultiprocessor") or _DEFAULT_LIMITS["smem"]),
            "threads": float(props.get("maxThreadsPerMultiprocessor") or _DEFAULT_LIMITS["threads"]),
        }
        threads = r["threads_per_block"] or 0.0
        regs = r["registers_per_thread"] or 0.0
        smem = r["shared_memory"] or 0.0
        cap: dict[str, float] = {"blocks per SM": float(_DEFAULT_LIMITS["blocks"])}
        if threads > 0:
            cap["threads"] = limits["threads"] // threads
            if regs > 0:
                cap["registers"] = limits["registers"] // (regs * threads)
        if smem > 0:
            cap["shared memory"] = limits["shared memory"] // smem
        factor = min(sorted(cap), key=lambda key: cap[key])
        detail = {
            "registers": f"{regs:.0f} registers/thread x {threads:.0f} threads",
            "shared memory": f"{smem / 1024:.0f} KiB shared memory per block",
            "threads": f"{threads:.0f} threads per block",
            "blocks per SM": "the per-SM block limit",
        }[factor]
        return f"limited by {factor} ({detail}: {cap[factor]:.0f} resident blocks per SM)"

    def _one(self, ctx: RuleContext, r: dict[str, Any], sms: int | None, pred: Prediction) -> Finding:
        why = self._limiting_factor(ctx, r, sms)
        r = {
            **r,
            "limiting_factor": why,
            "step_time_ms": pred.baseline_step_ms,
            "predicted_step_time_ms": pred.predicted_step_ms,
        }
        name = gw.short_kernel_name(r["name"])
        if r["reason"] == "grid":
            what = f"uses {gw.pct(r['blocks_per_sm'])} of the SMs (blocks per SM {r['blocks_per_sm']:.2f})"
            rec = (
                "Give each launch more blocks: split the work over more blocks (rows, columns, or the "
                "reduction dimension: split-K), or in Triton launch more programs with a smaller BLOCK "
                "(e.g. one program per row: grid=(n_rows,)); batch several small launches of this kernel "
                "into one."
            )
        else:
            what = f"has {r['occupancy_pct']:.0f}% estimated achieved occupancy with a full grid"
            rec = (
                "Raise the resident warps per SM: fewer registers per thread (smaller tiles; Triton "
                "num_warps/num_stages; __launch_bounds__ in CUDA), less shared memory per block, or "
                "larger blocks."
            )
        if r["op"]:
            rec = f"Launched by {r['op']}. " + rec
        rec += " " + cm.gain(pred)
        return self.finding(
            impact=pred.recovered_fraction,
            title=f"Low occupancy: {name} ({gw.pct(r['share'])} of GPU time) {what}",
            message=(
                f"{name} runs {r['count_per_step']:.0f}x per step for {gw.us(r['time_per_step_us'])} "
                f"({gw.pct(r['share'])} of GPU kernel time) and {what}; {why}. "
                + cm.prediction_sentence(pred, "the kernel given enough blocks to fill the GPU")
                + cm.note_uncorrected(pred)
            ),
            evidence=r,
            recommendation=rec,
            locations=[_location(r)],
            impact_explanation=cm.impact_explanation(pred, "this kernel filling the GPU"),
            remedy=RemedyId.FIX_KERNEL_GRID,
            prediction=pred,
        )


def _dims(row: Any, prefix: str) -> str | None:
    values = [
        gw.finite(row.get(f"{prefix}_{axis}")) if hasattr(row, "get") else None for axis in ("x", "y", "z")
    ]
    if any(v is None for v in values):
        return None
    return ",".join(f"{v:.0f}" for v in values if v is not None)


def _location(r: dict[str, Any]) -> Location:
    return Location(
        op=r["op"],
        kernel=gw.short_kernel_name(r["name"]),
        detail={
            k: r[k]
            for k in (
                "grid",
                "block",
                "blocks_per_sm",
                "occupancy_pct",
                "registers_per_thread",
                "shared_memory",
            )
            if r.get(k) is not None
        },
    )
