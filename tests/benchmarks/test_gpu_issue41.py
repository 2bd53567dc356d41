"""benchmarks/gpu_issue41.sh on the CPU (`--tiny`, a few workloads): every stage runs, its files land in
OUT (at most 8, the most a lent GPU machine returns), and what comes back reads as the phase-2 work
needs it (the NHWC table by gpuadvisor, the measurements as measure.py's JSONL, the recordings as run
directories)."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from gpuadvisor.stepmodel.layout import NhwcTable

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_gpu_script_runs_every_stage_and_returns_few_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = dict(os.environ, WORKLOADS="control_gn_decoder", PERIODIC="big_checkpoint", RECORD="control_gn_decoder",
               OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_issue41.sh"), str(out), "--tiny"],
                          capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["logs.tar.gz", "measure.jsonl", "nhwc_table.json", "raw_gemm_odd_shapes.json.gz",
                     "raw_gemm_odd_shapes_stack.json.gz", "record.tar.gz"]
    assert NhwcTable.from_json(json.loads((out / "nhwc_table.json").read_text())).entries
    records = [json.loads(line) for line in (out / "measure.jsonl").read_text().splitlines()]
    variants = {(r["workload"], r["variant"]) for r in records if r.get("record") == "variant"}
    assert variants == {("control_gn_decoder", "planted"), ("control_gn_decoder", "channels_last"),
                        ("big_checkpoint", "planted"), ("big_checkpoint", "async_checkpoint")}
    with tarfile.open(out / "record.tar.gz") as tar:
        names = tar.getnames()
    assert "runs/control_gn_decoder-planted/manifest.json" in names
    assert not any(n.startswith("runs/control_gn_decoder-fixed") for n in names)
    with tarfile.open(out / "logs.tar.gz") as tar:
        summary = tar.extractfile("logs/summary.txt")
        assert summary is not None
        text = summary.read().decode()
    assert "record: exit 0" in text and "raw_trace_stack: exit 0" in text and "skipped" not in text


def test_the_gpu_script_rejects_unknown_options(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_issue41.sh"), str(tmp_path), "--bogus"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "usage" in proc.stderr
