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
import json
import math
import os
import re
import zlib
from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import orjson

from gpuadvisor.errors import InputError
from gpuadvisor.trace import _split
from gpuadvisor.trace._stream import CHUNK_BYTES, EventStream, StreamFallback
from gpuadvisor.trace.identify import describe_document, read_head
from gpuadvisor.trace.job import RankClaim, check_one_job, not_one_job_error, rank_in_name, rank_problems
from gpuadvisor.trace.kernels import kernel_family
from gpuadvisor.trace.kind import CaptureScan, classify, scan_graph_captures
from gpuadvisor.trace.limits import TraceLimits, too_many_bytes, too_many_events
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
from gpuadvisor.trace.steps import segment_steps

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
_OPEN_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
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


# ---- reading bytes --------------------------------------------------------------------------------


class _Damage:
    """What the reader had to repair; `truncated`: the file ended before its end (events were lost)."""

    truncated = False


def _inflates_past(raw: bytes, limit: int) -> bool:
    """Whether gzip data inflates past `limit` bytes, told without keeping the text (bounded memory)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data, n = raw, 0
    try:
        while data:
            n += len(d.decompress(data, 16 << 20))
            if n > limit:
                return True
            if d.eof:
                data = d.unused_data
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            else:
                data = d.unconsumed_tail
    except zlib.error:
        pass  # damaged: the caller's decompression reports it
    return False


def _read_bytes(
    path: Path, warnings: list[str], damage: _Damage | None = None, limits: TraceLimits | None = None
) -> bytes:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a trace file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if limits is None:
        limits = TraceLimits.from_env()
    if raw[:2] != b"\x1f\x8b" and limits.bytes_exceeded(len(raw)):
        raise too_many_bytes(path, limits.max_bytes)
    if raw[:2] == b"\x1f\x8b" and limits.max_bytes > 0 and _inflates_past(raw, limits.max_bytes):
        raise too_many_bytes(path, limits.max_bytes)
    if raw[:2] == b"\x1f\x8b":
        try:
            return _without_bom(gzip.decompress(raw), path, warnings)
        except (OSError, EOFError, zlib.error):
            # A truncated gzip: decompress what is there, then salvage the JSON prefix.
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                data = d.decompress(raw)
            except zlib.error:
                raise InputError(f"{path}: corrupt gzip data, cannot be read") from None
            warnings.append(f"The gzip stream of {path.name} is truncated; only its complete part was read.")
            if damage is not None:
                damage.truncated = True
            return _without_bom(data, path, warnings)
    return _without_bom(raw, path, warnings)


_UTF8_BOM = b"\xef\xbb\xbf"
# Longest first: the UTF-32 LE mark starts with the UTF-16 LE one.
_OTHER_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)


def _without_bom(data: bytes, path: Path, warnings: list[str]) -> bytes:
    """Drop a UTF-8 byte-order mark; re-encode UTF-16/32 text (with its mark) as UTF-8.

    JSON parsers reject a leading BOM; without this the invalid-UTF-8 repair below would loop on it."""
    if data.startswith(_UTF8_BOM):
        return data[len(_UTF8_BOM) :]
    for bom, codec in _OTHER_BOMS:
        if data.startswith(bom):
            text = data[len(bom) :].decode(codec, errors="replace")
            warnings.append(f"{path.name} is {codec.upper()} text; it was read as UTF-8.")
            return text.encode("utf-8")
    return data


def _salvage_truncated(data: bytes) -> Any | None:
    """Cut a truncated Kineto JSON after its last complete event and close the array and object.

    Tries the last few `}` positions, newest first (an event's args dict also ends with `}`).
    """
    if data.lstrip().startswith(b"["):
        key, closing = data.find(b"["), b"]"  # a truncated bare event array
    else:
        key, closing = data.find(b'"traceEvents"'), b"]}"
    if key < 0:
        return None
    pos = len(data)
    for _ in range(64):
        pos = data.rfind(b"}", key, pos)
        if pos < 0:
            return None
        try:
            return orjson.loads(data[: pos + 1] + closing)
        except orjson.JSONDecodeError:
            continue
    return None


_UNPARSED = object()
# orjson's errors for what Python's json reads: NaN / Infinity tokens ("unexpected character"),
# -Infinity ("no digit after minus sign"), 1e999 ("number is infinity"), text after the document
_LENIENT_ERRORS = ("unexpected character", "no digit after", "is infinity", "unexpected content after document")


def _parse_lenient(path: Path, data: bytes, warnings: list[str]) -> Any:
    """The document as Python's json reads it, for what orjson refuses in an otherwise whole trace:
    NaN, Infinity, -Infinity, numbers beyond float64 (1e999) and text after the end of the document.
    Each is said in a note; the collector then sets aside the events whose `ts`/`dur` is not finite.
    `_UNPARSED` when this fails too (a truncated file: the salvage decides)."""
    nonfinite = [0]

    def constant(name: str) -> float:
        nonfinite[0] += 1
        return float(name)  # "NaN", "Infinity", "-Infinity"

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            nonfinite[0] += 1
        return value

    try:
        text = data.decode("utf-8", errors="replace")
        start = len(text) - len(text.lstrip())
        obj, end = json.JSONDecoder(parse_constant=constant, parse_float=number).raw_decode(text, start)
    except (ValueError, RecursionError):
        return _UNPARSED
    rest = text[end:].strip()
    if rest:
        shown = "".join(c if c.isprintable() else "?" for c in rest[:20])
        warnings.append(
            f"{path.name} has {len(rest)} characters after the end of its JSON document ({shown!r}...); "
            "they were ignored."
        )
    if nonfinite[0]:
        warnings.append(
            f"{path.name} holds {nonfinite[0]} numbers that are not finite (NaN, Infinity or beyond float64, "
            "such as 1e999), which JSON does not allow; they count as missing values."
        )
    return obj


def _parse(path: Path, data: bytes, warnings: list[str], damage: _Damage | None = None) -> dict[str, Any]:
    if not data.strip():
        raise InputError(f"{path}: empty file, not a trace")
    obj: Any = None
    parsed = False
    try:
        obj, parsed = orjson.loads(data), True
    except orjson.JSONDecodeError as exc:
        msg = str(exc)
    if not parsed and ("utf-8" in msg.lower() or "utf8" in msg.lower()):
        # One repair, never a loop: replace the bad bytes and parse once more.
        data = data.decode("utf-8", errors="replace").encode("utf-8")
        warnings.append(f"{path.name} holds invalid UTF-8; the bad bytes were replaced with U+FFFD.")
        try:
            obj, parsed = orjson.loads(data), True
        except orjson.JSONDecodeError as exc:
            msg = str(exc)
    if not parsed and any(kind in msg for kind in _LENIENT_ERRORS):
        # NaN, 1e999, text after the document; a truncated or too deeply nested file goes straight to
        # the salvage or its error (Python's parser would build most of it only to fail at its end)
        obj = _parse_lenient(path, data, warnings)
        parsed = obj is not _UNPARSED
    if not parsed:
        stripped = data.lstrip()
        if not stripped.startswith((b"{", b"[")):
            raise InputError(f"{path}: not a JSON trace (does not start with '{{')") from None
        if "recursion" in msg.lower():
            raise InputError(
                f"{path}: not a JSON trace gpuadvisor can read: nested deeper than the JSON parser allows ({msg})"
            ) from None
        obj = _salvage_truncated(data)
        if obj is None:
            raise InputError(
                f"{path}: not a JSON trace: invalid JSON and no complete events could be salvaged ({msg})"
            ) from None
        events = obj if isinstance(obj, list) else obj.get("traceEvents") if isinstance(obj, dict) else None
        n = len(events) if isinstance(events, list) else 0
        # Kineto closes a trace with metadata events (ph "M": process and thread names), its "Trace"
        # span and two uncategorized instants after every timed event: a cut among them lost no step.
        last = events[-1] if n and isinstance(events, list) else None
        in_trailer = isinstance(last, dict) and (
            last.get("ph") == "M" or last.get("cat") == "Trace" or (last.get("ph") == "i" and last.get("cat") is None)
        )
        if damage is not None and not in_trailer:
            damage.truncated = True
        warnings.append(
            f"{path.name} is truncated or malformed ({msg}); the {n} complete events before the damage were used."
        )
    what = describe_document(obj)
    if what:
        raise InputError(f"{path}: {what}")
    if isinstance(obj, list):
        # The JSON Array Format of the Chrome trace viewer: a bare list of events.
        return {"traceEvents": obj}
    assert isinstance(obj, dict)
    return obj


# ---- small converters -----------------------------------------------------------------------------


def _int_or_none(v: Any) -> int | None:
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
    i = _int_or_none(v)
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


def _bool_or_none(v: Any) -> bool | None:
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
    text (`msgspec.Raw`): they are turned into text once per distinct value (`_Collector._text`)."""

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
    """An Int64 cell of `_Columns`: the value, or `_NA_INT` for a missing one."""
    return _NA_INT if v is None else v


def _float_cell(v: float | None) -> float:
    return _NAN if v is None else v


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


# Int64 cells the collector stores without a value (an id Kineto did not give, a tid it could not
# read): the one int64 that `_id` never returns is this one, so it reads back as missing.
_NA_INT = _I64_MIN


class _Columns:
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


class _Collector:
    """The one pass: sorts events into per-table lists of tuples, counting what it skips."""

    def __init__(self, keep_python_functions: bool) -> None:
        self.keep_python_functions = keep_python_functions
        self.kernels = _Columns(_KERNEL_SPEC)
        self.copies = _Columns(_COPY_SPEC)
        self.memsets = _Columns(_MEMSET_SPEC)
        self.runtime = _Columns(_RUNTIME_SPEC)
        self.cpu_ops = _Columns(_CPU_OP_SPEC)
        self.annotations = _Columns(_ANNOTATION_SPEC)
        self.pyfuncs = _Columns(_PYFUNC_SPEC)
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
            columns: _Columns = getattr(self, name)
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


def _collect_streaming(
    path: Path,
    keep_python_functions: bool,
    progress: Progress | None,
    chunk_bytes: int,
    split: bool = True,
    limits: TraceLimits | None = None,
) -> tuple[dict[str, Any], _Collector]:
    """Stream the file in blocks (bounded memory); raises StreamFallback when it cannot. With `split`,
    a large file's second half is read by a worker process (`gpuadvisor.trace._split`)."""
    col = _Collector(keep_python_functions)
    handover = _split.start(path, col, chunk_bytes, while_waiting=_import_table_libraries) if split else None
    report = progress
    if handover is not None and progress is not None:
        other = handover

        def report(done: int, total: int) -> None:
            progress(min(total, done + other.worker_pos), total)

    limits = limits or TraceLimits.from_env()
    stream = EventStream(
        path, chunk_bytes=chunk_bytes, progress=report, handover=handover, decode=decode_events, limits=limits
    )
    try:
        for events in stream.chunks():
            if limits.events_exceeded(col.total + len(events)):
                raise too_many_events(path, limits.max_events)
            col.feed(events)
    finally:
        if handover is not None:
            handover.close()
    if limits.events_exceeded(col.total):  # this process's part and the split worker's together
        raise too_many_events(path, limits.max_events)
    return stream.top, col


def _import_table_libraries() -> None:
    """Import pandas (~0.3 s), which the tables need next: done while the split's worker finishes."""
    # lazy: pandas stays out of `import gpuadvisor.api` and the trace-split worker
    import pandas  # noqa: F401


def _collect_whole(
    path: Path,
    keep_python_functions: bool,
    progress: Progress | None,
    warnings: list[str],
    damage: _Damage | None = None,
    limits: TraceLimits | None = None,
) -> tuple[dict[str, Any], _Collector]:
    """Parse the whole document at once: the path for damaged files (salvage) and odd layouts."""
    limits = limits or TraceLimits.from_env()
    obj = _parse(path, _read_bytes(path, warnings, damage, limits), warnings, damage)
    events = obj.get("traceEvents")
    if not isinstance(events, list):
        raise InputError(f"{path}: not a Kineto trace ('traceEvents' is not a list)")
    if limits.events_exceeded(len(events)):
        raise too_many_events(path, limits.max_events)
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
    split: bool = True,
    limits: TraceLimits | None = None,
) -> TraceModel:
    """Load one Kineto trace file (.json or .json.gz, gzip detected by content) into a `TraceModel`.

    rank: overrides the rank (else distributedInfo.rank, else `rankN` in the file name, else 0).
    progress: called as progress(done, total) while loading (done/total is the fraction read: bytes
      of the file while streaming, events for a damaged file) and finally as (events, events).
    chunk_bytes: block size of the streaming reader (default 2 MiB; memory use grows with it).
    split: a trace of 32 MB or more (decompressed) is read by two processes when a second CPU is free
      (`gpuadvisor.trace._split`; same tables); False reads it in this process only.
    The file is streamed in blocks; a damaged file (truncated, invalid UTF-8, not an object) is
    re-read as a whole document so that its complete part can be salvaged.
    limits: the most decompressed text and events read (`gpuadvisor.trace.limits`; default: the
      environment's, else 2 GB and 20 million); past either, `TraceTooLarge` (an InputError, exit 2).
    Raises InputError (one line) when the file cannot be read as a trace at all.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a trace file")
    warnings: list[str] = []
    damage = _Damage()
    limits = limits or TraceLimits.from_env()
    # The load allocates millions of dicts and tuples that all stay alive until the tables are
    # built: the cyclic GC would rescan them again and again for nothing (it doubled load time).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            obj, col = _collect_streaming(
                path, keep_python_functions, progress, chunk_bytes or CHUNK_BYTES, split, limits
            )
        except StreamFallback:
            warnings = []
            obj, col = _collect_whole(path, keep_python_functions, progress, warnings, damage, limits)
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
    if col.total and not any(len(df) for df in tables.values()):
        _refuse_if_all_set_aside(path, col)
    _drop_zero_ts(tables, warnings)
    _check_time_resolution(path, tables, warnings)
    _drop_colliding_correlations(tables, warnings)
    capture = _drop_captured_launches(tables)
    span = _span(tables)
    meta = _meta(obj, span)
    if rank is None:
        rank = _rank(meta, path)
    py_df = (
        col.pyfuncs.frame()
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
        truncated=damage.truncated,
    )
    model.steps, model.step_source = segment_steps(model)
    model.kind = classify(model, capture)
    return model


def _rank(meta: TraceMeta, path: Path) -> int:
    if meta.distributed_info is not None:
        r = _int_or_none(meta.distributed_info.get("rank"))
        if r is not None:
            return r
    r = rank_in_name(path.name)
    return 0 if r is None else r


def _drop_captured_launches(tables: dict[str, pd.DataFrame]) -> CaptureScan:
    """Remove the runtime calls recorded into a CUDA/HIP graph during stream capture (they never ran
    as such: not GPU work, no kernel of their own) and return what the scan found."""
    gpu_corr = [
        *tables["kernels"]["correlation"],
        *tables["copies"]["correlation"],
        *tables["memsets"]["correlation"],
    ]
    scan, captured = scan_graph_captures(tables["runtime"], gpu_corr)
    if captured.any():
        tables["runtime"] = tables["runtime"][~captured].reset_index(drop=True)
    return scan


# ---- tables ---------------------------------------------------------------------------------------


def _cat(values: Any) -> Any:
    # lazy: pandas stays out of `import gpuadvisor.api` and the trace-split worker
    import pandas as pd

    return pd.Series(values, dtype=object).astype(str).astype("category")


def _build_tables(
    kernels: _Columns,
    copies: _Columns,
    memsets: _Columns,
    runtime: _Columns,
    cpu_ops: _Columns,
    annotations: _Columns,
) -> dict[str, pd.DataFrame]:
    """The typed tables of docs (gpuadvisor/trace/model.py) from the collector's columns (each
    released once its table is built)."""
    # lazy: numpy and pandas stay out of `import gpuadvisor.api` and the trace-split worker
    import numpy as np
    import pandas as pd

    k = kernels.frame()
    k["blocks"] = k["grid_x"] * k["grid_y"] * k["grid_z"]
    k["threads_per_block"] = k["block_x"] * k["block_y"] * k["block_z"]
    cats = [str(c) for c in k["name"].cat.categories]
    fam = {c: kernel_family(c) for c in cats}
    k["family"] = k["name"].astype(str).map(fam).astype("category") if len(k) else _cat([])
    k["is_collective"] = (k["family"].astype(str) == "collective").to_numpy(dtype=bool)
    k = k[list(KERNEL_COLUMNS)]

    c = copies.frame()
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

    m = memsets.frame()[list(MEMSET_COLUMNS)]
    r = runtime.frame()[list(RUNTIME_COLUMNS)]
    o = cpu_ops.frame()[list(CPU_OP_COLUMNS)]
    a = annotations.frame()[list(ANNOTATION_COLUMNS)]
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
    # lazy: numpy stays out of `import gpuadvisor.api` and the trace-split worker
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


def _refuse_if_all_set_aside(path: Path, col: _Collector) -> None:
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


def _check_time_resolution(path: Path, tables: dict[str, pd.DataFrame], warnings: list[str]) -> None:
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


def _drop_colliding_correlations(tables: dict[str, pd.DataFrame], warnings: list[str]) -> None:
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

    The rank of each comes from distributedInfo.rank, else `rankN` in the file name. The files of a
    folder must be the distinct ranks of one job (`gpuadvisor.trace.job.check_one_job`), else
    InputError. Several files load in parallel processes (see `load_trace_files`); `progress` is only
    used for a single file.
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
    return sorted(models, key=lambda m: m.rank)


def _load_one(path: Path, keep_python_functions: bool) -> TraceModel:
    """Worker-process entry point (module level so that it pickles). The ranks already use the
    CPUs: no second process per file."""
    return load_trace(path, keep_python_functions=keep_python_functions, split=False)


def load_trace_files(
    paths: Sequence[Path],
    *,
    keep_python_functions: bool = False,
    workers: int | None = None,
    on_done: Callable[[Path, int, int], None] | None = None,
    one_job: bool = True,
) -> list[TraceModel]:
    """Load several trace files, in parallel worker processes when there are several files and CPUs.

    Returns the models in the order of `paths` (ranks as `load_trace` finds them). workers: number of
    processes (default: min(files, CPUs); 1 loads in this process). on_done(path, done, total) is
    called in this process as each file finishes. An InputError of any file is raised as is.
    one_job: several files are the ranks of one job; when they are not (two files claim one rank, a
    file says no rank, world sizes, schemas or accelerators differ) InputError names why
    (`gpuadvisor.trace.job.check_one_job`).
    """
    paths = [Path(p) for p in paths]
    if one_job and len(paths) > 1:
        _refuse_early(paths)
    if workers is None:
        workers = min(len(paths), os.cpu_count() or 1)
    models: list[TraceModel] = []
    if workers <= 1 or len(paths) <= 1:
        for i, p in enumerate(paths):
            models.append(load_trace(p, keep_python_functions=keep_python_functions))
            if on_done is not None:
                on_done(p, i + 1, len(paths))
    else:
        models = _load_parallel(paths, keep_python_functions, workers, on_done)
    if one_job and len(models) > 1:
        check_one_job(models, _common_folder(paths))
    return models


def _refuse_early(paths: list[Path]) -> None:
    """Refuse a folder that cannot be one job before parsing it, when every file's rank claim can be
    read cheaply (`peek_rank_claim`): a folder of 30 MB traces that all say no rank fails in a
    fraction of a second instead of after loading them all."""
    claims = []
    for p in paths:
        claim = peek_rank_claim(p)
        if claim is None:
            return  # unknown without a full load: check_one_job decides after loading
        claims.append(claim)
    problems = rank_problems(claims)
    if problems:
        raise not_one_job_error(_common_folder(paths), len(paths), problems)


_TAIL_BYTES = 64 * 1024


def peek_rank_claim(path: Path) -> RankClaim | None:
    """The rank a trace file claims, read from its head (and tail) without parsing its events; None
    when that cannot be told cheaply. Kineto writes `distributedInfo` before `traceEvents`; hand-made
    traces may write it after, so a header without it is confirmed by the file's last 64 KB."""
    name_rank = rank_in_name(path.name)
    try:
        head = read_head(path, _TAIL_BYTES).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError:
        return None
    if head.startswith(b"["):
        return RankClaim(path.name, name_rank)  # a bare event array carries no metadata
    m = _OPEN_EVENTS.search(head)
    if not head.startswith(b"{") or m is None:
        return None
    try:
        header = orjson.loads(head[: m.start()] + b'"traceEvents": []}')
    except orjson.JSONDecodeError:
        return None
    info = header.get("distributedInfo") if isinstance(header, dict) else None
    if isinstance(info, dict):
        rank = _int_or_none(info.get("rank"))
        size = _int_or_none(info.get("world_size"))
        return RankClaim(path.name, rank if rank is not None else name_rank, size)
    try:
        tail = read_tail(path, _TAIL_BYTES)
    except (OSError, EOFError, zlib.error):
        return None
    if b'"distributedInfo"' in tail:
        return None  # metadata after the events: only a full load can read it
    return RankClaim(path.name, name_rank)


def read_tail(path: Path, nbytes: int) -> bytes:
    """The last `nbytes` of a file's content (decompressed for gzip: the stream is read through)."""
    with path.open("rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
        if not gz:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - nbytes))
            return fh.read()
        fh.seek(0)
        tail = b""
        with gzip.GzipFile(fileobj=fh, mode="rb") as stream:
            while block := stream.read(8 << 20):
                tail = (tail + block)[-nbytes:]
        return tail


def _common_folder(paths: Sequence[Path]) -> Path:
    parents = {p.parent for p in paths}
    return parents.pop() if len(parents) == 1 else Path(os.path.commonpath([str(p) for p in paths]))


def _load_parallel(
    paths: list[Path],
    keep_python_functions: bool,
    workers: int,
    on_done: Callable[[Path, int, int], None] | None,
) -> list[TraceModel]:
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
