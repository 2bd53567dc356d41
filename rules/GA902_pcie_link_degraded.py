"""GA902 pcie-link-degraded: the PCIe link runs below its generation or width while data moves."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.model import Category, Finding, Location
from gpuadvisor.rulekit import gpuwork as gw
from gpuadvisor.rulekit import nvml as nv
from gpuadvisor.rules_api import Requirement, Rule, RuleContext, Threshold
from gpuadvisor.words import Base, of_base


class PcieLinkDegraded(Rule):
    """The GPU's PCIe link ran below its maximum generation or width while transfers were running.

    Why it matters
    --------------
    Host<->device copies run at the link's speed: a Gen5 x16 link moves ~63 GB/s, the same card in a
    Gen3 slot or trained down to x8 moves a quarter or half of that. Idle links drop to a low
    generation to save power, so only samples taken while data moves are judged.

    How it is detected
    ------------------
    NVML samples in the capture window with PCIe rx+tx of at least `min_traffic_mbps`: the current
    link generation or width below its maximum in at least `min_degraded_share` of them.

    Impact = host<->device copy time share of the step (from the trace) x (1 - current / maximum link
    bandwidth): the copy time a full-speed link would save (upper bound). Info when the trace holds
    no copies.

    How to fix
    ----------
    Hardware or BIOS: reseat the card or move it to a x16 slot wired to the CPU, check risers, and the
    slot's PCIe generation setting in the BIOS; `nvidia-smi -q -d PCIE` shows current and max.

        # before
        nvidia-smi -q -d PCIE   # Link Gen Current 3 / Max 5, Width Current 8x / Max 16x
        # after (card moved to a Gen5 x16 slot)
        nvidia-smi -q -d PCIE   # Link Gen Current 5 / Max 5, Width Current 16x / Max 16x
    """

    id = "GA902"
    name = "pcie-link-degraded"
    category = Category.GPU_HEALTH
    requires = frozenset({Requirement.NVML})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_traffic_mbps": Threshold(100.0, "PCIe rx+tx from which a sample shows data moving", "MB/s"),
        "min_degraded_share": Threshold(0.5, "share of transfer samples below the link maximum", "fraction"),
    }
    references = ("https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        df = nv.window_samples(ctx)
        if df is None:
            return
        traffic_mbps = (df["pcie_rx_kbps"].fillna(0) + df["pcie_tx_kbps"].fillna(0)) / 1000.0
        moving = df[traffic_mbps >= ctx.threshold("min_traffic_mbps")]
        moving = moving.dropna(subset=["pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max"])
        if len(moving) == 0:
            return
        degraded = (moving["pcie_gen"] < moving["pcie_gen_max"]) | (
            moving["pcie_width"] < moving["pcie_width_max"]
        )
        share = float(degraded.mean())
        if share < ctx.threshold("min_degraded_share"):
            return
        bad = moving[degraded]
        gen, width = float(bad["pcie_gen"].median()), float(bad["pcie_width"].median())
        gen_max, width_max = float(bad["pcie_gen_max"].max()), float(bad["pcie_width_max"].max())
        current_bw = nv.link_gbps(gen, width)
        max_bw = nv.link_gbps(gen_max, width_max)
        window = ctx.model.window
        copy_fraction = None
        copies = ctx.trace.copies
        if window.total_us > 0 and len(copies):
            hd = copies[copies["direction"].astype(str).isin(["HtoD", "DtoH"]) & window.mask(copies["ts"])]
            copy_fraction = float(hd["dur"].sum()) / window.total_us
        impact = None
        if copy_fraction is not None and current_bw and max_bw:
            impact = copy_fraction * max(0.0, 1.0 - current_bw / max_bw)
        gpus = sorted({int(g) for g in bad["gpu_index"].dropna()})
        yield self.finding(
            impact=impact,
            title=f"PCIe link degraded: Gen{gen:.0f} x{width:.0f} of Gen{gen_max:.0f} x{width_max:.0f} during transfers",
            message=(
                f"In {gw.pct(share)} of the NVML samples with PCIe traffic the link ran at Gen{gen:.0f} "
                f"x{width:.0f} instead of Gen{gen_max:.0f} x{width_max:.0f}"
                + (
                    f" (~{current_bw:.0f} of ~{max_bw:.0f} GB/s per direction)"
                    if current_bw and max_bw
                    else ""
                )
                + (
                    f"; host<->device copies take {gw.pct(copy_fraction)} {of_base(Base.PROFILED_STEP)}."
                    if copy_fraction is not None
                    else "."
                )
            ),
            evidence={
                "transfer_samples": len(moving),
                "degraded_share": share,
                "pcie_gen": gen,
                "pcie_width": width,
                "pcie_gen_max": gen_max,
                "pcie_width_max": width_max,
                "link_gbps": current_bw,
                "link_max_gbps": max_bw,
                "copy_fraction": copy_fraction,
            },
            recommendation=(
                "Not a code change: reseat the GPU or move it to a x16 slot wired to the CPU, check risers "
                "and the BIOS PCIe generation setting; verify with `nvidia-smi -q -d PCIE` under load. "
                "Meanwhile, pinned memory and fewer, larger copies make the most of the link."
            ),
            locations=[Location(function=f"GPU {g} (NVML index)") for g in gpus],
            impact_explanation=(
                "Host<->device copy share of the step x (1 - current / maximum link bandwidth) (upper bound)."
                if impact is not None
                else "The trace holds no host<->device copies in the window: the cost could not be measured."
            ),
        )
