"""Which source lines a report shows for a finding's location (gpuadvisor/render/_source.py): the
snippet the capture recorded, not today's file (issue 30 item 1: on 12 of 56 sample runs the HTML
highlighted another line than the terminal printed). Synthetic run directories."""

from __future__ import annotations

import hashlib
from pathlib import Path

from gpuadvisor.model import Location
from gpuadvisor.render._source import recorded_sites, source_view
from gpuadvisor.runinfo import RunInfo

RECORDED = ["x = batch()", "", "loss = model(x)", "loss.backward()", "opt.step()"]


def _run(tmp_path: Path, site: dict[str, object]) -> RunInfo:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return RunInfo(run_dir=run_dir, manifest={"cwd": str(tmp_path)}, callsites=[site])


def _today(tmp_path: Path, lines: list[str]) -> bytes:
    data = ("\n".join(lines) + "\n").encode()
    (tmp_path / "train.py").write_bytes(data)
    return data


def test_the_recorded_snippet_is_shown_and_a_changed_file_is_said_to_have_changed(tmp_path: Path) -> None:
    old = _today(tmp_path, RECORDED)
    site = {
        "file": "train.py",
        "line": 3,
        "code": "loss = model(x)",
        "snippet": {"first_line": 1, "lines": RECORDED},
        "file_sha256": hashlib.sha256(old).hexdigest(),
    }
    run = _run(tmp_path, site)
    loc = Location(file="train.py", line=3, code="loss = model(x)")
    view = source_view(loc, run, recorded_sites(run))
    assert [(ln.no, ln.text, ln.target) for ln in view.lines][1:4] == [
        (2, "", False),
        (3, "loss = model(x)", True),
        (4, "loss.backward()", False),
    ]
    assert view.note is None  # unchanged file: nothing to say
    _today(tmp_path, ["import torch", "bench = StepBench()", *RECORDED])  # edited after the run
    view = source_view(loc, run, recorded_sites(run))
    assert [ln.text for ln in view.lines if ln.target] == ["loss = model(x)"]
    assert view.note is not None and "has changed since" in view.note


def test_an_old_run_without_a_snippet_never_highlights_another_line(tmp_path: Path) -> None:
    site = {"file": "train.py", "line": 3, "code": "loss = model(x)"}  # recorded before snippets existed
    run = _run(tmp_path, site)
    loc = Location(file="train.py", line=3, code="loss = model(x)")
    # the file still has the line there: today's lines, said to come from today's file
    _today(tmp_path, RECORDED)
    view = source_view(loc, run, recorded_sites(run))
    assert [ln.text for ln in view.lines if ln.target] == ["loss = model(x)"]
    assert view.note is not None and "today's train.py" in view.note and "still reads as recorded" in view.note
    # two lines inserted above: the recorded text is found where it moved, and said so
    _today(tmp_path, ["import torch", "bench = StepBench()", *RECORDED])
    view = source_view(loc, run, recorded_sites(run))
    assert [(ln.no, ln.text) for ln in view.lines if ln.target] == [(5, "loss = model(x)")]
    assert view.note is not None and "recorded at line 3" in view.note and "at 5" in view.note
    # the line is gone (or not unique): only the recorded line, never today's line 3
    _today(tmp_path, ["import torch", "bench = StepBench()", "loss = model(x)", "loss = model(x)"])
    view = source_view(Location(file="train.py", line=2, code="loss = model(x)"), run, recorded_sites(run))
    assert [(ln.no, ln.text, ln.target) for ln in view.lines] == [(2, "loss = model(x)", True)]
    assert view.note is not None and "another line at 2" in view.note
