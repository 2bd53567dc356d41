"""The remedies gpuadvisor can recommend, by stable id.

A finding names the remedy that fixes it (`Finding.remedy`). The step model predicts what the remedy
would gain by replaying a transformed copy of the analyzed steps (`Finding.prediction`), and
`gpuadvisor verify` measures the remedies that can be applied without editing the script
(`Finding.verified`). This module is the shared vocabulary of the three: rules, the replay and verify
refer to remedies by these ids only.

`injectable` says whether `gpuadvisor verify` can apply the remedy inside the script's process
without an edit of the script (a settings switch, a constructor argument, a wrapper); the others
need a code change that only the user can make.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["REMEDIES", "RemedyId", "RemedySpec", "remedy_spec"]


class RemedyId(str, enum.Enum):
    """Stable remedy ids (JSON, verify.json, docs)."""

    # host <-> device transfers
    PINNED_ASYNC_COPIES = "pinned_async_copies"  # pinned source + non_blocking copies
    PREFETCH_COPIES = "prefetch_copies"  # copy the next batch on a side stream during compute
    UINT8_INPUTS = "uint8_inputs"  # ship narrow dtypes, convert on the GPU
    # host syncs
    REMOVE_HOST_SYNCS = "remove_host_syncs"  # no .item()/.cpu()/synchronize() in the step
    STATIC_SHAPES = "static_shapes"  # avoid data-dependent-shape ops (nonzero, boolean masks)
    # input pipeline
    DATALOADER_WORKERS = "dataloader_workers"  # num_workers, persistent_workers, prefetch_factor
    DATALOADER_PIN_MEMORY = "dataloader_pin_memory"
    PERSISTENT_WORKERS = "persistent_workers"  # keep workers alive across epochs
    # costs that come every N steps (issue 27)
    EVALUATE_LESS_OFTEN = "evaluate_less_often"  # evaluation interval / batches, or asynchronously
    ASYNC_CHECKPOINT = "async_checkpoint"  # save checkpoints less often or in the background
    # batch and launches
    LARGER_BATCH = "larger_batch"
    CUDA_GRAPHS = "cuda_graphs"
    TORCH_COMPILE = "torch_compile"
    FUSED_OPTIMIZER = "fused_optimizer"
    # kernels
    FIX_KERNEL_GRID = "fix_kernel_grid"
    BF16_AUTOCAST = "bf16_autocast"
    TF32 = "tf32"
    CHANNELS_LAST = "channels_last"
    CUDNN_BENCHMARK = "cudnn_benchmark"
    # busy-time efficiency (issue 31)
    SDPA = "sdpa"  # F.scaled_dot_product_attention instead of hand-written attention
    PAD_GEMM_SHAPES = "pad_gemm_shapes"  # matmul dimensions padded to multiples of 8/64
    FUSED_CROSS_ENTROPY = "fused_cross_entropy"  # the loss without an FP32 copy of the logits
    # memory
    EXPANDABLE_SEGMENTS = "expandable_segments"
    REDUCE_MEMORY = "reduce_memory"
    # multi-GPU
    OVERLAP_COMMUNICATION = "overlap_communication"
    BALANCE_RANKS = "balance_ranks"
    # all safe injectable remedies together (verify only)
    ALL_SAFE = "all_safe"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RemedySpec:
    id: RemedyId
    title: str  # short imperative, e.g. "Use bf16 autocast"
    injectable: bool  # verify can apply it without an edit of the script
    changes_batch: bool = False  # results compare in samples/s, not step time
    changes_numerics: bool = False  # lower precision or a different batch: the user must re-check accuracy


REMEDIES: dict[RemedyId, RemedySpec] = {
    s.id: s
    for s in (
        RemedySpec(RemedyId.PINNED_ASYNC_COPIES, "Copy from pinned memory with non_blocking=True", False),
        RemedySpec(RemedyId.PREFETCH_COPIES, "Prefetch the next batch to the GPU during compute", False),
        RemedySpec(RemedyId.UINT8_INPUTS, "Ship inputs in a narrower dtype (uint8, float32) and convert on the GPU", False),
        RemedySpec(RemedyId.REMOVE_HOST_SYNCS, "Remove blocking reads and synchronizes from the step", False),
        RemedySpec(RemedyId.STATIC_SHAPES, "Replace data-dependent-shape ops with static-shape ones", False),
        RemedySpec(RemedyId.DATALOADER_WORKERS, "Load batches in DataLoader worker processes", True),
        RemedySpec(RemedyId.DATALOADER_PIN_MEMORY, "Pin DataLoader batches (pin_memory=True)", True),
        RemedySpec(
            RemedyId.PERSISTENT_WORKERS, "Keep DataLoader workers alive across epochs (persistent_workers=True)", True
        ),
        RemedySpec(RemedyId.EVALUATE_LESS_OFTEN, "Evaluate less often or on fewer batches", False),
        RemedySpec(RemedyId.ASYNC_CHECKPOINT, "Save checkpoints less often or in the background", False),
        RemedySpec(
            RemedyId.LARGER_BATCH, "Raise the batch size", True, changes_batch=True, changes_numerics=True
        ),
        RemedySpec(RemedyId.CUDA_GRAPHS, "Replay the step as a CUDA graph", False),
        RemedySpec(RemedyId.TORCH_COMPILE, "Compile the model with torch.compile", True),
        RemedySpec(RemedyId.FUSED_OPTIMIZER, "Use the fused optimizer implementation", True),
        RemedySpec(RemedyId.FIX_KERNEL_GRID, "Launch the kernel with enough blocks to fill the GPU", False),
        RemedySpec(
            RemedyId.BF16_AUTOCAST,
            "Run matmuls and convolutions in bf16 (autocast)",
            True,
            changes_numerics=True,
        ),
        RemedySpec(
            RemedyId.TF32, "Allow TF32 for float32 matmuls and convolutions", True, changes_numerics=True
        ),
        RemedySpec(RemedyId.CHANNELS_LAST, "Use channels_last memory format for the conv net", True),
        RemedySpec(RemedyId.CUDNN_BENCHMARK, "Enable cudnn.benchmark", True),
        RemedySpec(RemedyId.SDPA, "Use F.scaled_dot_product_attention (flash attention)", False),
        RemedySpec(RemedyId.PAD_GEMM_SHAPES, "Pad matmul dimensions to multiples of 64", False),
        RemedySpec(
            RemedyId.FUSED_CROSS_ENTROPY,
            "Compute the loss on the bf16 logits (no FP32 copy of the logits)",
            False,
            changes_numerics=True,
        ),
        RemedySpec(
            RemedyId.EXPANDABLE_SEGMENTS, "Use PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", True
        ),
        RemedySpec(
            RemedyId.REDUCE_MEMORY, "Reduce peak memory (activation checkpointing, smaller batch)", False
        ),
        RemedySpec(RemedyId.OVERLAP_COMMUNICATION, "Overlap gradient communication with compute", False),
        RemedySpec(RemedyId.BALANCE_RANKS, "Remove the per-rank imbalance", False),
        RemedySpec(RemedyId.ALL_SAFE, "All safe injectable remedies together", True),
    )
}


def remedy_spec(remedy: str | RemedyId) -> RemedySpec | None:
    """The spec of a remedy id (string or enum), or None for an unknown id (a user rule's own)."""
    try:
        return REMEDIES[RemedyId(remedy)]
    except ValueError:
        return None
