"""Decoding trace events: JSON text into msgspec structs of the fields the tables read, and what each
value may be.

`decode_events` turns a block of the `traceEvents` array into `Event` structs (msgspec skips every
other field without building it); `event_of` turns an event the whole-document path parsed as a dict
into the same struct. The functions below say, one value at a time, what a table cell may hold: an
id within int64, a finite number, launch dimensions a GPU can have, a thread id. The collector
(`gpuadvisor.trace.collect`) applies them to whole columns at once and falls back to them value by
value wherever a column holds anything unusual, so each rule lives here only.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable
from typing import Any

import msgspec
import orjson

from gpuadvisor.words import plural

Progress = Callable[[int, int], None]

# Older Kineto / torch versions spelled categories differently.
CAT_ALIASES = {
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
SPAN_AS_OP = re.compile(
    r"ProfilerStep\s*#\s*\d+$|Optimizer\.(?:step|zero_grad)#|enumerate\(DataLoader\)#|DistributedDataParallel\.forward$"
)
# A duration longer than a day (in us) is not a measurement: torch.profiler windows last seconds to
# minutes, and a day of events would be billions of them. Such events (a ProfilerStep of 1e300) are
# set aside and counted instead of stretching a step to the end of time.
MAX_DURATION_US = 86_400e6

# ---- what one value may be -------------------------------------------------------------------------


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
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1
# Int64 cells the collector stores without a value (an id Kineto did not give, a tid it could not
# read): the one int64 that `int64_id` never returns is this one, so it reads back as missing.
NA_INT = I64_MIN


def int64_id(v: Any) -> int | None:
    """An Int64 column value: an int within 64-bit signed range, else None."""
    if v is None:
        return None
    if type(v) is int:
        return v if I64_MIN < v <= I64_MAX else None
    i = int_or_none(v)
    return i if i is not None and I64_MIN < i <= I64_MAX else None


# Integers that a float64 column holds exactly (larger ones are converted through `number`).
_EXACT = 1 << 53


def number(v: Any) -> float | None:
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


def thread_id(v: Any) -> int | None:
    """A `tid` as an Int64 value: an int in range as it is, anything else (a thread name, a 64-bit
    unsigned id) as its CRC-32, so that one thread keeps one id."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v if I64_MIN < v <= I64_MAX else zlib.crc32(str(v).encode())
    if isinstance(v, str):
        try:
            return thread_id(int(v))
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


def as_text(v: Any) -> str | None:
    if v is None:
        return None
    return v if isinstance(v, str) else str(v)


class _BadDim(float):
    """Marker for launch dimensions no GPU can have (see `launch_dim3`)."""


BAD_DIM = _BadDim("nan")
# CUDA's largest grid dimension is 2^31 - 1 (x) and 65535 (y, z); HIP's are 32-bit. A value beyond
# 32 bits (a corrupted or 64-bit overflowed field) is not a launch dimension.
MAX_DIM = float(1 << 32)


def launch_dim3(v: Any) -> tuple[float | None, float | None, float | None]:
    """(x, y, z) of a `grid` / `block` arg; (None,)*3 when absent; (BAD_DIM,)*3 when impossible."""
    if isinstance(v, (list, tuple)) and len(v) == 3:
        x, y, z = number(v[0]), number(v[1]), number(v[2])
        if (
            x is None
            or y is None
            or z is None
            or not (0 <= x <= MAX_DIM)
            or not (0 <= y <= MAX_DIM)
            or not (0 <= z <= MAX_DIM)
        ):
            return BAD_DIM, BAD_DIM, BAD_DIM
        return x, y, z
    return None, None, None


# A tensor dimension, and the element count of a tensor, below this (2^53: what a float64 holds exactly;
# no GPU holds a tensor of more elements). Kineto's `Input Dims` are lists of such shapes.
MAX_ELEMENTS = 1 << 53


def shape_list(v: Any) -> bool:
    """An `Input Dims` value the analysis can compute with: a list whose leaves are ints in
    [0, 2^53), every list of ints (one tensor's shape) holding fewer than 2^53 elements."""
    if not isinstance(v, list):
        return False
    elements = 1
    for d in v:
        if type(d) is int:
            if not 0 <= d < MAX_ELEMENTS:
                return False
            elements *= d
            if elements >= MAX_ELEMENTS:
                return False
        elif not shape_list(d):
            return False
    return True


def type_list(v: Any) -> bool:
    """An `Input type` value: a list (of lists) of type names."""
    return isinstance(v, list) and all(type(t) is str or type_list(t) for t in v)


# A `\uXXXX` escape of half a surrogate pair with no other half: valid JSON text to Python's parser,
# refused by msgspec and orjson. Read left to right: an escaped backslash, a whole pair, or a lone half.
_ESCAPES = re.compile(
    rb"(\\\\)|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})"
)


def without_lone_surrogates(data: bytes) -> tuple[bytes, int]:
    """`data` with every escaped lone surrogate replaced by `\ufffd` (the replacement character), and
    how many there were."""
    count = 0

    def repair(m: re.Match[bytes]) -> bytes:
        nonlocal count
        if m.group(2) is None:
            return m.group(0)
        count += 1
        return b"\\ufffd"

    return _ESCAPES.sub(repair, data), count


def lone_surrogates_note(file_name: str, count: int) -> str:
    return (
        f"{file_name} holds {plural(count, 'escaped lone surrogate')} (half a UTF-16 pair, \\ud800...), which "
        "JSON parsers refuse; read as U+FFFD."
    )


# ---- the structs ----------------------------------------------------------------------------------

NO_RAW = msgspec.Raw()


class Args(msgspec.Struct, gc=False):
    """The `args` fields the tables read; msgspec skips every other one without building it (a
    cpu_op's Input Strides and Concrete Inputs, flow ids...). Input Dims / Input type stay raw JSON
    text (`msgspec.Raw`): they are turned into text once per distinct value (`Collector.texts`)."""

    external_id: Any = msgspec.field(name="External id", default=None)
    external_id_2021: Any = msgspec.field(name="external id", default=None)
    sequence: Any = msgspec.field(name="Sequence number", default=None)
    flops: Any = None
    dims: msgspec.Raw = msgspec.field(name="Input Dims", default=NO_RAW)
    dims_2021: msgspec.Raw = msgspec.field(name="Input dims", default=NO_RAW)
    types: msgspec.Raw = msgspec.field(name="Input type", default=NO_RAW)
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


# The fields whose presence says a kernel carries args (else it "carries no args").
KERNEL_ARG_FIELDS = (
    "correlation", "grid", "block", "device", "stream", "external_id", "external_id_2021", "registers", "occupancy",
)  # fmt: skip


class Event(msgspec.Struct, gc=False):
    """One trace event as the collector reads it (`ph` defaults to a complete event, as before)."""

    ph: Any = "X"
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    tid: Any = None
    pid: Any = None
    args: Args | None = None


NO_ARGS = Args()
# JSON key -> field, for events parsed as dicts (the whole-document path, a block msgspec refused)
_ARG_KEYS = {f.encode_name: f.name for f in msgspec.structs.fields(Args)}
_EVENT_DECODER = msgspec.json.Decoder(list[Event])


def event_of(ev: Any) -> Event | None:
    """An event parsed as a dict (the whole-document path, a block msgspec refused) as an `Event`;
    None for a value that is not a JSON object. Values are kept as they are (Input Dims as a list)."""
    if not isinstance(ev, dict):
        return None
    args = ev.get("args")
    return Event(
        ph=ev.get("ph", "X"),
        cat=ev.get("cat"),
        name=ev.get("name"),
        ts=ev.get("ts"),
        dur=ev.get("dur"),
        tid=ev.get("tid"),
        pid=ev.get("pid"),
        args=Args(**{f: args[k] for k, f in _ARG_KEYS.items() if k in args}) if isinstance(args, dict) else None,
    )


def decode_events(data: bytes) -> list[Any]:
    """The events of a JSON array (`[` + whole events + `]`) as `Event`s. A block whose values
    msgspec refuses (an event that is not an object, `args` that is not an object, a number out of
    range) is parsed by orjson and converted; invalid JSON raises orjson.JSONDecodeError, so that
    orjson decides what is valid exactly as before."""
    try:
        return _EVENT_DECODER.decode(data)
    except (msgspec.MsgspecError, ValueError):  # ValueError: invalid UTF-8
        events = orjson.loads(data)
    if not isinstance(events, list):
        return events  # type: ignore[no-any-return]  # the stream rejects it
    return [event_of(e) or e for e in events]
