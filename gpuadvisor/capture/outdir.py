"""The run directory `gpuadvisor profile` writes into: made, locked for the run (a second run into it is
refused), and cleared of a previous run with --force, and only of that: a folder that holds other files
(a project with its own manifest.json or report.html) is never a previous run (issue 39)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from gpuadvisor import rundir
from gpuadvisor.capture._io import read_json
from gpuadvisor.errors import OutputExistsError, UsageError

__all__ = [
    "LOCK_FILE",
    "clear_out_dir",
    "held_out_dirs",
    "prepare_out_dir",
    "release_out_dir",
    "remove_stray_temporaries",
]


LOCK_FILE = ".gpuadvisor.lock"
_LOCKS: dict[Path, Any] = {}


def _lock_out_dir(out: Path) -> None:
    """An exclusive lock on `out` for this run (flock on OUT/.gpuadvisor.lock, held until the run ends):
    a second `gpuadvisor profile` into the same folder is refused instead of interleaving its files."""
    # lazy: fcntl is POSIX-only, and `import gpuadvisor.api` loads this module on any OS
    import fcntl

    try:
        out.mkdir(parents=True, exist_ok=True)
        fh = open(out / LOCK_FILE, "a+")  # noqa: SIM115 - held open for the whole run
    except OSError as err:  # under a file, in /proc, read-only: a usage error before anything runs
        raise UsageError(f"output directory {out} is not writable: {err.strerror or err}") from err
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        holder = fh.read().strip()
        fh.close()
        raise UsageError(
            f"another gpuadvisor run is writing to {out}" + (f" (pid {holder})" if holder else "")
            + ": wait for it to end or choose another -o"
        ) from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    _LOCKS[out.resolve()] = fh


def remove_stray_temporaries(run_dir: Path) -> None:
    """Temporary files a killed training process left (a third Ctrl-C kills it mid-write): its native
    stderr capture, half-written trace temporaries. The child has ended: nothing writes them now."""
    for pattern in (".stderr.*.tmp", f"{rundir.TRACE_DIR}/.*.tmp", ".*.json.*.tmp"):
        for f in run_dir.glob(pattern):
            with contextlib.suppress(OSError):
                f.unlink()


def release_out_dir(out: Path) -> None:
    """End this process's lock on `out` (taken by prepare_out_dir) and remove the lock file."""
    fh = _LOCKS.pop(out.resolve(), None)
    if fh is None:
        return
    with contextlib.suppress(OSError):
        (out / LOCK_FILE).unlink()
    with contextlib.suppress(OSError):
        fh.close()


def prepare_out_dir(out: Path, force: bool) -> None:
    """Create and lock `out`; refuse an existing run (or any non-empty folder) without `force`; check
    it is writable."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"output path exists and is not a directory: {out}")
    if hasattr(os, "fork"):  # POSIX: flock
        _lock_out_dir(out)
    try:
        clear_out_dir(out, force)
    except BaseException:
        release_out_dir(out)
        raise


def _written_by_gpuadvisor(out: Path) -> bool:
    """Whether `out` holds a run directory gpuadvisor wrote (its manifest.json says so): a folder with a
    manifest.json of another kind (a web app's, a project's) is not a previous run."""
    doc = read_json(out / rundir.MANIFEST) if rundir.is_run_dir(out) else None
    tool = doc.get("tool") if isinstance(doc, dict) else None
    return isinstance(tool, dict) and tool.get("name") == "gpuadvisor"


def clear_out_dir(out: Path, force: bool) -> None:
    """Refuse a folder that holds anything but a previous run (dot files aside), and a previous run
    without `force`; with it, remove that run's files, and only those."""
    if out.is_dir() and any(p.name != LOCK_FILE and not p.name.startswith(".") for p in out.iterdir()):
        if not _written_by_gpuadvisor(out):
            raise OutputExistsError(out, "no gpuadvisor run (no manifest.json written by gpuadvisor)", ours=False)
        if not force:
            raise OutputExistsError(out, "a previous run")
        for name in (
            rundir.MANIFEST,
            rundir.ENVIRONMENT,
            rundir.CALLSITES,
            rundir.NVML,
            rundir.LOG,
            rundir.FINDINGS,
            rundir.REPORT,
        ):
            with contextlib.suppress(FileNotFoundError):
                (out / name).unlink()
        for pattern in ("environment.rank*.json", "callsites.rank*.json", ".child_state.rank*.json"):
            for f in out.glob(pattern):
                f.unlink()
        tdir = out / rundir.TRACE_DIR
        if tdir.is_dir():
            for f in tdir.glob("rank*.json.gz"):
                f.unlink()
    try:
        (out / rundir.TRACE_DIR).mkdir(parents=True, exist_ok=True)
        probe = out / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as err:
        raise UsageError(f"output directory {out} is not writable: {err.strerror or err}") from err


def held_out_dirs() -> set[Path]:
    """The output folders this process holds locked (resolved)."""
    return set(_LOCKS)
