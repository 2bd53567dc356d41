"""The worker process of a split read (gpuadvisor/trace/_split.py): forked, or started as a new
interpreter, it collects the events after the first boundary at or after its start offset with the loader's own
`Collector` and sends their columns on a pipe (a new interpreter's stdout). A module of its own so that the loader imports
the splitter and the worker imports the loader, never both ways.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import sys
from pathlib import Path
from typing import IO, NoReturn

from gpuadvisor.trace._split import _HEADER
from gpuadvisor.trace._stream import EventStream
from gpuadvisor.trace.collect import Collector
from gpuadvisor.trace.limits import TraceLimits, too_many_events

# -- the worker process ----------------------------------------------------------------------------


def worker_main(argv: list[str]) -> None:
    """A new interpreter's worker: collect the events after the first boundary at or after `start`
    and send them on stdout."""
    if not work(argv, sys.stdout.buffer):
        raise SystemExit(1) from None


def forked_main(argv: list[str], fd: int) -> NoReturn:
    """A forked worker (`_split.ForkedMain`): the same, sent to the pipe `fd`; ends the process."""
    ok = False
    try:
        with os.fdopen(fd, "wb") as out:
            ok = work(argv, out)
    finally:
        os._exit(0 if ok else 1)


def work(argv: list[str], out: IO[bytes]) -> bool:
    """Collect and send (argv: path, start offset, block bytes, keep python functions "1"/"0");
    False after a failure, which was sent as such when the parent could still be told."""
    path, start_at, chunk_bytes, keep_py = Path(argv[0]), int(argv[1]), int(argv[2]), argv[3] == "1"
    gc.disable()

    def send(kind: bytes, payload: bytes) -> None:
        out.write(_HEADER.pack(len(payload) + 1) + kind + payload)
        out.flush()

    pos = [0]

    def progress(done: int, _total: int) -> None:
        pos[0] = done

    try:
        limits = TraceLimits.from_env()  # the parent's limits: the options set the environment
        col = Collector(keep_py)
        stream = EventStream(
            path,
            chunk_bytes=chunk_bytes,
            progress=progress,
            start_at=start_at,
            decode=col.decode,
            repair=col.repair,
            on_boundary=lambda b: send(b"B", pickle.dumps((b, pos[0]))),
            limits=limits,
        )
        for events in stream.chunks():
            if limits.events_exceeded(col.total + len(events)):
                raise too_many_events(path, limits.max_events)  # the parent then stops at its own count
            col.feed(events)
            del events
            tables = col.take_columns()
            send(b"C", pos[0].to_bytes(8, "little") + pickle.dumps(tables, protocol=pickle.HIGHEST_PROTOCOL))
        counters = [getattr(col, name) for name in col.COUNTERS]
        send(b"D", pickle.dumps((col.counts, counters, stream.top), protocol=pickle.HIGHEST_PROTOCOL))
    except BaseException as exc:  # any failure: the parent reads the rest itself
        with contextlib.suppress(Exception):  # the parent may be gone
            send(b"F", pickle.dumps(f"{type(exc).__name__}: {exc}"))
        return False
    return True
