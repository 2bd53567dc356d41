"""Which remedies `gpuadvisor verify` tries on a run, and which it can skip before running anything.

The remedies come from the run's findings (`Finding.remedy`, else the rule -> remedy table below,
until every rule names its remedy) and from `--only` (rule ids select those findings' remedies; remedy
ids force a trial even without a finding). What the run recorded (environment.json: DataLoaders,
optimizers, settings, CUDA) rules out trials that cannot change anything, with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuadvisor.errors import UsageError
from gpuadvisor.remedies import REMEDIES, RemedyId, remedy_spec

__all__ = [
    "ALL_SAFE_DEFAULT",
    "IMPLEMENTED",
    "RULE_REMEDIES",
    "PlannedTrial",
    "default_num_workers",
    "plan_trials",
]

# Until the step model names every finding's remedy: the remedies verify tries for a rule's finding.
RULE_REMEDIES: dict[str, tuple[RemedyId, ...]] = {
    "GA301": (RemedyId.DATALOADER_WORKERS,),
    "GA401": (RemedyId.LARGER_BATCH,),
    "GA501": (RemedyId.TORCH_COMPILE,),
    "GA502": (RemedyId.FUSED_OPTIMIZER,),
    "GA701": (RemedyId.BF16_AUTOCAST, RemedyId.TF32),
    "GA802": (RemedyId.EXPANDABLE_SEGMENTS,),
}

# The finding category a remedy answers (for a trial forced by --only without a finding).
REMEDY_CATEGORY: dict[RemedyId, str] = {
    RemedyId.DATALOADER_WORKERS: "data_loading",
    RemedyId.DATALOADER_PIN_MEMORY: "host_device_transfer",
    RemedyId.LARGER_BATCH: "small_batch",
    RemedyId.TORCH_COMPILE: "launch_overhead",
    RemedyId.FUSED_OPTIMIZER: "launch_overhead",
    RemedyId.BF16_AUTOCAST: "fp32_math",
    RemedyId.TF32: "fp32_math",
    RemedyId.CHANNELS_LAST: "low_occupancy",
    RemedyId.CUDNN_BENCHMARK: "low_occupancy",
    RemedyId.EXPANDABLE_SEGMENTS: "memory",
}

# The injectable remedies verify knows how to apply (gpuadvisor/verify/inject.py).
IMPLEMENTED: frozenset[RemedyId] = frozenset(
    {
        RemedyId.DATALOADER_WORKERS,
        RemedyId.DATALOADER_PIN_MEMORY,
        RemedyId.LARGER_BATCH,
        RemedyId.TORCH_COMPILE,
        RemedyId.FUSED_OPTIMIZER,
        RemedyId.BF16_AUTOCAST,
        RemedyId.TF32,
        RemedyId.CHANNELS_LAST,
        RemedyId.CUDNN_BENCHMARK,
        RemedyId.EXPANDABLE_SEGMENTS,
        RemedyId.ALL_SAFE,
    }
)

# `--only all_safe` alone: every safe remedy that applies to the run. torch.compile is left out: it
# costs minutes of warm-up and fails on some models, which would sink the whole combination.
ALL_SAFE_DEFAULT: tuple[RemedyId, ...] = (
    RemedyId.DATALOADER_WORKERS,
    RemedyId.DATALOADER_PIN_MEMORY,
    RemedyId.FUSED_OPTIMIZER,
    RemedyId.CUDNN_BENCHMARK,
    RemedyId.CHANNELS_LAST,
    RemedyId.EXPANDABLE_SEGMENTS,
)

DEFAULT_BATCH_MULTIPLIER = 4
MAX_BATCH_MULTIPLIER = 64
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"


def default_num_workers() -> int:
    """DataLoader workers for the dataloader_workers remedy: min(8, usable CPUs - 1), at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
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


def _finding_remedies(finding: Mapping[str, Any]) -> tuple[RemedyId, ...]:
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


def _batch_multiplier(findings: Sequence[Mapping[str, Any]]) -> int:
    for f in findings:
        evidence = f.get("evidence")
        if isinstance(evidence, Mapping):
            value = evidence.get("recommended_batch_multiplier")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 2:
                return int(min(value, MAX_BATCH_MULTIPLIER))
    return DEFAULT_BATCH_MULTIPLIER


def _list(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def skip_reason(
    remedy: RemedyId, environment: Mapping[str, Any], *, num_workers: int, env: Mapping[str, str]
) -> str | None:
    """Why a trial of `remedy` could not change anything in this run, from environment.json; else None."""
    settings = environment.get("settings") if isinstance(environment.get("settings"), dict) else {}
    assert isinstance(settings, dict)
    cuda = bool(environment.get("cuda_available"))
    loaders = _list(environment.get("dataloaders"))
    optimizers = _list(environment.get("optimizers"))

    def used(key: str) -> bool:
        value = settings.get(key)
        return isinstance(value, dict) and bool(value.get("used"))

    if remedy is RemedyId.DATALOADER_WORKERS:
        if not loaders:
            return "the script constructed no DataLoader (its batches come from its own code)"
        if all(int(d.get("num_workers") or 0) >= num_workers for d in loaders):
            return f"every DataLoader already has num_workers >= {num_workers}"
    elif remedy is RemedyId.DATALOADER_PIN_MEMORY:
        if not cuda:
            return "pinned memory only speeds up copies to a CUDA GPU (this run had none)"
        if not loaders:
            return "the script constructed no DataLoader"
        if all(d.get("pin_memory") for d in loaders):
            return "every DataLoader already pins memory"
    elif remedy is RemedyId.LARGER_BATCH:
        if not loaders:
            return "the batch is not drawn from a DataLoader: raise it in the script"
        if all(d.get("batch_size") is None for d in loaders):
            return "the DataLoaders take a batch_sampler (no batch_size to raise)"
    elif remedy is RemedyId.FUSED_OPTIMIZER:
        if not optimizers:
            return "the script constructed no torch.optim optimizer"
        if all(o.get("fused") for o in optimizers):
            return "every optimizer is already fused"
    elif remedy is RemedyId.BF16_AUTOCAST:
        if used("autocast"):
            return "the script already runs under torch.autocast"
        scaler = settings.get("grad_scaler")
        if isinstance(scaler, dict) and scaler.get("used") and scaler.get("enabled") is not False:
            return "the script uses a GradScaler (fp16 mixed precision)"
    elif remedy is RemedyId.TF32:
        if not cuda:
            return "TF32 needs a CUDA GPU (this run had none)"
        if settings.get("allow_tf32_matmul") is True and settings.get("float32_matmul_precision") in (
            "high",
            "medium",
        ):
            return "TF32 matmuls were already allowed"
    elif remedy is RemedyId.CUDNN_BENCHMARK:
        if not cuda:
            return "cudnn.benchmark needs a CUDA GPU (this run had none)"
        if settings.get("cudnn_benchmark") is True:
            return "cudnn.benchmark was already on"
    elif remedy is RemedyId.TORCH_COMPILE:
        if used("torch_compile"):
            return "the script already calls torch.compile"
    elif remedy is RemedyId.EXPANDABLE_SEGMENTS:
        if not cuda:
            return "the CUDA caching allocator is not used without a CUDA GPU"
        if "expandable_segments" in env.get(ALLOC_CONF, ""):
            return f"{ALLOC_CONF} already sets expandable_segments"
    return None


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
        for remedy in _finding_remedies(f):
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
                batch_multiplier=_batch_multiplier(fs) if RemedyId.LARGER_BATCH in applies else None,
                predicted_speedup=max(predictions) if predictions else None,
            )
        )
    return trials
