"""GA803 (activation recompute) cases. All traces are SYNTHETIC (tests/synth.py), shaped as torch 2.13
records `torch.utils.checkpoint(use_reentrant=False)`: the recomputed forward ops (with autograd
sequence numbers) run inside the backward thread's `autograd::engine::evaluate_function` spans, the
backward formulas' ops (without) next to them."""

from __future__ import annotations

from tests.rules.harness import Expect, RuleCase
from tests.synth import BACKWARD_TID, K_NVJET_BF16, SyntheticTrace

BF16 = "c10::BFloat16"
GIB = 2**30
X = [8192, 4096]
W = [4096, 4096]


def _mem(allocated_gib: float, total_gib: float = 80.0) -> dict[str, object]:
    return {"memory": {"peak_allocated_bytes": int(allocated_gib * GIB), "total_bytes": int(total_gib * GIB)}}


def _blocks(recompute: bool = True, same_shapes: bool = True) -> SyntheticTrace:
    """4 GPU-bound steps of 6 bf16 linear blocks: forward 300 us per block on the main thread; backward per
    block an engine span on the backward thread holding (when `recompute`) the block's forward again
    (same op and shapes, or other shapes: a double backward's ops) and the two gradient GEMMs (600 us)."""
    st = SyntheticTrace()
    seq = 100
    period = 6 * (300.0 + 700.0 + 10.0) + 6 * 20.0 + 400.0
    for n in range(4):
        t0 = n * period
        t, launch = t0 + 20.0, t0 + 5.0
        seqs = []
        for _ in range(6):
            st.add_kernel(K_NVJET_BF16, ts=t, dur=300.0, op="aten::linear", op_input_types=[BF16, BF16],
                          op_input_dims=[X, W], op_seq=seq, launch_ts=launch, launch_dur=3.0)
            seqs.append(seq)
            seq += 1
            launch += 10.0
            t += 302.0
        launch = max(launch, t - 200.0)
        for s in reversed(seqs):
            span0 = launch
            st.add_cpu_op("autograd::engine::evaluate_function: AddmmBackward0", span0, 150.0, seq=s,
                          tid=BACKWARD_TID)
            if recompute:
                dims = [X, W] if same_shapes else [[64, 4096], W]
                st.add_kernel(K_NVJET_BF16, ts=t, dur=300.0, op="aten::linear", op_input_types=[BF16, BF16],
                              op_input_dims=dims, op_seq=seq, launch_ts=launch + 5.0, launch_dur=3.0,
                              op_ts=launch + 2.0, op_dur=40.0, launch_tid=BACKWARD_TID)
                seq += 1
                t += 302.0
            for _ in range(2):
                st.add_kernel(K_NVJET_BF16, ts=t, dur=300.0, op="aten::mm", op_input_types=[BF16, BF16],
                              op_input_dims=[X, W], launch_ts=launch + 60.0, launch_dur=3.0,
                              op_ts=launch + 55.0, op_dur=20.0, launch_tid=BACKWARD_TID, op_without_seq=True)
                t += 302.0
                launch += 30.0
            launch = span0 + 160.0
        st.add_step(n + 1, cpu_start=t0, cpu_dur=period, gpu_dur=period)
        st.add_item_read(ts=launch + 20.0, dur=max(10.0, t - launch - 20.0), copy_ts=t + 2.0)
        st.add_optimizer_step(t + 10.0, 5.0)
    return st


def checkpointed_blocks() -> SyntheticTrace:
    return _blocks()


def plain_blocks() -> SyntheticTrace:
    return _blocks(recompute=False)


def double_backward() -> SyntheticTrace:
    return _blocks(same_shapes=False)


CASES = [
    RuleCase(
        "GA803-fires-on-recomputation-with-memory-to-spare",
        "GA803",
        checkpointed_blocks,
        environment=_mem(10),
        expect=Expect(
            fires=True,
            min_severity="high",
            title_contains=("with memory to spare",),
            message_contains=("recomputes the forward", "it fits"),
            recommendation_contains=("gpuadvisor verify --only no_activation_checkpointing",),
        ),
    ),
    RuleCase(
        # 0.4 GiB of saved activations, 0.2 GiB below 90% of the GPU: half of the recomputation can go
        "GA803-checkpoints-fewer-blocks-when-only-part-fits",
        "GA803",
        checkpointed_blocks,
        environment=_mem(71.8),
        expect=Expect(
            fires=True,
            impact_min=0.10,
            impact_max=0.15,
            message_contains=("of them fit below 90% of the GPU",),
            recommendation_contains=("Checkpoint fewer blocks",),
        ),
    ),
    RuleCase(
        "GA803-quiet-without-headroom",
        "GA803",
        checkpointed_blocks,
        environment=_mem(75),
        expect=Expect(fires=False),
    ),
    RuleCase(
        "GA803-says-the-headroom-is-unknown-on-a-raw-trace",
        "GA803",
        checkpointed_blocks,
        expect=Expect(fires=True, severity="medium", message_contains=("not recorded",)),
    ),
    RuleCase("GA803-quiet-without-checkpointing", "GA803", plain_blocks, environment=_mem(10), expect=Expect(fires=False)),
    RuleCase(
        "GA803-quiet-on-backward-ops-that-are-not-the-forward-again",
        "GA803",
        double_backward,
        environment=_mem(10),
        expect=Expect(fires=False),
    ),
]
