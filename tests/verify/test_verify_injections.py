"""Each injection changes exactly what it should, seen from inside the script (CPU, real trial children).

The fixture dumps what its loop sees at step 3 (DataLoader, optimizer, switches, precision and layout
inside forward); each remedy's dump is compared with the baseline's: exactly the expected keys differ.
The parent's planning is bypassed (the trial child is run directly), so remedies that a CPU-only run
would skip (tf32, cudnn.benchmark) are exercised too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from verify_helpers import LOADER, SCRIPTS, run_trial_child

pytestmark = pytest.mark.slow

ARGS = ["--model", "conv", "--optimizer", "adamw", "--steps", "60"]


def dump_of(
    tmp: Path, remedies: tuple[str, ...], args: list[str] = ARGS, **kw: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    dump = tmp / f"{'_'.join(remedies) or 'baseline'}.dump.json"
    result = run_trial_child(tmp, LOADER, [*args, "--dump", str(dump)], remedies, **kw)
    assert result["status"] in ("ok", "skipped"), result
    return json.loads(dump.read_text()), result


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    state, result = dump_of(tmp_path_factory.mktemp("baseline"), ())
    assert result["status"] == "ok" and result["changes"] == []
    # at least the 4 steps asked; more where the host's jitter looks like a stall pattern (8 x 4 at most)
    assert result["step_detection"] == "optimizer_step_hook" and 4 <= result["steps_timed"] <= 32
    return state


CASES = {
    "dataloader_workers": (
        {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 4},
        ["num_workers"],
    ),
    "larger_batch": ({"batch_size": 32, "batch_rows": 32}, ["batch_size"]),
    "fused_optimizer": ({"optimizer_fused": True}, ["AdamW(fused)"]),
    "tf32": (
        {"allow_tf32_matmul": True, "float32_matmul_precision": "high"},
        ["torch.backends.cuda.matmul.allow_tf32"],
    ),
    "cudnn_benchmark": ({"cudnn_benchmark": True}, ["torch.backends.cudnn.benchmark"]),
    # bf16 inside forward, float32 outputs (the loss runs in float32 as under autocast)
    "bf16_autocast": ({"forward_autocast": True}, ["ConvNet.forward"]),
    "channels_last": (
        {"input_channels_last": True, "weight_channels_last": True},
        ["ConvNet and its 4-D inputs memory_format"],
    ),
}


@pytest.mark.parametrize("remedy", sorted(CASES))
def test_injection_changes_exactly(remedy: str, baseline: dict[str, Any], tmp_path: Path) -> None:
    expected, whats = CASES[remedy]
    state, result = dump_of(tmp_path, (remedy,))
    changed = {k: v for k, v in state.items() if baseline.get(k) != v}
    assert changed == expected
    assert result["status"] == "ok", result
    assert [c["what"] for c in result["changes"]][: len(whats)] == whats
    assert all(c["remedy"] == remedy for c in result["changes"])


def test_expandable_segments_comes_from_the_parent_environment(
    baseline: dict[str, Any], tmp_path: Path
) -> None:
    from gpuadvisor.verify.trials import trial_environment

    env, before = trial_environment(
        ("expandable_segments",), {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}
    )
    assert before == "max_split_size_mb:64"
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:64,expandable_segments:True"
    env.pop("PYTORCH_CUDA_ALLOC_CONF")
    env, before = trial_environment(("expandable_segments",), env)
    state, result = dump_of(tmp_path, ("expandable_segments",), env=env, alloc_conf_before=before)
    assert {k: v for k, v in state.items() if baseline.get(k) != v} == {
        "alloc_conf": "expandable_segments:True"
    }
    assert [c["text"] for c in result["changes"]] == [
        "PYTORCH_CUDA_ALLOC_CONF=unset -> expandable_segments:True"
    ]


def test_pin_memory_without_cuda_changes_nothing_and_says_so(
    baseline: dict[str, Any], tmp_path: Path
) -> None:
    state, result = dump_of(tmp_path, ("dataloader_pin_memory",))
    assert state == baseline
    assert result["status"] == "skipped" and "no CUDA device" in result["reason"]


def test_optimizer_without_fused_gets_foreach(tmp_path: Path) -> None:
    args = [*ARGS[:2], "--optimizer", "rmsprop", "--steps", "60"]
    (tmp_path / "base").mkdir()
    base, _ = dump_of(tmp_path / "base", (), args)
    state, result = dump_of(tmp_path, ("fused_optimizer",), args)
    assert {k: v for k, v in state.items() if base.get(k) != v} == {"optimizer_foreach": True}
    assert [c["text"].split(" at ")[0] for c in result["changes"]] == ["RMSprop(foreach)=None -> True"]


def test_tf32_overrides_the_scripts_own_setting(tmp_path: Path) -> None:
    args = [*ARGS, "--strict-fp32"]
    state, result = dump_of(tmp_path, ("tf32",), args)
    assert state["allow_tf32_matmul"] is True and state["allow_tf32_cudnn"] is True
    assert state["float32_matmul_precision"] == "high"
    overridden = [c for c in result["changes"] if c["where"] and "overridden" in c["where"]]
    assert {c["what"] for c in overridden} >= {
        "torch.backends.cuda.matmul.allow_tf32",
        "torch.backends.cudnn.allow_tf32",
    }


def test_framework_switches(tmp_path: Path) -> None:
    dump = tmp_path / "framework.json"
    result = run_trial_child(tmp_path, SCRIPTS / "framework_stub.py", [str(dump)], ("bf16_autocast", "tf32"))
    state = json.loads(dump.read_text())
    import torch

    cuda = torch.cuda.is_available()  # TrainingArguments(tf32=True) is only set where a GPU can take it
    assert state == {
        "bf16": True,
        "tf32": True if cuda else None,
        "validated": True,
        "precision": "bf16-mixed",
        "output_dtype": "torch.float32",
    }
    whats = [c["what"] for c in result["changes"]]
    assert "TrainingArguments.bf16" in whats and "Trainer.precision" in whats
    assert ("TrainingArguments.tf32" in whats) is cuda
    assert all(c["where"] is None or "framework_stub.py:" in c["where"] for c in result["changes"])
    # the framework's own switch replaces the generic autocast around the top module
    assert not any(w.endswith(".forward") for w in whats)


def test_torch_compile_in_place(baseline: dict[str, Any], tmp_path: Path) -> None:
    state, result = dump_of(tmp_path, ("torch_compile",), warmup_steps=3)
    if result["status"] == "skipped":
        pytest.skip(f"torch.compile does not work on this machine: {result['reason']}")
    assert {k: v for k, v in state.items() if baseline.get(k) != v} == {"compiled": True}
    assert [c["what"] for c in result["changes"]] == ["ConvNet"]


MIXED = SCRIPTS / "layout_mix.py"


def mixed_dump(tmp: Path, remedies: tuple[str, ...], args: list[str], **kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    dump = tmp / f"{'_'.join(remedies) or 'baseline'}.mixed.json"
    result = run_trial_child(tmp, MIXED, [*args, "--dump", str(dump)], remedies, **kw)
    return json.loads(dump.read_text()), result


def test_channels_last_converts_only_4d_floating_tensors(tmp_path: Path) -> None:
    # a Conv3d's 5-D weight, a 6-D batch of clips, 2-D features and a 4-D integer mask: Module.to(channels_last)
    # would raise "required rank 4 tensor to use channels_last format" on the Conv3d
    state, result = mixed_dump(tmp_path, ("channels_last",), [])
    assert result["status"] == "ok", result
    assert state["image_channels_last"] is True and state["clip_dim"] == 6 and state["conv3_weight_dim"] == 5
    assert state["mask_dtype"] == "torch.int64" and state["mask_contiguous"] is True
    assert any("4-D parameter/buffer tensors of Mixed converted" in n for n in result["notes"])


def test_injected_autocast_steps_aside_for_the_scripts_own(tmp_path: Path) -> None:
    state, result = mixed_dump(tmp_path, ("bf16_autocast",), ["--own-autocast"])
    assert state["fc_out_dtype"] == "torch.float16"  # the script's fp16, not the injected bf16
    assert result["status"] == "skipped" and result["reason"] == "the script enters torch.autocast itself"
    (tmp_path / "plain").mkdir()
    state, result = mixed_dump(tmp_path / "plain", ("bf16_autocast",), [])
    assert state["fc_out_dtype"] == "torch.bfloat16" and result["status"] == "ok"


def test_dataloader_levers_apply_separately(tmp_path: Path) -> None:
    # persistent_workers alone on a loader with workers; prefetch_factor alone; num_workers alone
    state, result = mixed_dump(tmp_path, ("persistent_workers",), ["--workers", "1"])
    assert (state["persistent_workers"], state["prefetch_factor"], state["num_workers"]) == (True, 2, 1)
    assert [c["what"] for c in result["changes"]] == ["persistent_workers"]
    (tmp_path / "p").mkdir()
    state, result = mixed_dump(
        tmp_path / "p", ("dataloader_workers",), ["--workers", "1"], params={"dataloader_workers": {"prefetch_factor": 4}}
    )
    assert (state["persistent_workers"], state["prefetch_factor"], state["num_workers"]) == (False, 4, 1)
    assert [c["what"] for c in result["changes"]] == ["prefetch_factor"]
    (tmp_path / "w").mkdir()
    state, result = mixed_dump(
        tmp_path / "w", ("dataloader_workers",), [], params={"dataloader_workers": {"num_workers": "auto"}}
    )
    assert (state["persistent_workers"], state["num_workers"]) == (False, 2)
    assert [c["what"] for c in result["changes"]] == ["num_workers"]


def test_dataloader_levers_reach_a_loader_built_by_library_code(tmp_path: Path) -> None:
    dump = tmp_path / "lib.json"
    result = run_trial_child(
        tmp_path,
        SCRIPTS / "library_loader.py",
        ["--dump", str(dump)],
        ("persistent_workers", "dataloader_workers"),
        params={"dataloader_workers": {"prefetch_factor": 4}},
    )
    assert result["status"] == "ok", result
    assert json.loads(dump.read_text()) == {"persistent_workers": True, "prefetch_factor": 4}
    assert sorted(c["what"] for c in result["changes"]) == ["persistent_workers", "prefetch_factor"]


def test_fp16_autocast_comes_with_a_grad_scaler(tmp_path: Path) -> None:
    state, result = mixed_dump(tmp_path, ("bf16_autocast",), [], params={"bf16_autocast": {"dtype": "float16"}})
    assert result["status"] == "ok", result
    assert state["fc_out_dtype"] == "torch.float16"
    whats = [c["what"] for c in result["changes"]]
    assert "Mixed.forward" in whats and "GradScaler" in whats
    assert result["nonfinite_params"] == 0


CHECKPOINTED = SCRIPTS / "checkpointed_mlp.py"


def test_checkpointed_functions_run_directly(tmp_path: Path) -> None:
    """Without an edit of the script: torch.utils.checkpoint, imported by name before the trial's patch
    could be undone, calls the blocks once per step (no recomputation in the backward)."""
    base_dump, res = tmp_path / "base.json", None
    (tmp_path / "b").mkdir()
    res = run_trial_child(tmp_path / "b", CHECKPOINTED, ["--steps", "40", "--dump", str(base_dump)], ())
    assert res["status"] == "ok" and json.loads(base_dump.read_text())["forwards_per_block_per_step"] == 2
    dump = tmp_path / "direct.json"
    res = run_trial_child(
        tmp_path, CHECKPOINTED, ["--steps", "40", "--dump", str(dump)], ("drop_activation_checkpointing",)
    )
    assert res["status"] == "ok", res
    assert json.loads(dump.read_text())["forwards_per_block_per_step"] == 1
    assert [c["what"] for c in res["changes"]] == ["torch.utils.checkpoint.checkpoint"]


def test_empty_cache_becomes_a_no_op_and_says_where(tmp_path: Path) -> None:
    dump = tmp_path / "d.json"
    res = run_trial_child(tmp_path, CHECKPOINTED, ["--steps", "40", "--dump", str(dump)], ("remove_empty_cache",))
    assert res["status"] == "ok", res
    (change,) = res["changes"]
    assert change["what"] == "torch.cuda.empty_cache()" and "checkpointed_mlp.py" in (change["where"] or "")


def test_a_script_without_checkpointing_has_nothing_to_change(tmp_path: Path) -> None:
    dump = tmp_path / "d.json"
    res = run_trial_child(tmp_path, LOADER, [*ARGS, "--dump", str(dump)], ("drop_activation_checkpointing",))
    assert res["status"] == "skipped" and "nothing to change" in res["reason"]
