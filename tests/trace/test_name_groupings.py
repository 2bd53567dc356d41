"""Issue 39 (a million distinct kernel names): the groupings on name numbers answer what the groupings
on the names' text they replaced answered.

Every input here is SYNTHETIC, built by this file (names in categories out of order, unused, missing,
not text; ties between the most common values; missing values), and each test holds the new function
to the old expression, written out here.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpuadvisor.metrics import _dims_codes, _kernel_agg
from gpuadvisor.namepattern import NamePattern
from gpuadvisor.stepmodel.kernels import group_modes, sorted_name_groups
from gpuadvisor.trace.kind import _count_matching, _names

RNG = np.random.default_rng(39)
POOL = [f"kernel_{c}_{i}" for i in range(40) for c in "zqa"] + ["gemm_x", "Gemm_y", "elementwise_z"]


def _names_column(n: int, *, categorical: bool, missing: float, unused: bool = True) -> pd.Series:
    values = [None if RNG.random() < missing else str(RNG.choice(POOL)) for _ in range(n)]
    if not categorical:
        return pd.Series(values, dtype=object)
    cats = list(dict.fromkeys(v for v in values if v is not None))
    RNG.shuffle(cats)  # categories out of order
    if unused:
        cats += ["never_used_kernel", "aaa_unused"]
    return pd.Series(pd.Categorical(values, categories=pd.Index(cats, dtype="str")))


def _old_group_modes(keys: Any, values: Any) -> dict[Any, Any]:
    df = pd.DataFrame({"k": pd.Series(keys).to_numpy(), "v": pd.Series(values).to_numpy()})
    df = df[df["v"].notna()]
    if len(df) == 0:
        return {}
    counts = df.groupby(["k", "v"], sort=False, observed=True).size()
    best = counts.groupby(level=0, sort=False).idxmax()
    return {k: kv[1] for k, kv in best.items()}


@pytest.mark.parametrize("kind", ["int", "float_missing", "text", "text_missing_values"])
def test_group_modes_equal_the_grouped_count(kind: str) -> None:
    """SYNTHETIC: the mode per key, ties to the pair seen first, missing keys and values left out."""
    n = 3000
    if kind == "int":
        keys: Any = RNG.integers(0, 300, n)
        values: Any = RNG.integers(0, 4, n)  # few values: many ties
    elif kind == "float_missing":
        keys = np.where(RNG.random(n) < 0.2, np.nan, RNG.integers(0, 300, n).astype(np.float64))
        values = RNG.integers(0, 3, n)
    else:
        keys = pd.Series([str(RNG.choice(POOL)) for _ in range(n)])
        values = pd.Series(
            [None if kind == "text_missing_values" and RNG.random() < 0.3 else f"[[{RNG.integers(0, 3)}, 8]]" for _ in range(n)],
            dtype=object,
        )
    assert group_modes(keys, values) == _old_group_modes(keys, values)
    assert group_modes(keys, pd.Series([None] * n, dtype=object)) == {}


@pytest.mark.parametrize("categorical", [True, False])
@pytest.mark.parametrize("missing", [0.0, 0.2])
def test_sorted_name_groups_number_the_names_as_a_sorted_grouping(categorical: bool, missing: float) -> None:
    names = _names_column(2000, categorical=categorical, missing=missing)
    group, distinct = sorted_name_groups(names)
    expected = names.astype(str).groupby(names.astype(str), sort=True).ngroup().to_numpy()
    present = names.notna().to_numpy()
    np.testing.assert_array_equal(group[present], expected[present])
    assert (group[~present] == -1).all()
    assert distinct == sorted({str(v) for v in names.dropna()})


def test_sorted_name_groups_of_categories_that_are_not_text() -> None:
    """Categories that are not all text (1 and "1" would be one name as text): grouped by the text."""
    names = pd.Series(pd.Categorical([1, "1", "b", None, 2], categories=[2, 1, "1", "b"]))
    group, distinct = sorted_name_groups(names)
    assert distinct == ["1", "2", "b"]
    assert group.tolist() == [0, 0, 2, -1, 1]


def _kernel_window(n: int, categorical: bool) -> pd.DataFrame:
    names = _names_column(n, categorical=categorical, missing=0.05)
    grid = RNG.choice([1.0, 2.0, 64.0, np.nan], (n, 3))
    block = RNG.choice([128.0, 256.0, np.nan], (n, 3))
    return pd.DataFrame(
        {
            "name": names,
            "family": pd.Series(RNG.choice(["gemm", "elementwise", "other"], n), dtype="category"),
            "dur": RNG.choice([1.0, 2.5, 5.0, 7.25], n),
            "blocks": RNG.choice([1.0, 64.0, np.nan], n),
            "blocks_per_sm": RNG.choice([0.5, 2.0, np.nan], n),
            "occupancy_pct": RNG.choice([10.0, 50.0, np.nan], n),
            **{f"grid_{a}": grid[:, i] for i, a in enumerate("xyz")},
            **{f"block_{a}": block[:, i] for i, a in enumerate("xyz")},
        }
    )


def _old_kernel_agg(kw: pd.DataFrame, tc_map: dict[str, Any]) -> pd.DataFrame:
    total = float(kw["dur"].sum())
    grid_code, grid_text = _dims_codes(kw, "grid")
    block_code, block_text = _dims_codes(kw, "block")
    df = kw.assign(_name=kw["name"].astype(str), _fam=kw["family"].astype(str))
    g = df.groupby("_name", sort=True)
    agg = g.agg(
        family=("_fam", "first"),
        count=("dur", "size"),
        total_us=("dur", "sum"),
        mean_us=("dur", "mean"),
        median_us=("dur", "median"),
        blocks=("blocks", "median"),
        blocks_per_sm=("blocks_per_sm", "median"),
        occupancy_pct=("occupancy_pct", "median"),
    )
    out = agg.reset_index().rename(columns={"_name": "name"})
    out["share"] = out["total_us"] / total if total > 0 else np.nan
    grids = _old_group_modes(df["_name"], grid_code)
    blocks = _old_group_modes(df["_name"], block_code)
    out["grid"] = [str(grid_text[grids[n]]) if n in grids else "<NA>" for n in out["name"]]
    out["block"] = [str(block_text[blocks[n]]) if n in blocks else "<NA>" for n in out["name"]]
    out["tensor_core"] = out["name"].map(lambda n: tc_map.get(n)).astype(object)
    out = out.sort_values(["total_us", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)
    return out[_kernel_agg(kw.iloc[:1], {}).columns.tolist()]


@pytest.mark.parametrize("categorical", [True, False])
def test_kernel_aggregate_equals_the_grouping_on_text(categorical: bool) -> None:
    """SYNTHETIC: the per-name kernel aggregate (grouped on name numbers) equals the grouping on the
    names' text it replaced: values, dtypes, order (ties in total time by name), modes of grid and block."""
    kw = _kernel_window(4000, categorical)
    tc = {"gemm_x": True, "Gemm_y": False}
    pd.testing.assert_frame_equal(_kernel_agg(kw, tc), _old_kernel_agg(kw, tc))


def _old_names(table: pd.DataFrame) -> list[str]:
    col = table["name"]
    if hasattr(col, "cat"):
        return [str(c) for c in col.cat.remove_unused_categories().cat.categories]
    return sorted({str(v) for v in col})


@pytest.mark.parametrize("categorical", [True, False])
@pytest.mark.parametrize("pattern", [NamePattern(r"gemm|_q_1\d"), re.compile(r"kernel_a_3")])
def test_kind_counts_from_codes_equal_the_text_comparison(categorical: bool, pattern: Any) -> None:
    table = pd.DataFrame({"name": _names_column(3000, categorical=categorical, missing=0.1)})
    names = [n for n in _old_names(table) if (pattern.matches(n) if isinstance(pattern, NamePattern) else pattern.search(n))]
    rows = int(table["name"].astype(str).isin(names).sum())
    assert names and _count_matching(table, pattern) == (rows, names)
    assert _names(table) == _old_names(table)
    assert _count_matching(table.iloc[:0], pattern) == (0, [])
