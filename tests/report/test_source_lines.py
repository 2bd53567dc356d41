"""Which source lines a report shows for a finding's location (gpuadvisor/render/_source.py): the
snippet the capture recorded, never a file of the machine that renders the report (issue 30 item 1:
on 12 of 56 sample runs the HTML highlighted another line than the terminal printed; issue 39 item 1:
a received run directory made the report embed the recipient's own files). Synthetic run directories."""

from __future__ import annotations

from pathlib import Path

from gpuadvisor.model import Location
from gpuadvisor.render._source import MISSING_SNIPPET, NO_LINES, recorded_sites, source_view
from gpuadvisor.runinfo import RunInfo

RECORDED = ["x = batch()", "", "loss = model(x)", "loss.backward()", "opt.step()"]


def _run(tmp_path: Path, site: dict[str, object]) -> RunInfo:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return RunInfo(run_dir=run_dir, manifest={"cwd": str(tmp_path)}, callsites=[site])


def _today(tmp_path: Path, lines: list[str]) -> None:
    (tmp_path / "train.py").write_text("\n".join(lines) + "\n")


def test_the_recorded_snippet_is_shown_whatever_the_file_says_today(tmp_path: Path) -> None:
    site = {"file": "train.py", "line": 3, "code": "loss = model(x)", "snippet": {"first_line": 1, "lines": RECORDED}}
    run = _run(tmp_path, site)
    loc = Location(file="train.py", line=3, code="loss = model(x)")
    _today(tmp_path, ["import torch", "bench = StepBench()", "SECRET = 1", *RECORDED])  # edited after the run
    view = source_view(loc, recorded_sites(run))
    assert [(ln.no, ln.text, ln.target) for ln in view.lines][1:4] == [
        (2, "", False),
        (3, "loss = model(x)", True),
        (4, "loss.backward()", False),
    ]
    assert view.note is None and "SECRET" not in repr(view)


def test_a_run_without_a_snippet_shows_the_recorded_line_alone_and_never_reads_the_file(tmp_path: Path) -> None:
    site = {"file": "train.py", "line": 3, "code": "loss = model(x)"}  # recorded before snippets existed
    run = _run(tmp_path, site)
    loc = Location(file="train.py", line=3, code="loss = model(x)")
    _today(tmp_path, ["DB_PASSWORD = 'x'", "y = 2", "loss = model(x)", "TOKEN = 'y'"])  # still has the line
    view = source_view(loc, recorded_sites(run))
    assert [(ln.no, ln.text, ln.target) for ln in view.lines] == [(3, "loss = model(x)", True)]
    assert view.note == MISSING_SNIPPET and "snippet" not in repr(view.lines)
    # a location with neither a snippet nor a recorded line shows nothing, and says why
    nothing = source_view(Location(file="train.py", line=4), recorded_sites(run))
    assert nothing.lines == () and nothing.note == NO_LINES
