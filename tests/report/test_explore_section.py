"""The report's "Measured configurations" section (verify --explore, issue 28) and its Markdown form.

The run directory is SYNTHETIC (tests/report/runs.py) and so is every verify.json here: built by this
file in the schema `gpuadvisor verify --explore` writes (docs/verify.md), not measured. The section is
drawn from `AnalysisResult.verify`, RUN/verify.json as the analysis read it; `_page` writes the file and
reads it back as the analysis does, so one analyzed run serves every document.
"""

from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.analysis import analyze
from gpuadvisor.render import markdown
from gpuadvisor.render._explore import explore_section, explore_view
from gpuadvisor.render.html import render_html
from gpuadvisor.render.text import render as render_text
from gpuadvisor.result import AnalysisResult
from gpuadvisor.verify.results import load_verify
from tests.report.runs import HOSTILE, build_run

FIXED = "2025-01-01T00:00:00+00:00"


def _trial(lever: str, label: str, status: str, **kw: Any) -> dict[str, Any]:
    return {"lever": lever, "label": label, "lever_title": f"title of {lever}", "status": status, **kw}


def _ok(lever: str, speedup: float, low: float, high: float, trials: int, verdict: str, **kw: Any) -> dict[str, Any]:
    return _trial(
        lever, kw.pop("label", lever), "ok", speedup=speedup, low=low, high=high, trials=trials,
        verdict=verdict, compared_in=kw.pop("compared_in", "step_time_ms"), **kw,
    )


# SYNTHETIC verify --explore document (made up by this test, not measured).
EXPLORE_DOC: dict[str, Any] = {
    "schema_version": 1,
    "synthetic": "written by tests/report/test_explore_section.py",
    "settings": {"budget_s": 600.0, "explore": True, "trials": 3},
    "noise_band": "low..high = the range of all baseline/remedy ratios (synthetic)",
    "baseline": {"status": "ok", "step_time_ms": 55.631, "samples_per_s": 2300.886, "trials": 3},
    "trials": [
        _trial("num_workers", "num_workers=8", "skipped", reason="the script constructed no DataLoader"),
        _ok("tf32", 0.999, 0.997, 1.001, 3, "within_noise", note="lower-precision math: re-check accuracy"),
        _ok("larger_batch", 3.104, 3.0, 3.2, 3, "faster", label="batch x4", compared_in="samples_per_s",
            note="the batch is 4x larger: the learning rate needs scaling"),
        _ok("channels_last", 1.859, 1.848, 1.863, 4, "faster"),
        _ok("bf16_autocast", 1.304, 1.251, 1.352, 3, "faster", dropped="failed with torch_compile: boom"),
        _trial("fused_optimizer", "fused_optimizer", "failed", reason="the script raised RuntimeError: boom"),
        _trial("torch_compile", "torch_compile", "skipped", reason="not measured: the search stopped first"),
    ],
    "explore": {
        "levers": ["num_workers", "tf32", "larger_batch", "channels_last", "bf16_autocast", "fused_optimizer"],
        "script_flags": [],
        "best": {
            "levers": ["channels_last", "bf16_autocast"],
            "labels": ["channels_last", "bf16_autocast"],
            "speedup": 2.385,
            "low": 2.301,
            "high": 2.447,
            "trials": 3,
            "verdict": "faster",
            "compared_in": "step_time_ms",
            "changes": [
                {"text": "ConvNet and its 4-D inputs memory_format=contiguous -> channels_last at train.py:44"},
                {"text": "ConvNet.forward under torch.autocast(cuda, bfloat16) at train.py:50"},
            ],
            "change": "joined changes (not shown: changes[] has them)",
            "changes_numerics": True,
            "note": "lower-precision math: re-check accuracy (loss curve) before keeping it",
            "text": "best measured configuration: channels_last + bf16_autocast: 2.39x (2.30-2.45, 3 trials)",
        },
        "batch": {
            "lever": "larger_batch",
            "text": "a larger batch: batch x4: 3.10x in samples/s (3.00-3.20, 3 trials), measured alone; "
            "it changes the optimization: scale the learning rate",
        },
        "steps": [
            {
                "from": ["channels_last"],
                "candidates": [
                    {"levers": ["channels_last", "bf16_autocast"], "trials": 3, "status": "ok", "speedup": 2.385,
                     "over_best": 1.283, "over_best_low": 1.204, "over_best_high": 1.351,
                     "over_best_verdict": "faster"},
                    {"levers": ["channels_last", "tf32"], "trials": 0, "status": "skipped",
                     "reason": "no trial ran (budget)"},
                ],
                "chosen": ["channels_last", "bf16_autocast"],
            },
            {
                "from": ["channels_last", "bf16_autocast"],
                "candidates": [
                    {"levers": ["channels_last", "bf16_autocast", "tf32"], "trials": 3, "status": "ok",
                     "speedup": 2.391, "over_best": 1.004, "over_best_low": 0.991, "over_best_high": 1.012,
                     "over_best_verdict": "within_noise"},
                ],
                "chosen": None,
            },
        ],
        "stopped": "no lever adds to the best configuration beyond noise",
        "trials_run": 23,
        "estimate_s_per_trial": 12.5,
    },
}


@pytest.fixture(scope="module")
def run_result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, AnalysisResult]:
    run = build_run(tmp_path_factory.mktemp("explore") / "run")
    return run, analyze(run)


def _page(run: Path, result: AnalysisResult, doc: Any) -> str:
    path = run / "verify.json"
    if doc is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    result.verify = load_verify(run)[0]  # as the analysis reads it
    return render_html(result, generated_at=FIXED, cdn=True)


def _section(page: str) -> str | None:
    match = re.search(r'<section id="explore".*?</section>', page, re.S)
    return match.group(0) if match else None


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _rows(section: str, table_class: str) -> list[list[str]]:
    tables = re.findall(rf'<table class="[^"]*\b{table_class}\b[^"]*">(.*?)</table>', section, re.S)
    return [
        [_text(cell) for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
        for table in tables
        for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)
    ]


def _notes(page: str) -> list[str]:
    match = re.search(r'<ul class="ga-notes">(.*?)</ul>', page, re.S)
    return [_text(n) for n in re.findall(r"<li>(.*?)</li>", match.group(1), re.S)] if match else []


def test_the_section_shows_what_verify_json_holds(run_result: tuple[Path, AnalysisResult]) -> None:
    run, result = run_result
    page = _page(run, result, EXPLORE_DOC)
    section = _section(page)
    assert section is not None and '<a href="#explore">Measured configurations</a>' in page
    text = _text(section)
    # the headline: the sentence verify printed, its verdict, the changes one per item, the note
    assert "Best measured configuration: channels_last + bf16_autocast: 2.39x (2.30-2.45, 3 trials) (faster, in step time)" in text
    changes = re.findall(r"<li>(.*?)</li>", section, re.S)
    assert [_text(c) for c in changes] == [c["text"] for c in EXPLORE_DOC["explore"]["best"]["changes"]]
    assert "Note: lower-precision math: re-check accuracy (loss curve) before keeping it" in text
    assert "changes the optimization a larger batch: batch x4: 3.10x in samples/s (3.00-3.20, 3 trials)" in text
    assert "Baseline (the script as recorded): 55.63 ms per step, 2,300.9 samples/s (median of 3 trials)." in text
    # every lever measured alone: step-time levers fastest first, then the batch (samples/s)
    assert _rows(section, "ga-explore-levers") == [
        ["lever", "speed-up (band)", "trials", "verdict", "compared in", "note"],
        ["channels_last (in the best)", "1.86x (1.85-1.86)", "4", "faster", "step time", ""],
        ["bf16_autocast (in the best)", "1.30x (1.25-1.35)", "3", "faster", "step time",
         "failed in a combination: failed with torch_compile: boom"],
        ["tf32", "1.00x (1.00-1.00)", "3", "within noise", "step time", "lower-precision math: re-check accuracy"],
        ["batch x4", "3.10x (3.00-3.20)", "3", "faster", "samples/s",
         "the batch is 4x larger: the learning rate needs scaling"],
    ]
    assert _rows(section, "ga-explore-failed") == [["fused_optimizer", "the script raised RuntimeError: boom"]]
    unmeasured = re.search(r'<details class="ga-explore-unmeasured">(.*?)</details>', section, re.S)
    assert unmeasured is not None and "Not measured alone: 2 skipped" in _text(unmeasured.group(1))
    assert "num_workers=8 (skipped) the script constructed no DataLoader" in _text(unmeasured.group(1))
    # the growth rounds: from where, each candidate against the baseline and over the best, the choice
    assert "Round 1, from channels_last : chose channels_last + bf16_autocast" in text
    assert "Round 2, from channels_last + bf16_autocast : nothing added beyond noise" in text
    assert _rows(section, "ga-explore-round") == [
        ["added", "trials", "vs baseline", "over the best (band)", "verdict", ""],
        ["bf16_autocast", "3", "2.39x", "1.28x (1.20-1.35)", "faster", "chosen"],
        ["tf32", "0", "skipped: no trial ran (budget)", ""],
        ["added", "trials", "vs baseline", "over the best (band)", "verdict", ""],
        ["tf32", "3", "2.39x", "1.00x (0.99-1.01)", "within noise", ""],
    ]
    assert (
        "Search stopped: no lever adds to the best configuration beyond noise; 23 trials run; budget 600 s; "
        "about 12 s per trial (verify's estimate)." in text
    )
    assert "Measured on another machine" not in text


def test_a_measurement_on_another_machine_says_so(run_result: tuple[Path, AnalysisResult]) -> None:
    run, result = run_result
    section = _section(_page(run, result, {**EXPLORE_DOC, "measured_on": "CPU only, torch 2.13.0+cpu"}))
    assert section is not None
    assert (
        "Measured on another machine: CPU only, torch 2.13.0+cpu, not the machine this run was recorded on."
        in _text(section)
    )


def test_no_best_configuration_says_why(run_result: tuple[Path, AnalysisResult]) -> None:
    run, result = run_result
    doc = copy.deepcopy(EXPLORE_DOC)
    doc["explore"].update(best=None, batch=None, steps=[], stopped="the budget ended during the singles")
    section = _section(_page(run, result, doc))
    assert section is not None
    text = _text(section)
    assert "No best configuration: the budget ended during the singles" in text
    assert "Best measured configuration" not in text and "changes the optimization" not in text
    assert "Growth rounds" not in text


def test_a_best_without_its_sentence_is_written_from_its_numbers() -> None:
    doc = copy.deepcopy(EXPLORE_DOC)
    del doc["explore"]["best"]["text"]
    view = explore_view(doc)
    # 2.385 as written in the file rounds half up (the float 2.385 is 2.38499...)
    assert view.best == "channels_last + bf16_autocast: 2.39x (2.30-2.45, 3 trials)"
    doc["explore"]["best"].update(speedup=None)
    with pytest.raises(ValueError, match=r"explore\.best has neither speedup nor text"):
        explore_view(doc)


def test_no_section_without_verify_json_or_without_explore(run_result: tuple[Path, AnalysisResult]) -> None:
    run, result = run_result
    for doc in (None, {k: v for k, v in EXPLORE_DOC.items() if k != "explore"}, {**EXPLORE_DOC, "explore": None}):
        page = _page(run, result, doc)
        assert _section(page) is None and 'href="#explore"' not in page
        assert not any("verify.json" in n for n in _notes(page))


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (lambda d: d.update(explore="fast"), "explore: 'fast' is not an object"),
        (lambda d: d["explore"]["best"].update(speedup="2.4"), "explore.best.speedup: '2.4' is not a number"),
        (lambda d: d["explore"]["best"].update(labels=[1, 2]), "explore.best.labels[0]: 1 is not a string"),
        (lambda d: d["explore"].update(steps={"from": []}), "explore.steps: {'from': []} is not a list"),
        (lambda d: d["explore"]["steps"][0]["candidates"].append(3), "explore.steps[0].candidates[2]: 3 is not"),
        (lambda d: d["explore"]["steps"][1].update(chosen="tf32"), "explore.steps[1].chosen: 'tf32' is not a list"),
        (lambda d: d["trials"][1].update(speedup=[1.0]), "trials[1].speedup: [1.0] is not a number"),
        (lambda d: d["trials"][3].update(trials=True), "trials[3].trials: True is not an integer"),
        (lambda d: d["trials"].append(7), "trials[7]: 7 is not an object"),
        (lambda d: d.update(measured_on={"gpu": "x"}), "measured_on: {'gpu': 'x'} is not a string"),
        (lambda d: d["settings"].update(budget_s="600"), "settings.budget_s: '600' is not a number"),
        (lambda d: d["explore"].update(trials_run=2.5), "explore.trials_run: 2.5 is not an integer"),
    ],
)
def test_a_value_of_an_unexpected_type_is_left_out_with_a_note(tmp_path: Path, change: Any, key: str) -> None:
    """verify.json is read as every file of a run directory: each value is checked once, where the
    analysis loads it (gpuadvisor/runcheck.py); one of another type is left out, the note names it,
    and every renderer draws what is left (issue 39)."""
    run = build_run(tmp_path / "run")
    doc = copy.deepcopy(EXPLORE_DOC)
    change(doc)
    (run / "verify.json").write_text(json.dumps(doc), encoding="utf-8")
    result = analyze(run)
    mine = [n for n in result.notes if n.startswith("verify.json: ") and "of the wrong type" in n]
    assert len(mine) == 1 and key in mine[0], result.notes
    page = render_html(result, generated_at=FIXED, cdn=True)
    assert any(key in n for n in _notes(page))
    assert key in markdown.render(result).replace("\\", "")
    render_text(result)


def test_an_unreadable_verify_json_is_one_note(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run")
    (run / "verify.json").write_text('{"trials": [], "explore": {', encoding="utf-8")
    result = analyze(run)
    page = render_html(result, generated_at=FIXED, cdn=True)
    assert _section(page) is None
    assert len([n for n in _notes(page) if n.startswith("verify.json is unreadable")]) == 1
    # the page shows what the analysis read: a file changed after it is not read again
    (run / "verify.json").write_text(json.dumps(EXPLORE_DOC), encoding="utf-8")
    page = render_html(result, generated_at=FIXED, cdn=True)
    assert _section(page) is None and len([n for n in _notes(page) if n.startswith("verify.json")]) == 1


def test_hostile_strings_in_verify_json_are_escaped(run_result: tuple[Path, AnalysisResult]) -> None:
    run, result = run_result
    doc = copy.deepcopy(EXPLORE_DOC)
    doc["trials"][3]["label"] = f"channels_last{HOSTILE}"
    doc["trials"][5]["reason"] = HOSTILE
    doc["explore"]["best"]["text"] = f"best measured configuration: {HOSTILE}: 2.39x"
    doc["explore"]["steps"][0]["from"] = [f"x{HOSTILE}"]
    doc["measured_on"] = HOSTILE
    page = _page(run, result, doc)
    section = _section(page)
    assert section is not None
    assert "<script>alert" not in page and "<!--" not in section
    assert "channels_last&lt;/script&gt;&lt;script&gt;alert(&#34;pwn&#34;)&lt;/script&gt;" in section
    rows = _rows(section, "ga-explore-levers")
    assert rows[1][0] == f"channels_last{HOSTILE} (in the best)"
    assert _rows(section, "ga-explore-failed") == [["fused_optimizer", HOSTILE]]
    md = markdown.render(result)
    assert "<script>" not in md and "&lt;/script&gt;&lt;script&gt;alert" in md


def test_markdown_has_the_compact_form_and_text_keeps_one_line(run_result: tuple[Path, AnalysisResult]) -> None:
    run, result = run_result
    (run / "verify.json").write_text(json.dumps(EXPLORE_DOC), encoding="utf-8")
    result.verify = load_verify(run)[0]
    md = markdown.render(result).replace("\\", "")  # Markdown escapes (_ |) removed to compare the words
    block = md[md.index("**Measured configurations (verify --explore)**") :]
    assert "Best: channels_last + bf16_autocast: 2.39x (2.30-2.45, 3 trials), faster in step time; changes: " in block
    assert "Changes the optimization: a larger batch: batch x4: 3.10x in samples/s" in block
    assert "| **channels_last** | 1.86x (1.85-1.86) | 4 | faster | step time |" in block
    assert "| batch x4 | 3.10x (3.00-3.20) | 3 | faster | samples/s |" in block
    assert "Not measured alone: 1 failed, 2 skipped. Search stopped: no lever adds" in block
    # the analysis had no verify.json: no note to drop; the one-line note stays the terminal's
    text = render_text(result)
    assert "Measured configurations" not in text and "Lever alone" not in text


def test_the_explore_note_is_not_repeated_in_markdown(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run")
    (run / "verify.json").write_text(json.dumps(EXPLORE_DOC), encoding="utf-8")
    result = analyze(run)
    note = next(n for n in result.notes if n.startswith("verify --explore: "))
    assert "Note: verify --explore: best measured configuration: channels_last" in render_text(result)
    md = markdown.render(result)
    assert md.count("2.39x (2.30-2.45, 3 trials)") == 1
    view, problem = explore_section(result.verify)
    assert problem is None and view is not None and view.analysis_note == note
