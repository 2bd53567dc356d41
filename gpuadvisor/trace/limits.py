"""How much of a trace file gpuadvisor reads before it refuses: the inflated text and the events.

A 6 MB `.json.gz` can inflate to gigabytes (a decompression bomb), and a small gzip can hold tens of
millions of tiny events; either would exhaust the memory of the machine long before an answer. The
reader (`gpuadvisor.trace._stream`, `gpuadvisor.trace.load`) stops at these limits with a one-line
error (exit 2) that names the option that lifts them.

Defaults, chosen for a 24 GB machine with room for the rest: 2 GB of decompressed text (a real Kineto
trace of that size is about 6-8 million events, 2-3 GB of memory once loaded) and 20 million events
(about 330 bytes of memory each once loaded: ~7 GB). `--max-trace-bytes` / `--max-events` of
analyze, report and diff, or the environment variables `GPUADVISOR_MAX_TRACE_BYTES` /
`GPUADVISOR_MAX_EVENTS` (the options set these, so that worker processes read the same limits),
change them; 0 means no limit.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from gpuadvisor.errors import InputError

DEFAULT_MAX_TRACE_BYTES = 2_000_000_000
DEFAULT_MAX_EVENTS = 20_000_000
ENV_MAX_TRACE_BYTES = "GPUADVISOR_MAX_TRACE_BYTES"
ENV_MAX_EVENTS = "GPUADVISOR_MAX_EVENTS"

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes of `2GB`, `512MiB`, `1500000000` (decimal K/M/G/T, binary KiB/MiB/GiB/TiB); ValueError
    for anything else. 0 is "no limit"."""
    m = _SIZE.match(text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a size (examples: 4GB, 512MiB, 3000000000; 0 for no limit)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_count(text: str) -> int:
    """An event count: `50000000`, `50M`, `5e7`; ValueError for anything else."""
    t = text.strip().replace("_", "").replace(",", "")
    scale = {"k": 10**3, "m": 10**6, "g": 10**9}.get(t[-1:].lower(), 1) if t else 1
    if scale != 1:
        t = t[:-1]
    try:
        value = float(t) * scale
    except ValueError:
        raise ValueError(f"{text!r} is not an event count (examples: 50000000, 50M; 0 for no limit)") from None
    if not (0 <= value < 1e15):
        raise ValueError(f"{text!r} is not an event count (examples: 50000000, 50M; 0 for no limit)")
    return int(value)


def human_bytes(n: int) -> str:
    """`2 GB`, `1.5 GB`, `512 MB` (decimal units, as the options take them)."""
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) or value >= 100 else f"{value:.3g} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class TraceLimits:
    """max_bytes: decompressed text; max_events: entries of traceEvents. 0: no limit."""

    max_bytes: int = DEFAULT_MAX_TRACE_BYTES
    max_events: int = DEFAULT_MAX_EVENTS

    @classmethod
    def from_env(cls) -> TraceLimits:
        """The limits in the environment (set by the CLI options), else the defaults. A value that
        does not parse is an InputError naming the variable."""
        out = cls()
        raw = os.environ.get(ENV_MAX_TRACE_BYTES, "").strip()
        if raw:
            try:
                out = cls(parse_size(raw), out.max_events)
            except ValueError as exc:
                raise InputError(f"{ENV_MAX_TRACE_BYTES}: {exc}") from None
        raw = os.environ.get(ENV_MAX_EVENTS, "").strip()
        if raw:
            try:
                out = cls(out.max_bytes, parse_count(raw))
            except ValueError as exc:
                raise InputError(f"{ENV_MAX_EVENTS}: {exc}") from None
        return out

    def bytes_exceeded(self, n: int) -> bool:
        return self.max_bytes > 0 and n > self.max_bytes

    def events_exceeded(self, n: int) -> bool:
        return self.max_events > 0 and n > self.max_events


class TraceTooLarge(InputError):
    """The trace is larger than a limit of `TraceLimits` (exit 2)."""


def too_many_bytes(path: Path, limit: int) -> TraceTooLarge:
    return TraceTooLarge(
        f"{path}: the trace inflates past {human_bytes(limit)}; pass --max-trace-bytes to read it "
        f"(e.g. --max-trace-bytes {human_bytes(limit * 2).replace(' ', '')}, if the machine has the memory)"
    )


def too_many_events(path: Path, limit: int) -> TraceTooLarge:
    return TraceTooLarge(
        f"{path}: the trace holds more than {limit:,} events; pass --max-events to read it "
        f"(about 330 bytes of memory per event)"
    )
