"""GA601 low-occupancy-kernels: kernels with a real share of GPU time that leave SMs or warps idle."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from gpuadvisor.model import Category, Finding, Location
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
    Per kernel name over the analyzed steps: its share of GPU kernel time, its median blocks per SM
    (grid blocks / SM count) and its estimated achieved occupancy (the trace's
    `est. achieved occupancy %`). A kernel is under-filling when blocks per SM < `max_blocks_per_sm`
    (grid smaller than the SM count), or when its occupancy is below `max_occupancy_pct` with a full
    grid. Not judged by occupancy: persistent / warp-specialized GEMMs and attention kernels
    (`nvjet_*`, cooperative/warp-specialized CUTLASS, flash/fmha), which run one block per SM and
    report 0 occupancy by design, and library GEMM/conv kernels, which trade occupancy for
    instruction-level parallelism. Never judged: multi-tensor optimizer kernels (at most 320 blocks
    per launch by design; see GA502) and NCCL kernels. A finding per kernel with at least
    `min_kernel_share` of GPU time, and one for the rest when together they reach `min_total_share`.
    The limiting factor (grid, registers, shared memory, threads per block) is computed from the
    kernel's registers per thread, shared memory and block size against the SM limits.

    Impact = kernel time / step time x (1 - blocks per SM) for a small grid, or x (1 - occupancy /
    `target_occupancy_pct`) for low occupancy: the idle part of the chip while it runs (upper bound).

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
            0.05, "share of GPU kernel time for a kernel to be reported alone", "fraction"
        ),
        "min_total_share": Threshold(
            0.10,
            "share of GPU kernel time for the smaller under-filling kernels reported together",
            "fraction",
        ),
        "max_blocks_per_sm": Threshold(
            1.0, "blocks per SM below which the grid leaves SMs empty", "blocks/SM"
        ),
        "max_occupancy_pct": Threshold(
            20.0, "estimated achieved occupancy below which a full-grid kernel cannot hide latency", "%"
        ),
        "target_occupancy_pct": Threshold(
            50.0, "occupancy assumed sufficient for memory-bound kernels (impact reference)", "%"
        ),
        "min_impact": Threshold(0.01, "smallest impact (share of step time) worth a finding", "fraction"),
    }
    references = (
        "https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#occupancy",
        "https://docs.nvidia.com/deeplearning/performance/dl-performance-gpu-background/index.html",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        import pandas as pd

        window = gw.step_window(ctx)
        if window.count == 0 or window.total_us <= 0:
            return
        kernels = gw.window_kernels(ctx, window)
        if len(kernels) == 0:
            return
        total_kernel_us = float(kernels["dur"].sum())
        if total_kernel_us <= 0:
            return
        sms = gw.sm_count(ctx)
        k = ctx.trace.kernel_ops().loc[kernels.index]
        k = k.assign(bps=gw.blocks_per_sm(k, sms), kname=k["name"].astype(str))
        rows: list[dict[str, Any]] = []
        for kname, group in k.groupby("kname", sort=True):
            name = str(kname)
            if (
                gw.is_multi_tensor_kernel(name)
                or gw.is_collective_kernel(name)
                or bool(group["is_collective"].any())
            ):
                continue
            dur = float(group["dur"].sum())
            share = dur / total_kernel_us
            bps = gw.finite(group["bps"].median())
            occ = gw.finite(group["occupancy_pct"].median())
            family = str(group["family"].iloc[0]) if pd.notna(group["family"].iloc[0]) else None
            reason: str | None = None
            waste = 0.0
            if bps is not None and bps < ctx.threshold("max_blocks_per_sm"):
                reason = "grid"
                waste = 1.0 - bps
            elif (
                occ is not None
                and 0.0 < occ < ctx.threshold("max_occupancy_pct")
                and not gw.is_persistent_kernel(name)
                and not gw.is_matmul_kernel(name, family)
            ):
                reason = "occupancy"
                waste = max(0.0, 1.0 - occ / ctx.threshold("target_occupancy_pct"))
            if reason is None:
                continue
            first = group.iloc[0]
            ops = group["op_name"].dropna().astype(str)
            rows.append(
                {
                    "name": name,
                    "reason": reason,
                    "share": share,
                    "time_per_step_us": dur / window.count,
                    "count_per_step": len(group) / window.count,
                    "impact": dur / window.total_us * waste,
                    "blocks_per_sm": bps,
                    "occupancy_pct": occ,
                    "grid": _dims(first, "grid"),
                    "block": _dims(first, "block"),
                    "registers_per_thread": gw.finite(first["registers_per_thread"]),
                    "shared_memory": gw.finite(first["shared_memory"]),
                    "threads_per_block": gw.finite(first["threads_per_block"]),
                    "op": ops.mode().iloc[0] if len(ops) else None,
                    "family": family,
                }
            )
        if not rows:
            return
        rows.sort(key=lambda r: (-r["impact"], r["name"]))
        big = [r for r in rows if r["share"] >= ctx.threshold("min_kernel_share")]
        small = [r for r in rows if r["share"] < ctx.threshold("min_kernel_share")]
        for r in big:
            if r["impact"] >= ctx.threshold("min_impact"):
                yield self._one(ctx, r, sms)
        small_share = sum(r["share"] for r in small)
        small_impact = sum(r["impact"] for r in small)
        if (
            small
            and small_share >= ctx.threshold("min_total_share")
            and small_impact >= ctx.threshold("min_impact")
        ):
            yield self._group(small, small_share, small_impact, sms)

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

    def _one(self, ctx: RuleContext, r: dict[str, Any], sms: int | None) -> Finding:
        why = self._limiting_factor(ctx, r, sms)
        r = {**r, "limiting_factor": why}
        name = gw.short_kernel_name(r["name"])
        if r["reason"] == "grid":
            what = f"uses {gw.pct(r['blocks_per_sm'])} of the SMs (blocks per SM {r['blocks_per_sm']:.2f})"
            rec = (
                "Give each launch more blocks: split the work over more blocks (rows, columns, or the "
                "reduction dimension: split-K), or in Triton launch more programs with a smaller BLOCK; "
                "batch several small launches of this kernel into one; or pick a variant of the op that "
                "parallelizes this shape better."
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
        return self.finding(
            impact=r["impact"],
            title=f"Low occupancy: {name} ({gw.pct(r['share'])} of GPU time) {what}",
            message=(
                f"{name} runs {r['count_per_step']:.0f}x per step for {gw.us(r['time_per_step_us'])} "
                f"({gw.pct(r['share'])} of GPU kernel time) and {what}; {why}."
            ),
            evidence=r,
            recommendation=rec,
            locations=[_location(r)],
            impact_explanation=(
                "Kernel time as a share of the step x the idle part of the GPU while it runs "
                "(1 - blocks per SM, or 1 - occupancy / target): upper bound if the kernel filled the GPU."
            ),
        )

    def _group(self, rows: list[dict[str, Any]], share: float, impact: float, sms: int | None) -> Finding:
        return self.finding(
            impact=impact,
            title=f"Low occupancy: {len(rows)} smaller kernels under-fill the GPU ({gw.pct(share)} of GPU time)",
            message=(
                f"{len(rows)} kernels, each under the per-kernel threshold, together take {gw.pct(share)} of "
                "GPU kernel time with grids smaller than the SM count or low occupancy: "
                + ", ".join(
                    f"{gw.short_kernel_name(r['name'], 60)} ({gw.pct(r['share'], 1)})" for r in rows[:5]
                )
                + "."
            ),
            evidence={"kernels": len(rows), "share": share, "num_sms": sms, "top": rows[:5]},
            recommendation=(
                "Batch the small launches (fewer, larger kernels: torch.compile fuses elementwise chains), "
                "or give each kernel more blocks (larger inputs per launch, a larger batch: see GA401)."
            ),
            locations=[_location(r) for r in rows[:5]],
            impact_explanation="Sum over these kernels of kernel time share of the step x idle part of the GPU.",
        )


def _dims(row: Any, prefix: str) -> str | None:
    values = [gw.finite(row[f"{prefix}_{axis}"]) for axis in ("x", "y", "z")]
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
