"""Reading one large trace with two processes: this one reads the events before a boundary about
two thirds into the file, a worker process reads the ones after it.

Parsing and sorting the events (msgspec, then the collector's per-event pass) is most of the time
of `load_trace` on a large trace and runs on one core. With a second core, a worker process
(`_split_worker.py`) skips to the split point of the decompressed text (`MAIN_SHARE`,
`MAIN_SHARE_FORKED`), finds the first `}` `,` `{` after it, reports that offset, and collects the
events from there to the end with the same `Collector`; it sends each block's columns back as it goes
(length-prefixed pickles on a pipe, read by a thread here). This
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

How the worker starts: on Linux, from a process with no other Python thread, by `os.fork()` (a few
milliseconds: the child has the loader and numpy imported already, and writes to a pipe); elsewhere, or
with threads running (a caller's threads; the progress display is a callback, not a thread), as a new
interpreter with the same Python (`sys.executable`, importing only the loader, not pandas; ~0.2 s of
start-up on 2 cores).
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from gpuadvisor.trace.collect import Collector

# A function the forked child runs: (worker argv, the pipe's write end) -> never returns (os._exit).
ForkedMain = Callable[[list[str], int], NoReturn]
# Whether the worker may be forked (see the module docstring); tests turn it off to start an interpreter.
FORK = sys.platform == "linux" and hasattr(os, "fork")

# Below this much decompressed text a second process does not pay for its start (~0.1 s).
SPLIT_MIN_BYTES = 32 * 1024 * 1024
# The share of the text this process reads. The worker starts ~0.2 s later (a new interpreter and
# the loader's imports) and pickles its columns; this process imports pandas while it waits. On the
# 99 MB trace of benchmarks/scale (2 cores) shares of 0.5-0.65 gave load times within the machine's
# noise (1.5-2.1 s with the pandas import, against 2.0-2.6 s in one process); 0.55 balances the two
# start-up costs.
MAIN_SHARE = 0.55
# The same for a forked worker, which starts at once: see docs/performance.md ("fourth pass").
MAIN_SHARE_FORKED = 0.45
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
    path: Path,
    col: Collector,
    chunk_bytes: int,
    *,
    while_waiting: Callable[[], object] | None = None,
    forked_main: ForkedMain | None = None,
) -> SplitRead | None:
    """A started split read of `path` feeding `col`, or None when it does not pay or cannot run.
    while_waiting: work for this process once its part is read and the worker is still busy (the
    loader imports pandas there, which it needs next). forked_main: what a forked worker runs
    (`_split_worker.forked_main`; None: always a new interpreter)."""
    setting = os.environ.get(ENV, "").strip().lower()
    if setting in ("0", "false", "no", "off"):
        return None
    forced = setting in ("1", "true", "yes", "on")  # asked for: whatever the load on the other CPU
    if usable_cpus() < 2 or not sys.executable or not (forced or second_cpu_free()):
        return None
    size = text_size(path)
    if size is None or size < SPLIT_MIN_BYTES:
        return None
    fork = forked_main if FORK and threading.active_count() == 1 else None
    split = SplitRead(path, col, chunk_bytes, int(size * (MAIN_SHARE_FORKED if fork else MAIN_SHARE)), fork)
    split.while_waiting = while_waiting
    return split if split.started else None


class SplitRead:
    """This process's side of the split (the `_stream.Handover` protocol)."""

    def __init__(
        self, path: Path, col: Collector, chunk_bytes: int, wait_offset: int, forked_main: ForkedMain | None = None
    ) -> None:
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
        args = [str(path), str(wait_offset), str(chunk_bytes), "1" if col.keep_python_functions else "0"]
        self.proc: subprocess.Popen[bytes] | _Forked | None = None
        if forked_main is not None:
            self.proc = _Forked.start(forked_main, args)
        if self.proc is None:
            root = str(Path(__file__).resolve().parents[2])
            code = (
                "import sys; sys.path.insert(0, sys.argv[1]); "
                "from gpuadvisor.trace._split_worker import worker_main; worker_main(sys.argv[2:])"
            )
            try:
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", code, root, *args],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            except OSError:
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


class _Forked:
    """A forked worker, with the parts of `subprocess.Popen` that `SplitRead` uses."""

    def __init__(self, pid: int, stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None

    @classmethod
    def start(cls, forked_main: ForkedMain, args: list[str]) -> _Forked | None:
        """Fork a worker running `forked_main(args, write_fd)`; None when the fork fails."""
        import numpy  # noqa: F401  # lazy: the collector's first block imports it anyway; the child shares it

        read_fd, write_fd = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            return None
        if pid == 0:  # the child: never returns into the caller's code
            try:
                os.close(read_fd)
                forked_main(args, write_fd)
            finally:
                os._exit(1)
        os.close(write_fd)
        return cls(pid, os.fdopen(read_fd, "rb"))

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)
