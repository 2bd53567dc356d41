"""The command a verify trial re-runs, as the run recorded it (manifest.json), checked as `gpuadvisor
profile` checks one, and with what a run directory must not decide left to the user: the interpreter
(`--python`, else the one running gpuadvisor; never the manifest's `python`), and a recorded module
found without importing it (issue 39)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuadvisor.capture.runner import find_module, validate_script
from gpuadvisor.errors import UsageError
from gpuadvisor.verify.trials import RecordedCommand

__all__ = ["recorded_command", "recorded_python_note"]


def recorded_command(
    manifest: Mapping[str, Any], argv: Sequence[str] | None = None, python: str | None = None
) -> RecordedCommand:
    """The recorded command, validated as `gpuadvisor profile` validates it (UsageError otherwise).
    `argv`: the script's real sys.argv when the caller has it (`profile --verify`); the manifest's
    has its credentials masked (`argv_redacted`) and cannot be re-run as recorded. `python`: the
    interpreter the user named (`--python`); without it, the one running verify. The manifest's own
    `python` is never run: a run directory is data (gpuadvisor/received.py), and a received one may
    name an executable it ships (`recorded_python_note` says when the two differ)."""
    if manifest.get("distributed") or len(manifest.get("ranks") or []) > 1:
        raise UsageError("verify re-runs single-process scripts; this run was launched with torchrun")
    target = manifest.get("target")
    if not isinstance(target, dict) or not target.get("path_or_name"):
        raise UsageError("the run's manifest.json does not record the command (no target)")
    if argv is None and manifest.get("argv_redacted"):
        raise UsageError(
            "the recorded command line had credentials masked (manifest.json argv_redacted): verify cannot "
            "re-run it as recorded; use `gpuadvisor profile --verify ...` (it verifies with the real "
            "command) or record with `profile --no-redact`"
        )
    argv = [str(a) for a in (argv if argv is not None else (target.get("argv") or []))]
    cwd = Path(str(manifest.get("cwd") or "."))
    if not cwd.is_dir():
        raise UsageError(f"the run's working directory {cwd} does not exist here")
    if python is not None and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise UsageError(f"--python {python}: not an executable file")
    cmd = RecordedCommand(
        kind=str(target.get("kind") or "script"),
        target=str(target["path_or_name"]),
        args=tuple(argv[1:]),
        cwd=cwd,
        python=python or sys.executable,
    )
    if cmd.kind == "module":
        find_module(cmd.target, cwd)
    else:
        validate_script(str(cmd.script_path()))
    return cmd


def recorded_python_note(manifest: Mapping[str, Any], cmd: RecordedCommand) -> str | None:
    """What to say when the run was recorded with another interpreter than the trials use."""
    recorded = manifest.get("python")
    if not isinstance(recorded, str) or not recorded:
        return None
    if os.path.realpath(recorded) == os.path.realpath(cmd.python):
        return None
    return (
        f"the run was recorded with {recorded}; the trials run {cmd.python} (verify never runs an "
        "interpreter a run directory names: pass --python PATH to choose it)"
    )
