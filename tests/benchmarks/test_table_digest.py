"""benchmarks/scale/table_digest.py: the digests tell apart tables that differ in a value, a dtype or
their order, and `--compare` fails on any difference. Frames and the trace are SYNTHETIC, built here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd

from tests.synth import training_loop

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("table_digest", ROOT / "benchmarks" / "scale" / "table_digest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_digest_sees_values_dtypes_and_order() -> None:
    tool = _tool()
    base = pd.DataFrame({"ts": [1.0, 2.0, 3.0], "name": ["a", "b", None], "step": [0, 0, 1]})
    assert tool.digest(base) == tool.digest(base.copy())
    assert tool.digest(base) != tool.digest(base.assign(ts=[1.0, 2.0, 3.5]))
    assert tool.digest(base) != tool.digest(base.assign(step=np.array([0, 0, 1], dtype=np.float64)))
    assert tool.digest(base) != tool.digest(base.assign(name=pd.Categorical(["a", "b", None])))
    assert tool.digest(base) != tool.digest(base.iloc[::-1].reset_index(drop=True))
    assert tool.digest(None) is None


def test_compare_exit_status(tmp_path: Path) -> None:
    tool = _tool()
    trace = training_loop(3).write(tmp_path / "t.json")
    tables = tool.tables_of(str(trace))
    assert {"ops", "host", "idle", "kernel_table", "per_step", "metrics.kernels"} <= set(tables)
    old, same, other = tmp_path / "old.json", tmp_path / "same.json", tmp_path / "other.json"
    old.write_text(json.dumps({"t": tables}))
    same.write_text(json.dumps({"t": tables}))
    other.write_text(json.dumps({"t": {**tables, "ops": "0" * 16}}))
    assert tool.compare(str(old), str(same)) == 0
    assert tool.compare(str(old), str(other)) == 1
