from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel import build as sb
from gpuadvisor.words import plural

# the modeled remedy must recover at least this share of the measured wait to rate the finding by it
MODELED_SHARE = 0.5
# Behind a loader that sets the pace, the loop's own step: the remedies of the busy-time rules that would
# shorten it (each is worth nothing on the mean step while the loop waits for data, so their rules stay
# quiet), named with their speed-up on the typical step when it is at least BEHIND_MIN_SPEEDUP.
BEHIND_REMEDIES = (
    RemedyId.CHANNELS_LAST,
    RemedyId.BF16_AUTOCAST,
    RemedyId.TORCH_COMPILE,
    RemedyId.FUSED_OPTIMIZER,
)
BEHIND_MIN_SPEEDUP = 1.05


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
    The host's `enumerate(DataLoader)#...__next__` spans in the analyzed steps. On a GPU run, the GPU
    idle time during them is what waiting for data costs now (a loader that prefetches behind GPU
    work costs nothing); on a CPU-only run the wait itself is on the critical path. Impact: the step
    time recovered in a replay of the analyzed steps in which the wait per step shrinks to handing
    over a ready batch, bounded below by the workers' throughput (one process made a batch in the time
    the host waited; N workers make N in that time). The annotation says `_SingleProcessDataLoaderIter`
    (num_workers=0) or `_MultiProcessingDataLoaderIter` (workers); a run adds the DataLoader call site
    and settings from environment.json and the machine's CPU count. An in-process loader
    (num_workers=0) runs the Dataset and collate in the training process, where the profiler slows them
    like any host code: when the capture timed the wait in `__next__` outside the profiler, the replay
    takes the loader's time at that pace (the profiled wait x unprofiled/profiled median wait, at most
    1; docs/model.md), the finding names the wait without the profiler, and the share it is rated by
    is that wait's share of the unprofiled step. When more workers are predicted
    to recover less than half of the measured wait (already at the machine's CPU count, or workers
    that cannot keep up) and that wait is at least `min_share_unmodeled` of the step, the finding is
    still reported, rated by the measured share of the step spent waiting, "gain not modeled" (facts
    before remedies). Steps that carry an epoch's worker restart are left to GA303.

    A loader whose workers deliver in bursts (they start together and take as long per batch) makes
    every num_workers-th step wait: the median step shows no wait, the mean step the user pays does.
    The capture times every step and its wait in `__next__`; when those stalls are the loader's, the
    loop runs at the loader's pace (the mean step less the costs between steps), the finding is priced
    on the run's mean step, and more workers are predicted from the rates: N workers deliver N batches
    in the time one takes, so the pace scales by now/new until the loop's own step is the slower one
    (docs/model.md, "The run's mean step"). Behind such a loader, the remedies that shorten the loop's
    own step (channels_last, bf16 autocast, torch.compile, a fused optimizer) gain nothing on the mean
    step, so their rules stay quiet; this finding names the ones whose replay on the typical step
    saves at least 5% ("once the loader keeps up, ...": `prediction.behind_the_loader`), so that the
    fix is planned as the combination it is (verify --explore measures them with the workers).

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
    requires = frozenset({Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_impact": Threshold(
            0.03,
            "report when the GPU idles waiting for data at least this share of step time (3%: small "
            "waits are the cost of any loader and within noise)",
            "fraction",
        ),
        "max_workers": Threshold(8, "cap of the suggested num_workers", "workers"),
        "min_share_unmodeled": Threshold(
            0.10,
            "report a wait that more workers do not remove when it takes at least this share of the step "
            "(10%: a large measured cost is reported even without a modeled remedy)",
            "fraction",
        ),
    }
    references = ("https://pytorch.org/docs/stable/data.html#multi-process-data-loading",)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        win = model.window
        spans = model.data_spans
        if win.count == 0 or spans.count == 0:
            return
        wait_us = float(spans.covered(win.starts, win.ends).sum())
        if wait_us <= 0:
            return
        gpu = model.has_gpu_work
        idle_us = model.idle_us(sb.IDLE_DATA) if gpu else wait_us
        names = sorted(spans.names)
        single = any("_SingleProcessDataLoaderIter" in n for n in names)
        cpu_count = cm.machine_cpus(ctx)
        loader = cm.main_dataloader(ctx)
        fw = cm.framework(ctx)
        cap = int(ctx.threshold("max_workers"))
        workers = cm.suggested_workers(cpu_count, cap)
        current = int(loader.get("num_workers") or 0) if loader else (0 if single else 1)
        if current >= workers and not single:
            workers = current  # already at the machine's size: no worker change to predict
        pred = ctx.predict(RemedyId.DATALOADER_WORKERS, workers=workers, current_workers=current)
        impact = pred.recovered_fraction
        share = win.share(idle_us) if gpu else win.share(wait_us)
        floor = ctx.threshold("min_impact")
        timing = ctx.model.run_timing
        restart = timing.cost("epoch_restart") if timing is not None else None
        steady = share
        if restart is not None:
            # the steps that carry an epoch's worker restart are GA303's: the facts here are the others'
            # lazy: numpy stays out of `gpuadvisor rules`
            import numpy as np

            keep = ~np.isin(win.step_ids, [s for s in restart.steps if s is not None])
            if not keep.all() and keep.any():
                wait_kept = float(spans.covered(win.starts[keep], win.ends[keep]).sum())
                total_kept = float((win.ends[keep] - win.starts[keep]).sum())
                steady = share * (wait_kept / wait_us) * (win.total_us / total_kept) if total_kept > 0 else share
        stalls = timing.stalls if timing is not None and timing.stalls is not None else None
        run_share = None
        if stalls is not None and stalls.cause == "data" and timing is not None and timing.mean_step_ms > 0:
            # the loader's cost as the run pays it: a share of the mean step (issue 38), the wait the
            # capture timed in every step when it did, else the stalls' excess
            run_share = stalls.per_step_ms / timing.mean_step_ms
            waits = cm.run_data_wait_ms(ctx)
            if waits is not None:
                run_share = max(run_share, min(1.0, waits / timing.mean_step_ms))
            steady = run_share
        data_time = model.data_time
        real_idle_us = 0.0
        if data_time is not None and model.unprofiled_step_ms and win.count:
            # an in-process loader ran slower under the profiler (StepModel.data_time): the wait the run
            # pays is the one the capture timed outside it, a share of the unprofiled step
            real_idle_us = win.per_step(idle_us) * data_time.scale
            steady = min(steady, real_idle_us / (model.unprofiled_step_ms * 1000.0))
        facts_floor = ctx.threshold("min_share_unmodeled")
        if impact < floor and steady < facts_floor:
            return
        # Facts before remedies (issue 27): a large measured wait that the modeled remedy (more workers)
        # removes little of is still reported, rated by its measured share, "gain not modeled".
        modeled = impact >= floor and impact >= MODELED_SHARE * steady
        if not modeled and steady < facts_floor:
            if impact < floor:
                return  # neither modeled nor large (or the wait is the epoch restarts: GA303's)
            modeled = True
        changes: list[str] = []
        observed = ""
        if loader is not None:
            nw = loader.get("num_workers")
            observed = (
                f"num_workers={nw}, pin_memory={loader.get('pin_memory')}, "
                f"persistent_workers={loader.get('persistent_workers')}, "
                f"prefetch_factor={loader.get('prefetch_factor')}, batch_size={loader.get('batch_size')}"
            )
            if not nw:
                changes.append(f"num_workers={workers}")
            elif nw < workers:
                changes.append(f"num_workers={workers} (now {nw}; the machine has {cpu_count} CPUs)")
            if gpu and not loader.get("pin_memory"):
                changes.append("pin_memory=True")
            if not loader.get("persistent_workers"):
                changes.append("persistent_workers=True")
            pf = loader.get("prefetch_factor")
            if nw and (pf is None or (isinstance(pf, int) and pf < 4)):
                changes.append("prefetch_factor=4")
        elif single:
            changes += [f"num_workers={workers}", "persistent_workers=True"] + (
                ["pin_memory=True"] if gpu else []
            )
        loc = cm.location_of(
            loader,
            **({k: loader.get(k) for k in ("num_workers", "pin_memory", "batch_size")} if loader else {}),
        )
        locations: list[Location] = (
            [loc] if loc is not None else [Location(function=names[0] if names else "DataLoader.__next__")]
        )
        if fw.is_hf:
            hf_changes = [f"dataloader_num_workers={workers}", "dataloader_persistent_workers=True"] + (
                ["dataloader_pin_memory=True"] if gpu else []
            )
            rec = "Set " + ", ".join(hf_changes) + " in your TrainingArguments"
            if fw.call_site is not None:
                rec += f" ({fw.call_site.label()})"
                locations.insert(0, fw.call_site)
            rec += "."
        elif changes:
            rec = (
                f"Change the DataLoader{' at ' + loc.label() if loc is not None else ''}: "
                + ", ".join(changes)
                + "."
            )
        else:
            rec = (
                "The loader settings are already tuned: the workers cannot produce batches fast enough. Make "
                "per-sample work cheaper (decode once and cache, move augmentation to the GPU, e.g. "
                "torchvision.transforms.v2 on CUDA tensors or DALI), or use more workers if CPUs allow."
            )
        if modeled:
            rec += " " + cm.gain(pred, impact)
        else:
            rec += (
                f" More workers alone are predicted to recover {cm.saves(pred, impact)}; the rest of the "
                "wait is the cost of making each batch: make per-sample work cheaper (decode once and cache, "
                "vectorize the transforms, move augmentation to the GPU). The gain of that is not modeled."
            )
        if cpu_count:
            rec += f" (Worker count from the machine's {cpu_count} CPUs, capped at {cap}.)"
        if loader is not None:
            how = f"The DataLoader at {loc.label() if loc else '?'} runs with {observed}."
        elif single:
            how = "The trace shows `_SingleProcessDataLoaderIter`: the DataLoader runs with num_workers=0 (call site not captured: raw trace)."
        else:
            how = "The trace shows `_MultiProcessingDataLoaderIter`: workers exist but do not keep up."
        restart = ctx.model.run_timing.cost("epoch_restart") if ctx.model.run_timing is not None else None
        if restart is not None:
            how += (
                f" Part of this wait is the workers' start-up at each epoch ({cm.ms(restart.each_ms * 1000)} every "
                f"{restart.period_steps} steps: GA303)."
            )
        unprofiled = ""
        if data_time is not None and real_idle_us > 0:
            unprofiled = f" ({cm.ms(real_idle_us)} a step without the profiler)"
            how += (
                f" Outside the profiler the loader took {cm.ms(data_time.unprofiled_ms * 1000)} per step in __next__ "
                f"(median of {data_time.steps_unprofiled} steps; {cm.ms(data_time.profiled_ms * 1000)} under it: the "
                "profiler slows the Dataset's and collate's own work in the training process like any host code); "
                "the prediction prices that wait."
            )
        if gpu:
            title = (
                f"The GPU waits for data {cm.of_profiled_step(win.share(idle_us), win.median_step_us)}{unprofiled}; "
                f"the fix is predicted to save {cm.saves(pred, impact)}"
            )
            seen = (
                f"The host spent {cm.ms(win.per_step(wait_us))} per step in DataLoader __next__; the GPU was "
                f"idle for {cm.ms(win.per_step(idle_us))} of it "
                f"({cm.of_profiled_step(win.share(idle_us), win.median_step_us)}). "
            )
        else:
            title = (
                f"The step waits for data {cm.of_profiled_step(win.share(wait_us), win.median_step_us)}{unprofiled}; "
                f"the fix is predicted to save {cm.saves(pred, impact)}"
            )
            seen = (
                f"The training process spent {cm.ms(win.per_step(wait_us))} per step in DataLoader __next__ "
                f"({cm.of_profiled_step(win.share(wait_us), win.median_step_us)}; CPU-only run: the wait is "
                "on the critical path). "
            )
        behind: list[tuple[str, float]] = []
        behind_text = ""
        if run_share is not None and modeled:
            for remedy in BEHIND_REMEDIES:
                typical = ctx.predict(remedy).typical_speedup
                if typical is not None and typical >= BEHIND_MIN_SPEEDUP:
                    behind.append((remedy.value, typical))
            if behind:
                behind_text = (
                    " Once the loader keeps up, the loop's own step is the bottleneck; replayed on it: "
                    + ", ".join(f"{r} {cm.times(x)}" for r, x in behind)
                    + " (each worth nothing on the mean step while the loop waits for data: apply them with the "
                    "workers; `gpuadvisor verify --explore` measures the combination)."
                )
        if run_share is not None and stalls is not None and timing is not None:
            every = (
                f"every {stalls.pattern.period}th step waits" if stalls.pattern.period else
                f"{stalls.pattern.count} of {stalls.steps_timed} steps wait"
            )
            title = (
                f"The loop waits for data {cm.pct(run_share)} of the {cm.ms(timing.mean_step_ms * 1000)} mean step "
                f"({every} {cm.ms(stalls.pattern.mean_excess_ms * 1000)} longer); the fix is predicted to save "
                f"{cm.saves(pred, impact)}"
            )
            seen = (
                f"Over the {stalls.steps_timed} steps the capture timed without the profiler, {stalls.pattern.count} "
                f"waited {cm.ms(stalls.pattern.mean_excess_ms * 1000)} more than the median step "
                f"({cm.ms(timing.typical_step_ms * 1000)}), in DataLoader __next__: the workers deliver in bursts "
                f"and the loop runs at their pace, {cm.ms((timing.loader_interval_ms or 0.0) * 1000)} a batch "
                f"on average. In the profiled window the host spent {cm.ms(win.per_step(wait_us))} per step in "
                "__next__. "
            )
        elif restart is not None and steady < share:
            title = (
                f"The {'GPU waits' if gpu else 'step waits'} for data {cm.pct(steady)} of each profiled step besides the "
                "epoch restarts"
            )
        if not modeled:
            # the title's remedy clause would promise what the model does not: say what it gives
            title = title.rsplit("; the fix is predicted to save", 1)[0] + (
                f"; more workers are predicted to recover {cm.saves(pred, impact)} (gain not modeled)"
            )
        yield self.finding(
            impact=impact if modeled else steady,
            title=title,
            message=seen
            + how
            + " "
            + cm.prediction_sentence(pred, plural(workers, "loader worker"))
            + behind_text
            + cm.note_uncorrected(pred),
            evidence={
                "dataloader_wait_ms_per_step": win.per_step(wait_us) / 1000,
                "idle_waiting_for_data_ms_per_step": win.per_step(idle_us) / 1000,
                "idle_waiting_for_data_fraction": win.share(idle_us),
                "gpu": gpu,
                "step_time_ms": pred.baseline_step_ms,
                "predicted_step_time_ms": pred.predicted_step_ms,
                "steps_analyzed": win.count,
                "iterator": names,
                "dataloader": loader or {},
                "cpu_count": cpu_count,
                "suggested_workers": workers,
                "framework": fw.name,
                "measured_share": share,
                "measured_share_without_epoch_restarts": steady if restart is not None else None,
                **(
                    {
                        "unprofiled_data_wait_ms_per_step": data_time.unprofiled_ms,
                        "profiled_data_wait_ms_per_step": data_time.profiled_ms,
                    }
                    if data_time is not None
                    else {}
                ),
                "run_stall_share": run_share,
                "stalls": stalls.to_dict() if stalls is not None else None,
                "gain_modeled": modeled,
            },
            recommendation=rec,
            locations=locations,
            impact_explanation=cm.impact_explanation(pred, f"the DataLoader running {workers} workers")
            if modeled
            else (
                (
                    f"The measured share of the profiled step spent waiting for data ({cm.pct(share)})"
                    if not real_idle_us
                    else f"The share of the step spent waiting for data outside the profiler ({cm.pct(steady)})"
                )
                + ": no modeled remedy "
                f"removes most of it (more workers: {cm.pct(impact)}), so the finding is rated by what it costs now."
            ),
            remedy=RemedyId.DATALOADER_WORKERS,
            prediction={
                **pred.to_dict(),
                **(
                    {"behind_the_loader": [{"remedy": r, "typical_speedup": round(x, 4)} for r, x in behind]}
                    if behind
                    else {}
                ),
            },
        )
