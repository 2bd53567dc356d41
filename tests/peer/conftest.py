"""Peer-trace tests: real Kineto traces recorded by other projects, in `<repo>/../shared/peer-traces`
or $GPUADVISOR_PEER_TRACES (never copied into the repo; tests/peer/corpus.py finds it). Every test here
skips with the reason, which names the places looked at, when that folder is absent."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.peer.corpus import PEER  # noqa: E402,F401
