"""Where a command may write its output: `-o FILE` of analyze, report, diff and verify, and a report's
default path. Outputs never destroy inputs.

`check_output(path, inputs)` runs before any analysis and refuses (UsageError, exit 2):
- the input itself (`analyze t.json.gz -o t.json.gz`, also through a link or a second hard link);
- a file of an input folder of traces (or a new trace-named file there), and any file of a run
  directory's recording (`report RUN -o RUN/manifest.json`, `-o RUN/trace/rank0.json.gz`, a recorded
  name such as `environment.json` even where it is missing): of a run directory's existing files,
  only the derived outputs at its top (findings.json, report.html, verify.json) may be written;
- anything that is not a regular file: a folder, a device node (`/dev/full`), a FIFO, a socket, and
  every symbolic link (`-o out.txt` linked to `/dev/stdout`: leave -o out to write to stdout);
- a folder that cannot hold it (`folder_refusal`: missing, a file on the way, not writable; also
  what the commands' -o option checks as it is read).

The write itself (`gpuadvisor._atomic.write_text_atomic`) goes to a new temporary file in the target
folder and is renamed only over a regular file (or no file).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from gpuadvisor import rundir
from gpuadvisor.errors import UsageError

__all__ = ["DERIVED", "check_output", "folder_refusal", "refusal"]

# The files of a run directory gpuadvisor derives from the recording (written again at will).
DERIVED = frozenset({rundir.FINDINGS, rundir.REPORT, rundir.VERIFY})


def check_output(path: Path, inputs: Sequence[Path], *, option: str = "-o") -> None:
    """UsageError (exit 2) when `path` may not be written (see the module docstring)."""
    why = refusal(Path(path), [Path(p) for p in inputs])
    if why is not None:
        raise UsageError(f"{option} {path}: {why}")


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


_TRACE_NAMES = (".json", ".json.gz", ".gz")
# names a run directory's reader takes as part of the recording (rank N > 0: environment.rankN.json...)
_RECORDED_PREFIXES = ("manifest.", "environment.", "callsites.", "nvml.", "gpuadvisor.log", "trace", ".")


def _recorded(path: Path) -> str | None:
    """Why `path` (resolved) is part of a run directory's recording, or would join it: an existing
    file of it other than the derived outputs, a recorded name (manifest.json, environment.json,
    nvml.csv.gz, ... even where missing), or anything under RUN/trace/ that exists or is named like a
    trace."""
    parent = path.parent
    if (
        rundir.is_run_dir(parent)
        and path.name not in DERIVED
        and (path.exists() or path.name.startswith(_RECORDED_PREFIXES))
    ):
        return (
            f"is part of the recording in the run directory {parent} (of its files only "
            f"{', '.join(sorted(DERIVED))} are outputs)"
        )
    if (
        parent.name == rundir.TRACE_DIR
        and rundir.is_run_dir(parent.parent)
        and (path.exists() or path.name.endswith(_TRACE_NAMES))
    ):
        return f"is in the trace folder of the run directory {parent.parent}: part of the recording"
    return None


def refusal(path: Path, inputs: Sequence[Path]) -> str | None:
    """Why `path` may not be written, or None."""
    try:
        st: os.stat_result | None = path.lstat()
    except OSError:
        st = None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            return (
                f"is a symbolic link (to {os.readlink(path)}), not a regular file: name the file itself "
                "(or leave -o out to write to stdout)"
            )
        kind = _kind(st.st_mode)
        if kind is not None:
            return f"is {kind}, not a regular file: outputs are written only as regular files"
    real = Path(os.path.realpath(path))
    for given in inputs:
        source = Path(os.path.realpath(given))
        if real == source or (st is not None and _same_file(path, given)):
            return f"is the input {given}: the output would destroy it"
        if (
            source.is_dir()
            and source in real.parents
            and not rundir.is_run_dir(source)
            and (real.exists() or real.name.endswith(_TRACE_NAMES))
        ):
            return f"lies inside the input folder {given}: outputs never overwrite or add to an input"
    recorded = _recorded(real)
    if recorded is not None:
        return recorded
    return folder_refusal(path)


def folder_refusal(path: Path) -> str | None:
    """Why the folder of `path` cannot hold it (missing, a file on the way, not writable), or None."""
    folder = Path(path).parent
    if not folder.is_dir():
        blocker = next((p for p in Path(path).parents if p.exists()), None)
        if blocker is not None and not blocker.is_dir():
            return f"{blocker} is a file, not a folder"
        return f"the folder {folder} does not exist"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
