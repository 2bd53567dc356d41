"""The trace's way out of the training process: one of the jobs of the capture session (issue 26).

`TraceExport` stops a profiler (finalizing CUPTI at the session's last stop), exports its trace as
torch writes it and gzips it into `trace/rankN.json.gz` through temporary files, with
`distributedInfo` added when torch left it out; it filters the `USDT:` lines torch's C++ writes to
fd 2 around a profiler's start and stop. It knows nothing of steps or of the window: the window
(`capture.window`) says which profiler to stop and which steps it holds.

The child's other files are named here too: the state hand-over (`STATE_FILE`, per rank
`rank_state_file`) and the per-rank names of environment.json / callsites.json (`rank_file_name`).
No torch import (the profiler object comes from the window; torch's version from the session).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuadvisor import rundir
from gpuadvisor.capture.experiment import Suspect
from gpuadvisor.capture.journal import CaptureJournal
from gpuadvisor.manifest import Degraded
from gpuadvisor.terminal import strip_controls

STATE_FILE = ".child_state.json"  # child -> parent hand-over, merged into manifest.json then removed
# child -> parent: torch could not be imported in the training process (a broken install); its one line
TORCH_IMPORT_FILE = ".torch_import_error"


def torch_import_error(run_dir: Path) -> str | None:
    """The child's one line when torch could not be imported in it (TORCH_IMPORT_FILE), else None."""
    try:
        line = (run_dir / TORCH_IMPORT_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return strip_controls(" ".join(line.split()))[:500] or "no message"


def rank_state_file(rank: int) -> str:
    """The hand-over file of one rank of a distributed capture (every rank, rank 0 included)."""
    return f".child_state.rank{rank}.json"


def rank_file_name(name: str, rank: int) -> str:
    """Per-rank name of a child file: rank 0 keeps the classic name (single-rank readers work),
    rank N writes `environment.rankN.json`, `callsites.rankN.json`."""
    if rank == 0:
        return name
    stem, dot, ext = name.partition(".")
    return f"{stem}.rank{rank}{dot}{ext}"


@contextlib.contextmanager
def _plain_path(path: Path) -> Iterator[str]:
    """`path` as a string Kineto handles: its export renames `<path>.tmp` to a copy of the path it
    rebuilt, with a newline dropped (a run directory named `run<LF>x` lost its trace: "Failed to
    rename ... No such file or directory"). A folder whose path holds a control character is reached
    through a descriptor of it, /proc/self/fd/N/NAME (Linux), where the name itself is ours."""
    text = str(path)
    if text.isprintable() or not os.path.isdir("/proc/self/fd"):
        yield text
        return
    fd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


class SkipExport(BaseException):
    """Second Ctrl-C during the export: give up the trace, keep the rest."""


def _cuda_version_at_least(version: str | None, major: int, minor: int) -> bool:
    try:
        parts = [int(p) for p in (version or "").split(".")[:2]]
    except ValueError:
        return False
    return len(parts) == 2 and (parts[0], parts[1]) >= (major, minor)


class TraceExport:
    """Stops profilers and writes the trace of one rank into `out`.

    `trace_written`: the trace file exists; `export_seconds`: how long the last export took;
    `cupti_teardown`: CUPTI is finalized after the window (ours or the user's setting)."""

    def __init__(self, out: Path, rank: int, world_size: int, journal: CaptureJournal) -> None:
        self.out = out
        self.rank = rank
        self.world_size = world_size
        self.journal = journal
        self.trace_written = False
        self.export_seconds: float | None = None
        self.cupti_teardown = False  # CUPTI finalized after the window (ours or the user's setting)
        self._manage_teardown = False  # we set TEARDOWN_CUPTI (the user did not)

    def dist_info_json(self) -> str:
        """The `distributedInfo` HTA needs, for a process that is not under torch.distributed."""
        return json.dumps({"backend": None, "rank": self.rank, "world_size": self.world_size})

    def request_cupti_teardown(self, torch: Any, off: frozenset[Suspect], cuda_available: bool) -> None:
        """Ask Kineto to finalize CUPTI when a trace stops, so that no CUPTI callback stays attached to
        the steps after the window (pytorch PR #146604 measured 10-20% on later steps without it).

        Kineto reads TEARDOWN_CUPTI at each stop. Not set when the user set it, when CUDA is older
        than 12.6 (teardown crashes next to CUDA graphs there; torch itself then sets it to 0), or in
        an experiment that disables it."""
        if Suspect.CUPTI_TEARDOWN in off or "TEARDOWN_CUPTI" in os.environ or not cuda_available:
            self.cupti_teardown = os.environ.get("TEARDOWN_CUPTI") == "1"
            return
        if not _cuda_version_at_least(getattr(torch.version, "cuda", None), 12, 6):
            return
        self._manage_teardown = True  # set per stop by stop()
        self.cupti_teardown = True

    @contextlib.contextmanager
    def native_stderr_filtered(self) -> Iterator[None]:
        """Drop the `USDT:... profiler_start/stop` lines torch's C++ writes to fd 2; keep the rest."""
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError, AttributeError):
            yield
            return
        path = self.out / f".stderr.{os.getpid()}.tmp"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            os.close(saved)
            yield
            return
        os.dup2(fd, 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            try:
                os.lseek(fd, 0, os.SEEK_SET)
                data = b""
                while chunk := os.read(fd, 65536):
                    data += chunk
            finally:
                os.close(fd)
                with contextlib.suppress(OSError):
                    path.unlink()
            kept = b"".join(line for line in data.splitlines(keepends=True) if not line.startswith(b"USDT:"))
            if kept:
                with contextlib.suppress(OSError):
                    os.write(2, kept)

    def stop(self, prof: Any, final: bool) -> None:
        """Stop a profiler. CUPTI is finalized only at the last stop of the session (`final`): a
        teardown followed by a re-initialization for the next recording is the path that crashed
        next to CUDA graphs, and it would cost a re-init for nothing."""
        if self._manage_teardown:
            os.environ["TEARDOWN_CUPTI"] = "1" if final else "0"  # Kineto reads it at each stop
        with self.native_stderr_filtered():
            prof.stop_trace()

    def export(self, prof: Any, first_step: int | None, last_step: int | None) -> None:
        """Export a stopped profiler's trace (steps `first_step`-`last_step`) into trace/rankN.json.gz
        (through temporary files)."""
        if not self.journal.is_origin():
            return
        t0 = time.monotonic()
        final = rundir.trace_path(self.out, self.rank)
        tmp_json = final.with_name(f".{final.name}.json.tmp")
        tmp_gz = final.with_name(f".{final.name}.tmp")
        # torch writes through its own `<path>.tmp` first (disk full left it behind)
        temporaries = (tmp_json, tmp_gz, tmp_json.with_name(tmp_json.name + ".tmp"))
        for p in temporaries:
            # a file or a symbolic link already there (left over, or planted) is replaced, never
            # written through: the trace must not land outside the run directory
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        try:
            with _plain_path(tmp_json) as where:
                prof.export_chrome_trace(where)
            self.gzip_with_dist_info(tmp_json, tmp_gz)
            os.replace(tmp_gz, final)
            self.trace_written = True
        except SkipExport:
            self.journal.degrade(Degraded.TRACE_NOT_EXPORTED, "the trace export was skipped by a second Ctrl-C.")
        except OSError as err:
            self.journal.degrade(
                Degraded.OUTPUT_INCOMPLETE,
                f"the trace could not be written ({err.strerror or err}); the trace of steps "
                f"{first_step}-{last_step} was lost.",
            )
            self.journal.degrade(Degraded.TRACE_NOT_EXPORTED, "")
        finally:
            for p in temporaries:
                with contextlib.suppress(OSError):
                    p.unlink()
            del prof
        self.export_seconds = round(time.monotonic() - t0, 3)
        self.journal.log(f"trace export took {self.export_seconds} s")

    def gzip_with_dist_info(self, src: Path, dst: Path) -> None:
        head_checked = False
        with open(src, "rb") as fin, gzip.open(dst, "wb", compresslevel=6) as fout:
            while chunk := fin.read(1 << 20):
                if not head_checked:
                    head_checked = True
                    if b'"distributedInfo"' not in chunk:
                        # Insert right after the opening brace; the rest stays byte-identical.
                        brace = chunk.index(b"{")
                        info = self.dist_info_json()
                        chunk = (
                            chunk[: brace + 1]
                            + f'\n  "distributedInfo": {info},'.encode()
                            + chunk[brace + 1 :]
                        )
                fout.write(chunk)
