"""GPU end-to-end capture (run on the GPU machine: `pytest -m gpu tests/capture/test_gpu_capture.py`)."""

from __future__ import annotations

import csv
import gzip
import json
import subprocess
from pathlib import Path

import pytest
import torch
from capture_helpers import SCRIPTS, manifest, profile_cmd, trace

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with CUDA"),
]


def test_gpu_training_capture(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = subprocess.run(
        profile_cmd(
            "-o",
            str(out),
            "--full",
            "--no-analyze",
            "--skip-steps",
            "5",
            "--warmup-steps",
            "2",
            "--active-steps",
            "5",
            str(SCRIPTS / "gpu_train.py"),
            "3",
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 3, r.stderr  # the script's own exit status
    m = manifest(out)
    assert m["exit_status"] == 3 and m["capture"]["state"] == "complete"
    assert "cuda_unavailable" not in m["degraded"]
    cats = {e.get("cat") for e in trace(out)["traceEvents"]}
    assert "kernel" in cats and "gpu_memcpy" in cats
    assert m["nvml"]["available"] is True and m["nvml"]["samples"] > 0
    with gzip.open(out / "nvml.csv.gz", "rt") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and rows[0]["gpu_uuid"].startswith(("GPU-", "MIG-")) and rows[0]["mem_total_bytes"]
    cs = json.loads((out / "callsites.json").read_text())
    item = [c for c in cs["callsites"] if c["call"] == "Tensor.item"]
    assert item and item[0]["line"] == 18 and item[0]["code"] == "hist.append(loss.item())"
    # Counted while the wrappers are installed: steps 1-2, then (the unprofiled reference steps 2-5 run
    # without them) from the warm-up at boundary 5 until the window ends at boundary 12; the read after
    # that step's optimizer.step() is not counted. Per step inside the window's 5 recorded steps.
    assert item[0]["count"] == 8 and item[0]["count_in_window"] == 5 and item[0]["per_step"] == 1.0
    assert cs["steps_counted"] == 9 and cs["window_steps"] == 5
    h2d = [c for c in cs["callsites"] if c["kind"] == "host_to_device" and c["line"] == 13]
    assert h2d and h2d[0]["pinned"] is False and h2d[0]["bytes_per_call"] == 64 * 256 * 4
    env = json.loads((out / "environment.json").read_text())
    assert env["gpus"] and env["gpus"][0]["sm_count"] > 0 and env["driver"]
    assert env["memory"]["peak_allocated_bytes"] > 0


def test_gpu_inference_loop_and_short_run(tmp_path: Path) -> None:
    """Issue 17 on the GPU: forward-call steps with the default window, the host copies recorded, CUPTI
    teardown requested; a 3-batch run is captured as a short run with its kernels."""
    out = tmp_path / "run"
    script = str(SCRIPTS / "inference_loop.py")
    r = subprocess.run(
        profile_cmd("-o", str(out), "-q", "--no-analyze", script, "--device", "cuda"),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert m["step_detection"] == "module_forward" and m["capture"]["state"] == "complete"
    assert m["capture"]["cupti_teardown"] is (torch.version.cuda is not None and tuple(
        int(p) for p in torch.version.cuda.split(".")[:2]) >= (12, 6))  # fmt: skip
    assert "kernel" in {e.get("cat") for e in trace(out)["traceEvents"]}
    cs = {c["call"]: c for c in json.loads((out / "callsites.json").read_text())["callsites"]}
    assert cs["Tensor.cpu"]["per_step"] == 1.0 and cs["Tensor.item"]["per_step"] == 1.0
    env = json.loads((out / "environment.json").read_text())
    assert env["settings"]["run_mode"]["kind"] == "inference"

    short = tmp_path / "short"
    r = subprocess.run(
        profile_cmd("-o", str(short), "-q", "--no-analyze", script, "--device", "cuda", "--batches", "3"),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    m = manifest(short)
    assert m["capture"]["short_run"] is True and "short_run" in m["degraded"]
    assert "kernel" in {e.get("cat") for e in trace(short)["traceEvents"]}
