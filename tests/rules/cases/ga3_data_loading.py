"""SYNTHETIC rule cases for GA301 (dataloader-stall) and GA302 (loop-batch-preparation), built with tests.synth.

GA302: tests.synth.training_loop, an eager training loop whose steps start with `prep_us` of batch
preparation in the loop, optionally followed by the batch's copy to the device.

Steps of 10 ms: the host waits in DataLoader __next__ for `wait` us at the step start; the GPU has no
work during that wait unless `prefetched` (then a kernel from the previous step's queue covers it).
"""

from __future__ import annotations

from tests.rules.harness import Expect, RuleCase
from tests.synth import K_NVJET_BF16, SyntheticTrace, training_loop

STEP = 10_000.0


def _trace(
    wait: float, *, multiprocessing: bool = False, prefetched: bool = False, n: int = 12
) -> SyntheticTrace:
    st = SyntheticTrace()
    for i in range(n):
        t0 = i * STEP
        st.add_step(i + 1, cpu_start=t0, cpu_dur=STEP, gpu_dur=STEP, gpu_start=t0)
        st.add_dataloader_wait(ts=t0 + 10, dur=wait, multiprocessing=multiprocessing)
        k0 = t0 + 10 if prefetched else t0 + 20 + wait
        st.add_kernel(K_NVJET_BF16, ts=k0, dur=t0 + 9990 - k0, launch_ts=max(t0, k0 - 10), op="aten::mm")
    return st


LOADER0 = {
    "id": 0,
    "file": "train.py",
    "line": 25,
    "code": "loader = DataLoader(ds, batch_size=64)",
    "batch_size": 64,
    "num_workers": 0,
    "pin_memory": False,
    "persistent_workers": False,
    "prefetch_factor": None,
    "iterations": 12,
}

CASES = [
    RuleCase(
        "GA301-fires-on-single-process-loader",
        "GA301",
        lambda: _trace(4000),
        expect=Expect(
            fires=True,
            severity="high",
            impact_min=0.35,
            impact_max=0.45,
            message_contains=("_SingleProcessDataLoaderIter",),
            recommendation_contains=("num_workers=8", "pin_memory=True"),
        ),
    ),
    RuleCase(
        "GA301-uses-captured-loader-and-cpu-count",
        "GA301",
        lambda: _trace(4000),
        environment={"cpu_count": 6, "dataloaders": [LOADER0]},
        callsites=[],
        expect=Expect(
            fires=True,
            location_contains=("train.py:25",),
            recommendation_contains=("num_workers=5", "pin_memory=True", "persistent_workers=True"),
        ),
    ),
    RuleCase(
        "GA301-slow-workers-advice",
        "GA301",
        lambda: _trace(3000, multiprocessing=True),
        expect=Expect(fires=True, message_contains=("_MultiProcessingDataLoaderIter",)),
    ),
    RuleCase(
        "GA301-quiet-when-prefetched",
        "GA301",
        lambda: _trace(4000, prefetched=True),
        expect=Expect(fires=False),
    ),
    RuleCase("GA301-quiet-on-short-waits", "GA301", lambda: _trace(100), expect=Expect(fires=False)),
    RuleCase(
        "GA302-fires-on-batch-preparation-before-the-copy",
        "GA302",
        lambda: training_loop(prep_us=4000.0, batch_bytes=4 << 20),
        environment={"cpu_count": 5},
        callsites=[{"kind": "host_to_device", "call": "Tensor.to", "file": "train.py", "line": 42,
                    "code": "x = x.to(device)", "function": "main", "count": 20, "count_in_window": 6,
                    "per_step": 1.0, "bytes_per_call": 4 << 20, "dtype": "torch.float32"}],
        expect=Expect(
            fires=True,
            severity="high",
            impact_min=0.6,
            impact_max=0.8,
            location_contains=("train.py:42",),
            recommendation_contains=("num_workers=4", "pin_memory=True", "non_blocking=True"),
            message_contains=("4.03 ms per step", "in 4 DataLoader workers"),
        ),
    ),
    RuleCase(
        "GA302-quiet-without-a-batch-copy",
        "GA302",
        lambda: training_loop(prep_us=4000.0),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA302-quiet-on-a-short-loop",
        "GA302",
        lambda: training_loop(prep_us=300.0, batch_bytes=4 << 20),
        expect=Expect(fires=False),
    ),
]
