"""Telling a Kineto trace from the other JSON files a profiling session leaves behind.

`analyze` refuses a file that is not a Kineto trace with exit 2 and a message naming what the file
is: a PyTorch execution trace (ExecutionTraceObserver: `schema` + `nodes`), a memory timeline
(`profiler.export_memory_timeline`: raw `[timestamp, action, bytes, category]` tuples, or
`[times, sizes]`), a memory snapshot, or a JSON list / object of something else. A bare JSON array
of trace events (the Chrome trace viewer's "JSON Array Format") is a trace.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

__all__ = ["BARE_EVENT_SHARE", "describe_document", "is_event_array", "read_head", "sniff_file"]

# A bare JSON array is a trace when at least this share of its first items are trace events.
BARE_EVENT_SHARE = 0.5
_SAMPLE = 200


def _is_event(item: Any) -> bool:
    return isinstance(item, dict) and ("ph" in item or ("ts" in item and "name" in item))


def is_event_array(items: Sequence[Any]) -> bool:
    """True for the JSON Array Format (a list of trace events); an empty list is an empty trace."""
    if not items:
        return True
    sample = items[:_SAMPLE]
    events = sum(1 for it in sample if _is_event(it))
    return events > 0 and events >= BARE_EVENT_SHARE * len(sample)


def _numbers(item: Any, n: int) -> bool:
    return (
        isinstance(item, list)
        and len(item) == n
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in item)
    )


def _keys(obj: dict[str, Any], limit: int = 5) -> str:
    keys = sorted(str(k) for k in obj)[:limit]
    more = "..." if len(obj) > limit else ""
    return ", ".join(keys) + more


def describe_document(obj: Any) -> str:
    """What a parsed JSON document is, in words, when it is not a Kineto trace ("" when it is one)."""
    if isinstance(obj, dict):
        events = obj.get("traceEvents")
        if isinstance(events, list):
            return ""
        if "nodes" in obj and ("schema" in obj or "finish_ts" in obj):
            return (
                "a PyTorch execution trace (ExecutionTraceObserver: 'schema' and 'nodes'), not a Kineto trace"
            )
        if "segments" in obj or "device_traces" in obj:
            return "a PyTorch CUDA memory snapshot (torch.cuda.memory._snapshot), not a Kineto trace"
        if "traceEvents" in obj:
            return f"not a Kineto trace: 'traceEvents' is a {type(events).__name__}, not a list of events"
        if "schemaVersion" in obj or "deviceProperties" in obj:
            return "a Kineto trace header without a 'traceEvents' array (no events)"
        return f"a JSON object with keys {_keys(obj)} and no 'traceEvents': not a Kineto trace"
    if isinstance(obj, list):
        if is_event_array(obj):
            return ""
        sample = obj[:_SAMPLE]
        if all(_numbers(it, 4) for it in sample):
            return (
                "a PyTorch memory timeline (profiler.export_memory_timeline raw events: timestamp, action, "
                "bytes, category), not a Kineto trace"
            )
        if len(obj) == 2 and all(isinstance(it, list) for it in obj):
            return (
                "a PyTorch memory timeline (profiler.export_memory_timeline: times and sizes per category), "
                "not a Kineto trace"
            )
        dicts = [it for it in sample if isinstance(it, dict)]
        if dicts and len(dicts) == len(sample):
            keys: set[str] = set()
            for d in dicts[:20]:
                keys.update(str(k) for k in d)
            shown = ", ".join(sorted(keys)[:5]) + ("..." if len(keys) > 5 else "")
            return (
                f"a JSON list of {len(obj):,} objects that are not trace events (no 'ph'/'ts' fields; keys: "
                f"{shown}), not a Kineto trace"
            )
        kinds = sorted({type(it).__name__ for it in sample})
        return f"a JSON list of {len(obj):,} {'/'.join(kinds)} values, not a Kineto trace"
    return f"a JSON {type(obj).__name__}, not a Kineto trace"


# How much of a file `sniff_file` reads: the head to recognize a trace, the whole (up to the cap) to
# say what something else is.
_HEAD_BYTES = 64 * 1024
_WHOLE_CAP = 64 * 1024 * 1024


def read_head(path: Path, limit: int) -> bytes:
    """The first `limit` bytes of a file's content (gunzipped when gzip; empty for a corrupt gzip)."""
    with path.open("rb") as fh:
        magic = fh.read(2)
        fh.seek(0)
        if magic != b"\x1f\x8b":
            return fh.read(limit)
        try:
            with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                return gz.read(limit)
        except (OSError, EOFError, zlib.error):
            return b""


def sniff_file(path: Path) -> tuple[bool, str]:
    """(looks like a Kineto trace, what it is in words) for a file whose name is not *.json[.gz].

    A trace is recognized by its head (a `traceEvents` key or a leading trace event); anything else is
    parsed whole (up to 64 MB) and described (`describe_document`)."""
    try:
        head = read_head(path, _HEAD_BYTES)
    except OSError as exc:
        return False, f"cannot be read ({exc.strerror or type(exc).__name__})"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if b'"traceEvents"' in text or (text.startswith(b"[") and b'"ph"' in text[:2048]):
        return True, "a Kineto trace"
    if not text.startswith((b"{", b"[")):
        return False, "not JSON"
    try:
        data = read_head(path, _WHOLE_CAP + 1)
    except OSError as exc:
        return False, f"cannot be read ({exc.strerror or type(exc).__name__})"
    if len(data) > _WHOLE_CAP:
        return False, "a large JSON document that does not start like a Kineto trace"
    try:
        obj = orjson.loads(data.lstrip(b"\xef\xbb\xbf"))
    except orjson.JSONDecodeError:
        return False, "not valid JSON"
    what = describe_document(obj)
    return (not what), (what or "a Kineto trace")
