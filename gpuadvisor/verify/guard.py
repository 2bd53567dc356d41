"""The write guard of a verify trial: the script's writes land in the scratch copy of its working
directory (gpuadvisor/verify/scratch.py), never on what the user keeps.

Installed in the trial process before the script runs (`install(config)`): a `sys.addaudithook` hook
sees every file the interpreter opens for writing (`open`, `os.open`, numpy and pandas writers, the
logging module) and every removal, rename, truncation and mode change, and `torch.save` is wrapped
(it writes an ASCII path from C++, which no audit event reports). A write is let through when its
target, with links followed, lies in the copy, the temporary folder, a cache folder, /dev or /proc,
and never when it lies in the original working directory. A write to a large file the copy links to
its original (a checkpoint, a dataset) replaces the link by a file of the copy first (with the
original's bytes when the file is opened to append or update). Any other write raises
PermissionError in the script and is counted (`refused()`; the trial's result lists them).

Not seen: a native library that opens a file by itself (its own C code, not Python's `open`);
DataLoader workers started with spawn or forkserver (fork keeps the guard).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["install", "refused"]

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# audit events that change a file or folder: the positions of their path arguments, and whether the
# change reaches through a link to its target (a removal or rename acts on the link itself)
_CHANGES = {
    "os.remove": ((0,), False),
    "os.rmdir": ((0,), False),
    "os.rename": ((0, 1), False),
    "os.link": ((1,), False),
    "os.symlink": ((1,), False),
    "os.mkdir": ((0,), False),
    "shutil.rmtree": ((0,), False),
    "os.truncate": ((0,), True),
    "os.chmod": ((0,), True),
    "os.chown": ((0,), True),
    "os.utime": ((0,), True),
}

_state: dict[str, Any] = {}
_busy = threading.local()
_refused: list[str] = []


def refused() -> list[str]:
    """The writes refused so far (paths)."""
    return list(_refused)


def _inside(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _writes(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str) and mode:
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _break_link(path: str, keep_bytes: bool) -> None:
    """A link of the copy to an original (a large file): made a file of the copy before a write."""
    target = os.path.realpath(path)
    os.unlink(path)
    if keep_bytes and os.path.isfile(target):
        shutil.copyfile(target, path)


def check(path: Any, *, keep_bytes: bool = True, follow: bool = True) -> None:
    """PermissionError unless a write to `path` may go through (see the module docstring). `follow`:
    the write reaches through a link at `path` to its target (open, truncate); else it acts on the
    entry itself (remove, rename)."""
    if isinstance(path, int) or path is None or not _state:
        return
    try:
        text = os.fsdecode(path)
    except (TypeError, ValueError):
        return
    absolute = os.path.abspath(text)
    copy, roots, protected = _state["copy"], _state["roots"], _state["protected"]
    if not follow:
        real = os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))
        if _inside(real, copy) or (_inside(real, roots) and not _inside(real, protected)):
            return
        _refuse(text)
    if _inside(absolute, copy) and os.path.islink(absolute) and not _inside(os.path.realpath(absolute), copy):
        _break_link(absolute, keep_bytes)
    real = os.path.realpath(absolute)
    if _inside(real, copy):
        return
    if _inside(real, roots) and not _inside(real, protected):
        return
    _refuse(text)


def _refuse(text: str) -> None:
    _refused.append(text)
    raise PermissionError(
        f"gpuadvisor verify: the trial may not write {text}: it runs in a scratch copy of the working "
        "directory and writes nothing of yours (verify --allow-writes lets it)"
    )


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if getattr(_busy, "on", False):
        return
    if event == "open":
        if len(args) < 3 or not _writes(args[1], args[2]):
            return
        targets: Sequence[Any] = (args[0],)
        keep = not (isinstance(args[1], str) and "w" in args[1])
        follow = True
    elif event in _CHANGES:
        positions, follow = _CHANGES[event]
        targets = [args[i] for i in positions if i < len(args)]
        keep = True
    else:
        return
    _busy.on = True
    try:
        for target in targets:
            check(target, keep_bytes=keep, follow=follow)
    finally:
        _busy.on = False


def _guard_torch_save() -> None:
    """torch.save with a path writes it from C++ (no audit event): the path is checked first."""
    try:
        # lazy: a trial imports torch anyway; this module is imported by the trial before the script runs
        import torch.serialization as ser
    except ImportError:
        return
    import torch  # lazy: as above

    original = ser.save

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, bytes, os.PathLike)):
            _busy.on = True
            try:
                check(f, keep_bytes=False)
            finally:
                _busy.on = False
        return original(obj, f, *args, **kwargs)

    ser.save = save
    torch.save = save


def install(config: Mapping[str, Sequence[str]] | None) -> None:
    """Guard this process's writes (`config`: `Workplace.guard()`; None: no guard)."""
    if not config:
        return
    _state.update(
        copy=[str(p) for p in config.get("copy", ())],
        roots=[str(p) for p in config.get("roots", ())],
        protected=[str(p) for p in config.get("protected", ())],
    )
    sys.addaudithook(_hook)
    _guard_torch_save()
