"""verify.json joins the findings: `Finding.verified`, the terminal line, the HTML card, diff.

The run is a real recording (sample_runs/fp32_transformer-planted, copied); the verify.json beside it
is written by this test (synthetic numbers, labelled so)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.model import Category, Finding, Severity
from gpuadvisor.verify.results import attach, attach_from_run, summary_line

SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"

# Synthetic verify.json (made up by this test, not measured).
VERIFY_DOC: dict[str, Any] = {
    "schema_version": 1,
    "synthetic": "written by tests/verify/test_verify_results.py",
    "baseline": {"status": "ok", "step_time_ms": 120.0, "samples_per_s": None, "trials": 3},
    "trials": [
        {
            "remedy": "tf32",
            "finding": "GA701",
            "findings": ["GA701"],
            "status": "ok",
            "speedup": 2.1,
            "low": 2.0,
            "high": 2.2,
            "trials": 3,
            "verdict": "faster",
            "compared_in": "step_time_ms",
            "step_time_ms": 57.0,
        },
        {
            "remedy": "bf16_autocast",
            "finding": "GA701",
            "findings": ["GA701"],
            "status": "ok",
            "speedup": 5.4,
            "low": 5.2,
            "high": 5.6,
            "trials": 3,
            "verdict": "faster",
            "compared_in": "step_time_ms",
            "step_time_ms": 22.2,
            "change": "GPT.forward=float32 -> autocast(cuda, bfloat16) with float32 outputs at x.py:3",
        },
        {
            "remedy": "fused_optimizer",
            "finding": "GA502",
            "findings": ["GA502"],
            "status": "failed",
            "reason": "the script raised RuntimeError: boom (step 3, counted by optimizer_step_hook)",
            "trials": 0,
        },
    ],
}


def make_finding(rule: str, impact: float | None = 0.75, remedy: str | None = None) -> Finding:
    return Finding(
        rule=rule,
        name="x",
        category=Category.FP32_MATH,
        severity=Severity.from_impact(impact),
        impact=impact,
        title="t",
        message="m",
        evidence={},
        recommendation="r",
        remedy=remedy,
    )


def test_attach_prefers_the_rules_main_remedy_and_lists_alternatives() -> None:
    fp32, other, opt = attach(
        [make_finding("GA701"), make_finding("GA201"), make_finding("GA502", impact=None)], VERIFY_DOC
    )
    assert fp32.verified is not None and fp32.verified["remedy"] == "bf16_autocast"
    assert fp32.verified["speedup"] == 5.4 and fp32.verified["baseline_step_time_ms"] == 120.0
    assert [a["remedy"] for a in fp32.verified["alternatives"]] == ["tf32"]
    assert other.verified is None
    assert opt.verified is not None and opt.verified["status"] == "failed"
    # the finding's own remedy wins
    (named,) = attach([make_finding("GA701", remedy="tf32")], VERIFY_DOC)
    assert named.verified is not None and named.verified["remedy"] == "tf32"


def test_summary_lines() -> None:
    fp32, opt = attach([make_finding("GA701"), make_finding("GA502", impact=None)], VERIFY_DOC)
    assert summary_line(fp32) == "predicted 4.00x, measured 5.40x (5.20-5.60, 3 trials) [bf16_autocast]"
    assert summary_line(opt) == (
        "verify fused_optimizer: failed (the script raised RuntimeError: boom (step 3, counted by "
        "optimizer_step_hook))"
    )
    assert summary_line(make_finding("GA701")) is None


def test_unreadable_verify_json_is_a_note(tmp_path: Path) -> None:
    (tmp_path / "verify.json").write_text("{not json")
    findings, notes = attach_from_run([make_finding("GA701")], tmp_path)
    assert findings[0].verified is None
    assert len(notes) == 1 and "verify.json is unreadable" in notes[0]
    assert attach_from_run([make_finding("GA701")], tmp_path / "none") == ([make_finding("GA701")], [])


@pytest.fixture(scope="module")
def verified_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = SAMPLES / "fp32_transformer-planted"
    if not src.is_dir():
        pytest.skip("sample_runs/fp32_transformer-planted is not in this checkout")
    run = tmp_path_factory.mktemp("verified") / "run"
    shutil.copytree(src, run)
    (run / "verify.json").write_text(json.dumps(VERIFY_DOC))
    return run


def test_analysis_text_html_and_diff_carry_the_measurement(verified_run: Path) -> None:
    from gpuadvisor.analysis import analyze
    from gpuadvisor.diff import diff_results
    from gpuadvisor.render.html import render_html
    from gpuadvisor.render.text import render as render_text

    result = analyze(verified_run)
    ga701 = [f for f in result.findings if f.rule == "GA701"]
    assert ga701 and ga701[0].verified is not None and ga701[0].verified["remedy"] == "bf16_autocast"
    as_json = result.to_dict()
    assert [f["verified"]["speedup"] for f in as_json["findings"] if f["rule"] == "GA701"] == [5.4]
    text = render_text(result)
    assert "measured 5.40x (5.20-5.60, 3 trials) [bf16_autocast]" in text
    html = render_html(result)
    assert "Verified:" in html and "measured 5.40x" in html
    baseline = analyze(SAMPLES / "fp32_transformer-planted")
    changes = diff_results(baseline, result).to_dict()["findings"]
    mine = [c for c in changes if c["rule"] == "GA701"]
    assert mine and mine[0]["new_verified"]["speedup"] == 5.4 and mine[0]["base_verified"] is None


# Synthetic verify --explore result (made up by this test, not measured).
EXPLORE_DOC: dict[str, Any] = {
    **VERIFY_DOC,
    "measured_on": "CPU only, torch 2.13.0+cpu",
    "explore": {
        "best": {
            "levers": ["channels_last", "bf16_autocast"],
            "text": "best measured configuration: channels_last + bf16_autocast: 1.74x (1.70-1.78, 3 trials)",
            "change": "ConvNet and its 4-D inputs memory_format=contiguous -> channels_last",
            "note": "lower-precision math: re-check accuracy (loss curve) before keeping it",
        },
        "stopped": "no lever adds to the best configuration beyond noise",
    },
}


def test_explore_best_configuration_is_a_note_of_the_analysis(tmp_path: Path) -> None:
    (tmp_path / "verify.json").write_text(json.dumps(EXPLORE_DOC))
    _, notes = attach_from_run([make_finding("GA701")], tmp_path)
    assert notes == [
        "verify --explore: best measured configuration: channels_last + bf16_autocast: 1.74x (1.70-1.78, "
        "3 trials) [measured on CPU only, torch 2.13.0+cpu, not the recording's machine]; changes: ConvNet "
        "and its 4-D inputs memory_format=contiguous -> channels_last; lower-precision math: re-check "
        "accuracy (loss curve) before keeping it"
    ]
    none = {**EXPLORE_DOC, "measured_on": None, "explore": {"best": None, "stopped": "no lever measured faster"}}
    (tmp_path / "verify.json").write_text(json.dumps(none))
    assert attach_from_run([], tmp_path)[1] == ["verify --explore: no best configuration (no lever measured faster)"]


def test_a_measurement_made_elsewhere_says_so() -> None:
    doc = {**VERIFY_DOC, "trials": [{**VERIFY_DOC["trials"][0], "measured_on": "CPU only, torch 2.13.0+cpu"}]}
    (fp32,) = attach([make_finding("GA701", remedy="tf32")], doc)
    line = summary_line(fp32)
    assert line is not None and "measured on CPU only, torch 2.13.0+cpu (not the recording's machine)" in line


def test_the_explore_note_reaches_the_terminal_summary_and_the_report(tmp_path: Path) -> None:
    from gpuadvisor.analysis import analyze
    from gpuadvisor.render.html import render_html
    from gpuadvisor.render.text import render as render_text

    src = SAMPLES / "fp32_transformer-planted"
    if not src.is_dir():
        pytest.skip("sample_runs/fp32_transformer-planted is not in this checkout")
    run = tmp_path / "run"
    shutil.copytree(src, run)
    (run / "verify.json").write_text(json.dumps(EXPLORE_DOC))
    result = analyze(run)
    assert any(n.startswith("verify --explore: best measured configuration: channels_last") for n in result.notes)
    assert "Note: verify --explore: best measured configuration: channels_last" in render_text(result)
    assert "verify --explore: best measured configuration: channels_last + bf16_autocast: 1.74x" in render_html(result)
