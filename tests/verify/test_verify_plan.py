"""Which remedies verify tries, from findings, --only and what the run recorded (no processes)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuadvisor.errors import UsageError
from gpuadvisor.remedies import RemedyId
from gpuadvisor.verify.plan import ALL_SAFE_DEFAULT, plan_trials, skip_reason

CUDA_ENV: dict[str, Any] = {
    "cuda_available": True,
    "settings": {
        "allow_tf32_matmul": False,
        "float32_matmul_precision": "highest",
        "cudnn_benchmark": False,
        "autocast": {"used": False},
        "grad_scaler": {"used": False},
        "torch_compile": {"used": False},
    },
    "dataloaders": [{"num_workers": 0, "pin_memory": False, "batch_size": 64}],
    "optimizers": [{"class": "AdamW", "fused": None, "foreach": None}],
}


def finding(rule: str, **extra: Any) -> dict[str, Any]:
    return {"rule": rule, "category": "x", "impact": 0.5, **extra}


def plan(findings: list[dict[str, Any]], env: dict[str, Any] = CUDA_ENV, **kw: Any) -> dict[RemedyId, Any]:
    return {t.remedy: t for t in plan_trials(findings, env, num_workers=8, env={}, **kw)}


def test_rule_table_and_all_safe() -> None:
    trials = plan([finding("GA301"), finding("GA502"), finding("GA701"), finding("GA201")])
    assert list(trials) == [
        RemedyId.DATALOADER_WORKERS,
        RemedyId.FUSED_OPTIMIZER,
        RemedyId.BF16_AUTOCAST,
        RemedyId.TF32,
        RemedyId.ALL_SAFE,
    ]
    assert trials[RemedyId.TF32].findings == ("GA701",)
    assert trials[RemedyId.TF32].changes_numerics
    assert trials[RemedyId.ALL_SAFE].applies == (RemedyId.DATALOADER_WORKERS, RemedyId.FUSED_OPTIMIZER)
    assert trials[RemedyId.ALL_SAFE].findings == ("GA301", "GA502")
    assert trials[RemedyId.DATALOADER_WORKERS].predicted_speedup == pytest.approx(2.0)
    assert all(t.skip_reason is None for t in trials.values())


def test_all_safe_is_not_a_copy_of_one_remedy() -> None:
    env = {**CUDA_ENV, "optimizers": [{"fused": True}]}
    trials = plan([finding("GA301"), finding("GA502")], env)
    assert trials[RemedyId.FUSED_OPTIMIZER].skip_reason == "every optimizer is already fused"
    reason = trials[RemedyId.ALL_SAFE].skip_reason
    assert reason is not None and reason.startswith("only dataloader_workers applies")


def test_finding_remedy_wins_over_the_table() -> None:
    trials = plan([finding("GA701", remedy="tf32", prediction={"speedup": 3.0})])
    assert list(trials) == [RemedyId.TF32]
    assert trials[RemedyId.TF32].predicted_speedup == 3.0
    # a remedy that needs an edit of the script is never tried
    assert plan([finding("GA201", remedy="remove_host_syncs")]) == {}


def test_only_selects_rules_and_forces_remedies() -> None:
    fs = [finding("GA301"), finding("GA701")]
    trials = plan(fs, only=("ga701",))
    assert list(trials) == [RemedyId.BF16_AUTOCAST, RemedyId.TF32]
    trials = plan(fs, only=("cudnn_benchmark",))
    assert list(trials) == [RemedyId.CUDNN_BENCHMARK]
    assert trials[RemedyId.CUDNN_BENCHMARK].forced and trials[RemedyId.CUDNN_BENCHMARK].findings == ()
    assert trials[RemedyId.CUDNN_BENCHMARK].category == "low_occupancy"
    with pytest.raises(UsageError, match="neither a remedy id nor the rule"):
        plan(fs, only=("GA999",))
    with pytest.raises(UsageError, match="needs an edit of the script"):
        plan(fs, only=("remove_host_syncs",))


def test_only_all_safe_alone_uses_every_applicable_safe_remedy() -> None:
    trials = plan([], only=("all_safe",))
    applies = trials[RemedyId.ALL_SAFE].applies
    assert set(applies) <= set(ALL_SAFE_DEFAULT)
    assert RemedyId.DATALOADER_WORKERS in applies and RemedyId.CUDNN_BENCHMARK in applies
    assert RemedyId.EXPANDABLE_SEGMENTS in applies


def test_larger_batch_multiplier_from_the_finding() -> None:
    trials = plan([finding("GA401", evidence={"recommended_batch_multiplier": 16})])
    assert trials[RemedyId.LARGER_BATCH].batch_multiplier == 16
    assert trials[RemedyId.LARGER_BATCH].changes_batch
    assert plan([], only=("larger_batch",))[RemedyId.LARGER_BATCH].batch_multiplier == 4


@pytest.mark.parametrize(
    ("remedy", "env_change", "why"),
    [
        (RemedyId.DATALOADER_WORKERS, {"dataloaders": []}, "constructed no DataLoader"),
        (RemedyId.DATALOADER_WORKERS, {"dataloaders": [{"num_workers": 8}]}, "already has num_workers"),
        (RemedyId.DATALOADER_PIN_MEMORY, {"cuda_available": False}, "CUDA"),
        (RemedyId.LARGER_BATCH, {"dataloaders": [{"batch_size": None}]}, "batch_sampler"),
        (RemedyId.FUSED_OPTIMIZER, {"optimizers": [{"fused": True}]}, "already fused"),
        (RemedyId.BF16_AUTOCAST, {"settings": {"autocast": {"used": True}}}, "already runs under"),
        (
            RemedyId.BF16_AUTOCAST,
            {"settings": {"grad_scaler": {"used": True, "enabled": True}}},
            "GradScaler",
        ),
        (RemedyId.TF32, {"cuda_available": False}, "needs a CUDA GPU"),
        (
            RemedyId.TF32,
            {"settings": {"allow_tf32_matmul": True, "float32_matmul_precision": "high"}},
            "already allowed",
        ),
        (RemedyId.CUDNN_BENCHMARK, {"settings": {"cudnn_benchmark": True}}, "already on"),
        (RemedyId.TORCH_COMPILE, {"settings": {"torch_compile": {"used": True}}}, "already calls"),
        (RemedyId.EXPANDABLE_SEGMENTS, {"cuda_available": False}, "allocator"),
    ],
)
def test_skip_reasons_from_the_record(remedy: RemedyId, env_change: dict[str, Any], why: str) -> None:
    assert skip_reason(remedy, CUDA_ENV, num_workers=8, env={}) is None
    env = {**CUDA_ENV, **env_change}
    reason = skip_reason(remedy, env, num_workers=8, env={})
    assert reason is not None and why in reason


def test_allocator_setting_already_in_the_environment() -> None:
    reason = skip_reason(
        RemedyId.EXPANDABLE_SEGMENTS,
        CUDA_ENV,
        num_workers=8,
        env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    )
    assert reason is not None and "already sets" in reason
