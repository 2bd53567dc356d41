from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold


class DataloaderStall(Rule):
    """The GPU waits for the input pipeline: it idles while the host is inside DataLoader `__next__`.

    Why it matters
    --------------
    When the next batch is not ready, the training loop blocks in `DataLoader.__next__` while the
    GPU has nothing queued. With `num_workers=0` all loading, decoding and augmentation runs in the
    training process between steps; with too few workers they cannot keep up. Either way the GPU
    idles for the time it takes to produce a batch.

    How it is detected
    ------------------
    GPU idle gaps of the analyzed steps (no kernel, copy or memset running) intersected with the
    `enumerate(DataLoader)#...__next__` annotation of the host: only the time when the GPU is idle
    AND the host waits for data counts, so a loader that prefetches behind GPU work costs nothing.
    Impact = that idle time / step time. The annotation says `_SingleProcessDataLoaderIter`
    (num_workers=0) or `_MultiProcessingDataLoaderIter` (workers); a run adds the DataLoader call
    site and settings from environment.json and the machine's CPU count.

    How to fix
    ----------
    Load in worker processes, pin memory, keep workers alive across epochs. Before::

        loader = DataLoader(ds, batch_size=64, shuffle=True)

    After::

        loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=8,
                            pin_memory=True, persistent_workers=True, prefetch_factor=4)
    """

    id = "GA301"
    name = "dataloader-stall"
    category = Category.DATA_LOADING
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_impact": Threshold(
            0.03,
            "report when the GPU idles waiting for data at least this share of step time (3%: small "
            "waits are the cost of any loader and within noise)",
            "fraction",
        ),
        "max_workers": Threshold(8, "cap of the suggested num_workers", "workers"),
    }
    references = ("https://pytorch.org/docs/stable/data.html#multi-process-data-loading",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        att = hs.attribute_idle(ctx)
        win = att.window
        if win.count == 0 or att.data_loading_us <= 0:
            return
        impact = att.share(att.data_loading_us)
        if impact < ctx.threshold("min_impact"):
            return
        waits = hs.dataloader_waits(ctx)
        in_win = hs.in_window(win, waits["ts"].to_numpy("float64"))
        names = sorted({str(n) for n in waits["name"][in_win]})
        single = any("_SingleProcessDataLoaderIter" in n for n in names)
        wait_us = float(waits["dur"][in_win].sum())
        env: dict[str, Any] = ctx.run.environment if ctx.run is not None else {}
        cpu_count = env.get("cpu_count") if isinstance(env.get("cpu_count"), int) else None
        loaders = [d for d in env.get("dataloaders") or [] if isinstance(d, dict)]
        loaders.sort(key=lambda d: -int(d.get("iterations") or 0))
        loader = loaders[0] if loaders else None
        cap = int(ctx.threshold("max_workers"))
        workers = min(cap, max(1, cpu_count - 1)) if cpu_count else cap
        changes: list[str] = []
        observed: list[str] = []
        if loader is not None:
            nw = loader.get("num_workers")
            observed.append(
                f"num_workers={nw}, pin_memory={loader.get('pin_memory')}, "
                f"persistent_workers={loader.get('persistent_workers')}, "
                f"prefetch_factor={loader.get('prefetch_factor')}, batch_size={loader.get('batch_size')}"
            )
            if not nw:
                changes.append(f"num_workers={workers}")
            elif cpu_count and nw < workers:
                changes.append(f"num_workers={workers} (now {nw}; the machine has {cpu_count} CPUs)")
            if not loader.get("pin_memory"):
                changes.append("pin_memory=True")
            if not loader.get("persistent_workers"):
                changes.append("persistent_workers=True")
            pf = loader.get("prefetch_factor")
            if nw and (pf is None or (isinstance(pf, int) and pf < 4)):
                # workers exist but batches arrive late: deeper prefetch absorbs slow batches
                changes.append("prefetch_factor=4")
        elif single:
            changes += [f"num_workers={workers}", "pin_memory=True", "persistent_workers=True"]
        locations: list[Location] = []
        if loader is not None and loader.get("file"):
            locations.append(
                Location(
                    file=str(loader["file"]),
                    line=loader.get("line"),
                    code=loader.get("code"),
                    detail={k: loader.get(k) for k in ("num_workers", "pin_memory", "batch_size")},
                )
            )
        else:
            locations.append(Location(function=names[0] if names else "DataLoader.__next__"))
        if loader is not None:
            how = f"The DataLoader at {locations[0].label()} runs with " + observed[0] + "."
        elif single:
            how = "The trace shows `_SingleProcessDataLoaderIter`: the DataLoader runs with num_workers=0 (call site not captured: raw trace)."
        else:
            how = "The trace shows `_MultiProcessingDataLoaderIter`: workers exist but do not keep up."
        if changes:
            rec = (
                f"Change the DataLoader{' at ' + locations[0].label() if loader is not None and loader.get('file') else ''}: "
                + ", ".join(changes)
                + "."
            )
        else:
            rec = (
                "The loader settings are already tuned: the workers cannot produce batches fast enough. Make "
                "per-sample work cheaper (decode once and cache, move augmentation to the GPU, e.g. "
                "torchvision.transforms.v2 on CUDA tensors or DALI), or use more workers if CPUs allow."
            )
        rec += (
            f" Expected gain: up to {hs.fmt_ms(att.per_step(att.data_loading_us))} per step "
            f"({hs.fmt_pct(impact)}), when batches are ready before the GPU needs them."
        )
        if cpu_count:
            rec += f" (Suggested worker count from the machine's {cpu_count} CPUs, capped at {cap}.)"
        yield self.finding(
            impact=impact,
            title=f"The GPU waits for data {hs.fmt_pct(impact)} of each step",
            message=(
                f"The host spent {hs.fmt_ms(att.per_step(wait_us))} per step in DataLoader __next__; the GPU "
                f"was idle for {hs.fmt_ms(att.per_step(att.data_loading_us))} of it per step "
                f"({hs.fmt_pct(impact)} of the {hs.fmt_ms(win.median_step_us)} step). {how}"
            ),
            evidence={
                "dataloader_wait_ms_per_step": att.per_step(wait_us) / 1000,
                "gpu_idle_waiting_for_data_ms_per_step": att.per_step(att.data_loading_us) / 1000,
                "step_time_ms": win.median_step_us / 1000,
                "steps_analyzed": win.count,
                "iterator": names,
                "dataloader": loader or {},
                "cpu_count": cpu_count,
                "metrics_idle_data_loading_fraction": ctx.metrics.window.get("idle_data_loading_fraction"),
            },
            recommendation=rec,
            locations=locations,
            impact_explanation=(
                "GPU idle time during which the host was inside DataLoader __next__, divided by the total step "
                "time of the analyzed steps."
            ),
        )
