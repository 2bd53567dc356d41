"""Issue 43, third pass: the metric tables only the terminal, Markdown and HTML outputs show (the
kernel and op aggregates, the idle gaps, busy time by class) are made when first read, so that
`--format json` never pays for them, and what they hold is what an eager computation gives.

The trace is SYNTHETIC (tests/synth.py `training_loop`, built by code here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import gpuadvisor
from gpuadvisor import metrics as metrics_module
from gpuadvisor.metrics import _gaps, _kernel_agg, _ops_agg, compute_metrics
from gpuadvisor.render import json_out
from gpuadvisor.trace.load import load_trace
from tests.synth import training_loop

_DEFERRED = ("_kernel_agg", "_ops_agg", "_gaps")


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls = dict.fromkeys(_DEFERRED, 0)
    for name in _DEFERRED:
        real = getattr(metrics_module, name)

        def counted(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls[_name] += 1
            return _real(*args)

        monkeypatch.setattr(metrics_module, name, counted)
    return calls


def test_json_output_makes_none_of_the_display_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SYNTHETIC: analyze + the JSON renderer never build the kernel/op aggregates or the gaps; the
    first read of each builds it once."""
    path = training_loop(4, batch_bytes=1 << 20).write(tmp_path / "t.json")
    calls = _counting(monkeypatch)
    result = gpuadvisor.analyze(path)
    json_out.render(result)
    assert calls == dict.fromkeys(_DEFERRED, 0)
    detail = result.metrics_detail
    assert detail is not None
    for _ in range(2):
        detail.kernels, detail.ops, detail.gaps, detail.busy_classes  # noqa: B018
    assert calls == dict.fromkeys(_DEFERRED, 1)


def test_deferred_tables_equal_the_eager_ones(tmp_path: Path) -> None:
    """SYNTHETIC: each table read later equals the same function called when the metrics are made."""
    trace = load_trace(training_loop(4, batch_bytes=1 << 20).write(tmp_path / "t.json"))
    m = compute_metrics(trace)
    model = m.model
    assert model is not None
    steps = m.per_step[m.per_step["analyzed"]]
    lo, hi = float(steps["start"].min()), float(steps["end"].max())
    kw = trace.kernel_ops()
    kw = kw[(kw["ts"] >= lo) & (kw["ts"] < hi)]
    assert len(m.kernels) and len(m.ops) and len(m.gaps)
    pd.testing.assert_frame_equal(m.ops, _ops_agg(trace.cpu_ops, lo, hi))
    pd.testing.assert_frame_equal(m.gaps, _gaps(model.idle, trace.steps))
    eager = _kernel_agg(kw, {name: m.kernels.set_index("name")["tensor_core"][name] for name in m.kernels["name"]})
    pd.testing.assert_frame_equal(m.kernels, eager)
    assert m.busy_classes is not None
    pd.testing.assert_frame_equal(m.busy_classes, model.busy_by_class)
