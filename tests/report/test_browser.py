"""Open SYNTHETIC reports in headless Chromium (marker `browser`; skipped when no Chromium is installed).

CI needs: `apt-get install -y chromium` (Debian) and `pytest -m browser tests/report`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuadvisor.analysis import analyze
from gpuadvisor.render.html import write_report
from tests.report import browser_check
from tests.report.runs import build_run, build_trace

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(
        browser_check.find_chromium() is None, reason="needs headless Chromium (apt-get install chromium)"
    ),
]


def test_run_report_renders_every_chart_without_errors(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run", hostile=True)
    report = write_report(analyze(run), tmp_path / "report.html", generated_at="2025-01-01T00:00:00+00:00")
    status = browser_check.check(report)
    assert status["charts"] == 3, status  # breakdown, timeline, NVML
    assert status["charts_ok"] == 3, status
    assert all(n > 0 for n in status["chart_svgs"].values()), status
    assert status["errors"] == [] and status["errors_count"] == 0, status
    assert status["done"], status
    assert status["findings"] >= 1 and status["code_blocks"] >= 1, status
    assert browser_check.ok(status)


def test_raw_trace_report_renders(tmp_path: Path) -> None:
    trace = build_trace(steps=3).write(tmp_path / "t.json.gz")
    report = write_report(analyze(trace), tmp_path / "report.html", generated_at="2025-01-01T00:00:00+00:00")
    status = browser_check.check(report)
    assert status["charts"] == 2 and status["charts_ok"] == 2, status  # no NVML chart for a raw trace
    assert browser_check.ok(status), status


def test_a_broken_figure_is_reported(tmp_path: Path) -> None:
    """The status element must be able to say 'failed': a page whose plotly.js is missing."""
    run = build_run(tmp_path / "run")
    report = write_report(analyze(run), tmp_path / "report.html", cdn=True, generated_at="x")
    page = report.read_text(encoding="utf-8")
    report.write_text(page.replace("https://cdn.plot.ly/", "file:///nonexistent/"), encoding="utf-8")
    status = browser_check.check(report)
    assert not browser_check.ok(status)
    assert status["charts_ok"] == 0 and status["errors_count"] > 0, status


SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"


@pytest.mark.parametrize("name", ["sync_bound-planted", "control_convnet-planted", "transfer_bound-fixed"])
def test_recorded_real_run_report_renders(tmp_path: Path, name: str) -> None:
    """A report of a REAL recording (sample_runs/, NVIDIA H200): every chart (breakdown, timeline, NVML)
    renders, no console error, findings and the environment are there."""
    result = analyze(SAMPLES / name)
    report = write_report(result, tmp_path / "report.html", generated_at="2025-01-01T00:00:00+00:00")
    status = browser_check.check(report)
    assert status["charts"] == 3 and status["charts_ok"] == 3, status
    assert all(n > 0 for n in status["chart_svgs"].values()), status
    assert status["errors_count"] == 0 and browser_check.ok(status), status
    assert status["findings"] == len(result.findings), status


def test_planted_run_report_puts_the_problem_first_with_its_source_line(tmp_path: Path) -> None:
    result = analyze(SAMPLES / "sync_bound-planted")
    page = write_report(result, tmp_path / "report.html", generated_at="x").read_text(encoding="utf-8")
    cards = page.split('class="ga-card ga-finding ')[1:]
    assert len(cards) == len(result.findings) >= 1
    first = cards[0]
    assert "GA201" in first and "host_sync" in first  # the planted problem is the first card
    assert "sync_bound.py:89" in first and "preds[i].item()" in first  # the user's line, with its code
