"""The planted-problem corpus: what each workload in benchmarks/workloads/ plants, how to measure it and
how to record it.

Importable without torch (`from benchmarks.catalog import CATALOG`, or with benchmarks/ on sys.path).
benchmarks/measure.py and benchmarks/record_corpus.py read it; tests/benchmarks/test_catalog.py checks
it against the scripts (every workload listed, every fix flag accepted, categories and remedy ids valid
in gpuadvisor's vocabulary, the split balanced).

Vocabulary:
- `family`: the model family (cnn, transformer, mlp, recurrent, embedding, unet); `compiled` marks a
  torch.compile'd model, `framework` a training loop driven by Hugging Face Trainer or Lightning.
- `problems`: one entry per planted problem: the workload's `--fix` name, gpuadvisor's finding category
  (gpuadvisor.model.Category values) and the remedy id (gpuadvisor.remedies.RemedyId values). A control
  has none.
- `split`: "calibration" (the what-if replay may be tuned on these) or "holdout" (only reported on).
  Assigned once, by hand-run greedy balancing (`balanced_split`, in the order of CATALOG): each workload
  went to the half where its family and categories were rarer so far, ties to the smaller half, then
  to calibration. The result is frozen here so that adding workloads never moves existing ones;
  tests check that every category and family with >= 2 workloads appears in both halves.
- `probes`: extra measured variants that are not fixes (e.g. a 4x batch where the batch is not the
  problem): they show what a wrong remedy would have gained. `probe_remedies` names the remedy a
  probe applies, when it is one the advice can name (then it is calibrated like a fix).
- `isolated`: measured with one fresh process per run (environment read at CUDA init, framework
  trainers with process-global state); the others run all their variants in one process.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = [
    "CATALOG",
    "EXCLUDED",
    "Family",
    "Framework",
    "MeasureSettings",
    "PlantedProblem",
    "RecordSettings",
    "Split",
    "Variant",
    "Workload",
    "balanced_split",
    "by_name",
    "shard",
]


class Family(str, enum.Enum):
    CNN = "cnn"
    TRANSFORMER = "transformer"
    MLP = "mlp"
    RECURRENT = "recurrent"
    EMBEDDING = "embedding"
    UNET = "unet"


class Framework(str, enum.Enum):
    PLAIN = "plain"
    HF_TRAINER = "hf_trainer"
    LIGHTNING = "lightning"


class Split(str, enum.Enum):
    CALIBRATION = "calibration"
    HOLDOUT = "holdout"


@dataclass(frozen=True)
class PlantedProblem:
    fix: str  # the workload's --fix NAME
    category: str  # gpuadvisor.model.Category value
    remedy: str  # gpuadvisor.remedies.RemedyId value


@dataclass(frozen=True)
class MeasureSettings:
    """How benchmarks/measure.py times the workload (plain python, no profiler).

    `max_steps` is passed as --steps: an upper bound, the harness's time budget ends the measured region.
    `est_run_s` is the expected wall time of one run on an H200 (setup + warm-up + measured region, with
    a 1.5 s region), `est_first_s` the extra of the first run in a process (compilation, CUDA
    and framework start-up); both only plan shards and the deadline.
    """

    max_steps: int = 100_000
    est_run_s: float = 3.0
    est_first_s: float = 3.0


# The default capture window: 10 skipped steps, 2 of profiler warm-up, 5 recorded (run dirs < ~500 KB).
WINDOW = ("--skip-steps", "10", "--warmup-steps", "2", "--active-steps", "5")


@dataclass(frozen=True)
class RecordSettings:
    """How benchmarks/record_corpus.py records the workload with `gpuadvisor profile --no-analyze`."""

    profile_args: tuple[str, ...] = WINDOW
    steps: int = 60  # the script's --steps: enough to reach the end of the window
    est_run_s: float = 10.0  # one recording on an H200, start-up included (plans shards)


@dataclass(frozen=True)
class Variant:
    name: str  # planted | <fix name> | fixed | <probe name>
    args: tuple[str, ...]  # script arguments that select it
    fixes: tuple[str, ...]  # the fixes applied (empty for planted and probes)


@dataclass(frozen=True)
class Workload:
    name: str
    family: Family
    problems: tuple[PlantedProblem, ...]
    split: Split
    inference: bool = False
    compiled: bool = False
    framework: Framework = Framework.PLAIN
    isolated: bool = False
    probes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # probe name -> the remedies it applies, joined by "+" (remedies the advice may name that are not a
    # planted fix: its measured gain enters the calibration table and the check of the top finding)
    probe_remedies: tuple[tuple[str, str], ...] = ()
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    record: RecordSettings = field(default_factory=RecordSettings)

    @property
    def control(self) -> bool:
        return not self.problems

    @property
    def script(self) -> str:
        """Path relative to the repository root."""
        return f"benchmarks/workloads/{self.name}.py"

    @property
    def fixes(self) -> tuple[str, ...]:
        return tuple(p.fix for p in self.problems)

    @property
    def categories(self) -> tuple[str, ...]:
        return tuple(p.category for p in self.problems)

    def variants(self) -> tuple[Variant, ...]:
        """planted, each single fix, every fix together (when there are two or more), then the probes."""
        out = [Variant("planted", (), ())]
        out += [Variant(f, ("--fix", f), (f,)) for f in self.fixes]
        if len(self.fixes) > 1:
            out.append(Variant("fixed", ("--fixed",), self.fixes))
        out += [Variant(name, args, ()) for name, args in self.probes]
        return tuple(out)

    def recorded_variants(self) -> tuple[Variant, ...]:
        """What record_corpus.py records: planted, and all fixes together (none for a control)."""
        if self.control:
            return (Variant("planted", (), ()),)
        return (Variant("planted", (), ()), Variant("fixed", ("--fixed",), self.fixes))


def _p(fix: str, category: str, remedy: str) -> PlantedProblem:
    return PlantedProblem(fix, category, remedy)


CAL, HOLD = Split.CALIBRATION, Split.HOLDOUT
F = Family
LAUNCH_WINDOW = ("--skip-steps", "10", "--warmup-steps", "2", "--active-steps", "3")
# No optimizer and no DataLoader: the capture counts the model's forward calls as steps (issue 17). A
# time fallback here (4 s, 20 ms steps) made the H200 recordings of 2026-11-23 miss the loop: the
# fallback began before the first batch and the switch to forward calls went wrong (docs/capture.md).
INFERENCE_WINDOW = LAUNCH_WINDOW

# issue 41's workloads, in catalog order, placed by `balanced_split` run on the catalog with them appended
SPLIT41 = (HOLD, CAL, HOLD, HOLD, CAL, CAL, HOLD, CAL, HOLD)

CATALOG: tuple[Workload, ...] = (
    # --- the original planted workloads -------------------------------------------------------------
    Workload("transfer_bound", F.CNN, (
        _p("uint8_inputs", "host_device_transfer", "uint8_inputs"),
        _p("prefetch_copies", "host_device_transfer", "prefetch_copies"),
    ), CAL, measure=MeasureSettings(est_run_s=3.5)),
    Workload("sync_bound", F.MLP, (_p("remove_host_syncs", "host_sync", "remove_host_syncs"),), HOLD,
             measure=MeasureSettings(est_run_s=2.2), record=RecordSettings(profile_args=LAUNCH_WINDOW)),
    Workload("dataloader_bound", F.CNN, (_p("dataloader_workers", "data_loading", "dataloader_workers"),), HOLD,
             measure=MeasureSettings(est_run_s=3.5), record=RecordSettings(est_run_s=14.0)),
    Workload("small_batch", F.CNN, (_p("larger_batch", "small_batch", "larger_batch"),), CAL,
             measure=MeasureSettings(est_run_s=2.2)),
    Workload("launch_bound", F.MLP, (
        _p("torch_compile", "launch_overhead", "torch_compile"),
        _p("fused_optimizer", "launch_overhead", "fused_optimizer"),
    ), CAL, measure=MeasureSettings(est_run_s=5.0, est_first_s=45.0),
        record=RecordSettings(profile_args=LAUNCH_WINDOW, est_run_s=30.0)),
    Workload("low_occupancy", F.MLP, (_p("fix_kernel_grid", "low_occupancy", "fix_kernel_grid"),), HOLD,
             measure=MeasureSettings(est_run_s=2.5, est_first_s=5.0)),
    Workload("fp32_transformer", F.TRANSFORMER, (
        _p("tf32", "fp32_math", "tf32"),
        _p("bf16_autocast", "fp32_math", "bf16_autocast"),
    ), CAL, measure=MeasureSettings(est_run_s=4.0)),
    # --- issue 10 and 17 cases ------------------------------------------------------------------------
    Workload("triton_loss", F.TRANSFORMER, (_p("fix_kernel_grid", "low_occupancy", "fix_kernel_grid"),), CAL,
             probes=(("batch_x4", ("--batch-size", "64")),),
             measure=MeasureSettings(est_run_s=2.8, est_first_s=6.0)),
    Workload("mlp_item_numpy", F.MLP, (
        _p("remove_host_syncs", "host_sync", "remove_host_syncs"),
        _p("dataloader_workers", "data_loading", "dataloader_workers"),
    ), CAL, measure=MeasureSettings(est_run_s=3.0)),
    Workload("tutorial_cnn", F.CNN, (
        _p("larger_batch", "small_batch", "larger_batch"),
        _p("remove_host_syncs", "host_sync", "remove_host_syncs"),
    ), HOLD, probes=(("workers_8", ("--num-workers", "8")),), probe_remedies=(("workers_8", "dataloader_workers"),),
       measure=MeasureSettings(est_run_s=3.0), record=RecordSettings(profile_args=LAUNCH_WINDOW)),
    Workload("lightning_autoencoder", F.MLP, (
        _p("larger_batch", "small_batch", "larger_batch"),
        _p("bf16_mixed", "fp32_math", "bf16_autocast"),
    ), HOLD, framework=Framework.LIGHTNING, isolated=True,
        probes=(("fused_adam", ("--fused-adam",)),), probe_remedies=(("fused_adam", "fused_optimizer"),),
        measure=MeasureSettings(est_run_s=6.0, est_first_s=0.0), record=RecordSettings(est_run_s=14.0)),
    Workload("hf_trainer_fp32", F.TRANSFORMER, (_p("bf16", "fp32_math", "bf16_autocast"),), HOLD,
             framework=Framework.HF_TRAINER, isolated=True,
             measure=MeasureSettings(est_run_s=9.0, est_first_s=0.0), record=RecordSettings(est_run_s=16.0)),
    Workload("inference_convnet", F.CNN, (
        _p("larger_batch", "small_batch", "larger_batch"),
        _p("remove_host_syncs", "host_sync", "remove_host_syncs"),
    ), CAL, inference=True, measure=MeasureSettings(est_run_s=2.0),
        record=RecordSettings(profile_args=INFERENCE_WINDOW, steps=200_000)),
    # --- more families and problems ---------------------------------------------------------------
    Workload("moe_nonzero", F.TRANSFORMER, (_p("static_shapes", "host_sync", "static_shapes"),), HOLD,
             probes=(("batched_experts", ("--dispatch", "batched")),
                     ("static_compiled", ("--dispatch", "static", "--compile"))),
             probe_remedies=(("static_compiled", "static_shapes+torch_compile"),),
             measure=MeasureSettings(est_run_s=2.5), record=RecordSettings(profile_args=LAUNCH_WINDOW)),
    Workload("lstm_lm", F.RECURRENT, (
        _p("larger_batch", "small_batch", "larger_batch"),
        _p("remove_host_syncs", "host_sync", "remove_host_syncs"),
    ), CAL, measure=MeasureSettings(est_run_s=2.5)),
    Workload("bilstm_tagger", F.RECURRENT, (_p("remove_host_syncs", "host_sync", "remove_host_syncs"),), HOLD,
             measure=MeasureSettings(est_run_s=2.5)),
    Workload("gru_forecast", F.RECURRENT, (
        _p("float32_inputs", "host_device_transfer", "uint8_inputs"),
        _p("prefetch_copies", "host_device_transfer", "prefetch_copies"),
    ), HOLD, measure=MeasureSettings(est_run_s=3.5)),
    Workload("text_dataloader", F.TRANSFORMER, (_p("dataloader_workers", "data_loading", "dataloader_workers"),),
             CAL, measure=MeasureSettings(est_run_s=3.0), record=RecordSettings(est_run_s=14.0)),
    Workload("dlrm", F.EMBEDDING, (
        _p("prefetch_copies", "host_device_transfer", "prefetch_copies"),
        _p("remove_host_syncs", "host_sync", "remove_host_syncs"),
    ), CAL, probes=(("torch_compile", ("--compile",)), ("compile_default", ("--compile", "--compile-mode", "default")),
                    ("fused_adam", ("--fused-adam",)), ("compile_fused_adam", ("--compile", "--fused-adam"))),
       probe_remedies=(("torch_compile", "torch_compile"), ("fused_adam", "fused_optimizer"),
                       ("compile_fused_adam", "torch_compile+fused_optimizer")),
       measure=MeasureSettings(est_run_s=3.0, est_first_s=60.0)),
    Workload("two_tower", F.EMBEDDING, (_p("larger_batch", "small_batch", "larger_batch"),), HOLD,
             measure=MeasureSettings(est_run_s=2.2)),
    Workload("unet_diffusion", F.UNET, (
        _p("fused_optimizer", "launch_overhead", "fused_optimizer"),
        _p("bf16_autocast", "fp32_math", "bf16_autocast"),
    ), HOLD, measure=MeasureSettings(est_run_s=3.0), record=RecordSettings(profile_args=LAUNCH_WINDOW)),
    Workload("compiled_vit", F.TRANSFORMER, (_p("tf32", "fp32_math", "tf32"),), CAL, compiled=True,
             measure=MeasureSettings(est_run_s=9.0, est_first_s=30.0), record=RecordSettings(est_run_s=40.0)),
    Workload("varlen_memory", F.TRANSFORMER, (_p("expandable_segments", "memory", "expandable_segments"),), HOLD,
             isolated=True, probes=(("torch_compile", ("--compile",)), ("compile_default", ("--compile", "--compile-mode", "default"))),
             probe_remedies=(("torch_compile", "torch_compile"),),
             measure=MeasureSettings(est_run_s=6.0, est_first_s=0.0)),
    Workload("multiscale_memory", F.CNN, (_p("expandable_segments", "memory", "expandable_segments"),), CAL,
             isolated=True, probes=(("torch_compile", ("--compile",)), ("compile_default", ("--compile", "--compile-mode", "default"))),
             probe_remedies=(("torch_compile", "torch_compile"),),
             measure=MeasureSettings(est_run_s=6.0, est_first_s=0.0)),
    # --- controls -------------------------------------------------------------------------------------
    Workload("control_transformer", F.TRANSFORMER, (), HOLD, measure=MeasureSettings(est_run_s=3.5)),
    Workload("control_convnet", F.CNN, (), HOLD, measure=MeasureSettings(est_run_s=3.5),
             record=RecordSettings(est_run_s=14.0)),
    Workload("control_recurrent", F.RECURRENT, (), CAL, measure=MeasureSettings(est_run_s=3.5)),
    Workload("control_compiled", F.TRANSFORMER, (), CAL, compiled=True,
             measure=MeasureSettings(est_run_s=9.0, est_first_s=30.0), record=RecordSettings(est_run_s=40.0)),
    Workload("control_inference", F.CNN, (), HOLD, inference=True, measure=MeasureSettings(est_run_s=2.5),
             record=RecordSettings(profile_args=INFERENCE_WINDOW, steps=50_000)),
    Workload("control_hf_trainer", F.TRANSFORMER, (), CAL, framework=Framework.HF_TRAINER, isolated=True,
             measure=MeasureSettings(est_run_s=10.0, est_first_s=0.0), record=RecordSettings(est_run_s=18.0)),
    # --- issue 31: busy time (kernel efficiency) ------------------------------------------------------
    Workload("resnet50_fp32_nchw", F.CNN, (
        _p("bf16_autocast", "kernel_efficiency", "bf16_autocast"),
        _p("channels_last", "kernel_efficiency", "channels_last"),
    ), CAL, measure=MeasureSettings(est_run_s=5.0, est_first_s=5.0), record=RecordSettings(est_run_s=20.0)),
    Workload("gpt_manual_attention", F.TRANSFORMER, (_p("sdpa", "kernel_efficiency", "sdpa"),), HOLD,
             probes=(("torch_compile", ("--compile",)),), probe_remedies=(("torch_compile", "torch_compile"),),
             measure=MeasureSettings(est_run_s=5.0, est_first_s=40.0), record=RecordSettings(est_run_s=20.0)),
    Workload("vit_manual_attention", F.TRANSFORMER, (
        _p("sdpa", "kernel_efficiency", "sdpa"),
        _p("bf16_autocast", "fp32_math", "bf16_autocast"),
    ), HOLD, measure=MeasureSettings(est_run_s=5.0), record=RecordSettings(est_run_s=20.0)),
    Workload("unet_bf16_nchw", F.UNET, (_p("channels_last", "kernel_efficiency", "channels_last"),), CAL,
             measure=MeasureSettings(est_run_s=5.0, est_first_s=5.0), record=RecordSettings(est_run_s=20.0)),
    Workload("resnet50_bf16_nchw", F.CNN, (_p("channels_last", "kernel_efficiency", "channels_last"),), HOLD,
             measure=MeasureSettings(est_run_s=5.0, est_first_s=5.0), record=RecordSettings(est_run_s=20.0)),
    Workload("mlp_unfused_chain", F.MLP, (_p("torch_compile", "kernel_efficiency", "torch_compile"),), CAL,
             measure=MeasureSettings(est_run_s=5.0, est_first_s=40.0), record=RecordSettings(est_run_s=20.0)),
    Workload("gemm_odd_shapes", F.TRANSFORMER, (_p("pad_gemm_shapes", "kernel_efficiency", "pad_gemm_shapes"),),
             HOLD, measure=MeasureSettings(est_run_s=4.0), record=RecordSettings(est_run_s=15.0)),
    Workload("vocab_fp32_loss", F.TRANSFORMER, (_p("fused_cross_entropy", "kernel_efficiency", "fused_cross_entropy"),),
             CAL, measure=MeasureSettings(est_run_s=4.0), record=RecordSettings(est_run_s=15.0)),
    # --- issue 27: costs that come every N steps --------------------------------------------------------
    Workload("epoch_restart_workers", F.CNN, (_p("persistent_workers", "data_loading", "persistent_workers"),),
             HOLD, measure=MeasureSettings(est_run_s=6.0), record=RecordSettings(steps=150, est_run_s=30.0)),
    Workload("eval_every_n", F.TRANSFORMER, (_p("evaluate_less_often", "periodic_cost", "evaluate_less_often"),),
             CAL, measure=MeasureSettings(est_run_s=6.0), record=RecordSettings(steps=150, est_run_s=30.0)),
    Workload("checkpoint_every_n", F.CNN, (_p("async_checkpoint", "periodic_cost", "async_checkpoint"),),
             HOLD, measure=MeasureSettings(est_run_s=6.0), record=RecordSettings(steps=150, est_run_s=30.0)),
    Workload("control_resnet50", F.CNN, (), CAL, measure=MeasureSettings(est_run_s=5.0, est_first_s=5.0),
             record=RecordSettings(est_run_s=20.0)),
    # --- issue 41: busy-time and periodic advice that holds on the next model ---------------------------
    # gn_unet_bf16's fix is the advice under test: on such a net channels_last may measure slower
    Workload("gn_unet_bf16", F.UNET, (_p("channels_last", "kernel_efficiency", "channels_last"),), SPLIT41[0],
             measure=MeasureSettings(est_run_s=5.0, est_first_s=5.0), record=RecordSettings(est_run_s=20.0)),
    Workload("mse_wide_head", F.MLP, (_p("compiled_loss", "kernel_efficiency", "torch_compile"),), SPLIT41[1],
             measure=MeasureSettings(est_run_s=4.0, est_first_s=25.0), record=RecordSettings(est_run_s=15.0)),
    Workload("gpt_checkpointed", F.TRANSFORMER,
             (_p("no_checkpointing", "memory", "drop_activation_checkpointing"),), SPLIT41[2],
             measure=MeasureSettings(est_run_s=4.0), record=RecordSettings(est_run_s=15.0)),
    Workload("big_checkpoint", F.MLP, (_p("async_checkpoint", "periodic_cost", "async_checkpoint"),), SPLIT41[3],
             measure=MeasureSettings(est_run_s=8.0), record=RecordSettings(steps=150, est_run_s=30.0)),
    Workload("empty_cache_loop", F.TRANSFORMER, (_p("remove_empty_cache", "memory", "remove_empty_cache"),),
             SPLIT41[4], measure=MeasureSettings(est_run_s=4.0), record=RecordSettings(est_run_s=15.0)),
    Workload("item_blocks_prep", F.CNN, (_p("remove_host_syncs", "host_sync", "remove_host_syncs"),), SPLIT41[5],
             measure=MeasureSettings(est_run_s=4.0), record=RecordSettings(est_run_s=15.0)),
    Workload("control_gpt_autocast_ce", F.TRANSFORMER, (), SPLIT41[6], measure=MeasureSettings(est_run_s=4.0),
             record=RecordSettings(est_run_s=15.0)),
    Workload("control_mobilenet_cl", F.CNN, (), SPLIT41[7], measure=MeasureSettings(est_run_s=4.0, est_first_s=5.0),
             record=RecordSettings(est_run_s=15.0)),
    # the probe measures the other layout beside the one the control keeps (its fastest)
    Workload("control_gn_decoder", F.CNN, (), SPLIT41[8], probes=(("channels_last", ("--layout", "channels_last")),),
             measure=MeasureSettings(est_run_s=4.0, est_first_s=5.0), record=RecordSettings(est_run_s=15.0)),
)

# Scripts in benchmarks/workloads/ that are not part of the single-GPU corpus, and why.
EXCLUDED: dict[str, str] = {
    "ddp_straggler": "needs 2 GPUs and torchrun (gpuadvisor profile --nproc-per-node 2); recorded separately",
}


def by_name(names: Iterable[str] | None = None) -> tuple[Workload, ...]:
    """The catalog's workloads, all or the named ones (in catalog order); unknown names raise KeyError."""
    if names is None:
        return CATALOG
    wanted = list(names)
    known = {w.name for w in CATALOG}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise KeyError(f"unknown workload(s): {', '.join(unknown)}")
    return tuple(w for w in CATALOG if w.name in set(wanted))


def shard(workloads: Iterable[Workload], index: int, count: int, cost: dict[str, float]) -> tuple[Workload, ...]:
    """Shard `index` (1-based) of `count`: workloads packed greedily by estimated cost, largest first, each
    to the least-loaded shard (ties to the lower shard), returned in catalog order. Deterministic."""
    if not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: index must be in 1..{count}")
    items = list(workloads)
    loads = [0.0] * count
    owner: dict[str, int] = {}
    for w in sorted(items, key=lambda w: (-cost[w.name], w.name)):
        i = min(range(count), key=lambda k: (loads[k], k))
        owner[w.name] = i
        loads[i] += cost[w.name]
    return tuple(w for w in items if owner[w.name] == index - 1)


def balanced_split(workloads: Iterable[Workload]) -> dict[str, Split]:
    """The greedy procedure that assigned `split` once (kept to place future workloads the same way).

    In order, each workload goes to the half where its features (family, planted categories, "control")
    weigh less so far, a feature weighing 1 / (its number of workloads in the whole list) per workload
    already holding it: rare features are spread first. Ties go to the smaller half, then to calibration.
    """
    items = list(workloads)

    def features(w: Workload) -> list[str]:
        return [f"family:{w.family.value}", *(f"category:{c}" for c in w.categories)] + (
            ["control"] if w.control else [])

    total = Counter(f for w in items for f in features(w))
    counts = {Split.CALIBRATION: Counter[str](), Split.HOLDOUT: Counter[str]()}
    sizes = {Split.CALIBRATION: 0, Split.HOLDOUT: 0}
    out: dict[str, Split] = {}
    for w in items:
        feats = features(w)

        def score(s: Split, feats: list[str] = feats) -> tuple[float, int, int]:
            return (sum(counts[s][f] / total[f] for f in feats), sizes[s], 0 if s is Split.CALIBRATION else 1)

        best = min((Split.CALIBRATION, Split.HOLDOUT), key=score)
        out[w.name] = best
        counts[best].update(feats)
        sizes[best] += 1
    return out
