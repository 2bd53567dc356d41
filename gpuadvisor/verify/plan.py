"""Which remedies `gpuadvisor verify` tries on a run, and which it can skip before running anything.

The remedies come from the run's findings (`Finding.remedy`, else the rule -> remedy table below,
until every rule names its remedy) and from `--only` (rule ids select those findings' remedies; remedy
ids force a trial even without a finding). What the run recorded (environment.json: DataLoaders,
optimizers, settings, CUDA) rules out trials that cannot change anything, with the reason.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuadvisor.errors import UsageError
from gpuadvisor.remedies import COMPOSITE, REMEDIES, Injection, RemedyId, remedy_spec, rule_remedies

__all__ = [
    "ALL_SAFE_DEFAULT",
    "IMPLEMENTED",
    "RULE_REMEDIES",
    "PlannedTrial",
    "default_num_workers",
    "plan_trials",
]

# Until the step model names every finding's remedy: the remedies verify tries for a rule's finding
# (the records' `Injection.for_rules`).
RULE_REMEDIES: dict[str, tuple[RemedyId, ...]] = rule_remedies()

# The finding category a remedy answers (for a trial forced by --only without a finding).
REMEDY_CATEGORY: dict[RemedyId, str] = {r: s.category for r, s in REMEDIES.items() if s.category != COMPOSITE}

# The injectable remedies (records with an `Injection`; their injections: gpuadvisor/verify/inject.py).
IMPLEMENTED: frozenset[RemedyId] = frozenset(r for r, s in REMEDIES.items() if s.injectable)

# `--only all_safe` alone: every safe remedy that applies to the run (the records' `all_safe_default`).
# torch.compile is left out: it costs minutes of warm-up and fails on some models.
ALL_SAFE_DEFAULT: tuple[RemedyId, ...] = tuple(
    s.id
    for s in sorted(REMEDIES.values(), key=lambda s: s.order)
    if isinstance(s.injection, Injection) and s.injection.all_safe_default
)

DEFAULT_BATCH_MULTIPLIER = 4
MAX_BATCH_MULTIPLIER = 64
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_num_workers(explore: bool = False) -> int:
    """DataLoader workers for the dataloader_workers remedy: min(8, usable CPUs - 1), at least 1.
    Explore's num_workers lever (`explore`): three quarters of the usable CPUs, at most 16 (the loop,
    the pin-memory thread and the device's driver keep the rest): the data levers are what explore
    reaches for once the model computes faster, and a fast GPU step needs more decoding workers
    (timm's ResNet-50 at bf16 on an H200 host of 16 CPUs: -j 12)."""
    cpus = _usable_cpus()
    if explore:
        return max(1, min(16, cpus * 3 // 4))
    return max(1, min(8, cpus - 1))


def is_safe(remedy: RemedyId) -> bool:
    """Changes neither the numerics nor the batch (may join all_safe)."""
    spec = REMEDIES[remedy]
    return remedy is not RemedyId.ALL_SAFE and not spec.changes_numerics and not spec.changes_batch


@dataclass(frozen=True)
class PlannedTrial:
    """One remedy to measure against the baseline.

    `applies` is what the trial child injects (one remedy, or the components of all_safe); `findings`
    the rule ids whose findings this remedy answers (empty when forced by `--only`); `skip_reason` set
    when the run's record shows that the trial could not change anything.
    """

    remedy: RemedyId
    applies: tuple[RemedyId, ...]
    findings: tuple[str, ...] = ()
    category: str | None = None
    forced: bool = False
    skip_reason: str | None = None
    batch_multiplier: int | None = None
    predicted_speedup: float | None = None

    @property
    def changes_batch(self) -> bool:
        return any(REMEDIES[r].changes_batch for r in self.applies)

    @property
    def changes_numerics(self) -> bool:
        return any(REMEDIES[r].changes_numerics for r in self.applies)


def finding_remedies(finding: Mapping[str, Any]) -> tuple[RemedyId, ...]:
    named = finding.get("remedy")
    if isinstance(named, str):
        spec = remedy_spec(named)
        if spec is not None:
            return (spec.id,) if spec.id in IMPLEMENTED and spec.injectable else ()
    return RULE_REMEDIES.get(str(finding.get("rule", "")), ())


def predicted_speedup(finding: Mapping[str, Any]) -> float | None:
    """The finding's predicted speed-up: the replay's, else 1 / (1 - impact) (an upper bound)."""
    prediction = finding.get("prediction")
    if isinstance(prediction, Mapping):
        value = prediction.get("speedup")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    impact = finding.get("impact")
    if isinstance(impact, (int, float)) and not isinstance(impact, bool) and 0 < impact < 1:
        return 1.0 / (1.0 - float(impact))
    return None


def batch_multiplier(findings: Sequence[Mapping[str, Any]]) -> int:
    for f in findings:
        evidence = f.get("evidence")
        if isinstance(evidence, Mapping):
            value = evidence.get("recommended_batch_multiplier")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 2:
                return int(min(value, MAX_BATCH_MULTIPLIER))
    return DEFAULT_BATCH_MULTIPLIER


def _list(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


@dataclass(frozen=True)
class Record:
    """What the run recorded (environment.json) and where verify runs, as the skip checks read it.

    `with_remedies`: the other remedies of the same trial (explore's combinations: `persistent_workers`
    applies to loaders that `dataloader_workers` gives workers in the same trial); `params`: the lever's."""

    settings: Mapping[str, Any]
    cuda: bool
    loaders: list[dict[str, Any]]
    optimizers: list[dict[str, Any]]
    num_workers: int
    env: Mapping[str, str]
    with_remedies: frozenset[RemedyId] = frozenset()
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    bf16_supported: bool | None = None

    @classmethod
    def of(
        cls,
        environment: Mapping[str, Any],
        *,
        num_workers: int,
        env: Mapping[str, str],
        with_remedies: Iterable[RemedyId] = (),
        params: Mapping[str, Any] | None = None,
        bf16_supported: bool | None = None,
    ) -> Record:
        settings = environment.get("settings")
        return cls(
            settings=settings if isinstance(settings, dict) else {},
            cuda=bool(environment.get("cuda_available")),
            loaders=_list(environment.get("dataloaders")),
            optimizers=_list(environment.get("optimizers")),
            num_workers=num_workers,
            env=env,
            with_remedies=frozenset(with_remedies),
            params=dict(params or {}),
            bf16_supported=bf16_supported,
        )

    def used(self, key: str) -> bool:
        value = self.settings.get(key)
        return isinstance(value, dict) and bool(value.get("used"))


SkipCheck = Callable[[Record], "str | None"]

# Why a trial of the remedy could not change anything in this run (None: it can), one check per
# injectable remedy; the registry test checks that every injectable record has one.
SKIP_CHECKS: dict[RemedyId, SkipCheck] = {}


def skip_check(remedy: RemedyId) -> Callable[[SkipCheck], SkipCheck]:
    def register(fn: SkipCheck) -> SkipCheck:
        SKIP_CHECKS[remedy] = fn
        return fn

    return register


def _workers_after(rec: Record, d: Mapping[str, Any]) -> int:
    """The loader's workers in this trial (its own, or N when dataloader_workers sets them)."""
    own = int(d.get("num_workers") or 0)
    if RemedyId.DATALOADER_WORKERS in rec.with_remedies:
        return max(own, rec.num_workers)
    return own


@skip_check(RemedyId.DATALOADER_WORKERS)
def _skip_workers(rec: Record) -> str | None:
    if not rec.loaders:
        return "the script constructed no DataLoader (its batches come from its own code)"
    if "num_workers" in rec.params or not rec.params:
        if all(int(d.get("num_workers") or 0) >= rec.num_workers for d in rec.loaders):
            return f"every DataLoader already has num_workers >= {rec.num_workers}"
        return None
    # a prefetch_factor lever alone: loaders with workers only
    if all(_workers_after(rec, d) == 0 for d in rec.loaders):
        return "prefetch_factor needs DataLoader workers (num_workers=0 here)"
    want = int(rec.params.get("prefetch_factor", 0) or 0)
    if want and all(int(d.get("prefetch_factor") or 2) >= want for d in rec.loaders if _workers_after(rec, d)):
        return f"every DataLoader with workers already has prefetch_factor >= {want}"
    return None


@skip_check(RemedyId.PERSISTENT_WORKERS)
def _skip_persistent(rec: Record) -> str | None:
    if not rec.loaders:
        return "the script constructed no DataLoader"
    with_workers = [d for d in rec.loaders if _workers_after(rec, d) > 0]
    if not with_workers:
        return "persistent_workers needs DataLoader workers (num_workers=0 here)"
    if all(d.get("persistent_workers") for d in with_workers):
        return "every DataLoader with workers is already persistent"
    return None


@skip_check(RemedyId.DATALOADER_PIN_MEMORY)
def _skip_pin(rec: Record) -> str | None:
    if not rec.cuda:
        return "pinned memory only speeds up copies to a CUDA GPU (this run had none)"
    if not rec.loaders:
        return "the script constructed no DataLoader"
    if all(d.get("pin_memory") for d in rec.loaders):
        return "every DataLoader already pins memory"
    return None


@skip_check(RemedyId.LARGER_BATCH)
def _skip_batch(rec: Record) -> str | None:
    if not rec.loaders:
        return "the batch is not drawn from a DataLoader: raise it in the script"
    if all(d.get("batch_size") is None for d in rec.loaders):
        return "the DataLoaders take a batch_sampler (no batch_size to raise)"
    return None


@skip_check(RemedyId.FUSED_OPTIMIZER)
def _skip_fused(rec: Record) -> str | None:
    if not rec.optimizers:
        return "the script constructed no torch.optim optimizer"
    if all(o.get("fused") for o in rec.optimizers):
        return "every optimizer is already fused"
    return None


@skip_check(RemedyId.BF16_AUTOCAST)
def _skip_autocast(rec: Record) -> str | None:
    if rec.params.get("script_flag"):
        return None  # the script's own flag: checked against its arguments (explore)
    if rec.used("autocast"):
        return "the script already runs under torch.autocast"
    scaler = rec.settings.get("grad_scaler")
    if isinstance(scaler, dict) and scaler.get("used") and scaler.get("enabled") is not False:
        return "the script uses a GradScaler (fp16 mixed precision)"
    dtype = rec.params.get("dtype")
    if dtype == "float16":
        if not rec.cuda:
            return "fp16 autocast is for CUDA GPUs (this run had none)"
        if rec.bf16_supported is not False:
            return "this GPU runs bf16: fp16 is measured only where bf16 is unsupported"
    elif dtype == "bfloat16" and rec.bf16_supported is False:
        return "this GPU does not support bf16"
    return None


@skip_check(RemedyId.TF32)
def _skip_tf32(rec: Record) -> str | None:
    if not rec.cuda:
        return "TF32 needs a CUDA GPU (this run had none)"
    if rec.settings.get("allow_tf32_matmul") is True and rec.settings.get("float32_matmul_precision") in (
        "high",
        "medium",
    ):
        return "TF32 matmuls were already allowed"
    return None


@skip_check(RemedyId.CUDNN_BENCHMARK)
def _skip_cudnn(rec: Record) -> str | None:
    if not rec.cuda:
        return "cudnn.benchmark needs a CUDA GPU (this run had none)"
    if rec.settings.get("cudnn_benchmark") is True:
        return "cudnn.benchmark was already on"
    return None


@skip_check(RemedyId.CHANNELS_LAST)
def _skip_channels_last(rec: Record) -> str | None:
    return None  # decided in the trial: the top module has no Conv2d -> skipped with that note


@skip_check(RemedyId.TORCH_COMPILE)
def _skip_compile(rec: Record) -> str | None:
    if rec.used("torch_compile"):
        return "the script already calls torch.compile"
    if rec.params.get("mode") == "reduce-overhead" and not rec.cuda:
        return "mode=\"reduce-overhead\" captures CUDA graphs (this run had no CUDA GPU)"
    return None


@skip_check(RemedyId.EXPANDABLE_SEGMENTS)
def _skip_expandable(rec: Record) -> str | None:
    if not rec.cuda:
        return "the CUDA caching allocator is not used without a CUDA GPU"
    if "expandable_segments" in rec.env.get(ALLOC_CONF, ""):
        return f"{ALLOC_CONF} already sets expandable_segments"
    return None


@skip_check(RemedyId.REMOVE_EMPTY_CACHE)
def _skip_empty_cache(rec: Record) -> str | None:
    if not rec.cuda:
        return "torch.cuda.empty_cache() does nothing without a CUDA GPU"
    return None  # decided in the trial: no call to torch.cuda.empty_cache() -> skipped, nothing to change


@skip_check(RemedyId.DROP_ACTIVATION_CHECKPOINTING)
def _skip_no_checkpointing(rec: Record) -> str | None:
    if not rec.cuda:
        return "activation checkpointing trades GPU memory for time: without a CUDA GPU there is neither"
    return None  # decided in the trial: no torch.utils.checkpoint call -> skipped, nothing to change


@skip_check(RemedyId.ALL_SAFE)
def _skip_all_safe(rec: Record) -> str | None:
    return None  # decided by its members (plan_trials)


def skip_reason(
    remedy: RemedyId,
    environment: Mapping[str, Any],
    *,
    num_workers: int,
    env: Mapping[str, str],
    with_remedies: Iterable[RemedyId] = (),
    params: Mapping[str, Any] | None = None,
    bf16_supported: bool | None = None,
) -> str | None:
    """Why a trial of `remedy` could not change anything in this run, from environment.json; else None."""
    check = SKIP_CHECKS.get(remedy)
    if check is None:
        return None
    rec = Record.of(
        environment,
        num_workers=num_workers,
        env=env,
        with_remedies=with_remedies,
        params=params,
        bf16_supported=bf16_supported,
    )
    return check(rec)


def plan_trials(
    findings: Sequence[Mapping[str, Any]],
    environment: Mapping[str, Any],
    *,
    only: Iterable[str] = (),
    num_workers: int,
    env: Mapping[str, str] | None = None,
) -> list[PlannedTrial]:
    """The trials to run, in a stable order (the order of the findings, forced remedies last).

    Raises UsageError for an `--only` token that is neither a remedy id nor the rule id of a finding
    of this run."""
    env = os.environ if env is None else env
    tokens = [t.strip() for t in only if t.strip()]
    forced: list[RemedyId] = []
    selected_rules: set[str] = set()
    finding_rules = {str(f.get("rule", "")).upper() for f in findings}
    for token in tokens:
        spec = remedy_spec(token.lower())
        if spec is not None:
            if spec.id not in IMPLEMENTED:
                raise UsageError(
                    f"--only {token}: remedy {spec.id.value} needs an edit of the script; verify can "
                    f"apply: {', '.join(sorted(r.value for r in IMPLEMENTED))}"
                )
            if spec.id not in forced:
                forced.append(spec.id)
        elif token.upper() in finding_rules:
            selected_rules.add(token.upper())
        else:
            known = ", ".join(sorted(r for r in finding_rules if r)) or "none"
            raise UsageError(
                f"--only {token}: neither a remedy id nor the rule of a finding of this run "
                f"(findings: {known}; remedies: {', '.join(sorted(r.value for r in IMPLEMENTED))})"
            )

    by_remedy: dict[RemedyId, list[Mapping[str, Any]]] = {}
    for f in findings:
        rule = str(f.get("rule", "")).upper()
        if tokens and rule not in selected_rules:
            continue
        for remedy in finding_remedies(f):
            by_remedy.setdefault(remedy, []).append(f)
    for remedy in forced:
        by_remedy.setdefault(remedy, [])

    safe_selected = [r for r in by_remedy if is_safe(r)]
    if RemedyId.ALL_SAFE not in by_remedy and not tokens and len(safe_selected) >= 2:
        by_remedy[RemedyId.ALL_SAFE] = []

    trials: list[PlannedTrial] = []
    for remedy, fs in by_remedy.items():
        rules: tuple[str, ...] = tuple(dict.fromkeys(str(f.get("rule")) for f in fs))
        applies: tuple[RemedyId, ...] = (remedy,)
        reason = None
        if remedy is RemedyId.ALL_SAFE:
            pool = safe_selected or list(ALL_SAFE_DEFAULT)
            applies = tuple(
                r for r in pool if skip_reason(r, environment, num_workers=num_workers, env=env) is None
            )
            if not applies:
                reason = "no safe remedy applies to this run"
            elif len(applies) == 1 and not tokens:
                reason = f"only {applies[0].value} applies: the same trial as its own"
            rules = tuple(dict.fromkeys(str(f.get("rule")) for r in applies for f in by_remedy.get(r, [])))
        else:
            reason = skip_reason(remedy, environment, num_workers=num_workers, env=env)
        predictions = [p for p in (predicted_speedup(f) for f in fs) if p is not None]
        trials.append(
            PlannedTrial(
                remedy=remedy,
                applies=applies,
                findings=rules,
                category=str(fs[0].get("category")) if fs else REMEDY_CATEGORY.get(remedy),
                forced=remedy in forced,
                skip_reason=reason,
                batch_multiplier=batch_multiplier(fs) if RemedyId.LARGER_BATCH in applies else None,
                predicted_speedup=max(predictions) if predictions else None,
            )
        )
    return trials
