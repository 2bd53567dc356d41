"""benchmarks/sample_findings.py compare: identical dumps pass, a changed value or a missing file fails,
and an empty or wrong folder (nothing compared) fails instead of reading "0 of 0 files identical".
The JSON files are SYNTHETIC, written here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sample_findings", ROOT / "benchmarks" / "sample_findings.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dump(folder: Path, files: dict[str, object]) -> Path:
    folder.mkdir()
    for name, doc in files.items():
        (folder / name).write_text(json.dumps(doc))
    return folder


def test_compare_passes_only_on_identical_dumps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tool = _tool()
    doc = {"findings": [{"name": "GA301", "impact": 0.4}]}
    a = _dump(tmp_path / "a", {"run.json": doc})
    assert tool.compare(a, _dump(tmp_path / "b", {"run.json": doc})) == 0
    changed = _dump(tmp_path / "c", {"run.json": {"findings": [{"name": "GA301", "impact": 0.41}]}})
    assert tool.compare(a, changed) == 1
    assert "$.findings[0].impact: 0.4 != 0.41" in capsys.readouterr().out
    assert tool.compare(a, _dump(tmp_path / "d", {})) == 1  # missing in new
    empty1, empty2 = _dump(tmp_path / "e1", {}), _dump(tmp_path / "e2", {})
    assert tool.compare(empty1, empty2) == 1
    assert "nothing compared" in capsys.readouterr().out
