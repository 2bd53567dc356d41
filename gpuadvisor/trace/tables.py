"""Building the typed tables of a trace (gpuadvisor/trace/model.py) from the collector's columns, and
the checks that need whole tables: placeholder timestamps, float64 time resolution, correlation ids
shared by several calls, launches recorded into a CUDA graph, and the trace's metadata.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuadvisor.errors import InputError
from gpuadvisor.trace.collect import Collector, Columns
from gpuadvisor.trace.decode import NA_INT, as_text, bool_or_none, int_or_none
from gpuadvisor.trace.kernels import kernel_family
from gpuadvisor.trace.kind import CaptureScan, scan_graph_captures
from gpuadvisor.trace.model import (
    ANNOTATION_COLUMNS,
    COPY_COLUMNS,
    CPU_OP_COLUMNS,
    KERNEL_COLUMNS,
    MEMSET_COLUMNS,
    RUNTIME_COLUMNS,
    TraceMeta,
)
from gpuadvisor.words import plural

if TYPE_CHECKING:
    import pandas as pd

_COPY_NAME = re.compile(r"Memcpy\s+(\w+)\s*\(\s*(\w+)\s*->\s*(\w+)\s*\)")


# What a GPU's deviceProperties may hold (Kineto writes ints; the analysis divides by them, compares
# peaks with them and prints them): a value outside these ranges, or not a number, is left out.
DEVICE_PROPERTY_RANGES: dict[str, tuple[float, float]] = {
    "id": (0, 1 << 16),
    "numSms": (1, 100_000),
    "totalGlobalMem": (1, 1 << 50),
    "computeMajor": (1, 99),
    "computeMinor": (0, 99),
    "maxThreadsPerBlock": (1, 1 << 20),
    "maxThreadsPerMultiprocessor": (1, 1 << 20),
    "regsPerBlock": (1, 1 << 24),
    "regsPerMultiprocessor": (1, 1 << 24),
    "warpSize": (1, 1024),
    "sharedMemPerBlock": (0, 1 << 32),
    "sharedMemPerBlockOptin": (0, 1 << 32),
    "sharedMemPerMultiprocessor": (0, 1 << 32),
}


def device_properties(props: Any, warnings: list[str]) -> list[dict[str, Any]]:
    """The trace's deviceProperties with every value checked once: a known number out of its range or
    not a number, or a name that is not text, is left out, said in a note."""
    if not isinstance(props, list):
        return []
    out = []
    for i, p in enumerate(props):
        if not isinstance(p, dict):
            continue
        dropped = []
        kept = {}
        for key, value in p.items():
            limits = DEVICE_PROPERTY_RANGES.get(key)
            if key == "name":
                ok = isinstance(value, str)
            elif limits is not None:
                ok = (
                    isinstance(value, (int, float))
                    and not isinstance(value, bool)
                    and math.isfinite(value)
                    and limits[0] <= value <= limits[1]
                )
            else:
                ok = True
            if ok:
                kept[key] = value
            else:
                shown = repr(value)
                dropped.append(f"{key} {shown[:40] + '...' if len(shown) > 40 else shown}")
        if dropped:
            warnings.append(
                f"deviceProperties of GPU {i}: {', '.join(dropped)}: not values a GPU has; left out (unknown "
                "to the analysis unless environment.json or the GPU's name tells them)."
            )
        out.append(kept)
    return out


def trace_meta(obj: dict[str, Any], span: float, warnings: list[str]) -> TraceMeta:
    dist = obj.get("distributedInfo")
    return TraceMeta(
        schema_version=int_or_none(obj.get("schemaVersion")),
        device_properties=device_properties(obj.get("deviceProperties"), warnings),
        cuda_driver_version=int_or_none(obj.get("cuda_driver_version")),
        cuda_runtime_version=int_or_none(obj.get("cuda_runtime_version")),
        with_stack=bool_or_none(obj.get("with_stack")),
        record_shapes=bool_or_none(obj.get("record_shapes")),
        with_flops=bool_or_none(obj.get("with_flops")),
        distributed_info=dist if isinstance(dist, dict) else None,
        base_time_ns=int_or_none(obj.get("baseTimeNanoseconds")),
        trace_span_us=span,
        synthetic=obj.get("gpuadvisor_synthetic") is True,
        torch_version=as_text(obj.get("torch_version") or obj.get("pytorch_version")),
    )


def drop_captured_launches(tables: dict[str, pd.DataFrame]) -> CaptureScan:
    """Remove the runtime calls recorded into a CUDA/HIP graph during stream capture (they never ran
    as such: not GPU work, no kernel of their own) and return what the scan found."""
    # read only when the trace captured a graph (a generator: no list of every GPU event's id)
    gpu_corr = itertools.chain.from_iterable(tables[key]["correlation"] for key in ("kernels", "copies", "memsets"))
    scan, captured = scan_graph_captures(tables["runtime"], gpu_corr)
    if captured.any():
        tables["runtime"] = tables["runtime"][~captured].reset_index(drop=True)
    return scan

def frame(columns: Columns) -> pd.DataFrame:
    """The table of `columns` sorted by `ts` (stable), with an `end` column after `dur`; the collector's
    chunks are released."""
    # lazy: numpy and pandas stay out of `import gpuadvisor.api` and the trace-split worker
    import numpy as np
    import pandas as pd

    kinds = dict(columns.spec)
    arrays: dict[str, Any] = {}
    for name, values in columns.arrays().items():
        kind = kinds[name]
        if kind == "i":
            mask = values == NA_INT
            arrays[name] = pd.arrays.IntegerArray(np.where(mask, 0, values) if mask.any() else values, mask)
        elif kind == "c":
            codes, strings = values
            arrays[name] = pd.Categorical.from_codes(codes, categories=strings) if strings else pd.Categorical([])
        elif kind == "o":
            out = np.empty(len(values), dtype=object)
            out[:] = values
            arrays[name] = out
        else:
            arrays[name] = values
    ts = arrays.get("ts")
    if ts is not None and len(ts) > 1 and not bool(np.all(ts[1:] >= ts[:-1])):
        order = np.argsort(ts, kind="stable")
        arrays = {c: a[order] if isinstance(a, np.ndarray) else a.take(order) for c, a in arrays.items()}
    df: pd.DataFrame = pd.DataFrame(
        {c: pd.Series(a, dtype=object, copy=False) if kinds[c] == "o" else a for c, a in arrays.items()},
        copy=False,
    )
    if "ts" in df.columns:
        df.insert(2, "end", (df["ts"] + df["dur"]).to_numpy(dtype=np.float64))
    return df


def _cat(values: Any) -> Any:
    # lazy: pandas stays out of `import gpuadvisor.api` and the trace-split worker
    import pandas as pd

    return pd.Series(values, dtype=object).astype(str).astype("category")


def build_tables(
    kernels: Columns,
    copies: Columns,
    memsets: Columns,
    runtime: Columns,
    cpu_ops: Columns,
    annotations: Columns,
) -> dict[str, pd.DataFrame]:
    """The typed tables of docs (gpuadvisor/trace/model.py) from the collector's columns (each
    released once its table is built)."""
    # lazy: numpy and pandas stay out of `import gpuadvisor.api` and the trace-split worker
    import numpy as np
    import pandas as pd

    k = frame(kernels)
    k["blocks"] = k["grid_x"] * k["grid_y"] * k["grid_z"]
    k["threads_per_block"] = k["block_x"] * k["block_y"] * k["block_z"]
    k["family"] = _families(k["name"]) if len(k) else _cat([])
    k["is_collective"] = (k["family"].astype(str) == "collective").to_numpy(dtype=bool)
    k = k[list(KERNEL_COLUMNS)]

    c = frame(copies)
    names = [str(n) for n in c["name"].cat.categories]
    parsed = {n: _parse_copy_name(n) for n in names}
    sname = c["name"].astype(str)
    c["direction"] = _cat(sname.map(lambda n: parsed[n][0]).to_numpy()) if len(c) else _cat([])
    c["src_kind"] = _cat(sname.map(lambda n: parsed[n][1]).to_numpy()) if len(c) else _cat([])
    c["dst_kind"] = _cat(sname.map(lambda n: parsed[n][2]).to_numpy()) if len(c) else _cat([])
    # bandwidth from bytes/dur when Kineto did not give it (bytes per us = MB/s; /1e3 = GB/s)
    with np.errstate(divide="ignore", invalid="ignore"):
        derived = np.where(c["dur"].to_numpy() > 0, c["bytes"].to_numpy() / c["dur"].to_numpy() / 1e3, np.nan)
    c["bandwidth_gbps"] = c["bandwidth_gbps"].fillna(pd.Series(derived, index=c.index, dtype="float64"))
    c = c[list(COPY_COLUMNS)]

    m = frame(memsets)[list(MEMSET_COLUMNS)]
    r = frame(runtime)[list(RUNTIME_COLUMNS)]
    o = frame(cpu_ops)[list(CPU_OP_COLUMNS)]
    a = frame(annotations)[list(ANNOTATION_COLUMNS)]
    return {"kernels": k, "copies": c, "memsets": m, "runtime": r, "cpu_ops": o, "annotations": a}


def _families(names: pd.Series) -> Any:
    """The `family` column of the kernels from their categorical names: each distinct name classified
    once, the rows mapped by code (a category of the families present, in sorted order)."""
    # lazy: numpy and pandas stay out of `import gpuadvisor.api` and the trace-split worker
    import numpy as np
    import pandas as pd

    codes = names.cat.codes.to_numpy(dtype=np.int64)
    used = np.unique(codes)
    if len(used) and used[0] < 0:  # a kernel without a name: left to pandas' own mapping
        fam = {str(c): kernel_family(str(c)) for c in names.cat.categories}
        return names.astype(str).map(fam).astype("category")
    cats = names.cat.categories.tolist()  # a list: indexing a pandas Index costs ~1 us a name
    of_used = [kernel_family(str(cats[i])) for i in used.tolist()]
    families = sorted(set(of_used))
    to_family = np.full(len(cats), -1, dtype=np.int64)
    to_family[used] = [families.index(f) for f in of_used]
    return pd.Series(
        pd.Categorical.from_codes(to_family[codes], categories=pd.Index(families, dtype="str")),
        index=names.index,
    )


def _parse_copy_name(name: str) -> tuple[str, str, str]:
    m = _COPY_NAME.search(name)
    if not m:
        return "other", "other", "other"
    direction = m.group(1) if m.group(1) in ("HtoD", "DtoH", "DtoD", "PtoP") else "other"
    return direction, m.group(2), m.group(3)


def drop_duplicate_events(tables: dict[str, pd.DataFrame], warnings: list[str]) -> None:
    """Keep once each event that appears again equal in every field. A trace merged with itself holds
    every event twice: every launch's correlation id then repeats, the links between launches and
    kernels are dropped as colliding, and every finding that follows a launch vanishes. Two real events
    are never equal in every field (ids, stream, start and duration to the nanosecond)."""
    # lazy: numpy stays out of `import gpuadvisor.api` and the trace-split worker
    import numpy as np

    dropped = 0
    for key, df in tables.items():
        ts = df["ts"].to_numpy()
        if len(ts) < 2:
            continue
        # tables are sorted by ts: equal events are neighbours, and most tables have no equal starts
        same = ts[1:] == ts[:-1]
        if not same.any():
            continue
        near = np.zeros(len(ts), dtype=bool)
        near[1:] |= same
        near[:-1] |= same
        again = df[near].duplicated(keep="first")
        if again.any():
            drop = df.index[near][again.to_numpy()]
            tables[key] = df.drop(index=drop).reset_index(drop=True)
            dropped += len(drop)
    if dropped:
        warnings.append(
            f"{plural(dropped, 'event')} appeared again, equal in every field (a trace merged with itself?): "
            "each was kept once."
        )


def drop_zero_ts(tables: dict[str, pd.DataFrame], warnings: list[str]) -> None:
    """Drop `ts <= 0` events from a trace whose other events carry real timestamps.

    Kineto timestamps are microseconds since an epoch far from 0; a `ts: 0` event in such a trace is
    a placeholder (seen for events whose start was never recorded) and would stretch every span.
    """
    # each table tested on its own: no joined copy of every timestamp (5M events: 40 MB, 0.2 s)
    starts = [df["ts"].to_numpy() for df in tables.values() if len(df)]
    if not any(bool((ts > 0).any()) for ts in starts) or not any(bool((ts <= 0).any()) for ts in starts):
        return
    dropped = 0
    for key, df in tables.items():
        bad = df["ts"].to_numpy() <= 0
        if bad.any():
            dropped += int(bad.sum())
            tables[key] = df[~bad].reset_index(drop=True)
    warnings.append(f"{dropped} events with ts <= 0 (placeholder timestamps) were ignored.")


def refuse_if_all_set_aside(path: Path, col: Collector) -> None:
    """InputError when validation set aside every timed event: an analysis of nothing would report an
    idle GPU."""
    why = [
        f"{n} {what}"
        for n, what in (
            (col.negative_dur, "with a negative 'dur'"),
            (col.bad_dur, "with a 'dur' that is not a finite number"),
            (col.huge_dur, "with a 'dur' longer than a day"),
            (col.no_ts, "without a usable 'ts'"),
        )
        if n
    ]
    if why:
        raise InputError(f"{path}: no usable timed event is left ({', '.join(why)}): nothing to analyze")


# Kineto writes timestamps in us with ns decimals; below 1 us of float64 resolution nothing is lost.
_TS_RESOLUTION_US = 1.0


def check_time_resolution(path: Path, tables: dict[str, pd.DataFrame], warnings: list[str]) -> None:
    """Timestamps so large that float64 cannot place events to the microsecond (`ts` + 9e18 is
    resolved to 1-2 ms): a note with the uncertainty, or InputError when it exceeds a tenth of the
    trace's median GPU event (then busy time, gaps and overlaps are noise, and no analysis is true)."""
    # lazy: numpy stays out of `import gpuadvisor.api` and the trace-split worker
    import numpy as np

    largest = 0.0
    for df in tables.values():
        if len(df):
            largest = max(largest, float(np.abs(df["ts"].to_numpy()).max()), float(np.abs(df["end"].to_numpy()).max()))
    resolution = math.ulp(largest)
    if resolution <= _TS_RESOLUTION_US:
        return
    durs = [df["dur"].to_numpy() for key in ("kernels", "copies", "memsets") if len(df := tables[key])]
    gpu = np.concatenate(durs) if durs else np.zeros(0)
    gpu = gpu[gpu > 0]
    typical = float(np.median(gpu)) if len(gpu) else None
    where = f"timestamps reach {largest:.3g} us, where float64 resolves only {resolution:g} us"
    if typical is None or resolution > 0.1 * typical:
        than = f"the median GPU event lasts {typical:.3g} us" if typical is not None else "there are no GPU events"
        raise InputError(
            f"{path}: {where} ({than}): event positions, busy and idle time cannot be told; re-base the "
            "timestamps (subtract the first one) where the trace is written"
        )
    warnings.append(
        f"The {where}: every event position is uncertain by up to {resolution / 2:g} us (the median GPU "
        f"event lasts {typical:.3g} us); busy, idle and overlap times carry that error."
    )


def drop_colliding_correlations(tables: dict[str, pd.DataFrame], warnings: list[str]) -> None:
    """Correlation ids carried by more than one runtime/driver call. Each launch has its own id in a
    Kineto trace (the kernels of one CUDA graph launch share that launch's id, which is fine); an id
    on several calls links launches to the wrong kernels (and joins on it multiply). Those ids are
    dropped from the calls and the GPU events: their launch-to-kernel links become unknown."""
    # lazy: pandas stays out of `import gpuadvisor.api` and the trace-split worker
    import pandas as pd

    rt = tables["runtime"]
    if not len(rt):
        return
    corr = rt["correlation"]
    known = corr.notna()
    dup = known & corr.duplicated(keep=False)
    if not dup.any():
        return
    ids = set(corr[dup].astype("int64").tolist())
    calls = int(dup.sum())
    tables["runtime"] = rt.assign(correlation=corr.mask(dup, pd.NA))
    gpu = 0
    for key in ("kernels", "copies", "memsets"):
        df = tables[key]
        if len(df):
            hit = df["correlation"].isin(ids).fillna(False).to_numpy(dtype=bool)
            if hit.any():
                gpu += int(hit.sum())
                tables[key] = df.assign(correlation=df["correlation"].mask(hit, pd.NA))
    warnings.append(
        f"{calls} runtime calls share {len(ids)} correlation ids (each launch has its own in a Kineto trace): "
        f"the links between them and their {gpu} GPU events were dropped; analyses that follow a launch to "
        "its kernels (launch overhead, host waits, the replay of a fix) leave those out: their findings may be "
        "missing or smaller than on an intact trace."
    )


def span_of(tables: dict[str, pd.DataFrame]) -> float:
    starts = [float(df["ts"].min()) for df in tables.values() if len(df)]
    ends = [float(df["end"].max()) for df in tables.values() if len(df)]
    return max(ends) - min(starts) if starts else 0.0
