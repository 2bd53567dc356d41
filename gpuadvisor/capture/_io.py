"""Small I/O helpers shared by the capture's parent and child: atomic sorted JSON, timestamps."""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuadvisor._atomic import write_text_atomic


def utc_iso(unix_s: float) -> str:
    """ISO 8601 UTC timestamp (seconds precision plus microseconds) for manifest fields."""
    return _dt.datetime.fromtimestamp(unix_s, tz=_dt.timezone.utc).isoformat()


def write_json_atomic(path: Path, data: Any) -> None:
    """Write `data` as UTF-8 JSON with sorted keys: temporary file in the same folder, then rename.

    A reader never sees a half-written file; a crash leaves at most a stray `.tmp` file.
    """
    write_text_atomic(path, json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, default=str) + "\n")


def read_json(path: Path) -> Any:
    """Read a JSON file; None when it is missing or unreadable (a killed child may leave nothing)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


# `python -m MODULE` puts the working directory first on sys.path, where a user's gpuadvisor.py (or
# gpuadvisor/ folder) would stand in for ours: our processes start from this line instead, which holds
# that entry aside (unless the interpreter runs with -P / -I, which adds none) until gpuadvisor is
# imported; `restore_first_path()` puts it back before the user's code runs (`python -m pkg.mod` needs
# the working directory first, `python SCRIPT` replaces it with the script's folder).
FIRST_PATH_HELD = "<gpuadvisor: the working directory, held aside while gpuadvisor is imported>"
_BOOT = (
    "import os, sys\n"
    "held = None\n"
    "if not getattr(sys.flags, 'safe_path', 0) and not sys.flags.isolated and sys.path:\n"
    "    held = sys.path[0] or os.getcwd()\n"
    "    sys.path[0] = {placeholder!r}\n"
    "import gpuadvisor.capture._io as boot\n"
    "boot.held_first_path = held\n"
    "import runpy\n"
    "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
)
held_first_path: str | None = None  # set by _BOOT


def restore_first_path() -> None:
    """Put back the first sys.path entry _BOOT held aside (gpuadvisor is imported by now)."""
    if held_first_path is not None and sys.path and sys.path[0] == FIRST_PATH_HELD:
        sys.path[0] = held_first_path


def own_module_argv(module: str, *args: str, python_flags: bool = True) -> list[str]:
    """The arguments after the interpreter that run our `module` as `python -m MODULE ARGS` would,
    except that nothing of the working directory can replace gpuadvisor (`_BOOT`). `python_flags`: the
    running interpreter's own flags first (-X, -W ...)."""
    flags = subprocess._args_from_interpreter_flags() if python_flags else []  # type: ignore[attr-defined]
    return [*flags, "-c", _BOOT.format(module=module, placeholder=FIRST_PATH_HELD), *args]
