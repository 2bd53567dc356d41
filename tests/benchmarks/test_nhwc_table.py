"""benchmarks/nhwc_table.py on the CPU (`--tiny`: tiny shapes, host timers): the script's logic, its JSON,
and that gpuadvisor reads the summary it writes (gpuadvisor/stepmodel/layout.py). The numbers are not a
table: only a GPU measures one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuadvisor.stepmodel.layout import FAMILIES, NhwcTable

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")


@pytest.mark.slow
def test_the_table_script_measures_each_family_and_gpuadvisor_reads_it(tmp_path: Path) -> None:
    out = tmp_path / "nhwc.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "nhwc_table.py"), "--tiny", "-o", str(out),
           "--rounds", "1", "--iters", "1", "--warmup", "1", "--dtypes", "fp32,bf16"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=ENV, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["schema"] == 1 and "not a table" in doc["source"]["gpu"]
    # the script's families are the ones the replay knows, every one measured in both dtypes
    assert set(doc["families"]) == set(FAMILIES)
    assert all(set(by) == {"fp32", "bf16"} for by in doc["families"].values())
    m = doc["measurements"][0]
    assert {"family", "variant", "dtype", "shape", "nchw_us", "channels_last_us", "ratio"} <= set(m)
    assert m["ratio"] == pytest.approx(m["channels_last_us"] / m["nchw_us"], rel=1e-3)
    # each channels_last run says whether the op kept the layout; the conversion itself is timed per dtype
    assert all(isinstance(m["output_channels_last"], bool) for m in doc["measurements"])
    assert set(doc["converts_back"]) <= set(FAMILIES)
    assert {c["dtype"] for c in doc["conversions"]} == {"fp32", "bf16"}
    assert all("ps_per_element" in c for c in doc["conversions"]) and set(doc["conversion"]) == {"fp32", "bf16"}
    table = NhwcTable.from_json(doc)
    assert len(table.entries) == 2 * len(FAMILIES)
    assert len(table.measurements) == len(doc["measurements"])
    assert table.recorded_converts_back == frozenset(doc["converts_back"])


def test_unknown_family_is_a_usage_error() -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "nhwc_table.py"), "--tiny", "--families", "softmax"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=ENV, cwd=ROOT)
    assert proc.returncode == 2 and "unknown families" in proc.stderr
