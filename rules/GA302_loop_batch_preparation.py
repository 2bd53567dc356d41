from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold
from gpuadvisor.stepmodel import transforms as tf


class LoopBatchPreparation(Rule):
    """The training loop builds each batch itself on the host (numpy, Python, CPU tensor ops) before
    copying it to the GPU: the GPU idles while the batch is prepared.

    Why it matters
    --------------
    Work done in the loop between steps is on the critical path: while the host samples rows,
    normalizes, one-hot encodes or tokenizes the next batch, nothing new is queued on the GPU, and a
    host sync (`.item()`) in the step makes sure the GPU has already drained its queue. A DataLoader
    with worker processes does the same work in parallel, ahead of the loop, which then only takes
    over a ready batch.

    How it is detected
    ------------------
    In the step model: stretches of host work in the loop itself (outside the model's forward and
    backward, the optimizer, DataLoader `__next__` and scalar reads) of at least
    `LOOP_PREPARATION_MIN_US` (0.5 ms: far more than the dispatch of a few launches), followed, before
    the model runs, by a host-to-device copy of at least 16 KiB (the prepared batch going to the GPU).
    Needs a trace in which the model's region is known (a backward pass ran). Impact: the step time
    recovered in a replay of the analyzed steps in which those stretches leave the loop, replaced by
    the hand-off of a batch from a worker, bounded below by the workers' throughput (one process
    prepared a batch in the time removed; N workers make N in that time). The location is the line that
    copies the batch to the device (callsites.json), where the preparation ends.

    How to fix
    ----------
    Move the preparation into a Dataset (or an IterableDataset yielding whole batches) and load it with
    worker processes. Before::

        for step in range(steps):
            x = torch.from_numpy(make_batch(table, rng))   # numpy work in the loop
            x = x.to(device)

    After::

        class Batches(torch.utils.data.IterableDataset):
            def __iter__(self):
                rng = np.random.default_rng(torch.utils.data.get_worker_info().id)
                while True:
                    yield torch.from_numpy(make_batch(table, rng))

        loader = DataLoader(Batches(), batch_size=None, num_workers=6, pin_memory=True,
                            persistent_workers=True, prefetch_factor=4)
        for x in loader:
            x = x.to(device, non_blocking=True)
    """

    id = "GA302"
    name = "loop-batch-preparation"
    category = Category.DATA_LOADING
    requires = frozenset({Requirement.STEPS})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_impact": Threshold(
            0.05,
            "report when moving the loop's batch preparation to workers recovers at least this share of "
            "the step (5%)",
            "fraction",
        ),
        "max_workers": Threshold(8, "cap of the suggested num_workers", "workers"),
    }
    references = (
        "https://pytorch.org/docs/stable/data.html#multi-process-data-loading",
        "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset",
    )

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        win = model.window
        if win.count == 0 or not model.has_gpu_work:
            return
        program = model.program
        mask = tf.loop_preparation_mask(model, program)
        if not mask.any():
            return
        prep_us = float(tf.loop_work_us(program)[mask].sum()) / max(1, program.steps)
        cpu_count = cm.machine_cpus(ctx)
        workers = cm.suggested_workers(cpu_count, int(ctx.threshold("max_workers")))
        pred = ctx.predict(RemedyId.DATALOADER_WORKERS, workers=workers, loop_preparation=True)
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            return
        copies = hs.callsites(ctx, "host_to_device")
        locations: list[Location] = [hs.site_location(c, "call", "bytes_per_call", "dtype") for c in copies[:2]]
        where = f" before the batch is copied at {locations[0].label()}" if locations else ""
        idle_share = win.share(model.idle_us()) if model.has_gpu_work else 0.0
        loader = cm.main_dataloader(ctx)
        loader_note = (
            f" A DataLoader exists ({loader.get('file')}:{loader.get('line')}), but this work runs after it, in the loop."
            if loader is not None and loader.get("file")
            else ""
        )
        yield self.finding(
            impact=impact,
            title=f"The loop prepares each batch on the host: {cm.ms(prep_us)} per step while the GPU waits",
            message=(
                f"The host spends {cm.ms(prep_us)} per step in the training loop itself{where}, outside "
                f"the model, the optimizer and the DataLoader (the GPU is idle "
                f"{cm.of_profiled_step(idle_share, win.median_step_us)}).{loader_note} "
                + cm.prediction_sentence(pred, f"that preparation in {workers} DataLoader workers")
                + cm.note_uncorrected(pred)
            ),
            evidence={
                "loop_preparation_ms_per_step": prep_us / 1000,
                "stretches_per_step": float(mask.sum()) / max(1, program.steps),
                "step_time_ms": pred.baseline_step_ms,
                "predicted_step_time_ms": pred.predicted_step_ms,
                "steps_analyzed": win.count,
                "cpu_count": cpu_count,
                "suggested_workers": workers,
                "dataloader": loader or {},
            },
            recommendation=(
                "Move the batch preparation into a Dataset (or an IterableDataset that yields whole "
                f"batches) and load it with DataLoader(..., num_workers={workers}, pin_memory=True, "
                "persistent_workers=True, prefetch_factor=4); copy the batch with non_blocking=True. "
                + cm.gain(pred, impact)
            ),
            locations=locations,
            impact_explanation=cm.impact_explanation(pred, f"the batch prepared by {workers} DataLoader workers"),
            remedy=RemedyId.DATALOADER_WORKERS,
            prediction=pred,
        )
