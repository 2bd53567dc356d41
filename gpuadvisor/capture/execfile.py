"""Run a script or module as `__main__`, the way `python SCRIPT` / `python -m MODULE` would.

Modelled on coverage.py's `execfile.PyRunner`. Used only inside the child process (which exits
afterwards), so nothing is restored.
"""

from __future__ import annotations

import importlib.machinery
import os
import runpy
import sys
import tokenize
import types
from types import TracebackType

_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # gpuadvisor/


def set_script_path(path: str) -> None:
    """Put the script's real directory first on sys.path, as `python SCRIPT` does (not under -P / -I:
    safe_path). Done before anything else is imported for the run (coverage.py's PyRunner order), so
    that the profiler session's own imports resolve as the script's would."""
    if getattr(sys.flags, "safe_path", False):
        return
    script_dir = os.path.dirname(os.path.realpath(os.path.abspath(path)))
    if sys.path:
        sys.path[0] = script_dir
    else:
        sys.path.insert(0, script_dir)


def run_script(path: str, args: list[str]) -> None:
    """Execute the file at `path` as `__main__` with `sys.argv = [path, *args]`."""
    abspath = os.path.abspath(path)
    set_script_path(path)
    with tokenize.open(abspath) as fh:  # honours the PEP 263 encoding cookie
        source = fh.read()
    code = compile(source, abspath, "exec", dont_inherit=True)

    main_mod = types.ModuleType("__main__")
    main_mod.__file__ = abspath
    main_mod.__cached__ = None  # type: ignore[attr-defined]
    main_mod.__loader__ = importlib.machinery.SourceFileLoader("__main__", abspath)
    main_mod.__package__ = None
    main_mod.__spec__ = None
    main_mod.__builtins__ = sys.modules["builtins"]  # type: ignore[attr-defined]
    main_mod.__annotations__ = {}
    # spawn/forkserver DataLoader workers unpickle classes defined in the script through these.
    sys.modules["__main__"] = main_mod
    sys.modules["__mp_main__"] = main_mod
    sys.argv = [path, *args]
    exec(code, main_mod.__dict__)


def run_module(name: str, args: list[str]) -> None:
    """Execute module `name` as `python -m name` would (sys.path[0] is the cwd already)."""
    sys.argv = [name, *args]  # run_module replaces argv[0] with the module's file
    runpy.run_module(name, run_name="__main__", alter_sys=True)


def _own(tb: TracebackType) -> bool:
    fn = tb.tb_frame.f_code.co_filename
    return os.path.abspath(fn).startswith(_OWN_DIR) or fn.endswith("runpy.py") or fn == "<frozen runpy>"


def strip_own_frames(tb: TracebackType | None) -> TracebackType | None:
    """Drop the leading traceback frames that belong to gpuadvisor or runpy (how the script was run),
    and the trailing ones (a Ctrl-C that landed inside one of gpuadvisor's hooks), so the user sees the
    traceback `python` would print. Keeps everything if nothing but our frames remain."""
    start = tb
    while tb is not None and _own(tb):
        tb = tb.tb_next
    if tb is None:
        return start
    first = tb
    last_theirs = tb
    node: TracebackType | None = tb
    while node is not None:
        if not _own(node):
            last_theirs = node
        node = node.tb_next
    last_theirs.tb_next = None  # our frames after the script's last one
    return first
