"""Atomic file writes shared by every writer of derived outputs (findings.json, report.html, -o FILE)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path


class NotARegularFile(OSError):
    """The path to write holds something other than a regular file (a link, FIFO, device node,
    folder): an output is never renamed over it."""


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` through a new temporary file in the same folder and a rename, so a
    reader never sees half a file and a failure (disk full) leaves the previous file intact. The rename
    goes only over a regular file or no file (NotARegularFile otherwise: a link, FIFO or device node at
    `path` stays as it is). The file gets the usual mode for new files (0666 minus the umask), not a
    temporary file's 0600. Raises OSError; callers turn it into their typed error."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # a leftover or a planted symbolic link is replaced, never written through
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        _only_over_a_regular_file(path)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _only_over_a_regular_file(path: Path) -> None:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise NotARegularFile(errno.EEXIST, f"{path} is not a regular file; it was left as it is")


def why_not_written(path: Path, err: OSError) -> str:
    """The reason `path` could not be written, in words: names a parent that is a file, not a folder
    (the OS says only "File exists" or "Not a directory" there)."""
    for parent in Path(path).parents:
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is a file, not a folder"
            break
    return str(err.strerror or err)
