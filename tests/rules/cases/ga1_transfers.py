"""SYNTHETIC rule cases for GA101 / GA102 / GA103 (host<->device transfers), built with tests.synth.

Steps of 10 ms shaped like a real training loop: the host copies the input batch (12 MiB HtoD at
[100, 100 + copy_us)), launches the model's kernels (one long GEMM until 9000, an elementwise kernel
until 9900), and ends the step reading the loss (`.item()`: it waits until the GPU is done). As in
real traces, a pageable copy's cudaMemcpyAsync lasts as long as the copy (the host stages the data)
so the kernels are launched after it; a pinned copy's call returns at once and the kernels queue
behind the copy on the same stream. Pageable at 12 GB/s: ~1050 us; pinned: ~500 us. `overlapped`:
the copy runs on a side stream while the model computes.
"""

from __future__ import annotations

from tests.rules.harness import Expect, RuleCase
from tests.synth import K_ELEMENTWISE, K_NVJET_BF16, SyntheticTrace

STEP = 10_000.0
BATCH = 12 << 20  # 12 MiB: 64 x 3 x 128 x 128 float32


def _trace(
    src: str,
    copy_us: float,
    *,
    overlapped: bool = False,
    n: int = 12,
    shapes: bool = False,
    dtype: str = "float",
    dims: tuple[int, ...] = (64, 3, 128, 128),
) -> SyntheticTrace:
    st = SyntheticTrace()
    pageable = src == "Pageable"
    for i in range(n):
        t0 = i * STEP
        st.add_step(i + 1, cpu_start=t0, cpu_dur=STEP, gpu_dur=STEP - 100, gpu_start=t0 + 100)
        k0 = t0 + 100 if overlapped else t0 + 100 + copy_us
        if overlapped:
            # the model is launched first; the copy (of the next batch) runs on a side stream beside it
            first_launch = t0 + 70
            copy_launch = t0 + 90
        else:
            copy_launch = t0 + 90
            first_launch = t0 + 100 + copy_us + 10 if pageable else t0 + 100
        call = copy_us + 15 if pageable else 5.0
        corr = st.add_copy(
            "HtoD",
            src,
            BATCH,
            ts=t0 + 100,
            dur=copy_us,
            launch_ts=copy_launch,
            launch_dur=call,
            stream=8 if overlapped else None,
        )
        if shapes:
            # the aten::copy_ op that issued the copy (record_shapes): float32 NCHW images by default
            ext = st.add_cpu_op(
                "aten::copy_",
                copy_launch - 5,
                call + 10,
                input_types=[dtype, dtype],
                input_dims=[list(dims), list(dims)],
            )
            for ev in st.events:
                if ev.get("cat") == "cuda_runtime" and ev.get("args", {}).get("correlation") == corr:
                    ev["args"]["External id"] = ext
        st.add_kernel(K_NVJET_BF16, ts=k0, dur=t0 + 9000 - k0, op="aten::mm", launch_ts=first_launch)
        st.add_kernel(K_ELEMENTWISE, ts=t0 + 9000, dur=900, op="aten::add", launch_ts=first_launch + 10)
        # loss.item(): the host waits for the GPU, then starts the next step
        st.add_item_read(ts=first_launch + 30, dur=t0 + 9905 - (first_launch + 30), copy_ts=t0 + 9901)
    return st


LOADER = {
    "id": 0,
    "file": "train.py",
    "line": 25,
    "code": "loader = DataLoader(ds, batch_size=64)",
    "batch_size": 64,
    "num_workers": 4,
    "pin_memory": False,
    "persistent_workers": False,
    "prefetch_factor": 2,
    "iterations": 12,
}
TO_SITE = {
    "kind": "host_to_device",
    "call": "Tensor.to",
    "file": "train.py",
    "line": 30,
    "function": "main",
    "code": "x = x.to(device)",
    "count": 12,
    "per_step": 1.0,
    "pinned": False,
    "non_blocking": False,
    "bytes_per_call": BATCH,
    "dtype": "torch.float32",
}
RUN = {"environment": {"cpu_count": 16, "dataloaders": [LOADER]}, "callsites": [TO_SITE]}

CASES = [
    RuleCase(
        "GA101-fires-on-pageable-batch-copies",
        "GA101",
        lambda: _trace("Pageable", 1050),
        expect=Expect(
            fires=True,
            min_severity="low",
            impact_min=0.02,
            impact_max=0.08,
            message_contains=("12.0 gb/s",),
            evidence_keys=("pageable_gbps", "pinned_gbps"),
        ),
    ),
    RuleCase(
        "GA101-names-dataloader-and-to-call",
        "GA101",
        lambda: _trace("Pageable", 1050),
        **RUN,
        expect=Expect(
            fires=True,
            location_contains=("train.py:25", "train.py:30"),
            recommendation_contains=("pin_memory=True", "non_blocking=True"),
        ),
    ),
    RuleCase(
        "GA101-quiet-on-pinned-copies", "GA101", lambda: _trace("Pinned", 500), expect=Expect(fires=False)
    ),
    RuleCase(
        "GA101-quiet-when-copies-overlap-compute",
        "GA101",
        lambda: _trace("Pageable", 1050, overlapped=True),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA102-fires-on-exposed-copies",
        "GA102",
        lambda: _trace("Pinned", 1000),
        expect=Expect(
            fires=True,
            impact_min=0.09,
            impact_max=0.11,
            severity="medium",
            recommendation_contains=("non_blocking=True",),
        ),
    ),
    RuleCase(
        "GA102-quiet-when-copies-overlap-compute",
        "GA102",
        lambda: _trace("Pinned", 1000, overlapped=True),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA103-fires-on-float32-images",
        "GA103",
        lambda: _trace("Pinned", 1000, shapes=True),
        expect=Expect(
            fires=True,
            message_contains=("float32",),
            recommendation_contains=("uint8",),
            impact_min=0.05,
            impact_max=0.09,
        ),
    ),
    RuleCase(
        # numpy's default dtype: a (batch, window, features) float64 array sent to a float32 model
        "GA103-fires-on-float64-tensors",
        "GA103",
        lambda: _trace("Pinned", 1000, shapes=True, dtype="double", dims=(64, 96, 256)),
        expect=Expect(
            fires=True,
            message_contains=("float64",),
            recommendation_contains=("float32",),
            impact_min=0.03,
            impact_max=0.06,
        ),
    ),
    RuleCase(
        "GA103-quiet-on-float32-non-image-tensors",
        "GA103",
        lambda: _trace("Pinned", 1000, shapes=True, dims=(64, 96, 256)),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA103-quiet-without-image-shapes",
        "GA103",
        lambda: _trace("Pinned", 1000),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA103-quiet-when-copies-overlap",
        "GA103",
        lambda: _trace("Pinned", 1000, shapes=True, overlapped=True),
        expect=Expect(fires=False),
    ),
]
