from __future__ import annotations

import sys
from pathlib import Path

# The repository root makes `tests.synth` (the shared synthetic trace builder) importable under any
# pytest import mode and from any working directory.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
