"""Text from a trace, a manifest or a script made safe for a terminal: the one helper every
terminal-bound output uses (text, github and markdown renderers, error lines, progress, the profile
summary). JSON and HTML keep the data as it is and escape it their own way.

A kernel name, a device name, a file name or an exception message is data: written raw, an escape
sequence in it would act on the terminal of whoever reads the output (`\\e]0;TITLE\\a` sets the window
title, `\\e[2J` clears the screen, OSC 8 makes a link whose target differs from its text, `\\r`
overwrites the line before it). `strip_controls` removes every escape sequence whole (CSI, OSC, DCS,
SOS/PM/APC, two-byte ESC sequences, and their 8-bit C1 forms) and every other C0/C1 control
character but tab and newline, plus the Unicode bidirectional overrides that reorder what is shown
("Trojan Source"). A CI log is a terminal too: GitHub Actions runs a workflow command found at the
start of any line a step prints, on stdout or stderr (`::error ...::`, `::add-mask::`, the legacy
`##[...]` anywhere in a line), so `strip_controls` also breaks every `::` that starts a line (a
zero-width space between the colons) and every `##[`: a file named `x<LF>::error title=X::...` or a
kernel name cannot emit one. `terminal_safe` does it for every string of an `AnalysisResult` (what a
renderer reads); gpuadvisor's own styles and workflow commands are added by the renderers after it.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from gpuadvisor.diff import DiffResult
    from gpuadvisor.result import AnalysisResult

T = TypeVar("T")

_SEQUENCE = re.compile(
    r"""
    (?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?        # CSI ... final byte (colours, cursor, clear)
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])                  # OSC, DCS, SOS, PM, APC ...
      [^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?                     #   ... up to BEL or ST (or the end)
    | \x1b[\x20-\x2f]*[\x30-\x7e]?                              # other ESC sequences (ESC c resets)
    """,
    re.VERBOSE,
)
# C0 controls but tab and newline, DEL, C1 controls; bidirectional embeddings, overrides, isolates.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


# a line's first `::` (after white space): where GitHub Actions reads a workflow command
_WORKFLOW_COMMAND = re.compile(r"^(\s*):(?=:)", re.MULTILINE)
ZWSP = "\u200b"


def strip_controls(text: str) -> str:
    """`text` without terminal escape sequences and control characters (tab and newline kept), and
    without a workflow command a CI runner would run (see the module docstring)."""
    if not text.isprintable():  # the common case skips this (tab and newline are not printable)
        text = _CONTROL.sub("", _SEQUENCE.sub("", text))
    if "::" in text or "##[" in text:
        text = _WORKFLOW_COMMAND.sub(lambda m: m.group(1) + ":" + ZWSP, text).replace("##[", "##" + ZWSP + "[")
    return text


def _clean(obj: Any) -> Any:
    if isinstance(obj, str):
        return strip_controls(obj) if not isinstance(obj, enum.Enum) else obj
    if isinstance(obj, (int, float, bool, enum.Enum)) or obj is None:
        return obj
    if isinstance(obj, dict):
        return {_clean(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_clean(v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: _clean(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    return obj


def clean_data(obj: T) -> T:
    """A copy of `obj` (strings, lists, tuples, dicts, dataclasses of them) with every string passed
    through `strip_controls`."""
    return _clean(obj)  # type: ignore[no-any-return]


def terminal_safe(result: AnalysisResult) -> AnalysisResult:
    """`result` with every string a renderer prints cleaned (source, environment, metrics, findings,
    rule statuses, notes, prediction); the in-memory trace and run objects are shared, not copied."""
    return dataclasses.replace(
        result,
        source=clean_data(result.source),
        environment=clean_data(result.environment),
        metrics=clean_data(result.metrics),
        findings=clean_data(result.findings),
        rules=clean_data(result.rules),
        notes=clean_data(result.notes),
        prediction=clean_data(result.prediction),
    )


def terminal_safe_diff(result: DiffResult) -> DiffResult:
    """`result` of a diff with every string its renderers print cleaned (the two analyses it holds for
    other renderers are shared)."""
    return dataclasses.replace(
        result,
        base_source=clean_data(result.base_source),
        new_source=clean_data(result.new_source),
        mismatches=clean_data(result.mismatches),
        step_time=clean_data(result.step_time),
        categories=clean_data(result.categories),
        findings=clean_data(result.findings),
        notes=clean_data(result.notes),
    )
