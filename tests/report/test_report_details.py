"""Report details of issue 14, on SYNTHETIC inputs (tests/report/runs.py and hand-made results):
single-spaced source snippets, the "well tuned" verdict, n/a for an unknown MFU, version codes shown as
they are, and the way to open the trace in Perfetto."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from gpuadvisor.analysis import analyze
from gpuadvisor.model import Category, Finding, Location, Severity
from gpuadvisor.render import html as report_html
from gpuadvisor.result import AnalysisResult, SourceInfo
from gpuadvisor.runinfo import RunInfo
from tests.report.runs import build_run

FIXED = "2025-01-01T00:00:00+00:00"


def _finding(severity: Severity, impact: float, title: str, **kw: object) -> Finding:
    return Finding(
        rule="GA999",
        name="synthetic-rule",
        category=Category.LOW_OCCUPANCY,
        severity=severity,
        impact=impact,
        title=title,
        message="synthetic message",
        evidence={},
        recommendation="synthetic fix",
        **kw,  # type: ignore[arg-type]
    )


def _result(findings: list[Finding], metrics: dict[str, object] | None = None, **kw: object) -> AnalysisResult:
    return AnalysisResult(
        source=SourceInfo(path="synthetic.json", kind="trace"),
        environment=kw.pop("environment", {}),  # type: ignore[arg-type]
        metrics=metrics or {"step_time_ms": 10.0, "gpu_busy_fraction": 0.96},
        findings=findings,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def run_result(tmp_path_factory: pytest.TempPathFactory) -> AnalysisResult:
    return analyze(build_run(tmp_path_factory.mktemp("details") / "run"))


def test_source_snippet_is_single_spaced_and_dedented(tmp_path: Path) -> None:
    lines = ["    for batch in loader:", "        out = model(batch)", "        total += loss.item()",
             "            nested = 1", "        step()"]  # fmt: skip
    site = {"file": "loop.py", "line": 4, "code": "total += loss.item()", "snippet": {"first_line": 2, "lines": lines}}
    run = RunInfo(run_dir=tmp_path, callsites=[site])
    finding = _finding(Severity.HIGH, 0.3, "synthetic", locations=(Location(file="loop.py", line=4),))
    page = report_html.render_html(_result([finding], run=run), generated_at=FIXED, rule_docs={})
    block = re.search(r'<pre class="ga-source-lines"><code>(.*?)</code></pre>', page, re.S)
    assert block is not None
    body = block.group(1)
    assert "\n" not in body  # each line is a block; a newline between them would be a blank line
    texts = re.findall(r'<span class="ga-lineno">(\d+)</span>(.*?)</span>', body)
    assert texts == [
        ("2", "for batch in loader:"),  # the snippet's common indentation (4 spaces) is gone
        ("3", "    out = model(batch)"),
        ("4", "    total += loss.item()"),
        ("5", "        nested = 1"),
        ("6", "    step()"),
    ]


def test_verdict_says_well_tuned_without_medium_or_high() -> None:
    low = _finding(Severity.LOW, 0.046, "Low occupancy in one kernel")
    verdict = report_html._verdict(_result([low]))
    assert verdict["headline"].startswith("Well tuned: no finding of medium or high impact.")
    assert "Low occupancy in one kernel (up to 4.6% of the step)" in verdict["headline"]
    assert verdict["well_tuned"] and verdict["actions"] == []
    medium = _finding(Severity.MEDIUM, 0.08, "Medium thing")
    verdict = report_html._verdict(_result([medium, low]))
    assert verdict["headline"] == "Biggest opportunity: Medium thing (up to 8% of the step)."
    assert not verdict["well_tuned"] and [a["title"] for a in verdict["actions"]] == ["Medium thing"]
    page = report_html.render_html(_result([low]), generated_at=FIXED, rule_docs={})
    assert "Well tuned" in page and "Biggest opportunity" not in page


def test_unknown_mfu_is_na() -> None:
    no_flops = report_html._verdict(_result([], {"step_time_ms": 5.0, "mfu": None}))
    assert no_flops["mfu"] == "n/a" and no_flops["mfu_note"] == "FLOPs not recorded"
    convnet = _result(
        [],
        {"mfu": 0.00001, "achieved_tflops": 0.01, "peak_dtype": "bf16"},
        metrics_detail=SimpleNamespace(kernels=pd.DataFrame({"family": ["conv", "gemm"], "share": [0.4, 0.6]})),
    )
    verdict = report_html._verdict(convnet)
    assert verdict["mfu"] == "n/a" and verdict["mfu_dtype"] is None
    assert verdict["mfu_note"] == "convolution FLOPs not recorded (40% of kernel time)"
    page = report_html.render_html(convnet, generated_at=FIXED, rule_docs={})
    tile = re.search(r'<div class="ga-tile-label">MFU</div>\s*<div class="ga-tile-value">([^<]*)</div>', page)
    assert tile is not None and tile.group(1) == "n/a"
    assert "<td>n/a (convolution FLOPs not recorded (40% of kernel time))</td>" in page  # key metrics
    known = report_html._verdict(_result([], {"mfu": 0.252, "achieved_tflops": 249.4, "peak_dtype": "bf16"}))
    assert known["mfu"] == "25.2%" and known["mfu_note"] is None


def test_version_codes_are_not_thousands() -> None:
    result = _result([], environment={"cuda_runtime_version": 13000, "cudnn": 91900, "torch": "2.11.0"})
    page = report_html.render_html(result, generated_at=FIXED, rule_docs={})
    assert "<td>13000</td>" in page and "<td>91900</td>" in page
    assert "13,000" not in page and "91,900" not in page


def test_trace_can_be_opened_in_perfetto(run_result: AnalysisResult, tmp_path: Path) -> None:
    trace = Path(run_result.trace.path).resolve()  # type: ignore[union-attr]
    out = report_html.write_report(run_result, trace.parent.parent.parent / "report.html", generated_at=FIXED)
    page = out.read_text(encoding="utf-8")
    assert '<section id="trace"' in page and "Open the trace in Perfetto" in page
    assert f"<code>{trace}</code>" in page
    relative = trace.relative_to(out.parent).as_posix()
    assert f'href="{relative}" download' in page  # relative to the report: survives moving the folder
    assert (out.parent / relative).is_file()
    assert "https://ui.perfetto.dev" in page and "ProfilerStep#" in page
    files = report_html.trace_files(run_result)  # no report folder: an absolute file URI
    assert files[0]["href"] == trace.as_uri() and files[0]["rank"] == "0"


def test_do_first_line_shortened_inside_code_stays_code() -> None:
    text = "Stop reading values: `correct += int(preds[i].item() == y[i].item())" + " x" * 200 + "` and more."
    short = report_html._first_sentence(text)
    assert len(short) <= 221 and short.endswith("…`")
    segments = report_html.inline_code(short)
    assert segments[-1][0] is True and segments[-1][1].endswith("…")  # the cut code span is still code


def test_the_headline_does_not_repeat_the_gain_its_title_says() -> None:
    """Issue 30 item 7: "... saves 81% of the step (up to 81% of step time)"."""
    said = _finding(Severity.HIGH, 0.81, "549 blocking reads per step: removing them saves 81% of the step")
    verdict = report_html._verdict(_result([said]))
    assert verdict["headline"] == f"Biggest opportunity: {said.title}."
    assert verdict["actions"][0]["gain"] == ""
    unsaid = _finding(Severity.HIGH, 0.5, "Something costly")
    assert report_html._verdict(_result([unsaid]))["headline"].endswith("(up to 50% of the step).")


def test_environment_has_no_internal_trace_kind_rows_and_cpu_runs_no_unknown_gpu() -> None:
    """Issue 30 item 7: ~30 `trace_kind.*` rows in the report's Environment; a CPU-only run said
    "unknown GPU"."""
    env = {"torch": "2.13.0+cpu", "cuda_available": False, "trace_kind": {"cpu_only": True, "vendor": "none"}}
    result = _result([], {"step_time_ms": 5.0, "achieved_tflops": 0.01, "mfu": None}, environment=env)
    rows = [k for k, _, _ in report_html._environment_view(result)["summary"]]
    assert rows and not any(k.startswith("trace_kind") for k in rows)
    assert report_html._verdict(result)["gpu"] == "none (CPU-only run)"
    assert report_html._verdict(result)["mfu_note"] == "no GPU ran (CPU-only run)"  # not "no peak for this GPU"


def test_a_zero_occupancy_estimate_of_a_library_gemm_says_why() -> None:
    kernels = pd.DataFrame(
        {
            "name": ["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "my_kernel"],
            "family": ["gemm", "other"],
            "occupancy_pct": [0.0, 0.0],
        }
    )
    rows = report_html._kernel_rows(kernels)
    # issue 42 item 1: the why is a note under the table, marked in the cell, never a 110-character
    # sentence in a cell that cannot wrap
    assert rows[0]["occupancy"] == "0%" and rows[0]["occupancy_note"]
    assert rows[1]["occupancy"] == "0%" and not rows[1]["occupancy_note"]  # a custom kernel at 0: said plainly
    page = report_html.render_html(_result([]), generated_at=FIXED, rule_docs={})
    assert "Kineto's occupancy estimate reads 0%" not in page  # no note without a row that needs it


def test_table_values_read_as_words_not_json() -> None:
    """Issue 42 item 9: evidence and environment tables showed raw JSON (`{"HtoD": 16.89}`), unix times
    and `null`."""
    from gpuadvisor.render._tables import fmt_value, kv_row

    assert fmt_value({"HtoD": 16.894625}) == "HtoD: 16.9"
    assert fmt_value({"0": {"step_ms": 72.1, "compute_ms": None}}) == "0: (compute_ms: —, step_ms: 72.1)"
    assert fmt_value([{"name": "NVIDIA H200", "sm_count": 132}, {"name": "B"}]) == "name: NVIDIA H200, sm_count: 132; name: B"
    assert fmt_value([]) == "none" and fmt_value({}) == "none" and fmt_value(None) == "—"
    assert fmt_value(1795478069.29446, "capture.window_start_unix_s") == "2026-11-23 23:54:29.294 UTC"
    assert fmt_value(12.5, "export_seconds") == "12.5"  # a duration is not a time of day
    _, shown, full = kv_row("ranks", {str(r): {"step_time_ms": 70.0 + r, "comm_ms": 3.0} for r in range(8)})
    assert shown.endswith("…") and len(shown) <= 100 and full is not None
    assert full.splitlines()[0] == "0: comm_ms: 3, step_time_ms: 70" and len(full.splitlines()) == 8
    for text in (shown, full):
        assert "{" not in text and '"' not in text and "null" not in text
