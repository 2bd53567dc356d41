"""GA601 low-occupancy-kernels cases. All traces are SYNTHETIC (tests/synth.py)."""

from __future__ import annotations

from tests.rules.harness import Expect, RuleCase
from tests.synth import K_ADAM, K_ELEMENTWISE, K_NVJET_BF16, SyntheticTrace

# A user's own Triton kernel and a custom CUDA extension kernel: the user chose their grids.
K_USER_TRITON = "_row_sum_kernel"
K_USER_CUDA = "void my_ext::fused_bias_act_kernel<float, 4>(float*, float const*, int)"
# torch.compile's generated kernels: Inductor sizes their grids from the tensor sizes.
K_TRITON_RED = "triton_red_fused_sum_0"


def _trace(
    main: str, grid: tuple[int, int, int], occupancy: float, registers: int = 32, extra: str | None = None
) -> SyntheticTrace:
    """5 steps of 1 ms, GPU-bound like a real training step: the host launches the step's kernels at
    its start (`main` 400 us under aten::sum, a full elementwise kernel 300 us), then reads the loss
    (`.item()` waits for the GPU) and starts the next step."""
    st = SyntheticTrace()
    for n in range(5):
        t0 = n * 1000.0
        st.add_step(n + 1, cpu_start=t0, cpu_dur=1000.0, gpu_dur=1000.0)
        st.add_kernel(
            main,
            ts=t0 + 20.0,
            dur=400.0,
            grid=grid,
            block=(256, 1, 1),
            occupancy=occupancy,
            registers=registers,
            op="aten::sum",
            op_input_types=["float"],
            launch_ts=t0 + 5.0,
            launch_dur=3.0,
        )
        st.add_kernel(
            K_ELEMENTWISE,
            ts=t0 + 430.0,
            dur=300.0,
            grid=(1024, 1, 1),
            occupancy=90.0,
            launch_ts=t0 + 9.0,
            launch_dur=3.0,
        )
        if extra:
            st.add_kernel(
                extra,
                ts=t0 + 740.0,
                dur=200.0,
                grid=(12, 1, 1),
                occupancy=5.0,
                launch_ts=t0 + 13.0,
                launch_dur=3.0,
            )
        gpu_end = t0 + (940.0 if extra else 730.0)
        st.add_item_read(ts=t0 + 20.0, dur=gpu_end + 5.0 - (t0 + 20.0), copy_ts=gpu_end + 1.0)
        st.add_optimizer_step(gpu_end + 10.0, 5.0)
    return st


def small_grid() -> SyntheticTrace:
    return _trace(K_USER_TRITON, (8, 1, 1), 6.0)


def register_limited() -> SyntheticTrace:
    return _trace(K_USER_CUDA, (2048, 1, 1), 12.0, registers=255)


def compiler_small_grid() -> SyntheticTrace:
    return _trace(K_TRITON_RED, (8, 1, 1), 6.0)


def persistent_gemm() -> SyntheticTrace:
    # nvjet: one block per SM (2x66 = 132), 0 estimated occupancy by design; plus a multi-tensor
    # optimizer kernel with a small grid (GA502's business, not low occupancy).
    return _trace(K_NVJET_BF16, (2, 66, 1), 0.0, extra=K_ADAM)


CASES = [
    RuleCase(
        "GA601-fires-on-small-grid-kernel",
        "GA601",
        small_grid,
        expect=Expect(
            fires=True,
            count=1,
            min_severity="medium",
            message_contains=("grid too small",),
            location_contains=("aten::sum", K_USER_TRITON),
            evidence_keys=("blocks_per_sm", "share"),
        ),
    ),
    RuleCase(
        "GA601-fires-on-register-limited-kernel",
        "GA601",
        register_limited,
        expect=Expect(
            fires=True,
            count=1,
            message_contains=("limited by registers",),
            recommendation_contains=("registers",),
        ),
    ),
    RuleCase(
        "GA601-quiet-on-persistent-gemm-and-multi-tensor-kernels",
        "GA601",
        persistent_gemm,
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA601-quiet-when-share-below-threshold",
        "GA601",
        small_grid,
        thresholds={"min_kernel_share": 0.9},
        expect=Expect(fires=False),
    ),
    RuleCase(
        # the same small grid in a torch.compile kernel: the lever is the batch/shapes (GA401), not a grid
        "GA601-quiet-on-compiler-generated-kernels",
        "GA601",
        compiler_small_grid,
        expect=Expect(fires=False),
    ),
]
