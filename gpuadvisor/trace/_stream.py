"""Streaming reader of a Kineto trace: the `traceEvents` array in chunks of parsed events.

A 1 GB trace parsed with one `orjson.loads` holds the whole text plus every event as a Python dict
(several GB). This reader instead reads the file (gzip-decompressed on the fly) in blocks of
`chunk_bytes`, cuts each block after the last complete event and parses only that slice with orjson
(as `[` + slice + `]`), so at most one block of text and one block of dicts are alive at a time.

Why the cut is safe without a byte-by-byte scanner: the cut is made at a `}` followed by `,` and `{`,
and the slice is accepted only when `[` + slice + `]` parses as JSON. A cut inside a string leaves an
unterminated string and a cut inside a nested object leaves an unclosed brace, so both fail to parse
and the next earlier candidate is tried; a slice that parses is exactly a run of whole events.

Anything unusual (no top-level object, no `traceEvents` array, a truncated or invalid file, invalid
UTF-8) raises `StreamFallback`; the caller then uses the whole-document loader, which owns the
error messages and the salvage of damaged files.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, cast

# Each block's parsed dicts take several times its text. Measured on a 99 MB trace (2 cores, 3
# interleaved runs each, `load_trace`): 8 MiB blocks 3.9-4.4 s and 222 MB peak RSS, 2 MiB 3.3-3.8 s and
# 121 MB, 1 MiB 3.3-4.0 s and 119 MB (since the collector copies values into compact columns, a block's
# objects are freed whole; smaller blocks also stay in the CPU caches).
CHUNK_BYTES = 2 * 1024 * 1024
_KEY = b'"traceEvents"'
_OPEN = re.compile(rb'"traceEvents"\s*:\s*\[')
_NEXT = re.compile(rb"\s*,\s*\{")
_WS = b" \t\r\n"
_UTF8_BOM = b"\xef\xbb\xbf"
_MAX_TRIES = 32  # cut candidates tried per block before reading a bigger block


class StreamFallback(Exception):
    """The file cannot be streamed; load it as a whole document instead."""


class EventStream:
    """Iterate over `chunks()` (lists of parsed events); afterwards `top` holds every top-level key
    except `traceEvents`. `progress(done_bytes, total_bytes)` is called after each block (on-disk
    bytes, so compressed bytes for a .gz)."""

    def __init__(
        self,
        path: Path,
        *,
        chunk_bytes: int = CHUNK_BYTES,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.path = path
        self.chunk_bytes = max(1024, chunk_bytes)
        self.progress = progress
        self.top: dict[str, Any] = {}

    def chunks(self) -> Iterator[list[Any]]:
        import orjson

        try:
            raw = self.path.open("rb")
        except OSError as exc:
            raise StreamFallback(str(exc)) from None
        with raw:
            total = _size(raw)
            magic = raw.read(2)
            raw.seek(0)
            reader = cast(IO[bytes], raw)
            if magic == b"\x1f\x8b":
                reader = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))
            try:
                yield from self._chunks(reader, raw, total, orjson)
            except (OSError, EOFError, zlib.error, orjson.JSONDecodeError) as exc:
                # truncated gzip, corrupt data, invalid UTF-8, truncated JSON ...
                raise StreamFallback(str(exc)) from None

    def _read(self, reader: IO[bytes], raw: IO[bytes], total: int) -> bytes:
        block = reader.read(self.chunk_bytes)
        if self.progress is not None and total > 0:
            self.progress(min(raw.tell(), total), total)
        return block

    def _chunks(self, reader: IO[bytes], raw: IO[bytes], total: int, orjson: Any) -> Iterator[list[Any]]:
        buf = self._read(reader, raw, total)
        eof = not buf
        if buf.startswith(_UTF8_BOM):
            buf = buf[len(_UTF8_BOM) :]  # a byte-order mark before the JSON (UTF-16/32 ones fall back)
        if not buf.lstrip(_WS).startswith(b"{"):
            raise StreamFallback("not a JSON object")
        # The header: everything before "traceEvents": [ (metadata keys may also follow the array).
        while True:
            m = _OPEN.search(buf)
            if m is not None:
                break
            if eof or len(buf) > 4 * self.chunk_bytes:
                raise StreamFallback("no traceEvents array")
            more = self._read(reader, raw, total)
            eof = not more
            buf += more
        head = orjson.loads(buf[: m.start()] + _KEY + b":[]}")
        if not isinstance(head, dict):
            raise StreamFallback("top level is not an object")
        self.top = {k: v for k, v in head.items() if k != "traceEvents"}
        buf = buf[m.end() :]
        while not eof:
            more = self._read(reader, raw, total)
            if not more:
                eof = True
                break
            buf += more
            if len(buf) < self.chunk_bytes:
                continue
            events, rest = _cut(buf, orjson)
            if events is None:
                continue  # no clean cut in this block (one huge event): read on
            buf = rest
            yield events
        tail = orjson.loads(b'{"traceEvents":[' + buf)
        if not isinstance(tail, dict) or not isinstance(tail.get("traceEvents"), list):
            raise StreamFallback("malformed end of trace")
        for key, value in tail.items():
            if key != "traceEvents":
                self.top[key] = value
        yield tail["traceEvents"]


def _cut(buf: bytes, orjson: Any) -> tuple[list[Any] | None, bytes]:
    """Split `buf` after its last complete event: (parsed events, the rest after the comma)."""
    end = len(buf)
    for _ in range(_MAX_TRIES):
        pos = buf.rfind(b"}", 0, end)
        if pos < 0:
            break
        end = pos
        nxt = _NEXT.match(buf, pos + 1)
        if nxt is None:
            continue
        try:
            events = orjson.loads(b"[" + buf[: pos + 1] + b"]")
        except orjson.JSONDecodeError:
            continue
        if isinstance(events, list):
            # keep the '{' of the next event: the rest starts right after the comma
            return events, buf[nxt.end() - 1 :]
    return None, buf


def _size(fh: IO[bytes]) -> int:
    try:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(0)
        return size
    except OSError:
        return 0
