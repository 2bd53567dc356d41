"""Issue 43: the code-based joins and groupings answer what the row-by-row code they replaced answered.

Every input here is SYNTHETIC, built by this file (random ids with repeats, missing ids, missing
values), and each test holds the new function to the old expression, written out here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuadvisor.metrics import _dims_codes
from gpuadvisor.stepmodel.build import _kernel_origins, kernel_origin
from gpuadvisor.stepmodel.hostcalls import _by_correlation
from gpuadvisor.trace.model import _Lookup
from gpuadvisor.trace.tables import _families

RNG = np.random.default_rng(43)


def _ids(n: int, high: int, missing: float) -> pd.Series:
    values = RNG.integers(0, high, n)
    return pd.Series(pd.array(np.where(RNG.random(n) < missing, None, values).tolist(), dtype="Int64"))


@pytest.mark.parametrize("missing", [0.0, 0.3, 1.0])
def test_lookup_equals_map_of_each_column(missing: float) -> None:
    """SYNTHETIC: `_Lookup` takes what `wanted.map(table.set_index(key)[column])` gave, dtypes and
    missing markers included (an all-missing object result is <NA>, as map's cast back gives)."""
    keys = pd.Series(pd.array(RNG.permutation(50)[:30].tolist(), dtype="Int64"))
    table = pd.DataFrame(
        {
            "key": keys,
            "ts": RNG.random(30) * 1e6,
            "name": [f"cudaLaunchKernel_{i % 4}" for i in range(30)],
            "tid": pd.array([None if i % 7 == 0 else i for i in range(30)], dtype="Int64"),
        }
    )
    wanted = _ids(200, 60, missing)
    keyed = table.set_index("key")
    take = _Lookup(table["key"], wanted)
    pd.testing.assert_series_equal(take.floats(table["ts"]), wanted.map(keyed["ts"]).astype("float64"), check_names=False)
    pd.testing.assert_series_equal(
        take.objects(table["name"].astype(object)),
        wanted.map(keyed["name"].astype(object)).astype(object),
        check_names=False,
    )
    pd.testing.assert_series_equal(take.ints(table["tid"]), wanted.map(keyed["tid"]).astype("Int64"), check_names=False)


def test_by_correlation_equals_a_dict_built_in_order() -> None:
    """SYNTHETIC: an id given twice takes its last value, as `dict(zip(ids, values))` did."""
    ids = RNG.integers(0, 40, 100).astype(np.float64)
    values = RNG.random(100)
    corr = np.where(RNG.random(300) < 0.2, np.nan, RNG.integers(0, 60, 300).astype(np.float64))
    table = dict(zip(ids.astype(np.int64).tolist(), values.tolist(), strict=True))
    old = np.array([table.get(int(c), np.nan) if c == c else np.nan for c in corr.tolist()])
    np.testing.assert_array_equal(_by_correlation(ids, values, corr), old)
    assert np.isnan(_by_correlation([], [], corr)).all()


def test_kernel_origins_and_families_once_per_distinct_name() -> None:
    """SYNTHETIC: per-code kernel origins and families equal the per-row classification."""
    pool = [
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        "triton_poi_fused_add_0",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
        "my_custom_kernel",
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>",
    ]
    names = pd.Series(RNG.choice(pool, 500), dtype="category")
    # a category no row uses
    names = names.cat.add_categories(["unused_kernel"])
    fam = _families(names)
    from gpuadvisor.trace.kernels import kernel_family

    old_fam = names.astype(str).map({c: kernel_family(c) for c in pool}).astype("category")
    pd.testing.assert_series_equal(fam, old_fam, check_names=False)
    got = _kernel_origins(names, fam)
    want = [kernel_origin(n, f) for n, f in zip(names.astype(str), fam.astype(str), strict=True)]
    assert list(got) == want


def test_dims_codes_equal_the_joined_texts() -> None:
    """SYNTHETIC: the grid texts made once per distinct triple equal "x,y,z" made per kernel, with
    "<NA>" for a missing or too large dimension; equal texts share one code."""
    n = 400
    cols = {}
    for axis in "xyz":
        v = RNG.choice([1.0, 2.0, 64.0, 128.0, np.nan, 2.0**60], n)
        cols[f"grid_{axis}"] = v

    def text(v: float) -> str:
        return "<NA>" if not (v == v and abs(v) < 2**53) else str(int(v))

    kw = pd.DataFrame(cols)
    codes, texts = _dims_codes(kw, "grid")
    old = [",".join(text(kw[f"grid_{a}"][i]) for a in "xyz") for i in range(n)]
    assert [texts[c] for c in codes.tolist()] == old
    assert len(texts) == len(set(old))
