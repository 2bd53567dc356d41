"""The report of a run without a GPU (issue 42 item 4), on a REAL capture recorded here on the CPU
(tests/report/real_reports.py: `gpuadvisor profile benchmarks/workloads/sync_bound.py --tiny`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuadvisor.analysis import analyze
from gpuadvisor.render import text
from gpuadvisor.render.html import build_context, render_html
from gpuadvisor.result import AnalysisResult
from tests.report.real_reports import record_cpu_run

pytestmark = pytest.mark.slow  # records a real run (~10 s)


@pytest.fixture(scope="module")
def cpu_result(tmp_path_factory: pytest.TempPathFactory) -> AnalysisResult:
    return analyze(record_cpu_run(tmp_path_factory.mktemp("cpu") / "run"))


def test_the_cpu_run_is_what_the_tests_below_assume(cpu_result: AnalysisResult) -> None:
    assert cpu_result.run is not None
    manifest = cpu_result.run.manifest
    assert {"cuda_unavailable", "nvml_unavailable"} <= set(manifest["degraded"])
    callsites = json.loads((cpu_result.run.run_dir / "callsites.json").read_text(encoding="utf-8"))
    assert callsites["callsites"] == []  # no host sync on the CPU: legitimately empty


def test_no_gpu_idle_lane_without_a_gpu(cpu_result: AnalysisResult) -> None:
    context = build_context(cpu_result, generated_at="x", rule_docs={})
    timeline = next(c for c in context["charts"] if c.id == "ga-fig-timeline")
    figure = json.loads(timeline.figure_json)
    lanes = {str(y) for trace in figure["data"] for y in (trace.get("y") or [])}
    assert lanes and not any("GPU" in lane for lane in lanes), lanes
    assert "red bars are GPU idle time" not in timeline.caption


def test_notes_say_the_degraded_inputs_in_words_once(cpu_result: AnalysisResult) -> None:
    notes = cpu_result.notes
    assert not any(n.startswith("degraded: ") for n in notes), notes  # the raw ids stay in manifest.json
    page = render_html(cpu_result, generated_at="x", rule_docs={})
    assert "degraded: cuda_unavailable" not in page and "degraded: nvml_unavailable" not in page
    nvml = cpu_result.run.nvml_reason if cpu_result.run is not None else None
    # the NVML message once in what the page says about the run (notes and "not available"), not in
    # both; the rules table names it again as the reason each NVML rule did not run
    said = _visible(page).split('<section id="rules"')[0]
    assert nvml and said.count(str(nvml)) == 1, nvml
    assert "callsites.json missing or empty" not in page and "callsites.json is missing" not in page
    summary = text.render(cpu_result)
    assert "degraded:" not in summary and summary.count("Note: GPU samples were not recorded") == 1, summary


def _visible(page: str) -> str:
    """The page without its <script> elements (the embedded JSON repeats every note)."""
    return re.sub(r"<script\b.*?</script>", "", page, flags=re.DOTALL)


def test_a_missing_callsites_file_is_still_said(cpu_result: AnalysisResult, tmp_path: Path) -> None:
    assert cpu_result.run is not None
    run = tmp_path / "run"
    run.mkdir()
    for item in cpu_result.run.run_dir.iterdir():
        if item.name != "callsites.json" and item.is_file():
            (run / item.name).write_bytes(item.read_bytes())
    (run / "trace").mkdir()
    for item in (cpu_result.run.run_dir / "trace").iterdir():
        (run / "trace" / item.name).write_bytes(item.read_bytes())
    page = render_html(analyze(run), generated_at="x", rule_docs={})
    assert "Call sites: callsites.json is missing" in page
