"""Telling a Kineto trace from the other JSON files a profiling session leaves behind.

`analyze` refuses a file that is not a Kineto trace with exit 2 and a message naming what the file
is: a PyTorch execution trace (ExecutionTraceObserver: `schema` + `nodes`), a memory timeline
(`profiler.export_memory_timeline`: raw `[timestamp, action, bytes, category]` tuples, or
`[times, sizes]`), a memory snapshot, or a JSON list / object of something else. A bare JSON array
of trace events (the Chrome trace viewer's "JSON Array Format") is a trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["BARE_EVENT_SHARE", "describe_document", "is_event_array"]

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
