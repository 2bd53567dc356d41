"""The analysis of each recording of sample_runs/ (real H100/H200 runs, see sample_runs/README.md), made
once per test process: test_sample_runs.py and tests/stepmodel read several of the same runs, and one
analysis of a real recording takes 0.4-3 s. A result is shared: read it, never change it."""

from __future__ import annotations

import functools
from pathlib import Path

from gpuadvisor.analysis import analyze
from gpuadvisor.result import AnalysisResult

SAMPLES = Path(__file__).resolve().parent.parent / "sample_runs"


@functools.cache
def analyzed(name: str) -> AnalysisResult:
    """`analyze(sample_runs/NAME)` as a user's run is analyzed (the capture's own reference steps)."""
    return analyze(SAMPLES / name)
