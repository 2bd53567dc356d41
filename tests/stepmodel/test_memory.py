"""Issue 43, fourth pass (memory): the step model's text columns hold shared strings, and the helpers
that save memory give what the expressions they replaced gave.

Every input here is SYNTHETIC, built by this file or by tests/synth.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuadvisor.stepmodel import build as sb
from gpuadvisor.stepmodel.intervals import rows_where, texts
from gpuadvisor.stepmodel.model import build_step_model
from gpuadvisor.trace.load import load_trace
from tests.synth import training_loop


@pytest.mark.parametrize("text", ["data_loading", "", "ü" * 40])
def test_texts_equal_np_full_with_one_object(text: str) -> None:
    out = texts(1000, text)
    assert out.dtype == object
    np.testing.assert_array_equal(out, np.full(1000, text, dtype=object))
    assert len({id(v) for v in out}) == 1
    assert len(texts(0, text)) == 0


def test_idle_causes_are_shared_strings(tmp_path: Path) -> None:
    """SYNTHETIC: a loop that waits for data and for the device (data-dependent sizes, a scalar read):
    each cause in the idle table is one string object however many gaps carry it (numpy's
    `np.full(n, text, dtype=object)` made one string per gap: ~70 bytes a row)."""
    st = training_loop(8, nonzero=True)
    for i in range(8):
        st.add_dataloader_wait(ts=i * 3400.0 + 10.0, dur=400.0)
    st.add_item_read(ts=600, dur=300)
    idle = build_step_model(load_trace(st.write(tmp_path / "t.json")), None).idle
    causes = idle["cause"].to_numpy(dtype=object)
    assert {sb.IDLE_DATA, sb.IDLE_SYNC} <= set(causes.tolist())
    assert len({id(v) for v in causes}) == len(set(causes.tolist()))


@pytest.mark.parametrize("pattern", ["run", "holes", "none", "all"])
def test_rows_where_equals_the_boolean_filter(pattern: str) -> None:
    n = 50
    frame = pd.DataFrame(
        {"ts": np.arange(n, dtype=np.float64), "name": pd.Categorical([f"k{i % 7}" for i in range(n)])},
        index=pd.RangeIndex(100, 100 + n),
    )
    mask = {
        "run": (np.arange(n) >= 10) & (np.arange(n) < 30),
        "holes": np.arange(n) % 3 == 0,
        "none": np.zeros(n, dtype=bool),
        "all": np.ones(n, dtype=bool),
    }[pattern]
    got, want = rows_where(frame, mask), frame[mask]
    pd.testing.assert_frame_equal(got, want, check_index_type=False)
    assert got.index.tolist() == want.index.tolist()
