from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The repository root makes `tests.synth` (the shared synthetic trace builder) importable under any
# pytest import mode and from any working directory.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


@pytest.fixture
def no_builtin_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    """Renderer tests describe rules from the synthetic result only, independent of the rule set on disk."""
    import gpuadvisor.render._ci as ci

    monkeypatch.setattr(ci, "_builtin_catalog", lambda: {})
