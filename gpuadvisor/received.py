"""A run directory is data: the files a reader may open, and how much of them it reads.

Run directories travel (bug reports, CI artifacts, a colleague's recording), so nothing in one decides
which files outside it are read: every file of a run directory that gpuadvisor reads (manifest.json,
environment.json, callsites.json, nvml.csv.gz, verify.json, findings.json, the traces the manifest
lists) goes through `run_file`, which gives its path only when it lies inside the run directory once
every symbolic link is followed, is named by a relative path without `..`, is a regular file (no FIFO,
device node or folder) and is no larger than the reader's limit. Anything else is left out, with the
reason, and the caller turns the reason into a note. The numbers inside those files are checked once,
where the run directory is loaded (`gpuadvisor.runcheck`). docs/run-directory.md, "A run directory
someone sent you", is the policy in words.

No torch, pandas or numpy here: `gpuadvisor --help` and the capture's parent import it.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["MAX_JSON_BYTES", "MAX_NVML_BYTES", "inside", "read_json_file", "run_file", "trace_entry"]

# The largest JSON document of a run directory read (manifest.json, environment.json, callsites.json,
# verify.json, findings.json): the capture writes at most a few MB (20,000 step times, 2,000 step
# events, call sites of user code); a larger one was not written by it.
MAX_JSON_BYTES = 64 << 20
# nvml.csv.gz, compressed: 10 samples a second of 8 GPUs for a day is about 60 MB of gzip.
MAX_NVML_BYTES = 256 << 20


def inside(root: Path, path: Path) -> bool:
    """Whether `path`, with every symbolic link followed, lies inside `root` (also resolved)."""
    try:
        real_root = Path(os.path.realpath(root))
        real = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return False
    return real == real_root or real_root in real.parents


def trace_entry(run_dir: Path, entry: str) -> tuple[Path | None, str | None]:
    """A manifest `traces` entry as a path of the run directory, or (None, why it is refused): an
    absolute path, a `..` part, or a file outside the run directory once links are followed."""
    pure = PurePosixPath(entry.replace("\\", "/"))
    if pure.is_absolute() or (len(entry) > 1 and entry[1] == ":"):
        return None, f"manifest.json lists the trace {entry!r} by an absolute path"
    if ".." in pure.parts:
        return None, f"manifest.json lists the trace {entry!r} outside the run directory (..)"
    return run_file(run_dir, Path(*pure.parts) if pure.parts else Path("."), what="trace")


def run_file(
    run_dir: Path, relative: str | Path, *, max_bytes: int | None = None, what: str = "file"
) -> tuple[Path | None, str | None]:
    """`run_dir / relative` when it may be read, else (None, why). (None, None): it does not exist.

    Refused: a path that leads outside the run directory (a symbolic link out of it, an absolute
    path, `..`), something that is not a regular file (a folder, FIFO, device node, socket), and a
    file larger than `max_bytes`."""
    rel = Path(relative)
    name = rel.as_posix()
    if rel.is_absolute() or ".." in rel.parts:
        return None, f"the {what} {name} lies outside the run directory; it was not read"
    path = Path(run_dir) / rel
    if not os.path.lexists(path):
        return None, None
    if not inside(run_dir, path):
        return None, f"the {what} {name} is a symbolic link out of the run directory; it was not read"
    try:
        st = path.stat()
    except OSError:
        return None, f"the {what} {name} is a broken symbolic link; it was not read"
    if not stat.S_ISREG(st.st_mode):
        return None, f"the {what} {name} is not a regular file; it was not read"
    if max_bytes is not None and st.st_size > max_bytes:
        return (
            None,
            f"the {what} {name} is {st.st_size:,} bytes, more than the {max_bytes:,} read; it was not read",
        )
    return path, None


def read_json_file(run_dir: Path, name: str, notes: list[str] | None = None) -> Any:
    """The JSON document `name` of a run directory, read under `run_file`'s rules (at most
    MAX_JSON_BYTES); None when it is missing, refused or unreadable (the reason appended to `notes`,
    except for a missing file)."""
    path, why = run_file(run_dir, name, max_bytes=MAX_JSON_BYTES)
    if path is None:
        if why is not None and notes is not None:
            notes.append(why)
        return None
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        if notes is not None:
            notes.append(f"{name} could not be read ({type(exc).__name__}); it was ignored.")
        return None
