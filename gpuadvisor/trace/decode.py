"""Decoding a trace's events into compact columns: the one pass of the loader.

`decode_events` turns a block of the `traceEvents` array into msgspec structs holding only the fields
the tables read; `Collector.feed` sorts them into per-table columns, validating every value once
(ids within int64, finite numbers, launch dimensions a GPU can have, durations a profiler can record)
and counting what it set aside. `python_function` events (often the majority) are only counted
unless `keep_python_functions=True`.
"""

from __future__ import annotations

import math
import re
import zlib
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import orjson

if TYPE_CHECKING:
    import pandas as pd

Progress = Callable[[int, int], None]

# Older Kineto / torch versions spelled categories differently.
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
# record_function spans that 2021 traces (category "Operator") log like ops; today they are
# user_annotation events. Read as annotations so that steps, optimizer steps and DataLoader waits count.
_SPAN_AS_OP = re.compile(
    r"ProfilerStep\s*#\s*\d+$|Optimizer\.(?:step|zero_grad)#|enumerate\(DataLoader\)#|DistributedDataParallel\.forward$"
)
_PROGRESS_EVERY = 200_000
# A duration longer than a day (in us) is not a measurement: torch.profiler windows last seconds to
# minutes, and a day of events would be billions of them. Such events (a ProfilerStep of 1e300) are
# set aside and counted instead of stretching a step to the end of time.
MAX_DURATION_US = 86_400e6

# ---- small converters -----------------------------------------------------------------------------


def int_or_none(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v):
        return int(v)
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return None
    return None


# Int64 table columns (ids, devices, streams, thread ids) hold values in this range; a value outside it
# (a 64-bit unsigned id, a corrupted field) is unknown rather than an overflow in pandas.
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1


def _id(v: Any) -> int | None:
    """An Int64 column value: an int within 64-bit signed range, else None."""
    if v is None:
        return None
    if type(v) is int:
        return v if _I64_MIN < v <= _I64_MAX else None
    i = int_or_none(v)
    return i if i is not None and _I64_MIN < i <= _I64_MAX else None


def _num(v: Any) -> float | None:
    """A finite float, else None (booleans, NaN, infinities, numbers too large for a float)."""
    t = type(v)
    if t is float:  # the common cases first (kernel args): no isinstance chain, no try
        return v if v - v == 0.0 else None
    if t is int and -_EXACT < v < _EXACT:
        return float(v)
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float, str)):
        try:
            f = float(v)
        except (ValueError, OverflowError):
            return None
        return f if math.isfinite(f) else None
    return None


def _tid(v: Any) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v if _I64_MIN < v <= _I64_MAX else zlib.crc32(str(v).encode())
    if isinstance(v, str):
        try:
            return _tid(int(v))
        except ValueError:
            return zlib.crc32(v.encode("utf-8", "replace"))
    return None


def bool_or_none(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return bool(v)
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes")
    return None


class _BadDim(float):
    """Marker for launch dimensions no GPU can have (see `_dim3`)."""


_BAD = _BadDim("nan")
# CUDA's largest grid dimension is 2^31 - 1 (x) and 65535 (y, z); HIP's are 32-bit. A value beyond
# 32 bits (a corrupted or 64-bit overflowed field) is not a launch dimension.
_MAX_DIM = float(1 << 32)
# Integers that a float64 column holds exactly (larger ones are converted through `_num`).
_EXACT = 1 << 53


def _dim3(v: Any) -> tuple[float | None, float | None, float | None]:
    """(x, y, z) of a `grid` / `block` arg; (None,)*3 when absent; (_BAD,)*3 when impossible."""
    if isinstance(v, (list, tuple)) and len(v) == 3:
        x, y, z = _num(v[0]), _num(v[1]), _num(v[2])
        if (
            x is None
            or y is None
            or z is None
            or not (0 <= x <= _MAX_DIM)
            or not (0 <= y <= _MAX_DIM)
            or not (0 <= z <= _MAX_DIM)
        ):
            return _BAD, _BAD, _BAD
        return x, y, z
    return None, None, None


_NO_RAW = msgspec.Raw()


class _Args(msgspec.Struct, gc=False):
    """The `args` fields the tables read; msgspec skips every other one without building it (a
    cpu_op's Input Strides and Concrete Inputs, flow ids...). Input Dims / Input type stay raw JSON
    text (`msgspec.Raw`): they are turned into text once per distinct value (`Collector._text`)."""

    external_id: Any = msgspec.field(name="External id", default=None)
    external_id_2021: Any = msgspec.field(name="external id", default=None)
    sequence: Any = msgspec.field(name="Sequence number", default=None)
    flops: Any = None
    dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_NO_RAW)
    dims_2021: msgspec.Raw = msgspec.field(name="Input dims", default=_NO_RAW)
    types: msgspec.Raw = msgspec.field(name="Input type", default=_NO_RAW)
    correlation: Any = None
    device: Any = None
    stream: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(name="registers per thread", default=None)
    shared_memory: Any = msgspec.field(name="shared memory", default=None)
    blocks_per_sm: Any = msgspec.field(name="blocks per SM", default=None)
    warps_per_sm: Any = msgspec.field(name="warps per SM", default=None)
    occupancy: Any = msgspec.field(name="est. achieved occupancy %", default=None)
    bytes: Any = None
    bandwidth: Any = msgspec.field(name="memory bandwidth (GB/s)", default=None)

    def external(self) -> Any:
        """"External id" (today) or "external id" (2021 traces)."""
        return self.external_id_2021 if self.external_id is None else self.external_id

    def kernel_fields(self) -> bool:
        """Whether any field of a kernel's args is there (else the kernel "carries no args")."""
        return not (
            self.correlation is None
            and self.grid is None
            and self.block is None
            and self.device is None
            and self.stream is None
            and self.external_id is None
            and self.external_id_2021 is None
            and self.registers is None
            and self.occupancy is None
        )


class _Event(msgspec.Struct, gc=False):
    """One trace event as the collector reads it (`ph` defaults to a complete event, as before)."""

    ph: Any = "X"
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    tid: Any = None
    pid: Any = None
    args: _Args | None = None


_NO_ARGS = _Args()
# JSON key -> field, for events parsed as dicts (the whole-document path, a block msgspec refused)
_ARG_KEYS = {f.encode_name: f.name for f in msgspec.structs.fields(_Args)}
_EVENT_DECODER = msgspec.json.Decoder(list[_Event])


def _event_of(ev: Any) -> _Event | None:
    """An event parsed as a dict (the whole-document path, a block msgspec refused) as an `_Event`;
    None for a value that is not a JSON object. Values are kept as they are (Input Dims as a list)."""
    if not isinstance(ev, dict):
        return None
    args = ev.get("args")
    return _Event(
        ph=ev.get("ph", "X"),
        cat=ev.get("cat"),
        name=ev.get("name"),
        ts=ev.get("ts"),
        dur=ev.get("dur"),
        tid=ev.get("tid"),
        pid=ev.get("pid"),
        args=_Args(**{f: args[k] for k, f in _ARG_KEYS.items() if k in args}) if isinstance(args, dict) else None,
    )


def decode_events(data: bytes) -> list[Any]:
    """The events of a JSON array (`[` + whole events + `]`) as `_Event`s. A block whose values
    msgspec refuses (an event that is not an object, `args` that is not an object, a number out of
    range) is parsed by orjson and converted; invalid JSON raises orjson.JSONDecodeError, so that
    orjson decides what is valid exactly as before."""
    try:
        return _EVENT_DECODER.decode(data)
    except (msgspec.MsgspecError, ValueError):  # ValueError: invalid UTF-8
        events = orjson.loads(data)
    if not isinstance(events, list):
        return events  # type: ignore[no-any-return]  # the stream rejects it
    return [_event_of(e) or e for e in events]


_NAN = float("nan")
_UNSEEN = object()


def _int_cell(v: int | None) -> int:
    """An Int64 cell of `Columns`: the value, or `_NA_INT` for a missing one."""
    return _NA_INT if v is None else v


def _float_cell(v: float | None) -> float:
    return _NAN if v is None else v


def as_text(v: Any) -> str | None:
    if v is None:
        return None
    return v if isinstance(v, str) else str(v)

# read): the one int64 that `_id` never returns is this one, so it reads back as missing.
_NA_INT = _I64_MIN


class Columns:
    """One table's columns while the trace is read, stored compactly: floats and ints in `array`
    buffers (8 bytes a cell, None as NaN / `_NA_INT`), strings as references to shared strings.

    Keeping the parsed events' own float and int objects would pin the allocator arenas of every
    parsed chunk (a 100 MB trace held ~175 MB of rows); copied into buffers they are freed with the
    chunk, and the tables are built from the buffers without a Python-level pass."""

    def __init__(self, spec: tuple[tuple[str, str], ...]) -> None:
        self.spec = spec  # (column, kind): f float64, i Int64, c category (strings), o object, b bool
        self.data: list[Any] = self.empty()

    def empty(self) -> list[Any]:
        """Fresh, empty buffers for the columns."""
        return [array("d") if k == "f" else array("q") if k == "i" else array("b") if k == "b" else [] for _, k in self.spec]

    def appenders(self) -> tuple[Callable[[Any], None], ...]:
        return tuple(d.append for d in self.data)

    def __len__(self) -> int:
        return len(self.data[0])

    def frame(self) -> pd.DataFrame:
        """The table sorted by `ts`, with an `end` column after `dur`; the buffers are released."""
        # lazy: numpy and pandas stay out of `import gpuadvisor.api` and the trace-split worker
        import numpy as np
        import pandas as pd

        n = len(self)
        arrays: dict[str, Any] = {}
        for (name, kind), d in zip(self.spec, self.data, strict=True):
            if kind == "f":
                arrays[name] = np.frombuffer(d, dtype=np.float64) if n else np.zeros(0, dtype=np.float64)
            elif kind == "i":
                raw = np.frombuffer(d, dtype=np.int64) if n else np.zeros(0, dtype=np.int64)
                mask = raw == _NA_INT
                arrays[name] = pd.arrays.IntegerArray(np.where(mask, 0, raw) if mask.any() else raw.copy(), mask)
            elif kind == "b":
                arrays[name] = np.frombuffer(d, dtype=np.int8).astype(bool) if n else np.zeros(0, dtype=bool)
            elif kind == "c":
                arrays[name] = pd.Categorical(d)
            else:
                out = np.empty(n, dtype=object)
                out[:] = d
                arrays[name] = out
        self.data = [None] * len(self.spec)
        ts = arrays.get("ts")
        if ts is not None and n > 1 and not bool(np.all(ts[1:] >= ts[:-1])):
            order = np.argsort(ts, kind="stable")
            arrays = {c: a[order] if isinstance(a, np.ndarray) else a.take(order) for c, a in arrays.items()}
        else:  # frombuffer arrays are read-only views of the released buffers: own them
            arrays = {c: a.copy() if isinstance(a, np.ndarray) and not a.flags.writeable else a for c, a in arrays.items()}
        kinds = dict(self.spec)
        df: pd.DataFrame = pd.DataFrame(
            {c: pd.Series(a, dtype=object, copy=False) if kinds[c] == "o" else a for c, a in arrays.items()},
            copy=False,
        )
        if "ts" in df.columns:
            df.insert(2, "end", (df["ts"] + df["dur"]).to_numpy(dtype=np.float64))
        return df


_KERNEL_SPEC = (
    ("ts", "f"), ("dur", "f"), ("name", "c"), ("device", "i"), ("stream", "i"), ("correlation", "i"),
    ("external_id", "i"), ("grid_x", "f"), ("grid_y", "f"), ("grid_z", "f"), ("block_x", "f"), ("block_y", "f"),
    ("block_z", "f"), ("registers_per_thread", "f"), ("shared_memory", "f"), ("blocks_per_sm", "f"),
    ("warps_per_sm", "f"), ("occupancy_pct", "f"),
)
_COPY_SPEC = (
    ("ts", "f"), ("dur", "f"), ("name", "c"), ("bytes", "f"), ("bandwidth_gbps", "f"), ("correlation", "i"),
    ("external_id", "i"), ("device", "i"), ("stream", "i"),
)
_MEMSET_SPEC = (
    ("ts", "f"), ("dur", "f"), ("name", "c"), ("bytes", "f"), ("correlation", "i"), ("device", "i"), ("stream", "i"),
)
_RUNTIME_SPEC = (
    ("ts", "f"), ("dur", "f"), ("name", "c"), ("correlation", "i"), ("external_id", "i"), ("tid", "i"), ("cat", "c"),
)
_CPU_OP_SPEC = (
    ("ts", "f"), ("dur", "f"), ("name", "c"), ("tid", "i"), ("external_id", "i"), ("input_dims", "o"),
    ("input_types", "o"), ("flops", "f"), ("seq_num", "i"),
)
_ANNOTATION_SPEC = (("ts", "f"), ("dur", "f"), ("name", "c"), ("tid", "i"), ("on_gpu", "b"))
_PYFUNC_SPEC = (("ts", "f"), ("dur", "f"), ("name", "c"), ("tid", "i"))


class Collector:
    """The one pass: sorts events into per-table lists of tuples, counting what it skips."""

    def __init__(self, keep_python_functions: bool) -> None:
        self.keep_python_functions = keep_python_functions
        self.kernels = Columns(_KERNEL_SPEC)
        self.copies = Columns(_COPY_SPEC)
        self.memsets = Columns(_MEMSET_SPEC)
        self.runtime = Columns(_RUNTIME_SPEC)
        self.cpu_ops = Columns(_CPU_OP_SPEC)
        self.annotations = Columns(_ANNOTATION_SPEC)
        self.pyfuncs = Columns(_PYFUNC_SPEC)
        self.counts: dict[str, int] = {}
        self.no_dur = 0
        self.no_ts = 0
        self.bad_events = 0
        self.kernels_without_args = 0
        self.bad_launch_dims = 0
        self.bad_dur = 0
        self.negative_dur = 0
        self.huge_dur = 0
        self.total = 0
        self._span_names: dict[str, bool] = {}
        # Repeated strings (op names, Input Dims of repeated steps) share one object: large traces
        # repeat the same few thousand values millions of times.
        self._strings: dict[str, str] = {}
        self._lists: dict[bytes, str | None] = {}
        self._cat_of_raw: dict[str, Any] = {}  # raw "cat" -> its canonical category (None: not read)
        self._dumps = orjson.dumps
        self._loads = orjson.loads

    # the tables and counters that a split read's worker hands over (gpuadvisor/trace/_split.py)
    TABLES = ("kernels", "copies", "memsets", "runtime", "cpu_ops", "annotations", "pyfuncs")
    COUNTERS = (
        "no_dur", "no_ts", "bad_events", "kernels_without_args", "bad_launch_dims", "bad_dur", "negative_dur",
        "huge_dur", "total",
    )  # fmt: skip

    def take_columns(self) -> list[list[Any]]:
        """Every table's buffers collected so far, leaving empty ones (the worker sends these)."""
        out = []
        for name in self.TABLES:
            columns: Columns = getattr(self, name)
            out.append(columns.data)
            columns.data = columns.empty()
        return out

    def append_columns(self, tables: list[list[Any]]) -> None:
        """Append another collector's `take_columns()` after this one's rows (strings re-shared)."""
        share = self._strings.setdefault
        for name, data in zip(self.TABLES, tables, strict=True):
            for mine, theirs in zip(getattr(self, name).data, data, strict=True):
                if isinstance(mine, list):
                    mine.extend([v if v is None else share(v, v) for v in theirs])
                else:
                    mine.extend(theirs)

    def add_counts(self, counts: dict[str, int], counters: Sequence[int]) -> None:
        """Add another collector's category counts and `COUNTERS` to this one's."""
        for key, n in counts.items():
            self.counts[key] = self.counts.get(key, 0) + n
        for name, n in zip(self.COUNTERS, counters, strict=True):
            setattr(self, name, getattr(self, name) + n)

    def _is_span(self, name: str) -> bool:
        """A record_function span logged as an operator (2021 traces): ProfilerStep#N and friends."""
        hit = self._span_names.get(name)
        if hit is None:
            hit = self._span_names[name] = bool(_SPAN_AS_OP.match(name))
        return hit

    def _text(self, v: Any) -> str | None:
        """`v` as one shared string: Input Dims / Input type lists in their `str()` form, computed once
        per distinct value (a large trace repeats a few hundred of them). `v` is the field's raw JSON
        text (`msgspec.Raw`, empty when the field is absent), or the parsed value on the
        whole-document path (keyed by orjson's bytes of it)."""
        if type(v) is msgspec.Raw:
            if not v:
                return None
            key = bytes(v)
            hit = self._lists.get(key, _UNSEEN)
            if hit is _UNSEEN:
                hit = self._lists[key] = self._text(self._loads(key))
            return hit  # type: ignore[return-value]
        if v is None:
            return None
        if type(v) is str:
            return self._strings.setdefault(v, v)
        try:
            key = b"=" + self._dumps(v)  # its own key space: the raw text of a JSON string is not its value
        except TypeError:  # not from JSON (a test's object): no cache
            return str(v)
        hit = self._lists.get(key)
        if hit is None:
            t = str(v)
            hit = self._lists[key] = self._strings.setdefault(t, t)
        return hit  # type: ignore[return-value]

    def feed(self, events: list[Any], progress: Progress | None = None, total: int = 0) -> None:
        keep_py = self.keep_python_functions
        counts = self.counts
        aliases = _CAT_ALIASES
        text = self._text
        k_put = self.kernels.appenders()
        c_put = self.copies.appenders()
        m_put = self.memsets.appenders()
        a_put = self.annotations.appenders()
        p_put = self.pyfuncs.appenders()
        r_ts, r_dur, r_name, r_corr, r_ext, r_tid, r_cat = self.runtime.appenders()
        o_ts, o_dur, o_name, o_tid, o_ext, o_dims, o_types, o_flops, o_seq = self.cpu_ops.appenders()
        by_raw = self._cat_of_raw
        spans = self._span_names
        strings = self._strings.setdefault
        seen = self.total
        for ev in events:
            seen += 1
            if progress is not None and seen % _PROGRESS_EVERY == 0:
                self.total = seen
                progress(seen, total)
            if type(ev) is not _Event:
                ev = _event_of(ev)  # a dict of the whole-document path
                if ev is None:
                    self.bad_events += 1
                    continue
            raw_cat = ev.cat
            cat_key = raw_cat if type(raw_cat) is str else ""
            counts[cat_key] = counts.get(cat_key, 0) + 1
            cat = by_raw.get(cat_key, _UNSEEN)
            if cat is _UNSEEN:
                cat = by_raw[cat_key] = aliases.get(cat_key.lower())
            if cat is None or ev.ph != "X":
                continue
            ts = ev.ts
            # `type(x) is float` first: the common case, far cheaper than the isinstance chain.
            # `x - x != 0.0` is true only for NaN and infinities.
            if (type(ts) is not float or ts - ts != 0.0) and not (type(ts) is int and -_EXACT < ts < _EXACT):
                ts = _num(ts)
                if ts is None:
                    self.no_ts += 1
                    continue
            dur = ev.dur
            if (type(dur) is not float or dur - dur != 0.0) and not (type(dur) is int and -_EXACT < dur < _EXACT):
                if dur is None:
                    self.no_dur += 1
                    dur = 0.0
                else:
                    dur = _num(dur)
                    if dur is None:  # NaN, infinite (1e999), not a number: set aside
                        self.bad_dur += 1
                        continue
            if dur < 0:
                self.negative_dur += 1
                continue
            if dur > MAX_DURATION_US:
                self.huge_dur += 1
                continue
            if cat == "python_function" and not keep_py:
                continue  # counted only (often the majority of a with_stack trace)
            name = ev.name
            if type(name) is not str:
                name = "" if name is None else str(name)
            name = strings(name, name)
            args = ev.args
            if args is None:
                args = _NO_ARGS
            if cat == "cpu_op":
                is_span = spans.get(name)
                if is_span is None:
                    is_span = self._is_span(name)
                if is_span:
                    cat = "user_annotation"  # 2021 traces log record_function spans as operators
            if cat == "cpu_op":
                # The hot path (most events of a real trace): inline the common types.
                tid = ev.tid
                ext = args.external_id
                if ext is None:
                    ext = args.external_id_2021
                seq = args.sequence
                flops = args.flops
                dims = args.dims
                if dims is None or (not dims and type(dims) is msgspec.Raw):
                    dims = args.dims_2021  # 2021 spelling
                o_ts(ts)
                o_dur(dur)
                o_name(name)
                o_tid(tid if type(tid) is int and _I64_MIN < tid <= _I64_MAX else _int_cell(_tid(tid)))
                o_ext(ext if type(ext) is int and _I64_MIN < ext <= _I64_MAX else _int_cell(_id(ext)))
                o_dims(text(dims))
                o_types(text(args.types))
                o_flops(_NAN if flops is None else _float_cell(_num(flops)))
                o_seq(seq if type(seq) is int and _I64_MIN < seq <= _I64_MAX else _int_cell(_id(seq)))
            elif cat == "kernel":
                if args is _NO_ARGS or not args.kernel_fields():
                    self.kernels_without_args += 1
                gx, gy, gz = _dim3(args.grid)
                bx, by, bz = _dim3(args.block)
                if gx is _BAD or bx is _BAD:
                    self.bad_launch_dims += 1
                    gx = gy = gz = bx = by = bz = None
                device, stream = args.device, args.stream
                for put, v in zip(
                    k_put,
                    (
                        ts,
                        dur,
                        name,
                        _int_cell(_id(ev.pid if device is None else device)),
                        _int_cell(_id(ev.tid if stream is None else stream)),
                        _int_cell(_id(args.correlation)),
                        _int_cell(_id(args.external())),
                        _NAN if gx is None else gx,
                        _NAN if gy is None else gy,
                        _NAN if gz is None else gz,
                        _NAN if bx is None else bx,
                        _NAN if by is None else by,
                        _NAN if bz is None else bz,
                        _float_cell(_num(args.registers)),
                        _float_cell(_num(args.shared_memory)),
                        _float_cell(_num(args.blocks_per_sm)),
                        _float_cell(_num(args.warps_per_sm)),
                        _float_cell(_num(args.occupancy)),
                    ),
                    strict=True,
                ):
                    put(v)
            elif cat == "cuda_runtime" or cat == "cuda_driver":
                r_ts(ts)
                r_dur(dur)
                r_name(name)
                r_corr(_int_cell(_id(args.correlation)))
                r_ext(_int_cell(_id(args.external())))
                r_tid(_int_cell(_tid(ev.tid)))
                r_cat(cat)
            elif cat == "gpu_memcpy":
                device, stream = args.device, args.stream
                for put, v in zip(
                    c_put,
                    (
                        ts,
                        dur,
                        name,
                        _float_cell(_num(args.bytes)),
                        _float_cell(_num(args.bandwidth)),
                        _int_cell(_id(args.correlation)),
                        _int_cell(_id(args.external())),
                        _int_cell(_id(ev.pid if device is None else device)),
                        _int_cell(_id(ev.tid if stream is None else stream)),
                    ),
                    strict=True,
                ):
                    put(v)
            elif cat == "gpu_memset":
                device, stream = args.device, args.stream
                for put, v in zip(
                    m_put,
                    (
                        ts,
                        dur,
                        name,
                        _float_cell(_num(args.bytes)),
                        _int_cell(_id(args.correlation)),
                        _int_cell(_id(ev.pid if device is None else device)),
                        _int_cell(_id(ev.tid if stream is None else stream)),
                    ),
                    strict=True,
                ):
                    put(v)
            elif cat == "user_annotation" or cat == "gpu_user_annotation":
                for put, v in zip(
                    a_put,
                    (ts, dur, name, _int_cell(_tid(ev.tid)), cat == "gpu_user_annotation"),
                    strict=True,
                ):
                    put(v)
            elif cat == "python_function":
                for put, v in zip(p_put, (ts, dur, name, _int_cell(_tid(ev.tid))), strict=True):
                    put(v)
        self.total = seen

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
        if self.bad_dur:
            out.append(
                f"{self.bad_dur} events had a 'dur' that is not a finite number (NaN, Infinity, 1e999, text); "
                "they were set aside: every time and share below leaves them out."
            )
        if self.negative_dur:
            out.append(
                f"{self.negative_dur} events had a negative 'dur'; they were set aside: every time and share "
                "below leaves them out."
            )
        if self.huge_dur:
            out.append(
                f"{self.huge_dur} events had a 'dur' longer than a day ({MAX_DURATION_US:.3g} us; no profiler "
                "window records that); they were set aside: every time and share below leaves them out."
            )
        if self.bad_launch_dims:
            out.append(
                f"{self.bad_launch_dims} kernels carry impossible launch dimensions (negative or beyond 32 bits); "
                "their grid and block were ignored."
            )
        if self.kernels_without_args:
            out.append(
                f"{self.kernels_without_args} kernels carry no args (grid, occupancy, correlation unknown for them)."
            )
        return out
