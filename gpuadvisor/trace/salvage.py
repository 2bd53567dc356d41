"""The whole-document path: a trace the streaming reader cannot read block by block (truncated,
invalid UTF-8, NaN or 1e999 numbers, text after the document, a bare event array, odd layouts) is
parsed at once, repaired where one repair can tell what was meant, and its complete part salvaged,
each repair said in a note. A file that cannot be read as a trace at all raises `InputError`.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import orjson

from gpuadvisor.errors import InputError
from gpuadvisor.trace._stream import is_blank
from gpuadvisor.trace.collect import Collector
from gpuadvisor.trace.decode import Progress, lone_surrogates_note, without_lone_surrogates
from gpuadvisor.trace.identify import describe_document
from gpuadvisor.trace.limits import TraceLimits, too_many_events
from gpuadvisor.trace.read import Damage, read_bytes

_LEADING_WS = re.compile(rb"\s*")


def _first_char(data: bytes) -> bytes:
    """The first character after leading whitespace (without copying a large text)."""
    start = _LEADING_WS.match(data)
    at = start.end() if start else 0
    return data[at : at + 1]


def _salvage_truncated(data: bytes) -> Any | None:
    """Cut a truncated Kineto JSON after its last complete event and close the array and object.

    Tries the last few `}` positions, newest first (an event's args dict also ends with `}`).
    """
    if _first_char(data) == b"[":
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


def parse_document(path: Path, data: bytes, warnings: list[str], damage: Damage | None = None) -> dict[str, Any]:
    if is_blank(data):
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
    if not parsed and "surrogate" in msg:
        # One repair: escaped lone surrogates (half a UTF-16 pair) read as U+FFFD, then parse once more.
        data, count = without_lone_surrogates(data)
        warnings.append(lone_surrogates_note(path.name, count))
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
        if _first_char(data) not in (b"{", b"["):
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

def collect_whole(
    path: Path,
    keep_python_functions: bool,
    progress: Progress | None,
    warnings: list[str],
    damage: Damage | None = None,
    limits: TraceLimits | None = None,
) -> tuple[dict[str, Any], Collector]:
    """Parse the whole document at once: the path for damaged files (salvage) and odd layouts."""
    limits = limits or TraceLimits.from_env()
    obj = parse_document(path, read_bytes(path, warnings, damage, limits), warnings, damage)
    events = obj.get("traceEvents")
    if not isinstance(events, list):
        raise InputError(f"{path}: not a Kineto trace ('traceEvents' is not a list)")
    if limits.events_exceeded(len(events)):
        raise too_many_events(path, limits.max_events)
    col = Collector(keep_python_functions)
    col.feed(events, progress, len(events))
    return obj, col
