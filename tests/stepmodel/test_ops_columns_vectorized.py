"""Issue 43, third pass: the ops table's `busy` and `work` columns, now made from each part's kind
codes (no text comparison over the joined table), and the launching threads, now told once per
distinct id, answer what the row-by-row expressions they replaced answered.

Every input here is SYNTHETIC, built by this file: random kinds, collective flags, copy directions and
byte counts (missing ones included), and a trace of tests/synth.py with tiny and large copies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpuadvisor.stepmodel import build as sb
from gpuadvisor.stepmodel.build import _idle_rows
from gpuadvisor.stepmodel.busy import time_by_op
from gpuadvisor.stepmodel.hostcalls import _in_flight, _launch_tids
from gpuadvisor.stepmodel.intervals import launch_order
from gpuadvisor.stepmodel.kernels import MATH_CLASSES, kernel_classes
from gpuadvisor.stepmodel.model import build_step_model
from gpuadvisor.stepmodel.window import StepWindow
from gpuadvisor.trace.load import load_trace
from gpuadvisor.trace.model import name_mask
from tests.synth import training_loop

RNG = np.random.default_rng(4303)


def _old_work(ops: pd.DataFrame) -> Any:
    """The `work` column as it was computed: text comparisons over the whole table."""
    kind = ops["kind"].astype(str).to_numpy()
    coll = ops["is_collective"].fillna(False).astype(bool).to_numpy()
    return np.where(
        kind == "copy", sb.WORK_COPY, np.where((kind == "kernel") & coll, sb.WORK_COLLECTIVE, sb.WORK_COMPUTE)
    )


def _old_busy(ops: pd.DataFrame) -> Any:
    d = ops["direction"].astype(str)
    return (~((ops["kind"] == "copy") & d.eq("DtoH") & (ops["bytes"].fillna(np.inf) <= sb.TINY_COPY_BYTES))).to_numpy()


@pytest.mark.parametrize("n", [0, 1, 500])
def test_work_classes_from_codes_equal_the_text_expression(n: int) -> None:
    """SYNTHETIC: random kinds and collective flags."""
    kinds = RNG.choice(["kernel", "copy", "memset"], n)
    ops = pd.DataFrame({"kind": kinds, "is_collective": RNG.random(n) < 0.3})
    codes = np.array([sb.KIND_CODES[k] for k in kinds], dtype=np.int8)
    new = sb.work_classes(codes, ops["is_collective"].to_numpy(dtype=bool))
    assert pd.Series(new).dtype == pd.Series(_old_work(ops)).dtype  # the same column type in a table
    np.testing.assert_array_equal(new, _old_work(ops))


def test_ops_busy_and_work_equal_the_text_expressions(tmp_path: Path) -> None:
    """SYNTHETIC: a trace with tiny device-to-host reads (not work), large copies both ways and
    kernels; the built table's `busy` and `work` are what the old expressions give on it."""
    st = training_loop(4, batch_bytes=1 << 20, nonzero=True)
    st.add_item_read(ts=600, dur=300)
    st.add_copy("DtoH", "Pageable", nbytes=32, ts=700, dur=5)
    st.add_copy("DtoH", "Pinned", nbytes=4 << 20, ts=900, dur=50)
    model = build_step_model(load_trace(st.write(tmp_path / "t.json")), None)
    ops = model.ops
    assert (ops["kind"] == "copy").any() and not ops["busy"].all()
    np.testing.assert_array_equal(ops["busy"].to_numpy(dtype=bool), _old_busy(ops))
    np.testing.assert_array_equal(ops["work"].astype(str).to_numpy(), _old_work(ops))


@pytest.mark.parametrize("missing", [0.0, 0.4, 1.0])
def test_launch_tids_equal_the_set_of_each_row(missing: float) -> None:
    """SYNTHETIC: thread ids with repeats and missing launches (NaN), as float64 (the ops column)."""
    tids = RNG.integers(1, 40, 300).astype(np.float64) * 1_000_003
    tids[RNG.random(300) < missing] = np.nan
    ops = pd.DataFrame({"launch_tid": tids})
    assert _launch_tids(ops) == sorted({int(t) for t in ops["launch_tid"].dropna().tolist()})


@pytest.mark.parametrize("n", [1, 7, 2000])
def test_kernel_classes_equal_the_object_array_expressions(n: int) -> None:
    """SYNTHETIC: random distinct-kernel classes (collectives and math classes among them) and random
    optimizer spans; the classes, their ranks and the membership tests are what the object-array
    expressions of the kernel table gave."""
    pool = ["gemm", "collective", "elementwise", "attention", "conv", "other", "reduction", "copy"]
    u_class = [str(c) for c in RNG.choice(pool, RNG.integers(1, len(pool) + 1))]
    codes = RNG.integers(0, len(u_class), n)
    in_opt = RNG.random(n) < 0.3
    old = np.asarray(u_class, dtype=object)[codes]
    old = np.where(in_opt & (old != "collective"), "optimizer", old)
    cls, ranks, in_classes = kernel_classes(u_class, codes, in_opt)
    assert cls.dtype == old.dtype
    np.testing.assert_array_equal(cls, old)
    np.testing.assert_array_equal(ranks, np.unique(old.astype(str), return_inverse=True)[1])
    for chosen in (MATH_CLASSES, ("collective", "optimizer", "other"), ("absent",)):
        np.testing.assert_array_equal(in_classes(chosen), np.isin(old, list(chosen)))


@pytest.mark.parametrize("n", [0, 1, 3000])
def testtime_by_op_equals_the_per_name_masks(n: int) -> None:
    """SYNTHETIC: op-name codes whose labels repeat ("" twice: a missing op and an empty name), random
    durations; per name, the same sums (bit for bit) in the same order as the per-name masks over the
    names' text gave."""
    labels = ["aten::mul", "", "aten::add", "", "aten::sum", "aten::unused"]
    codes = RNG.integers(0, len(labels) - 1, n)
    dur = RNG.random(n) * 1e3
    names = np.asarray(labels, dtype=object)[codes]
    old = {str(name): float(dur[names == name].sum()) / 3 for name in np.unique(names).tolist()}
    new = time_by_op(codes, labels, dur, 3)
    assert list(new) == list(old)
    assert new == old


@pytest.mark.parametrize("prefix", ["autograd::engine::evaluate_function", "aten::"])
def test_name_mask_prefix_equals_each_row(prefix: str) -> None:
    """SYNTHETIC: the recompute finder's name tests, now once per distinct name of the categorical cpu_op
    names (the loader writes "" for a missing name), answer what `str(name).startswith(prefix)` answered row by row."""
    pool = ["aten::mm", "autograd::engine::evaluate_function: MmBackward0", "aten", "Optimizer.step", ""]
    names = pd.Series(pd.Categorical(RNG.choice(pool, 400)))
    old = np.array([n.startswith(prefix) for n in names.astype(str).to_numpy(dtype=object)], dtype=bool)
    np.testing.assert_array_equal(name_mask(names, lambda s: s.str.startswith(prefix)), old)


def _old_idle_rows(segments: StepWindow, window: StepWindow, gs: Any, ge: Any, gi: Any, pieces: Any) -> pd.DataFrame:
    """The idle rows as attribute_idle laid them out before: each kind of piece for every gap, then a
    stable sort by (start, end)."""
    rows: list[list[Any]] = [[], [], [], [], []]
    cursor = gs.copy()
    for amount, cause, kinds in pieces:
        sel = amount > 0
        for out, part in zip(
            rows, (gi[sel], cursor[sel], np.minimum(cursor[sel] + amount[sel], ge[sel]), cause[sel], kinds[sel]),
            strict=True,
        ):
            out.append(part)
        cursor = cursor + amount
    seg = np.concatenate(rows[0]).astype(np.int64)
    start, end = np.concatenate(rows[1]), np.concatenate(rows[2])
    out = pd.DataFrame(
        {
            "step": window.step_index(segments.starts[seg] + 1e-6) if len(seg) else seg,
            "seg": seg,
            "start": start,
            "end": end,
            "dur": end - start,
            "cause": np.concatenate(rows[3]).astype(object),
            "sync_kind": np.concatenate(rows[4]).astype(object),
        }
    )
    return out[out["dur"] > 0].sort_values(["start", "end"], kind="stable").reset_index(drop=True)


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("n", [1, 5, 3000])
def test_idle_rows_equal_the_sorted_pieces(n: int, overlap: bool) -> None:
    """SYNTHETIC: random gaps in random steps, pieces of random lengths (zero, tiny beside the gap's
    start, and more than the gap holds); with `overlap`, the gaps of two steps that overlap (the sort is
    then needed and taken)."""
    steps = StepWindow(np.array([0.0, 5e5]), np.array([5e5, 1e6]), np.array([0, 1]))
    gs = np.sort(RNG.random(n) * 9e5 + 1e6)
    if overlap and n > 1:
        gs[n // 2 :] -= 3e5
        gs = np.sort(gs)
    ge = gs + RNG.random(n) * 50.0
    if not overlap:
        ge = np.minimum(ge, np.r_[gs[1:], np.inf])
    gi = RNG.integers(0, 2, n)

    def amounts() -> Any:
        a = RNG.random(n) * 30.0
        a[RNG.random(n) < 0.3] = 0.0
        a[RNG.random(n) < 0.05] = 1e-12
        return a

    kinds = np.asarray(RNG.choice(["", "scalar_read", "explicit"], n), dtype=object)
    pieces = (
        (amounts(), np.full(n, sb.IDLE_DATA, dtype=object), np.full(n, "", dtype=object)),
        (amounts(), np.full(n, sb.IDLE_SYNC, dtype=object), kinds),
        (amounts(), np.asarray(RNG.choice([sb.IDLE_LAUNCH, sb.IDLE_OTHER], n), dtype=object), np.full(n, "", dtype=object)),
    )
    new = _idle_rows(steps, steps, gs, ge, gi, pieces)
    old = _old_idle_rows(steps, steps, gs, ge, gi, pieces)
    pd.testing.assert_frame_equal(new, old)


def _old_union(starts: Any, ends: Any) -> tuple[Any, Any]:
    """union_intervals as it was: always a stable sort by start first."""
    s, e = np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64)
    keep = ~(np.isnan(s) | np.isnan(e))
    s, e = s[keep], e[keep]
    if len(s) == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum(e[order], s[order])
    run_max = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run_max[:-1]]
    idx = np.flatnonzero(new)
    return s[idx], run_max[np.r_[idx[1:] - 1, len(s) - 1]]


@pytest.mark.parametrize("presorted", [False, True])
@pytest.mark.parametrize("n", [0, 1, 2, 4000])
def test_union_intervals_without_a_sort_equals_the_sorted_union(n: int, presorted: bool) -> None:
    """SYNTHETIC: starts with ties (whole microseconds), ends before their starts, missing values; already
    in order (the ops table's rows: no sort) or not."""
    starts = np.floor(RNG.random(n) * 500.0)
    if presorted:
        starts = np.sort(starts)
    ends = starts + RNG.random(n) * 20.0 - 2.0
    ends[RNG.random(n) < 0.05] = np.nan
    new, old = sb.union_intervals(starts, ends), _old_union(starts, ends)
    np.testing.assert_array_equal(new[0], old[0])
    np.testing.assert_array_equal(new[1], old[1])


@pytest.mark.parametrize("n", [0, 1, 3000])
def test_launch_order_is_the_order_sort_values_gave(n: int) -> None:
    """SYNTHETIC: launch times with many ties (whole microseconds) and unknown launches (NaN); the rows,
    in order, that `ops[ops["launch_ts"].notna()].sort_values("launch_ts")` took."""
    lts = np.floor(RNG.random(n) * 200.0)
    lts[RNG.random(n) < 0.2] = np.nan
    ops = pd.DataFrame({"launch_ts": lts, "end": RNG.random(n)})
    old = ops[ops["launch_ts"].notna()].sort_values("launch_ts")
    positions = launch_order(ops)
    np.testing.assert_array_equal(ops.index.to_numpy()[positions], old.index.to_numpy())


@pytest.mark.parametrize("presorted", [False, True])
def test_in_flight_equals_the_filtered_table_count(presorted: bool) -> None:
    """SYNTHETIC: GPU operations with unknown launches (NaN) and ends in or out of order; the count at
    each time equals the one over the filtered table's sorted columns."""
    n = 2000
    lts = np.sort(RNG.random(n) * 1e4) if presorted else RNG.random(n) * 1e4
    end = lts + (1.0 if presorted else RNG.random(n) * 300.0)
    lts[RNG.random(n) < 0.1] = np.nan
    ops = pd.DataFrame({"launch_ts": lts, "end": end})
    at = RNG.random(500) * 1.1e4
    k = ops[ops["launch_ts"].notna()]
    old = np.searchsorted(np.sort(k["launch_ts"].to_numpy()), at, side="left") - np.searchsorted(
        np.sort(k["end"].to_numpy()), at, side="right"
    )
    np.testing.assert_array_equal(_in_flight(ops, at), np.maximum(old, 0).astype(np.int64))
