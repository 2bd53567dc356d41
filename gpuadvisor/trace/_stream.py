"""Streaming reader of a Kineto trace: the `traceEvents` array in chunks of parsed events.

A 1 GB trace parsed with one `orjson.loads` holds the whole text plus every event as a Python dict
(several GB). This reader instead reads the file (gzip-decompressed on the fly) in blocks of
`chunk_bytes`, cuts each block after the last complete event and parses only that slice (as `[` +
slice + `]`, with orjson or the loader's decoder), so at most one block of text and one block of
parsed events are alive at a time.

Why the cut is safe without a byte-by-byte scanner: the cut is made at a `}` followed by `,` and `{`,
and the slice is accepted only when `[` + slice + `]` parses as JSON. A cut inside a string leaves an
unterminated string and a cut inside a nested object leaves an unclosed brace, so both fail to parse
and the next earlier candidate is tried; a slice that parses is exactly a run of whole events.

Anything unusual (no top-level object, no `traceEvents` array, a truncated or invalid file, invalid
UTF-8) raises `StreamFallback`; the caller then uses the whole-document loader, which owns the
error messages and the salvage of damaged files.

Bounded on any input (`gpuadvisor.trace.limits`): the decompressed text read is counted and the read
stops with `TraceTooLarge` past `TraceLimits.max_bytes`; for a gzip that could inflate past it, a
thread inflates the file ahead without parsing (zlib releases the GIL: a decompression bomb is told in
seconds, not after parsing gigabytes). Time stays linear while no complete event arrives: the text is
kept as a list of blocks and joined only when the buffer has doubled since the last failed cut, a
buffer of whitespace alone is dropped (whitespace between events means nothing), and a run of
whitespace at the end of an incomplete buffer is collapsed to one byte (outside a string it means
nothing; inside one, a hostile trace loses a run of blanks).
"""

from __future__ import annotations

import gzip
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol, cast

import orjson

from gpuadvisor.errors import InputError
from gpuadvisor.trace.limits import TraceLimits, too_many_bytes

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
# The longest text read without an event ending in it (or before the traceEvents array): a Kineto event
# is at most kilobytes (a cat of thousands of tensors), so this much is a decompression bomb (nested
# brackets, one endless string, number or object), refused before it is held whole.
MAX_EVENT_BYTES = 64 << 20
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_SPLIT_SEARCH = 64 * 1024 * 1024  # a split point with no event boundary this far after it: no split
_AFTER_BOUNDARY = 64  # bytes read past a handover boundary to see the comma and '{' after it
_WS_BYTES = (b" ", b"\t", b"\r", b"\n")
# deflate cannot compress better than about 1032:1: a gzip this many times smaller than the limit
# cannot inflate past it, and needs no look-ahead
_DEFLATE_MAX_RATIO = 1032


class StreamFallback(Exception):
    """The file cannot be streamed; load it as a whole document instead."""


class Handover(Protocol):
    """The other side of a split read (`gpuadvisor.trace._split`): another process reads the events
    after a boundary near `wait_offset` while this stream reads the ones before it."""

    wait_offset: int

    def boundary(self) -> int | None:
        """The offset (in the decompressed text) where this stream stops: just after an event's `}`.
        Waits for the other reader to find it; None: no split, read everything here."""
        ...

    def finish(self) -> dict[str, Any] | None:
        """Called once this stream has read every event before the boundary: the top-level keys after
        the array when the other reader delivered the rest; None: read on from the boundary here."""
        ...

    def abandon(self) -> None:
        """The split is not used (the boundary was not an event boundary, or the file ended first)."""
        ...


class EventStream:
    """Iterate over `chunks()` (lists of parsed events); afterwards `top` holds every top-level key
    except `traceEvents`. `progress(done_bytes, total_bytes)` is called after each block (on-disk
    bytes, so compressed bytes for a .gz).

    decode: parses `[` + whole events + `]` (default orjson.loads); it must raise
    orjson.JSONDecodeError for invalid JSON. The last block's events are always orjson's dicts.
    repair: the text of the last block again, for the errors `decode` repairs (lone surrogates).
    handover: read only the events before a boundary that another reader chose (see `Handover`).
    start_at: read only the events that begin after the first event boundary at or after this offset
    of the decompressed text; `on_boundary(offset)` is told that boundary first (the worker side).
    limits: past `limits.max_bytes` of decompressed text, `TraceTooLarge` (default: no limit)."""

    def __init__(
        self,
        path: Path,
        *,
        chunk_bytes: int = CHUNK_BYTES,
        progress: Callable[[int, int], None] | None = None,
        handover: Handover | None = None,
        start_at: int | None = None,
        on_boundary: Callable[[int], None] | None = None,
        decode: Callable[[bytes], list[Any]] | None = None,
        limits: TraceLimits | None = None,
        repair: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self.path = path
        self.chunk_bytes = max(1024, chunk_bytes)
        self.progress = progress
        self.handover = handover
        self.start_at = start_at
        self.on_boundary = on_boundary
        self.decode = decode
        self.repair = repair
        self.limits = limits or TraceLimits(0, 0)
        self.inflated = 0  # bytes of decompressed text read so far
        self._ahead: _InflatedSize | None = None
        self.top: dict[str, Any] = {}

    def chunks(self) -> Iterator[list[Any]]:
        decode = self.decode or orjson.loads
        try:
            raw = self.path.open("rb")
        except OSError as exc:
            raise StreamFallback(str(exc)) from None
        with raw:
            total = _size(raw)
            magic = raw.read(2)
            raw.seek(0)
            reader = cast(IO[bytes], raw)
            limit = self.limits.max_bytes
            if magic == b"\x1f\x8b":
                reader = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))
                if limit > 0 and total * _DEFLATE_MAX_RATIO > limit and self.start_at is None:
                    self._ahead = _InflatedSize(self.path, limit)
            elif self.limits.bytes_exceeded(total):
                raise too_many_bytes(self.path, limit)
            try:
                if self.start_at is not None:
                    yield from self._chunks_from(reader, raw, total, decode, self.start_at)
                else:
                    yield from self._chunks(reader, raw, total, decode)
            except (OSError, EOFError, zlib.error, orjson.JSONDecodeError) as exc:
                # truncated gzip, corrupt data, invalid UTF-8, truncated JSON ...
                raise StreamFallback(str(exc)) from None
            finally:
                if self._ahead is not None:
                    self._ahead.stop()

    def _count(self, n: int) -> None:
        """Account for `n` more bytes of decompressed text; TraceTooLarge past the limit (or when the
        look-ahead found the whole file inflates past it)."""
        self.inflated += n
        ahead = self._ahead
        if ahead is not None and not ahead.over and ahead.likely_over():
            # The file inflates faster than the limit allows: let the look-ahead finish alone (it is
            # far faster than parsing) instead of sharing the CPU with the parser.
            ahead.wait()
        if self.limits.bytes_exceeded(self.inflated) or (ahead is not None and ahead.over):
            raise too_many_bytes(self.path, self.limits.max_bytes)

    def _read(self, reader: IO[bytes], raw: IO[bytes], total: int) -> bytes:
        block = reader.read(self.chunk_bytes)
        self._count(len(block))
        if self.progress is not None and total > 0:
            self.progress(min(raw.tell(), total), total)
        return block

    def _chunks(self, reader: IO[bytes], raw: IO[bytes], total: int, decode: Any) -> Iterator[list[Any]]:
        buf = self._read(reader, raw, total)
        base = 0  # offset of buf[0] in the decompressed text
        eof = not buf
        if buf.startswith(_UTF8_BOM):
            buf = buf[len(_UTF8_BOM) :]  # a byte-order mark before the JSON (UTF-16/32 ones fall back)
            base = len(_UTF8_BOM)
        while not eof and is_blank(buf):  # leading whitespace: dropped block by block
            base += len(buf)
            buf = self._read(reader, raw, total)
            eof = not buf
        if is_blank(buf):
            raise InputError(f"{self.path}: empty file, not a trace")
        if not buf.lstrip(_WS).startswith(b"{"):
            raise StreamFallback("not a JSON object")
        # The header: everything before "traceEvents": [ (metadata keys may also follow the array).
        while True:
            m = _OPEN.search(buf)
            if m is not None:
                break
            if len(buf) > MAX_EVENT_BYTES:
                raise InputError(
                    f"{self.path}: no traceEvents array in the first {MAX_EVENT_BYTES >> 20} MiB of its text "
                    "(a Kineto trace's header is a few KB): not a trace gpuadvisor reads"
                )
            if eof:
                raise StreamFallback("no traceEvents array")
            more = self._read(reader, raw, total)
            eof = not more
            buf += more
        head = orjson.loads(buf[: m.start()] + _KEY + b":[]}")
        if not isinstance(head, dict):
            raise StreamFallback("top level is not an object")
        self.top = {k: v for k, v in head.items() if k != "traceEvents"}
        yield from self._events(reader, raw, total, decode, buf[m.end() :], base + m.end(), eof)

    def _chunks_from(
        self, reader: IO[bytes], raw: IO[bytes], total: int, decode: Any, start: int
    ) -> Iterator[list[Any]]:
        """The worker side of a split: skip to `start`, find the first event boundary after it, tell
        `on_boundary`, then read the events from there to the end like `_chunks`."""
        base = 0
        while True:  # skip whole blocks before `start` without keeping them
            skip = min(start - base, 16 * self.chunk_bytes)
            if skip <= 0:
                break
            got = reader.read(skip)
            if not got:
                raise StreamFallback("the file ends before the split point")
            self._count(len(got))
            base += len(got)
        buf = b""
        eof = False
        searched = 0  # no boundary starts before this offset of buf
        while True:
            m = _BOUNDARY.search(buf, searched)
            if m is not None:
                break
            if eof or len(buf) > _SPLIT_SEARCH:
                raise StreamFallback("no event boundary after the split point")
            last = buf.rfind(b"}", searched)
            searched = last if last >= 0 else len(buf)
            more = self._read(reader, raw, total)
            eof = not more
            buf += more
        if self.on_boundary is not None:
            self.on_boundary(base + m.start() + 1)
        begin = m.end() - 1  # the next event's '{'
        yield from self._events(reader, raw, total, decode, buf[begin:], base + begin, eof)

    def _events(
        self, reader: IO[bytes], raw: IO[bytes], total: int, decode: Any, buf: bytes, base: int, eof: bool
    ) -> Iterator[list[Any]]:
        """The events of the array from `buf` (text right after `[` or after an event's comma; `base`
        is its offset) to the end of the file; the keys after the array go to `top`."""
        handover = self.handover
        stop: int | None = None  # where this stream hands over (known once the text reaches wait_offset)
        # The text after `base`: blocks joined only when a cut is tried, and a cut is tried only once
        # the text has doubled since the last failed one (linear time however long no event ends).
        pieces = [buf]
        size = len(buf)
        need = self.chunk_bytes
        while not eof:
            more = self._read(reader, raw, total)
            if not more:
                eof = True
                break
            if is_blank(more):  # a block of whitespace: nothing to keep but one separating byte
                if size == 0:
                    base += len(more)  # before the next event
                    continue
                if handover is not None:  # the text kept no longer matches the file's offsets
                    handover.abandon()
                    handover, stop = None, None
                if pieces[-1][-1:] in _WS_BYTES:
                    continue
                more = b" "
            pieces.append(more)
            size += len(more)
            if size < need:
                continue
            buf = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces = [buf]
            end = base + size
            if handover is not None and stop is None and end > handover.wait_offset:
                stop = handover.boundary()
                if stop is None or stop <= base:
                    handover.abandon()
                    handover, stop = None, None
            if handover is not None and stop is not None and end > stop:
                if end < stop + _AFTER_BOUNDARY:
                    continue  # read the separator after the boundary too
                events, after = _handover_cut(buf, stop - base, decode)
                if events is None:
                    handover.abandon()  # not an event boundary: read everything here
                    handover, stop = None, None
                else:
                    yield events
                    after_array = handover.finish()
                    if after_array is not None:
                        self.top.update(after_array)
                        return
                    handover, stop = None, None  # the other reader failed: read on from the boundary
                    base, buf = base + len(buf) - len(after), after
                    pieces, size, need = [buf], len(buf), self.chunk_bytes
                    continue
            events, rest = _cut(buf, decode)
            if events is None:  # no clean cut in this text (one huge event): read on
                if size > MAX_EVENT_BYTES:
                    raise InputError(
                        f"{self.path}: holds a single event of more than {MAX_EVENT_BYTES >> 20} MiB of text (a "
                        "profiler's events are at most kilobytes): not a trace gpuadvisor reads"
                    )
                need = 2 * size
                continue
            base += size - len(rest)
            pieces, size, need = [rest], len(rest), self.chunk_bytes
            yield events
        buf = b"".join(pieces)
        if handover is not None:
            handover.abandon()  # the file ended before the boundary: everything was read here
        # the keys after the array: any JSON
        try:
            tail = orjson.loads(b'{"traceEvents":[' + buf)
        except orjson.JSONDecodeError as exc:
            if self.repair is None or "surrogate" not in str(exc):
                raise
            tail = orjson.loads(b'{"traceEvents":[' + self.repair(buf))
        if not isinstance(tail, dict) or not isinstance(tail.get("traceEvents"), list):
            raise StreamFallback("malformed end of trace")
        for key, value in tail.items():
            if key != "traceEvents":
                self.top[key] = value
        yield tail["traceEvents"]


def is_blank(text: bytes) -> bool:
    """Whether `text` is JSON whitespace only (empty too). `isspace` is fast but also takes vertical
    tab and form feed, which JSON does not."""
    return not text or (text.isspace() and b"\x0b" not in text and b"\x0c" not in text)


def _handover_cut(buf: bytes, at: int, decode: Any) -> tuple[list[Any] | None, bytes]:
    """The events of `buf[:at]` and the text of the next event on, when `at` is an event boundary:
    `[` + buf[:at] + `]` parses as a list and a comma and `{` follow. A boundary inside a string or a
    nested value cannot parse, since this text starts at a true boundary of the array."""
    nxt = _NEXT.match(buf, at)
    if at <= 0 or buf[at - 1 : at] != b"}" or nxt is None:
        return None, buf

    try:
        events = decode(_bracketed(buf, at))
    except orjson.JSONDecodeError:
        return None, buf
    if not isinstance(events, list):
        return None, buf
    return events, buf[nxt.end() - 1 :]


def _bracketed(buf: bytes, end: int) -> bytes:
    """`[` + buf[:end] + `]` in one copy (`+` made three of a 2 MiB block, each in fresh pages: ~2 ms
    a block, ~0.1 s of CPU on a 100 MB trace)."""
    return b"".join((b"[", memoryview(buf)[:end], b"]"))


def _cut(buf: bytes, decode: Any) -> tuple[list[Any] | None, bytes]:
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
            events = decode(_bracketed(buf, pos + 1))
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


class _InflatedSize:
    """A thread that inflates a gzip file ahead of the parser, counting bytes without keeping them
    (bounded memory), and sets `over` once the text passes `limit`. Multi-member gzips are followed;
    a damaged stream ends the count (the reader reports the damage)."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.over = False
        self.inflated = 0
        self.consumed = 0  # compressed bytes read
        try:
            self.size = path.stat().st_size
        except OSError:
            self.size = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuadvisor-inflated-size", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def wait(self) -> None:
        self._thread.join()

    def likely_over(self) -> bool:
        """Whether the ratio inflated so far, applied to the whole file, passes the limit (only a
        guess, so the reader waits for the count instead of refusing on it)."""
        return self.consumed >= (4 << 20) and self.inflated / self.consumed * self.size > self.limit

    def _run(self) -> None:
        try:
            with self.path.open("rb") as fh:
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                while not self._stop.is_set():
                    data = fh.read(1 << 20)
                    if not data:
                        return
                    self.consumed += len(data)
                    while data and not self._stop.is_set():
                        self.inflated += len(d.decompress(data, 16 << 20))
                        if self.inflated > self.limit:
                            self.over = True
                            return
                        if d.eof:  # the next member of a multi-member gzip, if any
                            data = d.unused_data
                            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                        else:
                            data = d.unconsumed_tail
        except (OSError, zlib.error, EOFError):
            return
