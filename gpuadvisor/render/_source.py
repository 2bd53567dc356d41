"""The source lines a report shows for a finding's location: what the run recorded, never a file of
the machine that renders the report.

The capture records, for every call site it names (callsites.json rows, environment.json dataloaders,
optimizers, model_calls and framework call sites), the line's text (`code`) and the lines around it
(`snippet`: {first_line, lines}; docs/run-directory.md). A report shows the recorded snippet. A run
directory is data (gpuadvisor/received.py): the file a location names may be another machine's, an
absolute path or a link to anything on this one, so it is never opened; runs recorded before snippets
existed (or whose record has none) show the recorded line alone, and the note says the snippet is
missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuadvisor.rundir import site_records

if TYPE_CHECKING:
    from gpuadvisor.model import Location
    from gpuadvisor.runinfo import RunInfo

__all__ = ["SourceLine", "SourceView", "recorded_sites", "source_view"]

# The notes of a location whose run recorded no lines around it (runs recorded before issue 30).
_NEVER_READ = "a report shows what the run recorded, never a file of this machine"
MISSING_SNIPPET = f"the recorded line only: the run recorded no lines around it ({_NEVER_READ})"
NO_LINES = f"no source lines: the run recorded no lines around this location ({_NEVER_READ})"


@dataclass(frozen=True)
class SourceLine:
    no: int | str
    text: str
    target: bool


@dataclass(frozen=True)
class SourceView:
    """Lines to show (the target marked) and a note on where they come from (None: the recorded snippet,
    nothing to say)."""

    lines: tuple[SourceLine, ...]
    note: str | None = None


def recorded_sites(run: RunInfo | None) -> dict[tuple[str, int], Mapping[str, Any]]:
    """(file, line) -> the run's record of that call site (the one with a snippet when several)."""
    out: dict[tuple[str, int], Mapping[str, Any]] = {}
    if run is None:
        return out
    for rec in site_records(run.callsites, run.environment):
        file, line = rec.get("file"), rec.get("line")
        if not isinstance(file, str) or not isinstance(line, int) or isinstance(line, bool):
            continue
        if (file, line) not in out or ("snippet" in rec and "snippet" not in out[(file, line)]):
            out[(file, line)] = rec
    return out


def _dedented(first: int, texts: list[str], target: int | None) -> tuple[SourceLine, ...]:
    shown = [t.expandtabs(4).rstrip() for t in texts]
    # the common indentation goes (the loop body of a function starts at column 0)
    indent = min((len(s) - len(s.lstrip(" ")) for s in shown if s.strip()), default=0)
    return tuple(SourceLine(first + i, s[indent:], first + i == target) for i, s in enumerate(shown))


def source_view(loc: Location, sites: Mapping[tuple[str, int], Mapping[str, Any]]) -> SourceView:
    """The lines to show for `loc` (see the module docstring). `sites`: `recorded_sites(run)`."""
    if not (loc.file and loc.line):
        if loc.code:
            return SourceView((SourceLine(loc.line or "", loc.code, True),))
        return SourceView(())
    line = int(loc.line)
    rec = sites.get((loc.file, line), {})
    code = loc.code or (rec.get("code") if isinstance(rec.get("code"), str) else None)
    snippet = rec.get("snippet")
    if isinstance(snippet, Mapping):
        first, texts = snippet.get("first_line"), snippet.get("lines")
        if isinstance(first, int) and isinstance(texts, list) and all(isinstance(t, str) for t in texts):
            return SourceView(_dedented(first, list(texts), line))
    if not code:
        return SourceView((), NO_LINES)
    return SourceView((SourceLine(line, code, True),), MISSING_SNIPPET)
