"""The source lines a report shows for a finding's location: what the run recorded, not what the file
says today.

The capture records, for every call site it names (callsites.json rows, environment.json dataloaders,
optimizers, model_calls and framework call sites), the line's text (`code`), the lines around it
(`snippet`: {first_line, lines}) and the file's sha256 at profile time (`file_sha256`;
docs/run-directory.md). A report shows the recorded snippet. Runs recorded before snippets existed
have only `code`: then today's file is read, the recorded line is highlighted only where today's file
still has that text there (else only the recorded line is shown, or the place today's file moved it
to), and the note says the lines come from today's file and whether it changed since the run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuadvisor.model import Location
    from gpuadvisor.runinfo import RunInfo

__all__ = ["SourceLine", "SourceView", "recorded_sites", "source_view"]

_SOURCE_SUFFIXES = (".py", ".pyw", ".pyx", ".ipynb")
_MAX_SOURCE_BYTES = 2 * 1024 * 1024
CONTEXT = 2


@dataclass(frozen=True)
class SourceLine:
    no: int | str
    text: str
    target: bool


@dataclass(frozen=True)
class SourceView:
    """Lines to show (the target marked) and a note on where they come from (None: the recorded snippet
    of an unchanged file, nothing to say)."""

    lines: tuple[SourceLine, ...]
    note: str | None = None


def _site_records(run: RunInfo) -> Iterable[Mapping[str, Any]]:
    yield from run.callsites
    env = run.environment
    for key in ("dataloaders", "optimizers", "model_calls"):
        rows = env.get(key)
        if isinstance(rows, list):
            yield from (r for r in rows if isinstance(r, Mapping))
    framework = env.get("framework")
    if isinstance(framework, Mapping):
        if isinstance(framework.get("call_site"), Mapping):
            yield framework["call_site"]
        sites = framework.get("call_sites")
        if isinstance(sites, Mapping):
            yield from (s for s in sites.values() if isinstance(s, Mapping))


def recorded_sites(run: RunInfo | None) -> dict[tuple[str, int], Mapping[str, Any]]:
    """(file, line) -> the run's record of that call site (the one with a snippet when several)."""
    out: dict[tuple[str, int], Mapping[str, Any]] = {}
    if run is None:
        return out
    for rec in _site_records(run):
        file, line = rec.get("file"), rec.get("line")
        if not isinstance(file, str) or not isinstance(line, int) or isinstance(line, bool):
            continue
        if (file, line) not in out or ("snippet" in rec and "snippet" not in out[(file, line)]):
            out[(file, line)] = rec
    return out


def _candidates(file: str, run: RunInfo | None) -> list[Path]:
    path = Path(file)
    if path.is_absolute():
        return [path]
    out: list[Path] = []
    if run is not None:
        cwd = run.manifest.get("cwd")
        if isinstance(cwd, str) and cwd:
            out.append(Path(cwd) / path)
        out.append(run.run_dir.parent / path)
    out.append(Path.cwd() / path)
    return out


def _today(file: str, run: RunInfo | None) -> tuple[list[str], str] | None:
    """(lines, sha256) of the file as it is today, when it can be found. Only Python sources are read
    (never arbitrary files named in a trace)."""
    if not file.endswith(_SOURCE_SUFFIXES):
        return None
    for candidate in _candidates(file, run):
        try:
            if not candidate.is_file() or candidate.stat().st_size > _MAX_SOURCE_BYTES:
                continue
            data = candidate.read_bytes()
        except OSError:
            continue
        text = data.decode("utf-8", errors="replace").splitlines()
        return text, hashlib.sha256(data).hexdigest()
    return None


def _dedented(first: int, texts: list[str], target: int | None) -> tuple[SourceLine, ...]:
    shown = [t.expandtabs(4).rstrip() for t in texts]
    # the common indentation goes (the loop body of a function starts at column 0)
    indent = min((len(s) - len(s.lstrip(" ")) for s in shown if s.strip()), default=0)
    return tuple(SourceLine(first + i, s[indent:], first + i == target) for i, s in enumerate(shown))


def _around(text: list[str], line: int) -> tuple[SourceLine, ...]:
    lo, hi = max(1, line - CONTEXT), min(len(text), line + CONTEXT)
    return _dedented(lo, [text[n - 1] for n in range(lo, hi + 1)], line)


def _same(a: str, b: str) -> bool:
    return a.strip() == b.strip()


def source_view(
    loc: Location, run: RunInfo | None, sites: Mapping[tuple[str, int], Mapping[str, Any]]
) -> SourceView:
    """The lines to show for `loc` (see the module docstring). `sites`: `recorded_sites(run)`."""
    if not (loc.file and loc.line):
        if loc.code:
            return SourceView((SourceLine(loc.line or "", loc.code, True),))
        return SourceView(())
    file, line = loc.file, int(loc.line)
    rec = sites.get((file, line), {})
    code = loc.code or (rec.get("code") if isinstance(rec.get("code"), str) else None)
    recorded_hash = rec.get("file_sha256") if isinstance(rec.get("file_sha256"), str) else None
    snippet = rec.get("snippet")
    today = _today(file, run)
    changed: bool | None = None
    if today is not None and recorded_hash is not None:
        changed = today[1] != recorded_hash
    if isinstance(snippet, Mapping):
        first, texts = snippet.get("first_line"), snippet.get("lines")
        if isinstance(first, int) and isinstance(texts, list) and all(isinstance(t, str) for t in texts):
            note = None
            if changed:
                note = f"as recorded when the run was profiled; {file} has changed since"
            return SourceView(_dedented(first, list(texts), line), note)
    only_recorded = SourceView((SourceLine(line, code, True),) if code else ())
    if today is None or line < 1:
        return SourceView(
            only_recorded.lines,
            None if not code else "the recorded line; the file is not readable here",
        )
    text, _ = today
    changed_words = {
        True: "it has changed since the run",
        False: "unchanged since the run",
        None: "whether the file changed since the run is unknown: no file hash was recorded",
    }[changed]
    if code is None:
        if line > len(text):
            return SourceView(())
        return SourceView(
            _around(text, line), f"read from today's {file} (the run recorded no snippet); {changed_words}"
        )
    if line <= len(text) and _same(text[line - 1], code):
        return SourceView(
            _around(text, line),
            f"read from today's {file} (the run recorded no snippet): line {line} still reads as recorded; "
            f"{changed_words}",
        )
    moved = [n for n, t in enumerate(text, 1) if _same(t, code)]
    if len(moved) == 1:
        return SourceView(
            _around(text, moved[0]),
            f"recorded at line {line}; today's {file} has that line at {moved[0]} (it has changed since the run)",
        )
    return SourceView(
        only_recorded.lines,
        f"the recorded line only: today's {file} has another line at {line} (it has changed since the run)",
    )
