"""GA401 small-batch cases. All traces are SYNTHETIC (tests/synth.py). Each step ends with an
optimizer step (a training run): the advice then includes the learning-rate scaling."""

from __future__ import annotations

from tests.rules.harness import Expect, RuleCase
from tests.synth import K_ELEMENTWISE, K_NVJET_BF16, SyntheticTrace

STEP_US = 1000.0


def _steps(
    kernel_grid: tuple[int, int, int], kernel_us: float, kernels: int, gap_us: float
) -> SyntheticTrace:
    """5 steps of STEP_US; each step runs `kernels` kernels of `kernel_us` separated by `gap_us`."""
    st = SyntheticTrace()
    for n in range(5):
        t0 = n * STEP_US
        st.add_step(n + 1, cpu_start=t0, cpu_dur=STEP_US, gpu_dur=STEP_US)
        t = t0 + 20.0
        for i in range(kernels):
            name = K_NVJET_BF16 if i % 2 == 0 else K_ELEMENTWISE
            st.add_kernel(name, ts=t, dur=kernel_us, grid=kernel_grid, block=(128, 1, 1), occupancy=10.0)
            t += kernel_us + gap_us
        st.add_optimizer_step(t0 + STEP_US - 15.0, 10.0)
    return st


def small_kernels() -> SyntheticTrace:
    # 16 blocks on 132 SMs, 6 us kernels, GPU busy ~24% of the step.
    return _steps((16, 1, 1), 6.0, 40, 18.0)


def few_full_grid_tiny_kernels() -> SyntheticTrace:
    # Real small-batch runs (batch 8 convnet on an H200) show grids that do fill the SMs (elementwise
    # kernels launch many blocks) but 2-3 us kernels with long host gaps: few kernels, GPU mostly idle.
    return _steps((264, 1, 1), 3.0, 40, 20.0)


def many_tiny_kernels() -> SyntheticTrace:
    # 900 full-grid kernels per step of 0.8 us, each launched (0.8 us call) 1.1 us after the last:
    # the host paces the GPU, which idles ~28% of the step; the grids already fill the SMs, so a larger
    # batch grows every kernel with it and recovers only part of that idle time per sample.
    st = SyntheticTrace()
    for n in range(5):
        t0 = n * STEP_US
        st.add_step(n + 1, cpu_start=t0, cpu_dur=STEP_US, gpu_dur=STEP_US)
        t = t0 + 5.0
        for _ in range(900):
            st.add_kernel(
                K_ELEMENTWISE,
                ts=t,
                dur=0.8,
                grid=(264, 1, 1),
                block=(128, 1, 1),
                occupancy=10.0,
                launch_ts=t - 1.0,
                launch_dur=0.8,
            )
            t += 1.1
        st.add_optimizer_step(t0 + STEP_US - 4.0, 2.0)
    return st


def full_kernels() -> SyntheticTrace:
    # Large grids and long kernels that keep the GPU ~90% busy: a well-sized batch.
    return _steps((528, 1, 1), 180.0, 5, 0.0)


ENV_HEADROOM = {
    "gpus": [
        {
            "cuda_index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "sm_count": 132,
            "compute_capability": "9.0",
            "total_memory_bytes": 80 * 2**30,
        }
    ],
    "memory": {
        "peak_allocated_bytes": 6 * 2**30,
        "peak_reserved_bytes": 8 * 2**30,
        "total_bytes": 80 * 2**30,
    },
    "dataloaders": [
        {
            "id": 0,
            "file": "train.py",
            "line": 25,
            "code": "loader = DataLoader(ds, batch_size=32)",
            "batch_size": 32,
            "num_workers": 4,
            "iterations": 100,
        }
    ],
    "settings": {},
}
ENV_FULL = {
    **ENV_HEADROOM,
    "memory": {
        "peak_allocated_bytes": 70 * 2**30,
        "peak_reserved_bytes": 76 * 2**30,
        "total_bytes": 80 * 2**30,
    },
}

CASES = [
    RuleCase(
        "GA401-fires-on-small-underfilled-kernels-raw-trace",
        "GA401",
        small_kernels,
        expect=Expect(
            fires=True,
            min_severity="high",
            message_contains=("headroom is unknown",),
            evidence_keys=("sm_use", "kernel_median_us", "gpu_busy_fraction_replayed"),
        ),
    ),
    RuleCase(
        "GA401-fires-with-batch-multiplier-and-dataloader-site",
        "GA401",
        small_kernels,
        environment=ENV_HEADROOM,
        expect=Expect(
            fires=True,
            recommendation_contains=("8x to 256", "learning rate"),
            location_contains=("train.py:25",),
        ),
    ),
    RuleCase(
        "GA401-quiet-when-memory-is-full",
        "GA401",
        small_kernels,
        environment=ENV_FULL,
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA401-fires-on-few-tiny-kernels-even-when-grids-fill-the-sms",
        "GA401",
        few_full_grid_tiny_kernels,
        environment=ENV_HEADROOM,
        expect=Expect(fires=True, min_severity="high", evidence_keys=("recommended_batch_multiplier",)),
    ),
    RuleCase(
        "GA401-recovers-only-the-idle-share-when-grids-fill-the-sms",
        "GA401",
        many_tiny_kernels,
        environment=ENV_HEADROOM,
        # every kernel grows with the batch: 2x the batch fills the 28% idle time, more gains nothing
        expect=Expect(fires=True, impact_min=0.2, impact_max=0.35, title_contains=("2x the batch",)),
    ),
    RuleCase("GA401-quiet-on-full-grid-long-kernels", "GA401", full_kernels, expect=Expect(fires=False)),
]
