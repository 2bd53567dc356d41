"""Peer-trace tests: real Kineto traces recorded by other projects, in `<repo>/../shared/peer-traces`
(never copied into the repo). Every test here skips with the reason when that folder is absent."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

PEER = _ROOT.parent / "shared" / "peer-traces"
