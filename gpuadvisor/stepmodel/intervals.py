"""The interval algebra of the step model (one implementation for the whole analysis), and the small
table helpers the step model's builders share: intervals in time, their union, what part of a range
they cover, what they leave free.

Leaf of the step model's builders: `spans`, `hostcalls` and `build` import it; it imports none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd



def union_intervals(starts: Any, ends: Any) -> tuple[Any, Any]:
    """Merge intervals: sort by start, running max of ends, cut where a start exceeds it.
    Returns (merged_starts, merged_ends) as float64 numpy arrays, sorted and disjoint (NaN dropped)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    keep = ~(np.isnan(s) | np.isnan(e))
    s, e = s[keep], e[keep]
    if len(s) == 0:
        return s, e
    if not bool(np.all(s[1:] >= s[:-1])):  # rows of the ops table come sorted: no sort to do then
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    e = np.maximum(e, s)
    run_max = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_max[:-1]
    idx = np.flatnonzero(new)
    last = np.r_[idx[1:] - 1, len(s) - 1]
    return s[idx], run_max[last]


def covered(ms: Any, me: Any, a: Any, b: Any) -> Any:
    """Length of [a, b) covered by the disjoint sorted intervals (ms, me); vectorized over a, b."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if len(ms) == 0:
        return np.zeros(np.broadcast(a, b).shape)
    cum = np.r_[0.0, np.cumsum(me - ms)]

    def f(t: Any) -> Any:
        i = np.searchsorted(ms, t, side="right") - 1
        ic = np.clip(i, 0, len(ms) - 1)
        part = np.clip(np.minimum(t, me[ic]) - ms[ic], 0.0, None)
        return np.where(i < 0, 0.0, cum[ic] + part)

    return np.clip(f(b) - f(a), 0.0, None)


def within(starts: Any, ends: Any, t: Any) -> Any:
    """Per time in `t`: it falls inside one of the intervals [starts, ends) (any order, overlapping or
    nested: their union)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    ms, me = union_intervals(starts, ends)
    t = np.asarray(t, dtype=np.float64)
    return covered(ms, me, t, t + 1e-3) > 0


def complement_in(ms: Any, me: Any, starts: Any, ends: Any) -> tuple[Any, Any, Any]:
    """The parts of each [starts[i], ends[i]) NOT covered by the disjoint sorted intervals (ms, me).
    Returns (gap_starts, gap_ends, interval_index), sorted."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    gs_all = np.r_[-np.inf, me]
    ge_all = np.r_[ms, np.inf]
    out_s: list[Any] = []
    out_e: list[Any] = []
    out_i: list[Any] = []
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        lo = np.searchsorted(ge_all, s, side="right")
        hi = np.searchsorted(gs_all, e, side="left")
        gs = np.clip(gs_all[lo:hi], s, e)
        ge = np.clip(ge_all[lo:hi], s, e)
        keep = ge > gs
        out_s.append(gs[keep])
        out_e.append(ge[keep])
        out_i.append(np.full(int(keep.sum()), i, dtype=np.int64))
    if not out_s:
        z = np.zeros(0)
        return z, z.copy(), np.zeros(0, dtype=np.int64)
    return np.concatenate(out_s), np.concatenate(out_e), np.concatenate(out_i)



def empty_frame(columns: tuple[str, ...]) -> pd.DataFrame:
    # lazy: pandas stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import pandas as pd

    frame: pd.DataFrame = pd.DataFrame({c: pd.Series([], dtype=object) for c in columns})
    return frame


def sorted_by_start_end(ts: Any, end: Any) -> bool:
    """Rows already in (ts, end) order (no NaN): a stable sort by the two would keep them as they are."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if np.isnan(ts).any() or np.isnan(end).any():
        return False
    same = ts[1:] == ts[:-1]
    return bool(np.all(ts[1:] >= ts[:-1]) and np.all(end[1:][same] >= end[:-1][same]))


def texts(n: int, text: str) -> Any:
    """An object array of `n` references to one string. `np.full(n, text, dtype=object)` makes a new
    string object per element (numpy converts the text to a fixed-width array first: ~70 bytes a row,
    115 MB for the 1.67M idle gaps of the 5M-event trace, where this is 8 bytes a row)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    out = np.empty(n, dtype=object)
    out.fill(text)
    return out


def rows_where(frame: pd.DataFrame, mask: Any) -> pd.DataFrame:
    """`frame[mask]`; when the chosen rows are one run (the analyzed steps of a time-sorted table, a
    table of kernels only) a slice of it: the same rows and index, no copy (copy-on-write)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    chosen = np.flatnonzero(mask)
    if len(chosen) and chosen[-1] - chosen[0] + 1 == len(chosen):
        run: pd.DataFrame = frame.iloc[int(chosen[0]) : int(chosen[-1]) + 1]
        return run
    out: pd.DataFrame = frame[mask]
    return out


def launch_order(ops: pd.DataFrame) -> Any:
    """Positions of the ops-table rows whose launch is known, in launch order: the rows
    `ops[ops["launch_ts"].notna()].sort_values("launch_ts")` gives (pandas sorts one column with
    numpy's quicksort; the same sort of the same values orders ties the same), without taking every
    column of the table along (1.67M rows x 39 columns)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    lts = ops["launch_ts"].to_numpy(dtype=np.float64) if len(ops) else np.zeros(0)
    rows = np.flatnonzero(~np.isnan(lts))
    return rows[np.argsort(lts[rows], kind="quicksort")]
