"""Loading Kineto traces (`.json` / `.json.gz`) into a `TraceModel`.

One pass over `traceEvents` sorts events into lists of tuples per category; pandas DataFrames with
typed columns are built from them at the end. `python_function` events (often the majority) are
only counted unless `keep_python_functions=True`.

Bad input never raises a traceback: a file that cannot be read as a trace at all raises `InputError`
with a one-line message; anything partially usable (truncated file, invalid UTF-8, events without
`dur`, `ts: 0` events, kernels without args, an old `cat` spelling) is loaded as far as possible and
explained in `TraceModel.warnings`.
"""

from __future__ import annotations

import gc
import gzip
import os
import re
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuadvisor.errors import InputError
from gpuadvisor.trace.model import (
    ANNOTATION_COLUMNS,
    COPY_COLUMNS,
    CPU_OP_COLUMNS,
    KERNEL_COLUMNS,
    MEMSET_COLUMNS,
    RUNTIME_COLUMNS,
    TraceMeta,
    TraceModel,
)

if TYPE_CHECKING:
    import pandas as pd

Progress = Callable[[int, int], None]

# Older Kineto / torch versions spelled categories differently.
_CAT_ALIASES = {
    "runtime": "cuda_runtime",
    "cuda_runtime": "cuda_runtime",
    "driver": "cuda_driver",
    "cuda_driver": "cuda_driver",
    "kernel": "kernel",
    "memcpy": "gpu_memcpy",
    "gpu_memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "gpu_memset": "gpu_memset",
    "operator": "cpu_op",
    "cpu_op": "cpu_op",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation",
    "python_function": "python_function",
}

_COPY_NAME = re.compile(r"Memcpy\s+(\w+)\s*\(\s*(\w+)\s*->\s*(\w+)\s*\)")
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.I)
_PROGRESS_EVERY = 200_000


# ---- reading bytes --------------------------------------------------------------------------------


def _read_bytes(path: Path, warnings: list[str]) -> bytes:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a trace file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error):
            # A truncated gzip: decompress what is there, then salvage the JSON prefix.
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                data = d.decompress(raw)
            except zlib.error:
                raise InputError(f"{path}: corrupt gzip data, cannot be read") from None
            warnings.append(f"The gzip stream of {path.name} is truncated; only its complete part was read.")
            return data
    return raw


def _salvage_truncated(data: bytes) -> Any | None:
    """Cut a truncated Kineto JSON after its last complete event and close the array and object.

    Tries the last few `}` positions, newest first (an event's args dict also ends with `}`).
    """
    import orjson

    key = data.find(b'"traceEvents"')
    if key < 0:
        return None
    pos = len(data)
    for _ in range(64):
        pos = data.rfind(b"}", key, pos)
        if pos < 0:
            return None
        try:
            return orjson.loads(data[: pos + 1] + b"]}")
        except orjson.JSONDecodeError:
            continue
    return None


def _parse(path: Path, data: bytes, warnings: list[str]) -> dict[str, Any]:
    import orjson

    if not data.strip():
        raise InputError(f"{path}: empty file, not a trace")
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        msg = str(exc)
        if "utf-8" in msg.lower() or "utf8" in msg.lower():
            fixed = data.decode("utf-8", errors="replace").encode("utf-8")
            warnings.append(f"{path.name} holds invalid UTF-8; the bad bytes were replaced with U+FFFD.")
            return _parse(path, fixed, warnings)
        stripped = data.lstrip()
        if not stripped.startswith(b"{"):
            raise InputError(f"{path}: not a JSON trace (does not start with '{{')") from None
        obj = _salvage_truncated(data)
        if obj is None:
            raise InputError(
                f"{path}: not valid JSON and no complete events could be salvaged ({msg})"
            ) from None
        n = len(obj.get("traceEvents") or []) if isinstance(obj, dict) else 0
        warnings.append(
            f"{path.name} is truncated or malformed ({msg}); the {n} complete events before the damage were used."
        )
    if isinstance(obj, list):
        # The JSON Array Format of the Chrome trace viewer: a bare list of events.
        return {"traceEvents": obj}
    if not isinstance(obj, dict):
        raise InputError(
            f"{path}: not a Kineto trace (top level is {type(obj).__name__}, expected an object)"
        )
    if "traceEvents" not in obj:
        raise InputError(f"{path}: not a Kineto trace (no 'traceEvents' key)")
    return obj


# ---- small converters -----------------------------------------------------------------------------


def _int_or_none(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v == v:
        return int(v)
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return None
    return None


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _tid(v: Any) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return zlib.crc32(v.encode("utf-8", "replace"))
    return None


def _bool_or_none(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return bool(v)
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes")
    return None


def _dim3(v: Any) -> tuple[float | None, float | None, float | None]:
    if isinstance(v, (list, tuple)) and len(v) == 3:
        return _num(v[0]), _num(v[1]), _num(v[2])
    return None, None, None


def _as_text(v: Any) -> str | None:
    if v is None:
        return None
    return v if isinstance(v, str) else str(v)


# ---- the one pass ---------------------------------------------------------------------------------


def _meta(obj: dict[str, Any], span: float) -> TraceMeta:
    props = obj.get("deviceProperties")
    dist = obj.get("distributedInfo")
    return TraceMeta(
        schema_version=_int_or_none(obj.get("schemaVersion")),
        device_properties=[p for p in props if isinstance(p, dict)] if isinstance(props, list) else [],
        cuda_driver_version=_int_or_none(obj.get("cuda_driver_version")),
        cuda_runtime_version=_int_or_none(obj.get("cuda_runtime_version")),
        with_stack=_bool_or_none(obj.get("with_stack")),
        record_shapes=_bool_or_none(obj.get("record_shapes")),
        with_flops=_bool_or_none(obj.get("with_flops")),
        distributed_info=dist if isinstance(dist, dict) else None,
        base_time_ns=_int_or_none(obj.get("baseTimeNanoseconds")),
        trace_span_us=span,
        synthetic=obj.get("gpuadvisor_synthetic") is True,
        torch_version=_as_text(obj.get("torch_version") or obj.get("pytorch_version")),
    )


class _Collector:
    """The one pass: sorts events into per-table lists of tuples, counting what it skips."""

    def __init__(self, keep_python_functions: bool) -> None:
        self.keep_python_functions = keep_python_functions
        self.kernels: list[tuple[Any, ...]] = []
        self.copies: list[tuple[Any, ...]] = []
        self.memsets: list[tuple[Any, ...]] = []
        self.runtime: list[tuple[Any, ...]] = []
        self.cpu_ops: list[tuple[Any, ...]] = []
        self.annotations: list[tuple[Any, ...]] = []
        self.pyfuncs: list[tuple[Any, ...]] = []
        self.counts: dict[str, int] = {}
        self.no_dur = 0
        self.no_ts = 0
        self.bad_events = 0
        self.kernels_without_args = 0
        self.total = 0
        # Repeated strings (op names, Input Dims of repeated steps) share one object: large traces
        # repeat the same few thousand values millions of times.
        self._strings: dict[str, str] = {}

    def _text(self, v: Any) -> str | None:
        if v is None:
            return None
        t = v if type(v) is str else str(v)
        return self._strings.setdefault(t, t)

    def feed(self, events: list[Any], progress: Progress | None = None, total: int = 0) -> None:
        keep_py = self.keep_python_functions
        counts = self.counts
        aliases = _CAT_ALIASES
        text = self._text
        for ev in events:
            self.total += 1
            if progress is not None and self.total % _PROGRESS_EVERY == 0:
                progress(self.total, total)
            if not isinstance(ev, dict):
                self.bad_events += 1
                continue
            raw_cat = ev.get("cat")
            cat_key = raw_cat if isinstance(raw_cat, str) else ""
            counts[cat_key] = counts.get(cat_key, 0) + 1
            cat = aliases.get(cat_key.lower())
            if cat is None or ev.get("ph", "X") != "X":
                continue
            ts = ev.get("ts")
            # `type(x) is float` first: the common case, far cheaper than the isinstance chain.
            if type(ts) is not float and (not isinstance(ts, (int, float)) or isinstance(ts, bool)):
                ts = _num(ts)
                if ts is None:
                    self.no_ts += 1
                    continue
            dur = ev.get("dur")
            if type(dur) is not float and (not isinstance(dur, (int, float)) or isinstance(dur, bool)):
                dur = _num(dur)
                if dur is None:
                    self.no_dur += 1
                    dur = 0.0
            if dur < 0:
                dur = 0.0
            if cat == "python_function" and not keep_py:
                continue  # counted only (often the majority of a with_stack trace)
            name = ev.get("name")
            if not isinstance(name, str):
                name = "" if name is None else str(name)
            name = self._strings.setdefault(name, name)
            args = ev.get("args")
            if not isinstance(args, dict):
                args = {}
            if cat == "kernel":
                if not args:
                    self.kernels_without_args += 1
                gx, gy, gz = _dim3(args.get("grid"))
                bx, by, bz = _dim3(args.get("block"))
                self.kernels.append(
                    (
                        ts,
                        dur,
                        name,
                        _int_or_none(args.get("device", ev.get("pid"))),
                        _int_or_none(args.get("stream", ev.get("tid"))),
                        _int_or_none(args.get("correlation")),
                        _int_or_none(args.get("External id")),
                        gx,
                        gy,
                        gz,
                        bx,
                        by,
                        bz,
                        _num(args.get("registers per thread")),
                        _num(args.get("shared memory")),
                        _num(args.get("blocks per SM")),
                        _num(args.get("warps per SM")),
                        _num(args.get("est. achieved occupancy %")),
                    )
                )
            elif cat == "cuda_runtime" or cat == "cuda_driver":
                self.runtime.append(
                    (
                        ts,
                        dur,
                        name,
                        _int_or_none(args.get("correlation")),
                        _int_or_none(args.get("External id")),
                        _tid(ev.get("tid")),
                        cat,
                    )
                )
            elif cat == "cpu_op":
                # The hot path (most events of a real trace): inline the common types.
                tid = ev.get("tid")
                ext = args.get("External id")
                seq = args.get("Sequence number")
                flops = args.get("flops")
                self.cpu_ops.append(
                    (
                        ts,
                        dur,
                        name,
                        tid if type(tid) is int else _tid(tid),
                        ext if type(ext) is int else _int_or_none(ext),
                        text(args.get("Input Dims")),
                        text(args.get("Input type")),
                        None if flops is None else _num(flops),
                        seq if type(seq) is int else _int_or_none(seq),
                    )
                )
            elif cat == "gpu_memcpy":
                self.copies.append(
                    (
                        ts,
                        dur,
                        name,
                        _num(args.get("bytes")),
                        _num(args.get("memory bandwidth (GB/s)")),
                        _int_or_none(args.get("correlation")),
                        _int_or_none(args.get("External id")),
                        _int_or_none(args.get("device", ev.get("pid"))),
                        _int_or_none(args.get("stream", ev.get("tid"))),
                    )
                )
            elif cat == "gpu_memset":
                self.memsets.append(
                    (
                        ts,
                        dur,
                        name,
                        _num(args.get("bytes")),
                        _int_or_none(args.get("correlation")),
                        _int_or_none(args.get("device", ev.get("pid"))),
                        _int_or_none(args.get("stream", ev.get("tid"))),
                    )
                )
            elif cat == "user_annotation" or cat == "gpu_user_annotation":
                self.annotations.append((ts, dur, name, _tid(ev.get("tid")), cat == "gpu_user_annotation"))
            elif cat == "python_function":
                self.pyfuncs.append((ts, dur, name, _tid(ev.get("tid"))))

    def warnings(self, path: Path) -> list[str]:
        out: list[str] = []
        if self.total == 0:
            out.append(f"{path.name} holds no events (empty traceEvents).")
        if self.bad_events:
            out.append(f"{self.bad_events} trace events were not JSON objects and were skipped.")
        if self.no_ts:
            out.append(f"{self.no_ts} events had no usable 'ts' and were skipped.")
        if self.no_dur:
            out.append(f"{self.no_dur} complete events had no 'dur'; they were kept with a duration of 0.")
        if self.kernels_without_args:
            out.append(
                f"{self.kernels_without_args} kernels carry no args (grid, occupancy, correlation unknown for them)."
            )
        return out


def _collect_streaming(
    path: Path, keep_python_functions: bool, progress: Progress | None, chunk_bytes: int
) -> tuple[dict[str, Any], _Collector]:
    """Stream the file in blocks (bounded memory); raises StreamFallback when it cannot."""
    from gpuadvisor.trace._stream import EventStream

    stream = EventStream(path, chunk_bytes=chunk_bytes, progress=progress)
    col = _Collector(keep_python_functions)
    for events in stream.chunks():
        col.feed(events)
    return stream.top, col


def _collect_whole(
    path: Path, keep_python_functions: bool, progress: Progress | None, warnings: list[str]
) -> tuple[dict[str, Any], _Collector]:
    """Parse the whole document at once: the path for damaged files (salvage) and odd layouts."""
    obj = _parse(path, _read_bytes(path, warnings), warnings)
    events = obj.get("traceEvents")
    if not isinstance(events, list):
        raise InputError(f"{path}: not a Kineto trace ('traceEvents' is not a list)")
    col = _Collector(keep_python_functions)
    col.feed(events, progress, len(events))
    return obj, col


def load_trace(
    path: Path,
    *,
    rank: int | None = None,
    keep_python_functions: bool = False,
    progress: Progress | None = None,
    chunk_bytes: int | None = None,
) -> TraceModel:
    """Load one Kineto trace file (.json or .json.gz, gzip detected by content) into a `TraceModel`.

    rank: overrides the rank (else distributedInfo.rank, else `rankN` in the file name, else 0).
    progress: called as progress(done, total) while loading (done/total is the fraction read: bytes
      of the file while streaming, events for a damaged file) and finally as (events, events).
    chunk_bytes: block size of the streaming reader (default 8 MiB; memory use grows with it).
    The file is streamed in blocks; a damaged file (truncated, invalid UTF-8, not an object) is
    re-read as a whole document so that its complete part can be salvaged.
    Raises InputError (one line) when the file cannot be read as a trace at all.
    """
    from gpuadvisor.trace._stream import CHUNK_BYTES, StreamFallback
    from gpuadvisor.trace.steps import segment_steps

    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a trace file")
    warnings: list[str] = []
    # The load allocates millions of dicts and tuples that all stay alive until the tables are
    # built: the cyclic GC would rescan them again and again for nothing (it doubled load time).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            obj, col = _collect_streaming(path, keep_python_functions, progress, chunk_bytes or CHUNK_BYTES)
        except StreamFallback:
            warnings = []
            obj, col = _collect_whole(path, keep_python_functions, progress, warnings)
        if progress is not None:
            progress(col.total, col.total)
        warnings.extend(col.warnings(path))
        tables = _build_tables(
            col.kernels, col.copies, col.memsets, col.runtime, col.cpu_ops, col.annotations
        )
        del col.kernels, col.copies, col.memsets, col.runtime, col.cpu_ops, col.annotations
    finally:
        if gc_was_enabled:
            gc.enable()
    _drop_zero_ts(tables, warnings)
    span = _span(tables)
    meta = _meta(obj, span)
    if rank is None:
        rank = _rank(meta, path)
    py_df = (
        _frame(col.pyfuncs, ("ts", "dur", "name", "tid"), {"name": "category", "tid": "Int64"})
        if (keep_python_functions)
        else None
    )
    model = TraceModel(
        path=path,
        rank=rank,
        meta=meta,
        kernels=tables["kernels"],
        copies=tables["copies"],
        memsets=tables["memsets"],
        runtime=tables["runtime"],
        cpu_ops=tables["cpu_ops"],
        annotations=tables["annotations"],
        steps=tables["annotations"].iloc[0:0],  # replaced below
        warnings=warnings,
        counts=dict(sorted(col.counts.items())),
        python_functions=py_df,
    )
    model.steps, model.step_source = segment_steps(model)
    _labels(model)
    return model


def _rank(meta: TraceMeta, path: Path) -> int:
    if meta.distributed_info is not None:
        r = _int_or_none(meta.distributed_info.get("rank"))
        if r is not None:
            return r
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else 0


def _labels(model: TraceModel) -> None:
    """Add notes that label the trace (CPU-only, CUDA graphs, torch.compile) to the warnings."""
    from gpuadvisor.trace.kernels import is_triton

    if not model.has_gpu_kernels and (len(model.cpu_ops) or len(model.runtime)):
        model.warnings.append(
            "No GPU kernels were recorded (CPU-only trace, or CUPTI was unavailable): GPU metrics are not available."
        )
    if len(model.runtime):
        graph = int(model.runtime["name"].astype(str).str.contains("GraphLaunch", regex=False).sum())
        if graph:
            model.warnings.append(
                f"The trace holds {graph} CUDA graph launches: kernels replayed by a graph share one launch, "
                "so per-kernel launch attribution is approximate."
            )
    if len(model.kernels):
        names = [str(n) for n in model.kernels["name"].cat.categories]
        triton = sum(1 for n in names if is_triton(n))
        if triton:
            model.warnings.append(f"{triton} distinct Triton kernels (torch.compile) were recorded.")


# ---- tables ---------------------------------------------------------------------------------------


def _frame(rows: list[tuple[Any, ...]], cols: tuple[str, ...], dtypes: dict[str, str]) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    df: pd.DataFrame
    if rows:
        df = pd.DataFrame.from_records(rows, columns=list(cols))
    else:
        df = pd.DataFrame({c: pd.Series([], dtype=object) for c in cols})
    for c in cols:
        dt = dtypes.get(c, "float64")
        if dt == "float64":
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
        elif dt == "Int64":
            df[c] = pd.array(df[c].to_numpy(dtype=object), dtype="Int64")
        elif dt == "bool":
            df[c] = df[c].astype(bool)
        elif dt == "category":
            df[c] = df[c].astype(str).astype("category") if len(df) else df[c].astype("category")
        elif dt == "object":
            df[c] = df[c].astype(object)
    if "ts" in df.columns:
        df = df.sort_values("ts", kind="stable").reset_index(drop=True)
        df.insert(2, "end", (df["ts"] + df["dur"]).to_numpy(dtype=np.float64))
    return df


def _cat(values: Any) -> Any:
    import pandas as pd

    return pd.Series(values, dtype=object).astype(str).astype("category")


def _build_tables(
    kernels: list[tuple[Any, ...]],
    copies: list[tuple[Any, ...]],
    memsets: list[tuple[Any, ...]],
    runtime: list[tuple[Any, ...]],
    cpu_ops: list[tuple[Any, ...]],
    annotations: list[tuple[Any, ...]],
) -> dict[str, pd.DataFrame]:
    import numpy as np
    import pandas as pd

    from gpuadvisor.trace.kernels import kernel_family

    ints = {
        "device": "Int64",
        "stream": "Int64",
        "correlation": "Int64",
        "external_id": "Int64",
        "tid": "Int64",
    }
    k_cols = tuple(
        c
        for c in KERNEL_COLUMNS
        if c not in ("end", "blocks", "threads_per_block", "is_collective", "family")
    )
    k = _frame(kernels, k_cols, {**ints, "name": "category"})
    k["blocks"] = k["grid_x"] * k["grid_y"] * k["grid_z"]
    k["threads_per_block"] = k["block_x"] * k["block_y"] * k["block_z"]
    cats = [str(c) for c in k["name"].cat.categories]
    fam = {c: kernel_family(c) for c in cats}
    k["family"] = k["name"].astype(str).map(fam).astype("category") if len(k) else _cat([])
    k["is_collective"] = (k["family"].astype(str) == "collective").to_numpy(dtype=bool)
    k = k[list(KERNEL_COLUMNS)]

    c_cols = (
        "ts",
        "dur",
        "name",
        "bytes",
        "bandwidth_gbps",
        "correlation",
        "external_id",
        "device",
        "stream",
    )
    c = _frame(copies, c_cols, {**ints, "name": "category"})
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

    m_cols = tuple(x for x in MEMSET_COLUMNS if x != "end")
    m = _frame(memsets, m_cols, {**ints, "name": "category"})[list(MEMSET_COLUMNS)]
    r_cols = tuple(x for x in RUNTIME_COLUMNS if x != "end")
    r = _frame(runtime, r_cols, {**ints, "name": "category", "cat": "category"})[list(RUNTIME_COLUMNS)]
    o_cols = tuple(x for x in CPU_OP_COLUMNS if x != "end")
    o = _frame(
        cpu_ops,
        o_cols,
        {**ints, "name": "category", "input_dims": "object", "input_types": "object", "seq_num": "Int64"},
    )[list(CPU_OP_COLUMNS)]
    a_cols = tuple(x for x in ANNOTATION_COLUMNS if x != "end")
    a = _frame(annotations, a_cols, {**ints, "name": "category", "on_gpu": "bool"})[list(ANNOTATION_COLUMNS)]
    return {"kernels": k, "copies": c, "memsets": m, "runtime": r, "cpu_ops": o, "annotations": a}


def _parse_copy_name(name: str) -> tuple[str, str, str]:
    m = _COPY_NAME.search(name)
    if not m:
        return "other", "other", "other"
    direction = m.group(1) if m.group(1) in ("HtoD", "DtoH", "DtoD", "PtoP") else "other"
    return direction, m.group(2), m.group(3)


def _drop_zero_ts(tables: dict[str, pd.DataFrame], warnings: list[str]) -> None:
    """Drop `ts <= 0` events from a trace whose other events carry real timestamps.

    Kineto timestamps are microseconds since an epoch far from 0; a `ts: 0` event in such a trace is
    a placeholder (seen for events whose start was never recorded) and would stretch every span.
    """
    import numpy as np

    positive = [df["ts"].to_numpy() for df in tables.values() if len(df)]
    if not positive:
        return
    all_ts = np.concatenate(positive)
    if not (all_ts > 0).any() or not (all_ts <= 0).any():
        return
    dropped = 0
    for key, df in tables.items():
        bad = df["ts"].to_numpy() <= 0
        if bad.any():
            dropped += int(bad.sum())
            tables[key] = df[~bad].reset_index(drop=True)
    warnings.append(f"{dropped} events with ts <= 0 (placeholder timestamps) were ignored.")


def _span(tables: dict[str, pd.DataFrame]) -> float:
    starts = [float(df["ts"].min()) for df in tables.values() if len(df)]
    ends = [float(df["end"].max()) for df in tables.values() if len(df)]
    return max(ends) - min(starts) if starts else 0.0


def load_traces(
    path: Path,
    *,
    keep_python_functions: bool = False,
    progress: Progress | None = None,
) -> list[TraceModel]:
    """Load every `.json` / `.json.gz` trace in a folder (or one file), sorted by rank.

    The rank of each comes from distributedInfo.rank, else `rankN` in the file name, else its position.
    Two files claiming the same rank: InputError. Several files load in parallel processes
    (see `load_trace_files`); `progress` is only used for a single file.
    """
    path = Path(path)
    if path.is_file():
        return [load_trace(path, keep_python_functions=keep_python_functions, progress=progress)]
    if not path.is_dir():
        raise InputError(f"{path}: no such file or directory")
    files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))
    if not files:
        raise InputError(f"{path}: no .json or .json.gz traces in this folder")
    models = load_trace_files(files, keep_python_functions=keep_python_functions)
    has_rank = [
        m.meta.distributed_info is not None or _RANK_IN_NAME.search(m.path.name) is not None for m in models
    ]
    if not all(has_rank):
        for i, m in enumerate(models):
            if not has_rank[i]:
                m.rank = i
    seen: dict[int, Path] = {}
    for m in models:
        if m.rank in seen:
            raise InputError(f"{path}: {seen[m.rank].name} and {m.path.name} both claim rank {m.rank}")
        seen[m.rank] = m.path
    return sorted(models, key=lambda m: m.rank)


def _load_one(path: Path, keep_python_functions: bool) -> TraceModel:
    """Worker-process entry point (module level so that it pickles)."""
    return load_trace(path, keep_python_functions=keep_python_functions)


def load_trace_files(
    paths: Sequence[Path],
    *,
    keep_python_functions: bool = False,
    workers: int | None = None,
    on_done: Callable[[Path, int, int], None] | None = None,
) -> list[TraceModel]:
    """Load several trace files, in parallel worker processes when there are several files and CPUs.

    Returns the models in the order of `paths` (ranks as `load_trace` finds them). workers: number of
    processes (default: min(files, CPUs); 1 loads in this process). on_done(path, done, total) is
    called in this process as each file finishes. An InputError of any file is raised as is.
    """
    paths = [Path(p) for p in paths]
    if workers is None:
        workers = min(len(paths), os.cpu_count() or 1)
    if workers <= 1 or len(paths) <= 1:
        models: list[TraceModel] = []
        for i, p in enumerate(paths):
            models.append(load_trace(p, keep_python_functions=keep_python_functions))
            if on_done is not None:
                on_done(p, i + 1, len(paths))
        return models
    from concurrent.futures import ProcessPoolExecutor, as_completed

    results: dict[int, TraceModel] = {}
    # Each worker parses one file at a time and sends the finished tables back (pickled DataFrames:
    # a few MB even for a large trace, since python_function and args are already dropped).
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(_load_one, p, keep_python_functions): i for i, p in enumerate(paths)}
        for fut in as_completed(futures):
            i = futures[fut]
            results[i] = fut.result()
            if on_done is not None:
                on_done(paths[i], len(results), len(paths))
    return [results[i] for i in range(len(paths))]
