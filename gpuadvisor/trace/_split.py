"""Reading one large trace with two processes: this one reads the events before a boundary about
two thirds into the file, a worker process reads the ones after it.

Parsing and sorting the events (msgspec, then the collector's per-event pass) is most of the time
of `load_trace` on a large trace and runs on one core. With a second core, a worker process (`_split_worker.py`) started
with the same Python (`sys.executable`, importing only the loader, not pandas) skips to the split
point of the decompressed text (`MAIN_SHARE`), finds the first `}` `,` `{` after it, reports that
offset, and collects the events from there to the end with the same `Collector`; it sends each
block's columns back as it goes (length-prefixed pickles on its stdout, read by a thread here). This
process reads up to the boundary and checks it: the text before it, parsed from the real start of
the array, must end exactly after a whole event (a `}` inside a string or a nested value cannot
parse). The columns of both parts are then joined in file order, so the tables are the same as a
one-process read.

The split runs only where a second CPU is free now (the load average says so): on cores shared with
other work the worker would compete with this process and make the load slower.
`GPUADVISOR_LOAD_SPLIT=0` turns it off, `=1` asks for it whatever the load.

Anything unexpected (the worker cannot start, dies, reports no boundary or an error, stops sending
for `_STALL_S` seconds, or the boundary is not an event boundary) falls back to reading the rest in
this process: the split only ever costs time, never events.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuadvisor.trace.collect import Collector

# Below this much decompressed text a second process does not pay for its start (~0.1 s).
SPLIT_MIN_BYTES = 32 * 1024 * 1024
# The share of the text this process reads. The worker starts ~0.2 s later (a new interpreter and
# the loader's imports) and pickles its columns; this process imports pandas while it waits. On the
# 99 MB trace of benchmarks/scale (2 cores) shares of 0.5-0.65 gave load times within the machine's
# noise (1.5-2.1 s with the pandas import, against 2.0-2.6 s in one process); 0.55 balances the two
# start-up costs.
MAIN_SHARE = 0.55
ENV = "GPUADVISOR_LOAD_SPLIT"
_HEADER = struct.Struct("<Q")
_BOUNDARY_WAIT_S = 120.0  # the worker reports its boundary within a fraction of a second normally
# After the boundary the worker sends a block every few tens of milliseconds: this long without one
# (a worker stopped or stuck without dying), this process stops waiting and reads the rest itself.
_STALL_S = 60.0


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def second_cpu_free() -> bool:
    """Whether another CPU is idle now: the last minute's load average (this process counts one) leaves
    half a CPU or more. On shared cores the worker would only compete with this process (measured on 2
    cores with another job running, benchmarks/scale: the split read made `analyze` 15% slower)."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # not told: as before, a second CPU is taken to be free
        return True
    return load < usable_cpus() - 0.5


def text_size(path: Path) -> int | None:
    """Bytes of decompressed text: the file size, or a gzip file's ISIZE trailer (None when unknown:
    not a regular file, or a gzip whose size wrapped past 4 GiB)."""
    try:
        with path.open("rb") as fh:
            magic = fh.read(2)
            fh.seek(0, 2)
            size = fh.tell()
            if magic != b"\x1f\x8b":
                return size
            if size < 18:
                return None
            fh.seek(size - 4)
            isize = int.from_bytes(fh.read(4), "little")
    except OSError:
        return None
    return isize if isize >= size else None


def start(
    path: Path, col: Collector, chunk_bytes: int, *, while_waiting: Callable[[], object] | None = None
) -> SplitRead | None:
    """A started split read of `path` feeding `col`, or None when it does not pay or cannot run.
    while_waiting: work for this process once its part is read and the worker is still busy (the
    loader imports pandas there, which it needs next)."""
    setting = os.environ.get(ENV, "").strip().lower()
    if setting in ("0", "false", "no", "off"):
        return None
    forced = setting in ("1", "true", "yes", "on")  # asked for: whatever the load on the other CPU
    if usable_cpus() < 2 or not sys.executable or not (forced or second_cpu_free()):
        return None
    size = text_size(path)
    if size is None or size < SPLIT_MIN_BYTES:
        return None
    split = SplitRead(path, col, chunk_bytes, int(size * MAIN_SHARE))
    split.while_waiting = while_waiting
    return split if split.started else None


class SplitRead:
    """This process's side of the split (the `_stream.Handover` protocol)."""

    def __init__(self, path: Path, col: Collector, chunk_bytes: int, wait_offset: int) -> None:
        self.col = col
        self.wait_offset = wait_offset
        self.while_waiting: Callable[[], object] | None = None
        self.messages: list[bytes] = []
        self.worker_pos = 0  # on-disk bytes the worker has read past its start (for progress)
        self._start_pos: int | None = None
        self._boundary: int | None = None
        self._told = threading.Event()  # the worker reported its boundary, or ended
        self._ended = threading.Event()
        self._failed = False
        root = str(Path(__file__).resolve().parents[2])
        code = (
            "import sys; sys.path.insert(0, sys.argv[1]); "
            "from gpuadvisor.trace._split_worker import worker_main; worker_main(sys.argv[2:])"
        )
        argv = [sys.executable, "-c", code, root, str(path), str(wait_offset), str(chunk_bytes)]
        argv.append("1" if col.keep_python_functions else "0")
        try:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
        except OSError:
            self.proc = None
            return
        assert self.proc.stdout is not None
        self._reader = threading.Thread(target=self._read_all, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    @property
    def started(self) -> bool:
        return self.proc is not None

    # -- the reader thread ---------------------------------------------------------------------

    def _read_all(self, out: IO[bytes]) -> None:
        try:
            while True:
                head = out.read(_HEADER.size)
                if len(head) < _HEADER.size:
                    break
                (n,) = _HEADER.unpack(head)
                body = out.read(n)
                if len(body) < n:
                    break
                kind = body[:1]
                if kind == b"B":  # the boundary: small, decoded here
                    self._boundary, self._start_pos = pickle.loads(body[1:])
                    self._told.set()
                elif kind == b"C":  # a block's columns: decoded later, in this process's main thread
                    self.messages.append(body)
                    self.worker_pos = int.from_bytes(body[1:9], "little") - (self._start_pos or 0)
                elif kind in (b"D", b"F"):
                    self.messages.append(body)
                    break
        finally:
            self._ended.set()
            self._told.set()

    # -- Handover ------------------------------------------------------------------------------

    def boundary(self) -> int | None:
        if not self._told.wait(_BOUNDARY_WAIT_S):
            return None
        return self._boundary

    def finish(self) -> dict[str, Any] | None:
        assert self.proc is not None
        if self.while_waiting is not None and not self._ended.is_set():
            self.while_waiting()
        if not self._wait_for_end():
            self.close()
            return None  # the worker stalled: this process reads the rest
        self._reader.join()
        last = self.messages[-1] if self.messages else b""
        if last[:1] != b"D" or self.proc.wait() != 0:
            self.close()
            return None  # the worker failed: this process reads the rest
        col = self.col
        for body in self.messages[:-1]:
            col.append_columns(pickle.loads(body[9:]))
        self.messages.clear()
        counts, counters, top = pickle.loads(last[1:])
        col.add_counts(counts, counters)
        return dict(top)

    def _wait_for_end(self) -> bool:
        """Wait for the worker's last message while it keeps sending; False when nothing came for
        `_STALL_S` seconds."""
        seen, since = -1, time.monotonic()
        while not self._ended.wait(min(1.0, _STALL_S)):
            count = len(self.messages)
            if count != seen:
                seen, since = count, time.monotonic()
            elif time.monotonic() - since >= _STALL_S:
                return False
        return True

    def abandon(self) -> None:
        self.close()

    def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        # the reader thread sees the end of the killed worker's output before the pipe is closed
        if self._reader.is_alive():
            self._reader.join(10.0)
        if proc.stdout is not None:
            proc.stdout.close()
        self.messages.clear()
