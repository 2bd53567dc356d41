"""`verify --explore` end to end on the CPU, and verify's refusals (another machine, a run tracked by
git). Real `profile` runs of the synthetic fixture (sleeps stand in for per-sample decoding and for the
device's share of a step), real trial processes; trial counts and steps kept small."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from verify_helpers import LOADER, gpuadvisor, profile

SHORT = ["--trials", "2", "--warmup-steps", "3", "--steps", "10", "--num-workers", "2"]


def probe_here() -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "gpuadvisor.verify.probe"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    data: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return data


def hand_made_run(tmp: Path, environment: dict[str, Any]) -> Path:
    """A run directory with no trace, whose findings.json names nothing: verify measures nothing,
    so only its checks and its output are exercised."""
    run = tmp / "run"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(
        json.dumps(
            {
                "target": {"kind": "script", "path_or_name": str(LOADER), "argv": [str(LOADER)]},
                "cwd": str(Path.cwd()),
                "python": sys.executable,
            }
        )
    )
    (run / "environment.json").write_text(json.dumps(environment))
    (run / "findings.json").write_text(json.dumps({"schema_version": 1, "findings": []}))
    return run


@pytest.mark.slow
def test_a_run_recorded_elsewhere_is_refused(tmp_path: Path) -> None:
    here = probe_here()
    h200 = {**here, "cuda_available": True, "gpus": [{"name": "NVIDIA H200"}], "torch": "2.11.0+cu130"}
    run = hand_made_run(tmp_path, h200)
    r = gpuadvisor("verify", str(run))
    assert r.returncode == 2, r.stderr
    assert "this one differs" in r.stderr and "GPU: recorded on NVIDIA H200" in r.stderr
    assert "torch: recorded 2.11.0+cu130" in r.stderr and "--allow-other-machine" in r.stderr
    assert not (run / "verify.json").exists()
    # allowed: the numbers say where they were measured
    r = gpuadvisor("verify", str(run), "--allow-other-machine")
    assert r.returncode == 0, r.stderr
    doc = json.loads((run / "verify.json").read_text())
    assert doc["machine"]["same"] is False and doc["measured_on"].startswith(("CPU only", "NVIDIA", "a CUDA"))
    assert doc["baseline"]["measured_on"] == doc["measured_on"]
    assert any(n.startswith("not measured on the recording's machine") for n in doc["notes"])
    assert "measuring on another machine than the recording's" in r.stderr


@pytest.mark.slow
def test_a_run_tracked_by_git_gets_no_verify_json_without_o(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    here = probe_here()
    run = hand_made_run(tmp_path / "repo", {k: here[k] for k in ("platform", "cpu_count", "torch", "cuda_available")})
    repo = tmp_path / "repo"
    for cmd in (["init", "-q"], ["add", "run"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, capture_output=True)
    r = gpuadvisor("verify", str(run))
    assert r.returncode == 2 and "tracked by git" in r.stderr and "-o FILE" in r.stderr
    assert not (run / "verify.json").exists()
    out = tmp_path / "measured.json"
    r = gpuadvisor("verify", str(run), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["machine"]["same"] is True and not (run / "verify.json").exists()


@pytest.mark.slow
def test_explore_measures_a_data_lever_on_a_data_bound_script(tmp_path: Path) -> None:
    # 8 samples x 3 ms of per-sample work per step at num_workers=0, 4 ms of step
    run = profile(tmp_path / "run", LOADER, "--sample-ms", "3", "--step-ms", "4", "--steps", "400")
    r = gpuadvisor(
        "verify", str(run), "--explore", *SHORT,
        "--only", "num_workers", "--only", "persistent_workers", "--only", "prefetch_factor",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads((run / "verify.json").read_text())
    assert "estimate:" in r.stderr and r.stderr.index("estimate:") < r.stderr.index("trial 1:")
    workers = next(t for t in doc["trials"] if t["lever"] == "num_workers")
    assert workers["status"] == "ok" and workers["category"] == "data_loading"
    assert workers["verdict"] == "faster" and workers["speedup"] > 1.3, workers
    assert workers["change"].startswith("num_workers=0 -> 2")
    skipped = {t["lever"]: t["reason"] for t in doc["trials"] if t["status"] == "skipped"}
    assert "needs DataLoader workers" in skipped["persistent_workers"]
    best = doc["explore"]["best"]
    assert best is not None and "num_workers" in best["levers"] and best["speedup"] > 1.3
    assert best["text"].startswith("best measured configuration: num_workers=2")
    assert "best measured configuration: num_workers=2" in r.stderr and "changes: num_workers=0 -> 2" in r.stderr
    # the search grew: the dependent levers were tried on top of num_workers
    tried = {tuple(c["levers"]) for step in doc["explore"]["steps"] for c in step["candidates"]}
    assert any("persistent_workers" in t for t in tried) and any("prefetch_factor" in t for t in tried)
    assert doc["explore"]["stopped"]


@pytest.mark.slow
def test_explore_drops_a_failing_lever_and_goes_on(tmp_path: Path) -> None:
    run = profile(tmp_path / "run", LOADER, "--fail-in-worker", "--sample-ms", "1", "--steps", "400")
    r = gpuadvisor("verify", str(run), "--explore", *SHORT, "--only", "num_workers", "--only", "larger_batch")
    assert r.returncode == 0, r.stderr
    doc = json.loads((run / "verify.json").read_text())
    by = {t["lever"]: t for t in doc["trials"]}
    assert by["num_workers"]["status"] == "failed"
    assert "this dataset cannot run in a DataLoader worker" in by["num_workers"]["reason"]
    assert by["larger_batch"]["status"] == "ok" and by["larger_batch"]["trials"] == 2
    assert by["larger_batch"]["compared_in"] == "samples_per_s" and "learning rate" in by["larger_batch"]["note"]


@pytest.mark.slow
def test_all_safe_goes_on_without_a_member_that_fails(tmp_path: Path) -> None:
    run = profile(tmp_path / "run", LOADER, "--fail-in-worker", "--steps", "400")
    r = gpuadvisor("verify", str(run), "--only", "all_safe", *SHORT)
    assert r.returncode == 0, r.stderr
    doc = json.loads((run / "verify.json").read_text())
    (entry,) = [t for t in doc["trials"] if t["remedy"] == "all_safe"]
    assert [m["remedy"] for m in entry["left_out"]] == ["dataloader_workers"]
    assert "cannot run in a DataLoader worker" in entry["left_out"][0]["reason"]
    assert "dataloader_workers" not in entry["applies"] and entry["applies"]
    assert entry["status"] in ("ok", "skipped"), entry  # measured without it (or nothing else to change)
    assert "all_safe goes on without dataloader_workers" in r.stderr


@pytest.mark.slow
def test_ctrl_c_keeps_the_trials_measured_so_far(tmp_path: Path) -> None:
    import signal
    import time

    run = profile(tmp_path / "run", LOADER, "--sample-ms", "1", "--steps", "400")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuadvisor", "verify", str(run), "--explore", *SHORT,
         "--only", "num_workers", "--only", "fused_optimizer"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if "trial 2:" in line:
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, "".join(seen) + rest
    doc = json.loads((run / "verify.json").read_text())
    assert doc["baseline"]["trials"] >= 1 and doc["explore"]["stopped"] == "interrupted (Ctrl-C)"
    assert any("interrupted" in n for n in doc["notes"])


WORKLOADS = Path(__file__).resolve().parents[2] / "benchmarks" / "workloads"


@pytest.mark.slow
def test_explore_on_the_resnet50_workload(tmp_path: Path) -> None:
    """The real ResNet-50 training script (--tiny on the CPU): channels_last and bf16 autocast apply
    and run on it (the timing on a shared CPU says nothing; the GPU check is in docs/verify.md)."""
    script = WORKLOADS / "resnet50_fp32_nchw.py"
    if not script.is_file():
        pytest.skip("benchmarks/workloads/resnet50_fp32_nchw.py is not in this checkout")
    run = tmp_path / "run"
    r = gpuadvisor(
        "profile", "-o", str(run), "--skip-steps", "2", "--warmup-steps", "1", "--active-steps", "2",
        "--no-analyze", "-q", str(script), "--tiny", "--steps", "40",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = gpuadvisor(
        "verify", str(run), "--explore", "--trials", "2", "--warmup-steps", "2", "--steps", "4",
        "--only", "channels_last", "--only", "bf16_autocast",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads((run / "verify.json").read_text())
    by = {t["lever"]: t for t in doc["trials"]}
    assert by["channels_last"]["status"] == "ok" and by["bf16_autocast"]["status"] == "ok", by
    assert "memory_format=contiguous -> channels_last" in by["channels_last"]["change"]
    assert "autocast(cpu, bfloat16)" in by["bf16_autocast"]["change"]


@pytest.mark.slow
def test_profile_explore_is_one_command(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = gpuadvisor(
        "profile", "-o", str(run), "--skip-steps", "2", "--warmup-steps", "1", "--active-steps", "3",
        "--explore", "--verify-only", "num_workers", "--verify-trials", "2",
        str(LOADER), "--sample-ms", "2", "--step-ms", "4", "--steps", "400",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads((run / "verify.json").read_text())
    assert doc["settings"]["explore"] is True and [t["lever"] for t in doc["trials"]] == ["num_workers"]
    assert doc["trials"][0]["status"] == "ok"
    # analyzed once, after the search: findings.json carries the explore note
    assert r.stderr.count("gpuadvisor: report: ") == 1
    assert any(n.startswith("verify --explore: ") for n in json.loads((run / "findings.json").read_text())["notes"])


@pytest.mark.slow  # profiles a script and runs about 12 trial processes (about 60 s on 2 cores)
def test_a_batch_sliced_in_the_script_is_raised_through_its_own_batch_size_argument(tmp_path: Path) -> None:
    from verify_helpers import SCRIPTS

    script = SCRIPTS / "sliced_batch.py"
    run = profile(tmp_path / "run", script, "--steps", "400")
    # the small-batch finding a GPU run would carry (GA401 does not fire on the CPU): its multiplier is used
    ga401 = {"rule": "GA401", "title": "Small batch", "impact": 0.8, "remedy": "larger_batch",
             "evidence": {"recommended_batch_multiplier": 8}}  # fmt: skip
    (run / "findings.json").write_text(json.dumps({"schema_version": 1, "findings": [ga401]}))
    r = gpuadvisor(
        "verify", str(run), "--explore", *SHORT, "--only", "script_batch_size", "--only", "larger_batch"
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((run / "verify.json").read_text())
    by = {t["lever"]: t for t in doc["trials"]}
    # the DataLoader lever cannot apply; the script's own argument can
    assert by["larger_batch"]["status"] == "skipped" and "DataLoader" in by["larger_batch"]["reason"]
    lever = by["script_batch_size"]
    assert lever["status"] == "ok", lever
    # the option is declared in a helper module: found by the baseline trial, not in the script's source
    assert "the script's own switches: script_batch_size -> --batch-size (ArgumentParser, seen at run time)" in r.stderr
    assert lever["compared_in"] == "samples_per_s" and "learning rate" in lever["note"]
    # the baseline's batch was counted at the model's input: 4 samples a step, times the finding's 8
    assert doc["baseline"]["samples_per_s"] and lever["change"] == "the script's own --batch-size argument set to 32 (4 x 8)"
    # a fixed 4 ms per step: 8x the batch is well over 2x the samples/s
    assert lever["speedup"] > 2.0 and lever["verdict"] == "faster", lever
    # 8x the batch gave more than half of 8x the samples/s: the ladder measured x32 (a rung of its own)
    assert "script_batch_size: x8 gave " in r.stderr and "the batch ladder measures x32 next" in r.stderr
    rungs = doc["explore"]["rungs"]
    assert rungs[0] == "script_batch_size@x32", rungs
    x32 = by["script_batch_size@x32"]
    assert x32["rung_of"] == "script_batch_size" and x32["change"] == "the script's own --batch-size argument set to 128 (4 x 32)"
    # reported beside the best configuration, never inside it: the fastest rung
    batch = doc["explore"]["batch"]
    assert batch["lever"].startswith("script_batch_size") and batch["speedup"] >= lever["speedup"]
    assert f"a larger batch: {batch['label']}: " in r.stderr and "learning rate" in batch["text"]
    from gpuadvisor.verify.results import explore_note

    assert f"; also a larger batch: {batch['label']}" in str(explore_note(doc))  # the report's note


def _explore_batch_lever(tmp_path: Path, script: Path) -> dict[str, Any]:
    """Profile `script`, give the run a small-batch finding (x8), explore its --batch-size lever alone."""
    run = profile(tmp_path / "run", script, "--steps", "400")
    ga401 = {"rule": "GA401", "title": "Small batch", "impact": 0.8, "remedy": "larger_batch",
             "evidence": {"recommended_batch_multiplier": 8}}  # fmt: skip
    (run / "findings.json").write_text(json.dumps({"schema_version": 1, "findings": [ga401]}))
    r = gpuadvisor("verify", str(run), "--explore", *SHORT, "--only", "script_batch_size")
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads((run / "verify.json").read_text())
    return doc


@pytest.mark.slow  # profiles a script and runs about 12 trial processes (about 60 s on 2 cores)
def test_a_sequence_first_batch_is_counted_along_its_batch_axis(tmp_path: Path) -> None:
    """PyTorch's word-language-model LSTM takes (seq, batch, ...): counting the first axis counted time
    steps, so 8x the batch (same samples a step, longer steps) measured "slower" on an H200."""
    from verify_helpers import SCRIPTS

    doc = _explore_batch_lever(tmp_path, SCRIPTS / "seq_first_batch.py")
    lever = {t["lever"]: t for t in doc["trials"]}["script_batch_size"]
    assert lever["status"] == "ok", lever
    # the trials recorded the model input's shape: (12, 4, 8) at the baseline, (12, 32, 8) at x8
    assert doc["baseline"]["samples_shape"] == [12, 4, 8] and lever["samples_shape"] == [12, 32, 8], lever
    assert lever["samples_axis"] == 1 and "axis 1" in lever["note"]
    # a fixed 4 ms per step: 8x the batch is well over 2x the samples/s (along axis 0 it was below 1x)
    assert lever["speedup"] > 2.0 and lever["verdict"] == "faster", lever


@pytest.mark.slow  # profiles a script and runs about 10 trial processes (about 60 s on 2 cores)
def test_a_batch_counted_from_time_steps_keeps_one_value_per_lever(tmp_path: Path) -> None:
    """lstm_lm on an H200: the parser leaves --batch-size None, so the lever multiplied the count at the
    model's input (time steps); once its first trial showed the batch axis, its next trials multiplied
    the batch instead: two batch sizes in one lever's trials, no shape to compare, a wrong 'slower'."""
    from verify_helpers import SCRIPTS

    doc = _explore_batch_lever(tmp_path, SCRIPTS / "seq_first_no_default.py")
    trials = {t["lever"]: t for t in doc["trials"]}
    lever = trials["script_batch_size"]
    # both trials ran --batch-size 96 (the 12 time steps x 8): one shape, compared along axis 1
    assert lever["samples_shape"] == [12, 96, 8] and lever["batch_sizes"] == [4, 96], lever
    assert lever["samples_axis"] == 1 and "24x larger (4 -> 96" in lever["note"], lever
    assert lever["label"] == "script --batch-size x8 (batch 4 -> 96)"
    for name, rung in trials.items():  # a rung multiplies the batch axis's own size (4), not the 12
        if name.startswith("script_batch_size@x"):
            m = int(name.split("@x")[1])
            assert rung["samples_shape"] in (None, [12, 4 * m, 8]), rung
