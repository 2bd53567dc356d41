"""Every file of `../shared/peer-traces` (real traces of other projects, not recorded by us) through the
real CLI: no traceback ever, non-traces refused with exit 2 naming what they are, and the labels each
trace must carry (tests/peer/corpus.py). Skipped with the reason when the corpus is absent.

The slowest files (over 500 KB on disk) are marked `slow`; `-m "not slow"` keeps the rest under ~30 s
on 2 cores."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuadvisor.cli import cli
from gpuadvisor.trace.kind import kind_of
from gpuadvisor.trace.load import load_trace
from tests.peer.corpus import (
    EXPECT,
    FOLDERS_ONE_JOB,
    FOLDERS_REFUSED,
    PEER,
    SKIP_REASON,
    SLOW_FOLDERS,
    Expect,
    corpus_files,
    is_slow,
)

pytestmark = pytest.mark.skipif(not PEER.is_dir(), reason=SKIP_REASON)

# Rules whose advice needs what the trace may not be (see the rules' `requires`).
NVIDIA_ONLY = ("GA601", "GA701")
TRAINING_ONLY = ("GA502", "GA1004")
GPU_RULES = (
    "GA101",
    "GA102",
    "GA103",
    "GA201",
    "GA202",
    "GA203",
    "GA301",
    "GA401",
    "GA501",
    "GA502",
    "GA601",
    "GA701",
)


def _param(rel: str) -> Any:
    return pytest.param(rel, id=rel, marks=[pytest.mark.slow] if is_slow(rel) else [])


@cache
def _run(target: str) -> tuple[int, str, dict[str, Any] | None]:
    """`gpuadvisor analyze TARGET --format json` in-process (once per target): (exit code, output, JSON)."""
    res = CliRunner().invoke(cli, ["analyze", str(PEER / target), "--format", "json"])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"traceback on {target}: {res.exception!r}") from res.exception
    data = json.loads(res.stdout) if res.exit_code == 0 else None
    return res.exit_code, res.output, data


def _status(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["rule"]: r for r in data["rules"]}


def test_every_corpus_file_has_an_expectation() -> None:
    files = corpus_files()
    assert files, SKIP_REASON
    missing = sorted(set(files) - set(EXPECT))
    gone = sorted(set(EXPECT) - set(files))
    assert not missing, f"add these corpus files to tests/peer/corpus.py EXPECT: {missing}"
    assert not gone, f"EXPECT lists files the corpus no longer has: {gone}"


@pytest.mark.parametrize("rel", [_param(r) for r in sorted(EXPECT)])
def test_file_analyzes_without_traceback_and_is_labelled(rel: str) -> None:
    expect = EXPECT[rel]
    code, output, data = _run(rel)
    if expect.not_trace is not None:
        assert code == 2, output
        assert expect.not_trace in output and "Traceback" not in output
        assert len(output.strip().splitlines()) == 1, output
        return
    assert code == 0, output
    assert data is not None
    assert not [r for r in data["rules"] if r["status"] == "error"], "a rule raised"
    kind = data["environment"]["trace_kind"]
    _check_kind(rel, expect, kind)
    notes = data["notes"]
    assert sum(1 for n in notes if n.startswith("trace kind:")) == 1
    status = _status(data)
    fired = {f["rule"] for f in data["findings"]}
    if kind["vendor"] != "nvidia":
        for rule in NVIDIA_ONLY:
            assert status[rule]["status"] == "not_applicable" and rule not in fired
    if kind["workload"] != "training":
        for rule in TRAINING_ONLY:
            assert status[rule]["status"] == "not_applicable" and rule not in fired
            if kind["workload"] == "inference":
                assert "inference run: no optimizer step or backward pass" in status[rule]["detail"]
    if kind["cpu_only"]:
        assert not fired & set(GPU_RULES)
    if kind["vendor"] == "mtia":
        assert not [n for n in notes if "CPU-only" in n or "CUPTI" in n]


def _check_kind(rel: str, expect: Expect, kind: dict[str, Any]) -> None:
    checks = {
        "vendor": expect.vendor,
        "workload": expect.workload,
        "schema": expect.schema,
        "cpu_only": expect.cpu_only,
        "torch_compile": expect.torch_compile,
        "world_size": expect.world_size,
    }
    for key, want in checks.items():
        if want is not None:
            assert kind[key] == want, f"{rel}: trace_kind.{key} is {kind[key]!r}, expected {want!r}"


@pytest.mark.parametrize("rel", [_param(r) for r in sorted(EXPECT) if EXPECT[r].min_steps])
def test_steps_from_every_schema(rel: str) -> None:
    """ProfilerStep#N as user_annotation or as an Operator (2021), else optimizer steps: never the
    whole-trace fallback where markers exist (HTA finds these steps too)."""
    m = load_trace(PEER / rel)
    assert m.step_source in ("profiler_step", "optimizer_step"), m.step_source
    assert len(m.steps) >= (EXPECT[rel].min_steps or 0)


def _inference_files() -> list[Any]:
    out = []
    for rel in sorted(EXPECT):
        if EXPECT[rel].workload != "inference" or is_slow(rel):
            continue
        marks: list[Any] = []
        out.append(pytest.param(rel, id=rel, marks=marks))
    return out


@pytest.mark.parametrize("rel", _inference_files())
def test_inference_traces_get_no_training_advice(rel: str) -> None:
    _, output, data = _run(rel)
    assert data is not None, output
    for f in data["findings"]:
        text = " ".join((f["title"], f["message"], f["recommendation"])).lower()
        for word in ("learning rate", "optimizer", "fused=true", "no_sync"):
            assert word not in text, f"{f['rule']} gives training advice ({word!r}) on an inference trace"


def test_amd_trace_gets_no_cuda_advice() -> None:
    _, _, data = _run("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert data is not None
    status = _status(data)
    for rule in NVIDIA_ONLY:
        assert status[rule]["detail"] == "AMD GPU (ROCm): CUDA-specific advice does not apply"
    assert any(n.startswith("AMD GPU (ROCm) trace (HIP runtime calls") for n in data["notes"])
    for f in data["findings"]:
        text = " ".join((f["title"], f["message"], f["recommendation"]))
        for word in ("TF32", "tensor core", "cudaGraph", "nvidia-smi"):
            assert word not in text, f"{f['rule']} gives CUDA advice ({word!r}) on an AMD trace"


def test_2021_traces_have_steps_and_say_old_schema() -> None:
    _, _, data = _run("kineto/resnet50_num_workers_4/worker0.pt.trace.json.gz")
    assert data is not None
    assert data["metrics"]["steps_analyzed"] >= 4
    assert any(
        n.startswith("old Kineto schema (2021 category names Operator, Runtime, Kernel")
        for n in data["notes"]
    )
    ga001 = [f for f in data["findings"] if f["rule"] == "GA001"]
    assert not [f for f in ga001 if "step markers" in f["message"].lower()]


# ---- folders ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("folder", sorted(FOLDERS_ONE_JOB))
def test_folders_of_one_job(folder: str) -> None:
    code, output, data = _run(folder)
    assert code == 0, output
    assert data is not None
    assert tuple(data["source"]["ranks"]) == FOLDERS_ONE_JOB[folder]
    assert any(
        n.startswith(f"multi-rank analysis: {len(FOLDERS_ONE_JOB[folder])} ranks") for n in data["notes"]
    )
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for f in data["findings"]:
        by_rule.setdefault(f["rule"], []).append(f)
    # one straggler verdict: GA1001 speaks of a straggler only when GA1002 reports that same rank
    g2 = {f["evidence"]["straggler_rank"] for f in by_rule.get("GA1002", [])}
    for f in by_rule.get("GA1001", []):
        named = f["evidence"]["straggler_rank"]
        assert (named is None and not g2) or {named} == g2
        # the impact is the named rank's own exposed share, and so is the "most exposed" number
        rank = str(f["evidence"]["rank"])
        assert f["impact"] == pytest.approx(f["evidence"]["ranks"][rank]["exposed_fraction"], abs=1e-4)
        most = str(f["evidence"]["most_exposed_rank"])
        share = f["evidence"]["ranks"][most]["exposed_fraction"]
        assert share == max(r["exposed_fraction"] for r in f["evidence"]["ranks"].values())


def test_dlrm_nested_ddp_forwards_are_not_micro_batches() -> None:
    _, _, data = _run("param/dlrm_kineto_8rank")
    assert data is not None
    assert _status(data)["GA1004"]["status"] == "ran"
    assert not [f for f in data["findings"] if f["rule"] == "GA1004"]


@pytest.mark.parametrize(
    "folder",
    [
        pytest.param(f, id=f, marks=[pytest.mark.slow] if f in SLOW_FOLDERS else [])
        for f in sorted(FOLDERS_REFUSED)
    ],
)
def test_folders_that_are_not_one_job_are_refused(folder: str) -> None:
    code, output, _ = _run(folder)
    assert code == 2 and FOLDERS_REFUSED[folder] in output and "Traceback" not in output, output


def test_folder_of_different_models_rank0_traces_is_refused(tmp_path: Path) -> None:
    """Five different models' rank-0 traces in one folder are not a 5-rank job. Copied into the test's
    temporary folder (at most 125 KB each): a link out of a folder of traces is not one of its traces."""
    picks = [
        "hta/timeline_analysis/sampled_rank-0.json.gz",
        "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
        "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz",
        "hta/execution_trace/benchmark_simple_add_trace.json.gz",
        "hta/critical_path/end_to_end/simple_add/input/trace.json.gz",
    ]
    for i, rel in enumerate(picks):
        shutil.copyfile(PEER / rel, tmp_path / f"model{i}.json.gz")
    res = CliRunner().invoke(cli, ["analyze", str(tmp_path)])
    assert res.exit_code == 2 and "not the distinct ranks of one job" in res.output
    assert "all claim rank 0" in res.output and "Traceback" not in res.output


# ---- the real command line, in a fresh process -------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run(
        [sys.executable, "-m", "gpuadvisor", "analyze", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.slow  # three CLI subprocesses (~5 s on 2 loaded cores); in-process tests cover the same files
def test_subprocess_cli_on_an_amd_trace_and_two_non_traces() -> None:
    ok = _cli(str(PEER / "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"), "--format", "json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["environment"]["trace_kind"]["vendor"] == "amd"
    for rel, words in (
        ("param/non_kineto/linear_et.json.gz", "PyTorch execution trace"),
        ("hta/memory_analysis/memory_timeline.raw.gz", "PyTorch memory timeline"),
    ):
        bad = _cli(str(PEER / rel))
        assert bad.returncode == 2 and words in bad.stderr and "Traceback" not in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1


def test_mtia_trace_kind_is_decided_from_its_events() -> None:
    m = load_trace(PEER / "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz")
    kind = kind_of(m)
    assert kind.vendor.value == "mtia" and kind.device_events_not_analyzed == 1313
    assert not kind.cpu_only and not m.has_gpu_kernels
