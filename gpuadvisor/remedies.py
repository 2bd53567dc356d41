"""The remedies gpuadvisor can recommend: one record per remedy, by stable id.

A finding names the remedy that fixes it (`Finding.remedy`). The step model predicts what the remedy
would gain by replaying a transformed copy of the analyzed steps (`Finding.prediction`), and
`gpuadvisor verify` measures the remedies that can be applied without editing the script
(`Finding.verified`). This module is the shared vocabulary of the three and the one place a remedy is
described: its id, title, finding category, safety class, where it sits in the order combined remedies
are applied, how the replay predicts it (`replay`) and whether and how verify injects it
(`injection`, with the levers `verify --explore` measures).

Layering: this is a leaf module (it imports nothing of the package). The functions that carry out a
record live on their own side and register themselves against the id: the replay transformations in
`gpuadvisor.stepmodel.predict` (`TRANSFORMS`), the injections in `gpuadvisor.verify.inject`
(`INJECTORS`) and verify's record checks in `gpuadvisor.verify.plan` (`SKIP_CHECKS`).
`tests/test_remedy_registry.py` fails when a record lacks a part or a side lacks the function a record
promises (and the other way round). A part that does not exist is stated, never left out:
`NotReplayed(reason)` ("not modeled yet" only as `NotReplayed.pending(issue)`), `NotInjectable(reason)`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "COMPOSITE",
    "REMEDIES",
    "Injection",
    "Lever",
    "NotInjectable",
    "NotReplayed",
    "RemedyId",
    "RemedySpec",
    "Replay",
    "Safety",
    "apply_order",
    "explore_levers",
    "lever",
    "remedy_spec",
    "rule_remedies",
]


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
    REMOVE_EMPTY_CACHE = "remove_empty_cache"  # no torch.cuda.empty_cache() in the loop
    REDUCE_MEMORY = "reduce_memory"
    DROP_ACTIVATION_CHECKPOINTING = "drop_activation_checkpointing"  # recompute less where memory allows
    # multi-GPU
    OVERLAP_COMMUNICATION = "overlap_communication"
    BALANCE_RANKS = "balance_ranks"
    # all safe injectable remedies together (verify only)
    ALL_SAFE = "all_safe"

    def __str__(self) -> str:
        return self.value


class Safety(str, enum.Enum):
    """What a remedy changes besides speed."""

    SAFE = "safe"  # neither the numerics nor the batch: may join all_safe
    CHANGES_NUMERICS = "changes_numerics"  # lower precision: the user must re-check accuracy
    CHANGES_BATCH = "changes_batch"  # a different batch: compared in samples/s; numerics change too

    def __str__(self) -> str:
        return self.value


# The category of a remedy that stands for several (all_safe): its trial takes its members' findings.
COMPOSITE = "composite"


@dataclass(frozen=True)
class Replay:
    """The step model predicts the remedy by a transformation of the replay program, registered
    against the id in `gpuadvisor.stepmodel.predict.TRANSFORMS`; `how` says what it changes."""

    how: str


@dataclass(frozen=True)
class NotReplayed:
    """The replay does not predict this remedy, and why. `pending_issue`: "not modeled yet", an
    issue will add the transformation (the only form of a missing transform the registry test allows
    without a reason of substance)."""

    reason: str
    pending_issue: int | None = None

    @classmethod
    def pending(cls, issue: int) -> NotReplayed:
        return cls(f"not modeled yet (issue {issue})", issue)


@dataclass(frozen=True)
class Lever:
    """One setting `verify` can measure: the remedy's injection with these parameters.

    `name` is unique over all remedies (verify.json, `--only`); `params` are what the injection
    reads (`gpuadvisor.verify.inject`); `explore` says whether `verify --explore` measures it;
    `slow`: its warm-up takes minutes (compilation), so explore tries it last, on top of the best
    configuration of the others.
    """

    name: str
    title: str
    params: tuple[tuple[str, Any], ...] = ()
    explore: bool = True
    slow: bool = False

    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)


@dataclass(frozen=True)
class Injection:
    """verify applies the remedy inside the trial process without an edit of the script.

    `how`: what the trial changes (docs); `skipped_when`: what rules a trial out (docs; the checks are
    `gpuadvisor.verify.plan.SKIP_CHECKS`); `levers`: the settings it measures, the first being the one
    `verify` tries for a finding; `for_rules`: rules whose findings do not name a remedy yet but that
    this remedy answers; `all_safe_default`: a member of `--only all_safe` alone."""

    how: str
    skipped_when: str
    levers: tuple[Lever, ...]
    for_rules: tuple[str, ...] = ()
    all_safe_default: bool = False


@dataclass(frozen=True)
class NotInjectable:
    """verify cannot apply the remedy without an edit of the script (or at all), and why."""

    reason: str


EDIT = "none: needs an edit of the script"


@dataclass(frozen=True)
class RemedySpec:
    id: RemedyId
    title: str  # short imperative, e.g. "Use bf16 autocast"
    category: str  # a Category value (gpuadvisor.model), or COMPOSITE
    safety: Safety
    order: int  # combined remedies apply in increasing order (replay and injection alike)
    replay: Replay | NotReplayed
    injection: Injection | NotInjectable
    notes: tuple[str, ...] = field(default=())

    @property
    def injectable(self) -> bool:
        """verify can apply it without an edit of the script."""
        return isinstance(self.injection, Injection)

    @property
    def replayed(self) -> bool:
        return isinstance(self.replay, Replay)

    @property
    def changes_batch(self) -> bool:
        """Results compare in samples/s, not step time."""
        return self.safety is Safety.CHANGES_BATCH

    @property
    def changes_numerics(self) -> bool:
        """Lower precision or a different batch: the user must re-check accuracy."""
        return self.safety in (Safety.CHANGES_NUMERICS, Safety.CHANGES_BATCH)

    @property
    def levers(self) -> tuple[Lever, ...]:
        return self.injection.levers if isinstance(self.injection, Injection) else ()


def _spec(
    id: RemedyId,
    title: str,
    category: str,
    safety: Safety,
    order: int,
    replay: Replay | NotReplayed,
    injection: Injection | NotInjectable,
) -> RemedySpec:
    return RemedySpec(id, title, category, safety, order, replay, injection)


_R = RemedyId
_S = Safety
_NO_EDIT = NotInjectable(EDIT)
# costs between steps (issue 27): outside the analyzed steps, so not a transformation of them
_TIMED_STEPS = NotReplayed(
    "a cost between steps, outside the analyzed steps: priced from the run's timed steps "
    "(gpuadvisor.stepmodel.periodic; the finding's prediction has basis `timed_steps`)"
)

# `order` is the application order: waits and the input pipeline first (they change what the host
# does), then copies, memory, kernels and precision, then the launch remedies (a CUDA graph forms only
# once the waits that break it are gone), the larger batch last (it scales what is left). The records
# are listed in that order except bf16 before tf32 (the order verify tries them for a GA701 finding).
# fmt: off
_SPECS: tuple[RemedySpec, ...] = (
    _spec(
        _R.REMOVE_HOST_SYNCS, "Remove blocking reads and synchronizes from the step", "host_sync", _S.SAFE, 10,
        Replay("the step's blocking scalar reads and explicit waits removed"), _NO_EDIT,
    ),
    _spec(
        _R.STATIC_SHAPES, "Replace data-dependent-shape ops with static-shape ones", "host_sync", _S.SAFE, 20,
        Replay("the waits of data-dependent-shape ops removed"), _NO_EDIT,
    ),
    _spec(
        _R.EVALUATE_LESS_OFTEN, "Evaluate less often or on fewer batches", "periodic_cost", _S.SAFE, 25,
        _TIMED_STEPS, _NO_EDIT,
    ),
    _spec(
        _R.ASYNC_CHECKPOINT, "Save checkpoints less often or in the background", "periodic_cost", _S.SAFE, 27,
        _TIMED_STEPS, _NO_EDIT,
    ),
    _spec(
        _R.DATALOADER_WORKERS, "Load batches in DataLoader worker processes", "data_loading", _S.SAFE, 30,
        Replay("the data wait shrunk to what N workers deliver (or the loop's batch preparation moved to workers)"),
        Injection(
            how="every DataLoader: `num_workers` -> N (`--num-workers`), `persistent_workers=True`, "
            "`prefetch_factor` -> 4; on a CUDA machine also `pin_memory=True` (explore: `num_workers` "
            "alone, and `prefetch_factor` on loaders with workers, each its own lever)",
            skipped_when="no DataLoader; all have >= N workers; an `IterableDataset` (each worker would "
            "yield the whole stream)",
            levers=(
                Lever(
                    "dataloader_workers",
                    "num_workers=N with persistent workers, prefetch 4 and pinned memory",
                    (("num_workers", "auto"), ("persistent_workers", True), ("prefetch_factor", 4),
                     ("pin_memory", "cuda")),
                    explore=False,
                ),
                Lever("num_workers", "DataLoader num_workers=N", (("num_workers", "auto"),)),
                Lever("prefetch_factor", "DataLoader prefetch_factor=4", (("prefetch_factor", 4),)),
            ),
            for_rules=("GA301",),
            all_safe_default=True,
        ),
    ),
    _spec(
        _R.DATALOADER_PIN_MEMORY, "Pin DataLoader batches (pin_memory=True)", "host_device_transfer", _S.SAFE, 35,
        Replay("pageable host-to-device copies of 64 KiB and more made pinned and asynchronous"),
        Injection(
            how="every DataLoader: `pin_memory=True`",
            skipped_when="no CUDA; no DataLoader; already pinned",
            levers=(Lever("dataloader_pin_memory", "DataLoader pin_memory=True", (("pin_memory", True),)),),
            all_safe_default=True,
        ),
    ),
    _spec(
        _R.PERSISTENT_WORKERS, "Keep DataLoader workers alive across epochs (persistent_workers=True)",
        "data_loading", _S.SAFE, 37,
        _TIMED_STEPS,
        Injection(
            how="every DataLoader with workers (or given workers by `num_workers` in the same trial): "
            "`persistent_workers=True`",
            skipped_when="no DataLoader; none has workers (explore: unless `num_workers` joins it); "
            "all are persistent already",
            levers=(
                Lever(
                    "persistent_workers", "DataLoader persistent_workers=True", (("persistent_workers", True),)
                ),
            ),
            all_safe_default=True,
        ),
    ),
    _spec(
        _R.UINT8_INPUTS, "Ship inputs in a narrower dtype (uint8, float32) and convert on the GPU",
        "host_device_transfer", _S.SAFE, 40,
        Replay("the named input copies narrowed by the dtype ratio"), _NO_EDIT,
    ),
    _spec(
        _R.PINNED_ASYNC_COPIES, "Copy from pinned memory with non_blocking=True", "host_device_transfer", _S.SAFE, 50,
        Replay("pageable host-to-device copies of 64 KiB and more made pinned and asynchronous"), _NO_EDIT,
    ),
    _spec(
        _R.PREFETCH_COPIES, "Prefetch the next batch to the GPU during compute", "host_device_transfer", _S.SAFE, 60,
        Replay("host-to-device copies of 64 KiB and more moved off the step's critical path"), _NO_EDIT,
    ),
    _spec(
        _R.EXPANDABLE_SEGMENTS, "Use PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "memory", _S.SAFE, 70,
        Replay("the step's cudaMalloc/cudaFree calls removed"),
        Injection(
            how="`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` in the trial's environment (appended "
            "to an existing value)",
            skipped_when="no CUDA; already set",
            levers=(Lever("expandable_segments", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),),
            for_rules=("GA802",),
            all_safe_default=True,
        ),
    ),
    _spec(
        _R.REMOVE_EMPTY_CACHE, "Stop emptying the CUDA cache in the loop (torch.cuda.empty_cache())", "memory",
        _S.SAFE, 71,
        Replay("the step's cudaMalloc/cudaFree calls removed (their driver time and the device waits of cudaFree)"),
        Injection(
            how="`torch.cuda.empty_cache` made a no-op in the trial process (the caching allocator keeps its "
            "blocks)",
            skipped_when="no CUDA; the script never calls torch.cuda.empty_cache() (`skipped`: nothing to change)",
            levers=(Lever("no_empty_cache", "torch.cuda.empty_cache() made a no-op"),),
            all_safe_default=True,
        ),
    ),
    _spec(
        _R.REDUCE_MEMORY, "Reduce peak memory (activation checkpointing, smaller batch)", "memory", _S.SAFE, 75,
        NotReplayed("a memory remedy: it buys headroom, the time it costs or saves depends on its use"),
        _NO_EDIT,
    ),
    _spec(
        _R.DROP_ACTIVATION_CHECKPOINTING, "Checkpoint fewer blocks (or none) where memory allows", "memory",
        _S.SAFE, 76,
        Replay(
            "the forward work recomputed inside the backward (torch.utils.checkpoint regions) removed, all of "
            "it or the share whose saved activations fit in the free memory "
            "(gpuadvisor.stepmodel.recompute)"
        ),
        Injection(
            how="`torch.utils.checkpoint.checkpoint` and `checkpoint_sequential` call the checkpointed "
            "functions directly (no recomputation; the activations are kept); the trial reports the peak "
            "memory it reached (`peak_memory_bytes`)",
            skipped_when="no CUDA; the script never calls torch.utils.checkpoint (`skipped`: nothing to "
            "change); out of memory (`failed` with the error)",
            levers=(Lever("no_activation_checkpointing", "torch.utils.checkpoint runs the function directly"),),
            for_rules=("GA803",),
        ),
    ),
    _spec(
        _R.FIX_KERNEL_GRID, "Launch the kernel with enough blocks to fill the GPU", "low_occupancy", _S.SAFE, 80,
        Replay("the named kernels' durations scaled to a full GPU"), _NO_EDIT,
    ),
    _spec(
        _R.SDPA, "Use F.scaled_dot_product_attention (flash attention)", "kernel_efficiency", _S.SAFE, 82,
        Replay(
            "the hand-written attention's kernels shrunk to what fused attention needs for the same shapes "
            "(gpuadvisor.stepmodel.busy.attention_patterns)"
        ),
        _NO_EDIT,
    ),
    _spec(
        _R.PAD_GEMM_SHAPES, "Pad matmul dimensions to multiples of 64", "kernel_efficiency", _S.SAFE, 84,
        Replay(
            "misaligned bf16/fp16 GEMMs at their padded FLOPs and the roofline fraction of the run's aligned "
            "GEMMs (gpuadvisor.stepmodel.busy.odd_gemms)"
        ),
        _NO_EDIT,
    ),
    _spec(
        _R.FUSED_CROSS_ENTROPY, "Compute the loss on the bf16 logits (no FP32 copy of the logits)",
        "kernel_efficiency", _S.CHANGES_NUMERICS, 86,
        Replay(
            "the FP32 large-vocabulary loss kernels shrunk to one read of the bf16 logits and one write of "
            "their gradient (gpuadvisor.stepmodel.busy.vocab_loss)"
        ),
        _NO_EDIT,
    ),
    _spec(
        _R.CHANNELS_LAST, "Use channels_last memory format for the conv net", "kernel_efficiency", _S.SAFE, 88,
        Replay("cuDNN's NCHW<->NHWC layout transposes around its NHWC kernels removed"),
        Injection(
            how="the top module's 4-D floating parameters and buffers made channels_last, and its 4-D "
            "floating inputs at each call (other inputs, 5-D weights untouched); where the script has "
            "its own `--channels-last` switch (explore): that switch instead",
            skipped_when="no `Conv2d` in the top module",
            levers=(Lever("channels_last", "channels_last memory format for the model and its 4-D inputs"),),
            all_safe_default=True,
        ),
    ),
    _spec(
        _R.CUDNN_BENCHMARK, "Enable cudnn.benchmark", "low_occupancy", _S.SAFE, 89,
        NotReplayed("the trace does not say which convolution algorithm autotuning would pick"),
        Injection(
            how="`torch.backends.cudnn.benchmark = True`",
            skipped_when="no CUDA; already on",
            levers=(Lever("cudnn_benchmark", "torch.backends.cudnn.benchmark=True"),),
            all_safe_default=True,
        ),
    ),
    _spec(
        _R.BF16_AUTOCAST, "Run matmuls and convolutions in bf16 (autocast)", "fp32_math", _S.CHANGES_NUMERICS, 95,
        Replay("float32 matmul and convolution kernels sped up by the GPU's BF16/FP32 ratio"),
        Injection(
            how="the top module's forward runs under `torch.autocast(<its device>, bfloat16)` and its "
            "floating outputs come back as float32, so a loss computed outside the model runs in float32 "
            "as autocast would run it; with Hugging Face `TrainingArguments`: `bf16=True` instead; with "
            "Lightning `Trainer`: `precision=\"bf16-mixed\"`; where the script has its own switch "
            "(explore): that switch instead (timm's `--amp --amp-dtype bfloat16`, `--bf16`). Explore measures fp16 autocast with a GradScaler (on the loss's "
            "backward and the optimizers' steps; `fp16=True`, `precision=\"16-mixed\"` for the "
            "frameworks) instead where the GPU has no bf16",
            skipped_when="the script uses autocast or an enabled GradScaler itself; `TrainingArguments(fp16=True)`",
            levers=(
                Lever("bf16_autocast", "bf16 autocast around the model's forward", (("dtype", "bfloat16"),)),
                Lever(
                    "fp16_autocast",
                    "fp16 autocast around the model's forward, with a GradScaler",
                    (("dtype", "float16"),),
                ),
            ),
            for_rules=("GA701",),
        ),
    ),
    _spec(
        _R.TF32, "Allow TF32 for float32 matmuls and convolutions", "fp32_math", _S.CHANGES_NUMERICS, 90,
        Replay("float32 matmul and convolution kernels sped up by the GPU's TF32/FP32 tensor-core ratio"),
        Injection(
            how="`torch.backends.cuda.matmul.allow_tf32`, `torch.backends.cudnn.allow_tf32`, "
            "`set_float32_matmul_precision(\"high\")`; with `TrainingArguments`: also `tf32=True`",
            skipped_when="no CUDA; already allowed",
            levers=(Lever("tf32", "TF32 matmuls and convolutions"),),
            for_rules=("GA701",),
        ),
    ),
    _spec(
        _R.FUSED_OPTIMIZER, "Use the fused optimizer implementation", "launch_overhead", _S.SAFE, 100,
        Replay("the optimizer's per-parameter kernels replaced by a few fused launches"),
        Injection(
            how="every `torch.optim` optimizer that takes `fused`: `fused=True` (and `foreach=None`); "
            "when fused is refused for the parameters' device or dtype, `foreach=True`",
            skipped_when="no optimizer; all fused",
            levers=(Lever("fused_optimizer", "fused=True on the torch.optim optimizers"),),
            for_rules=("GA502",),
            all_safe_default=True,
        ),
    ),
    _spec(
        _R.TORCH_COMPILE, "Compile the model with torch.compile", "launch_overhead", _S.SAFE, 110,
        Replay("elementwise kernels fused and the model region's launches replayed as a graph"),
        Injection(
            how="`top_module.compile()` (in place; compile time falls in the warm-up); explore also "
            "measures `mode=\"reduce-overhead\"` (CUDA graphs)",
            skipped_when="the script compiles already; compilation fails (`skipped` with the error)",
            levers=(
                Lever("torch_compile", "torch.compile (default mode)", (("mode", "default"),), slow=True),
                Lever(
                    "torch_compile_reduce_overhead",
                    "torch.compile(mode=\"reduce-overhead\")",
                    (("mode", "reduce-overhead"),),
                    slow=True,
                ),
            ),
            for_rules=("GA501",),
        ),
    ),
    _spec(
        _R.CUDA_GRAPHS, "Replay the step as a CUDA graph", "launch_overhead", _S.SAFE, 120,
        Replay("the model region's launches replayed as one graph (with its input copies)"), _NO_EDIT,
    ),
    _spec(
        _R.OVERLAP_COMMUNICATION, "Overlap gradient communication with compute", "communication", _S.SAFE, 130,
        NotReplayed("predicted by the cross-rank analysis, not by the single-rank replay"), _NO_EDIT,
    ),
    _spec(
        _R.BALANCE_RANKS, "Remove the per-rank imbalance", "communication", _S.SAFE, 135,
        NotReplayed("predicted by the cross-rank analysis, not by the single-rank replay"), _NO_EDIT,
    ),
    _spec(
        _R.LARGER_BATCH, "Raise the batch size", "small_batch", _S.CHANGES_BATCH, 150,
        Replay("per-sample work scaled by the multiplier, per-step costs kept; compared per sample"),
        Injection(
            how="every DataLoader: `batch_size` x M (the finding's `recommended_batch_multiplier`, else 4); "
            "compared in samples/s; the result says the learning rate needs scaling",
            skipped_when="batch not from a DataLoader (sliced in the script's own code); `batch_sampler`; "
            "explore: with the script's own batch-size option (`-b`, `--batch-size`, "
            "`--per_device_train_batch_size`), that option x M instead where no DataLoader's `batch_size` "
            "can be raised or the option sets it (x the value it parsed to, else the batch measured at the "
            "model's input in the baseline trials)",
            levers=(
                Lever("larger_batch", "DataLoader batch_size x M", (("multiplier", "auto"),)),
                Lever(
                    "script_batch_size",
                    "the script's own batch-size option x M",
                    (("script_flag", "--batch-size"), ("multiplier", "auto")),
                ),
            ),
            for_rules=("GA401",),
        ),
    ),
    _spec(
        _R.ALL_SAFE, "All safe injectable remedies together", COMPOSITE, _S.SAFE, 1000,
        NotReplayed("a verify-only combination: the replay combines the findings' own remedies"),
        Injection(
            how="the selected remedies that change neither numerics nor batch, together; a member that "
            "fails on its own is left out of the combination",
            skipped_when="none applies",
            levers=(Lever("all_safe", "the safe remedies together", explore=False),),
        ),
    ),
)
# fmt: on

REMEDIES: dict[RemedyId, RemedySpec] = {s.id: s for s in _SPECS}


def remedy_spec(remedy: str | RemedyId) -> RemedySpec | None:
    """The spec of a remedy id (string or enum), or None for an unknown id (a user rule's own)."""
    try:
        return REMEDIES[RemedyId(remedy)]
    except ValueError:
        return None


def apply_order(remedy: RemedyId) -> int:
    return REMEDIES[remedy].order


def rule_remedies() -> dict[str, tuple[RemedyId, ...]]:
    """Rule id -> the injectable remedies verify tries for its findings when they name none."""
    out: dict[str, list[RemedyId]] = {}
    for spec in _SPECS:  # in the records' order: bf16 before tf32 for GA701
        if isinstance(spec.injection, Injection):
            for rule in spec.injection.for_rules:
                out.setdefault(rule, []).append(spec.id)
    return {rule: tuple(rs) for rule, rs in sorted(out.items())}


def lever(name: str) -> tuple[RemedySpec, Lever] | None:
    """The remedy and lever named `name` (a lever name, e.g. `torch_compile_reduce_overhead`)."""
    for spec in _SPECS:
        for lv in spec.levers:
            if lv.name == name:
                return spec, lv
    return None


def explore_levers() -> list[tuple[RemedySpec, Lever]]:
    """Every lever `verify --explore` considers, in application order."""
    return [(s, lv) for s in sorted(_SPECS, key=lambda s: s.order) for lv in s.levers if lv.explore]


def params_text(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def markdown_table() -> str:
    """docs/remedies.md's table (regenerate with `python -m gpuadvisor.remedies > docs/remedies.md`)."""
    lines = [
        "# Remedies",
        "",
        "Generated from `gpuadvisor/remedies.py` (`python -m gpuadvisor.remedies > docs/remedies.md`); a test",
        "fails when this file is stale. One record per remedy: how the step model predicts it (`replay`),",
        "whether `gpuadvisor verify` can apply it without an edit of the script (`verify`, with the levers",
        "`verify --explore` measures), its safety class and its place in the order combined remedies apply.",
        "",
        "| order | remedy | title | category | safety | replay | verify | levers |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in sorted(_SPECS, key=lambda s: s.order):
        replay = s.replay.how if isinstance(s.replay, Replay) else f"none: {s.replay.reason}"
        if isinstance(s.injection, Injection):
            verify = f"{s.injection.how}. Skipped when: {s.injection.skipped_when}"
        else:
            verify = s.injection.reason
        levers = "; ".join(
            f"`{lv.name}`" + (" (not in explore)" if not lv.explore else " (slow: tried last)" if lv.slow else "")
            for lv in s.levers
        ) or "-"
        cells = [str(s.order), f"`{s.id.value}`", s.title, s.category, s.safety.value, replay, verify, levers]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


VERIFY_TABLE_BEGIN = "<!-- generated from gpuadvisor/remedies.py: python -m gpuadvisor.remedies --verify-table -->"
VERIFY_TABLE_END = "<!-- end of generated table -->"


def verify_table() -> str:
    """docs/verify.md's table of the injectable remedies, between VERIFY_TABLE_BEGIN and _END."""
    lines = [
        VERIFY_TABLE_BEGIN,
        "| remedy | what the trial changes, nothing else | skipped when (from the run's record, or found while running) | levers (`--explore`) |",
        "|---|---|---|---|",
    ]
    for s in sorted(_SPECS, key=lambda s: s.order):
        if isinstance(s.injection, Injection):
            levers = ", ".join(f"`{lv.name}`" for lv in s.levers if lv.explore) or "-"
            cells = [f"`{s.id.value}`", s.injection.how, s.injection.skipped_when, levers]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines.append(VERIFY_TABLE_END)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(verify_table() if "--verify-table" in sys.argv[1:] else markdown_table())
