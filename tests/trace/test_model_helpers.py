"""Helpers of gpuadvisor.trace.model."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuadvisor.trace.model import name_mask


def test_name_mask_tests_each_distinct_name_once_and_maps_back() -> None:
    raw = ["c10d::allreduce_", "aten::mm", None, "c10d::broadcast_", "aten::mm", "gloo:all_reduce"]
    seen: list[int] = []

    def starts_c10d(s: pd.Series) -> pd.Series:
        seen.append(len(s))
        return s.str.startswith("c10d::")

    cat = pd.Series(raw, dtype="category")
    got = name_mask(cat, starts_c10d)
    assert got.tolist() == [True, False, False, True, False, False]
    assert seen == [4]  # the 4 distinct names, not the 6 rows; a missing name is False
    obj = pd.Series(raw, dtype=object)
    assert np.array_equal(name_mask(obj, lambda s: s.str.startswith("c10d::")), got)
