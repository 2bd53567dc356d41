"""Reading a trace file's bytes, guarded: a missing or unreadable file is a one-line `InputError`, a
gzip that inflates past the limit is refused before it is inflated (`gpuadvisor.trace.limits`), a
truncated gzip gives up its complete part, and byte-order marks are dropped (UTF-16/32 text is
re-encoded as UTF-8). The whole-document path (`gpuadvisor.trace.salvage`) reads through here; the
streaming reader (`gpuadvisor.trace._stream`) applies the same limits block by block.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

from gpuadvisor.errors import InputError
from gpuadvisor.trace.limits import TraceLimits, too_many_bytes


class Damage:
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


# Blocks of decompressed text: one that is whitespace only is kept as one byte (whitespace between
# JSON tokens means nothing; inside a string, a hostile file loses a run of blanks, as in the stream).
_BLOCK = 4 << 20
_WS = b" \t\r\n"


def _compact(blocks: Iterator[bytes]) -> bytes:
    """The text of `blocks` with each block of whitespace alone reduced to one byte: a decompression
    bomb of whitespace costs its time, not its memory. Gathered in one growing buffer (the blocks are
    freed as they come; joining a list of them would hold the text twice)."""
    text = bytearray()
    for block in blocks:
        if block.isspace() and b"\x0b" not in block and b"\x0c" not in block:  # JSON whitespace only
            if text and text[-1] in _WS:
                continue
            block = b" "
        text += block
    # a bytearray reads as bytes everywhere the whole-document path uses it (find, slices, parsers)
    return cast(bytes, text)


def _inflated_blocks(raw: bytes, path: Path, warnings: list[str], damage: Damage | None) -> Iterator[bytes]:
    """The decompressed text of a (multi-member) gzip in blocks; a truncated stream gives up its complete
    part with a note, a corrupt one is an InputError."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data = raw
    produced = False
    while True:
        try:
            block = d.decompress(data, _BLOCK)
        except zlib.error:
            if produced:  # damage after some text: what came before is read, as of a truncated stream
                break
            raise InputError(f"{path}: corrupt gzip data, cannot be read") from None
        if block:
            produced = True
            yield block
        if d.eof:
            data = d.unused_data
            if not data:
                return
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # the next member
        else:
            data = d.unconsumed_tail
            if not data and not block:
                break
    rest = d.flush()
    if rest:
        yield rest
    warnings.append(f"The gzip stream of {path.name} is truncated; only its complete part was read.")
    if damage is not None:
        damage.truncated = True


def _file_blocks(fh: IO[bytes]) -> Iterator[bytes]:
    while block := fh.read(_BLOCK):
        yield block


def read_bytes(
    path: Path, warnings: list[str], damage: Damage | None = None, limits: TraceLimits | None = None
) -> bytes:
    """The decompressed text of a trace file, whitespace-only blocks reduced to one byte, a byte-order
    mark dropped."""
    if limits is None:
        limits = TraceLimits.from_env()
    try:
        with path.open("rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
            fh.seek(0)
            if gz:
                raw = fh.read()
                if limits.max_bytes > 0 and _inflates_past(raw, limits.max_bytes):
                    raise too_many_bytes(path, limits.max_bytes)
                text = _compact(_inflated_blocks(raw, path, warnings, damage))
            else:
                if limits.bytes_exceeded(os.fstat(fh.fileno()).st_size):
                    raise too_many_bytes(path, limits.max_bytes)
                text = _compact(_file_blocks(fh))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a trace file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    return _without_bom(text, path, warnings)


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
