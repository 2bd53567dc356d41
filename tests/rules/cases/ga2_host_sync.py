"""SYNTHETIC rule cases for GA201 / GA202 / GA203 (host syncs). Every trace here is built by
tests.synth.SyntheticTrace and labelled synthetic.

Step layout used below (times in us, relative to the step start, 10 ms steps):
  forward kernel [100, 6000) launched at 50; the host then blocks in a sync from 1000 until the GPU
  is done (~6000); after the sync it needs `refill` us to launch the next kernel, so the GPU idles
  [6000, 6000 + refill); a second kernel runs until 9900. Default refill: 3000 us (30% of the step).
"""

from __future__ import annotations

from collections.abc import Callable

from tests.rules.harness import Expect, RuleCase
from tests.synth import K_ELEMENTWISE, K_NVJET_BF16, SyntheticTrace

STEP = 10_000.0


def _steps(
    n: int,
    blocker: Callable[[SyntheticTrace, float], None] | None,
    *,
    refill: float = 3000.0,
    every: int = 1,
) -> SyntheticTrace:
    st = SyntheticTrace()
    for i in range(n):
        t0 = i * STEP
        st.add_step(i + 1, cpu_start=t0, cpu_dur=STEP, gpu_dur=STEP - 100, gpu_start=t0 + 100)
        st.add_kernel(K_NVJET_BF16, ts=t0 + 100, dur=5900, launch_ts=t0 + 50, op="aten::mm")
        blocking = blocker is not None and i % every == 0
        if blocking:
            assert blocker is not None
            blocker(st, t0)
        start2 = t0 + 6000 + (refill if blocking else 20)
        st.add_kernel(K_ELEMENTWISE, ts=start2, dur=t0 + 9900 - start2, launch_ts=start2 - 10, op="aten::add")
        st.add_optimizer_step(t0 + 9950, 20.0)  # a training step
    return st


def item_read(st: SyntheticTrace, t0: float) -> None:
    st.add_item_read(ts=t0 + 1000, dur=5002)  # copy at 6000, sync until ~6001.5


def read_loop(st: SyntheticTrace, t0: float) -> None:
    # `for i in range(90): preds[i].item()` after the GPU went idle at t0+6000: each read is 10 us
    # (4-byte copy + sync), with 20 us of Python between reads; the loop spans ~2.7 ms of the step.
    for i in range(90):
        st.add_item_read(ts=t0 + 6050 + i * 30, dur=10.0)


def device_sync(st: SyntheticTrace, t0: float) -> None:
    st.add_sync(ts=t0 + 1000, dur=5002, name="cudaDeviceSynchronize")


def nonzero(st: SyntheticTrace, t0: float) -> None:
    st.add_cpu_op("aten::index", t0 + 990, 5020, input_types=["float", "bool"])
    st.add_cpu_op("aten::nonzero", t0 + 995, 5010, input_types=["bool"])
    corr = st.new_correlation()
    st.add_runtime("cudaMemcpyAsync", t0 + 998, 1.0, correlation=corr)
    st.add_sync(ts=t0 + 1000, dur=5002)


ITEM_SITE = {
    "kind": "host_sync",
    "call": "Tensor.item",
    "file": "train.py",
    "line": 36,
    "function": "main",
    "code": "hist.append(loss.item())",
    "count": 12,
    "per_step": 1.0,
}
SYNC_SITE = {
    "kind": "host_sync",
    "call": "torch.cuda.synchronize",
    "file": "train.py",
    "line": 41,
    "function": "main",
    "code": "torch.cuda.synchronize()",
    "count": 12,
    "per_step": 1.0,
}
NONZERO_SITE = {
    "kind": "host_sync",
    "call": "Tensor.nonzero",
    "file": "model.py",
    "line": 88,
    "function": "forward",
    "code": "idx = (scores > 0.5).nonzero()",
    "count": 12,
    "per_step": 1.0,
}

CASES = [
    # ---- GA201 ----
    RuleCase(
        # The read loop starts after the GPU went idle; its cost is the loop's whole span (first read
        # to last), not only the 90 syncs' own 8 us each, and the tiny copies do not split the gap.
        "GA201-charges-a-per-sample-read-loop-its-whole-span",
        "GA201",
        lambda: _steps(12, read_loop),
        expect=Expect(fires=True, severity="high", impact_min=0.25, impact_max=0.30),
    ),
    RuleCase(
        "GA201-fires-on-item-per-step",
        "GA201",
        lambda: _steps(12, item_read),
        expect=Expect(
            fires=True,
            count=1,
            severity="high",  # ~3 ms bubble per 10 ms step
            impact_min=0.25,
            impact_max=0.35,
            message_contains=("1 blocking read of device values per step",),
            location_contains=("aten::_local_scalar_dense",),
            evidence_keys=("reads_per_step", "gpu_idle_after_reads_ms_per_step"),
        ),
    ),
    RuleCase(
        "GA201-points-at-the-captured-call-site",
        "GA201",
        lambda: _steps(12, item_read),
        callsites=[ITEM_SITE],
        environment={"cpu_count": 16},
        expect=Expect(
            fires=True,
            location_contains=("train.py:36", "hist.append(loss.item())"),
            recommendation_contains=("train.py:36", ".detach()"),
        ),
    ),
    RuleCase(
        "GA201-quiet-on-one-item-per-100-steps",
        "GA201",
        # 12 steps, one read: 0.08 reads per step, below min_reads_per_step
        lambda: _steps(12, item_read, every=100),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA201-quiet-when-the-host-refills-the-queue-at-once",
        "GA201",
        lambda: _steps(12, item_read, refill=20),  # the read costs a 20 us bubble: 0.2% of the step
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA201-quiet-on-explicit-synchronize",
        "GA201",
        lambda: _steps(12, device_sync),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA201-threshold-override-silences",
        "GA201",
        lambda: _steps(12, item_read),
        thresholds={"min_impact": 0.5},
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA201-not-applicable-without-gpu-kernels",
        "GA201",
        lambda: SyntheticTrace(device_properties=None),
        expect=Expect(fires=False, status="not_applicable", detail_contains=("GPU kernels",)),
    ),
    # ---- GA202 ----
    RuleCase(
        "GA202-fires-on-synchronize-per-step",
        "GA202",
        lambda: _steps(12, device_sync),
        callsites=[SYNC_SITE],
        environment={"cpu_count": 16},
        expect=Expect(
            fires=True,
            severity="high",
            impact_min=0.25,
            location_contains=("train.py:41",),
            recommendation_contains=("torch.cuda.Event",),
        ),
    ),
    RuleCase(
        "GA202-quiet-on-item-reads",
        "GA202",
        lambda: _steps(12, item_read),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA202-quiet-when-synchronize-costs-nothing",
        "GA202",
        lambda: _steps(12, device_sync, refill=20),
        expect=Expect(fires=False),
    ),
    # ---- GA203 ----
    RuleCase(
        "GA203-fires-on-nonzero-per-step",
        "GA203",
        lambda: _steps(12, nonzero),
        expect=Expect(
            fires=True,
            severity="high",
            impact_min=0.25,
            location_contains=("aten::nonzero",),
            recommendation_contains=("torch.where",),
        ),
    ),
    RuleCase(
        "GA203-names-the-call-site",
        "GA203",
        lambda: _steps(12, nonzero),
        callsites=[NONZERO_SITE],
        environment={"cpu_count": 16},
        expect=Expect(fires=True, location_contains=("model.py:88",)),
    ),
    RuleCase(
        "GA203-quiet-on-item-reads",
        "GA203",
        lambda: _steps(12, item_read),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA203-quiet-when-rare",
        "GA203",
        lambda: _steps(12, nonzero, every=100),
        expect=Expect(fires=False),
    ),
]
