"""HTML report tests on SYNTHETIC runs (tests/report/runs.py): escaping, embedded JSON, determinism,
size, what-is-missing statements, source lines, rule docs, and the `report` command."""

from __future__ import annotations

import html.parser
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuadvisor.analysis import analyze
from gpuadvisor.cli import cli
from gpuadvisor.model import Category, Finding, Location, Severity
from gpuadvisor.render import html as report_html
from gpuadvisor.result import AnalysisResult
from tests.report.runs import HOSTILE, HOSTILE_FILE, HOSTILE_KERNEL, build_run, build_trace

FIXED = "2025-01-01T00:00:00+00:00"
DATA_RE = re.compile(r'<script type="application/json" id="gpuadvisor-data">(.*?)</script>', re.S)


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.scripts.append(dict(attrs))
            self.script_text.append("")
            self._in_script = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_text[-1] += data


@pytest.fixture(scope="module")
def hostile_result(tmp_path_factory: pytest.TempPathFactory) -> AnalysisResult:
    run = build_run(tmp_path_factory.mktemp("hostile") / "run", hostile=True)
    result = analyze(run)
    # Whatever the rules found, add a (synthetic) finding made of hostile strings everywhere.
    result.findings.append(
        Finding(
            rule="GA999",
            name=f"hostile-{HOSTILE}",
            category=Category.HOST_SYNC,
            severity=Severity.HIGH,
            impact=0.5,
            title=f"synthetic {HOSTILE}",
            message=HOSTILE,
            evidence={HOSTILE: HOSTILE},
            recommendation=f"fix {HOSTILE}\n\n    code {HOSTILE}\n",
            references=(f"javascript:{HOSTILE}",),
            impact_explanation=HOSTILE,
            locations=(Location(file=HOSTILE_FILE, line=3, code=HOSTILE), Location(kernel=HOSTILE_KERNEL)),
        )
    )
    return result


@pytest.fixture(scope="module")
def plain_result(tmp_path_factory: pytest.TempPathFactory) -> AnalysisResult:
    return analyze(build_run(tmp_path_factory.mktemp("plain") / "run"))


def _embedded(page: str) -> Any:
    match = DATA_RE.search(page)
    assert match is not None
    return json.loads(match.group(1))


def test_hostile_strings_are_escaped(hostile_result: AnalysisResult) -> None:
    page = report_html.render_html(hostile_result, generated_at=FIXED)
    assert 'alert("pwn")' not in page.replace("\\u003c", "")  # never as live markup
    assert "<script>alert" not in page
    # ...but shown, escaped, as text: argv, the script path and the kernel name appear
    assert "&lt;/script&gt;&lt;script&gt;alert(&#34;pwn&#34;)&lt;/script&gt;" in page
    parser = _Tags()
    parser.feed(page)
    # Only our own script elements exist: error hook, plotly, one JSON per chart, the data, the report JS.
    kinds = [(s.get("type"), s.get("id")) for s in parser.scripts]
    json_ids = [i for t, i in kinds if t == "application/json"]
    assert "gpuadvisor-data" in json_ids
    assert all(i and (i == "gpuadvisor-data" or i.startswith("ga-fig-")) for i in json_ids)
    assert len([t for t, _ in kinds if t is None]) == 3
    for text in parser.script_text:
        assert "</script" not in text.lower()


def test_embedded_json_round_trips(hostile_result: AnalysisResult) -> None:
    page = report_html.render_html(hostile_result, generated_at=FIXED)
    data = _embedded(page)
    expected = json.loads(json.dumps(hostile_result.to_dict(), sort_keys=True))
    assert data == expected
    assert any(f["message"] == HOSTILE for f in data["findings"])


def test_script_json_escapes_closing_tags() -> None:
    value = {"k": "</script><!-- & \u2028 \u2029 >"}
    text = report_html.script_json(value)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == value


def test_render_is_deterministic(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run")
    first = report_html.render_html(analyze(run), generated_at=FIXED)
    second = report_html.render_html(analyze(run), generated_at=FIXED)
    assert first == second
    other_time = report_html.render_html(analyze(run), generated_at="2030-01-01T00:00:00+00:00")
    assert other_time != first
    assert other_time.replace("2030-01-01T00:00:00+00:00", FIXED) == first


def test_report_sections_and_content(plain_result: AnalysisResult) -> None:
    page = report_html.render_html(plain_result, generated_at=FIXED)
    for anchor in (
        'id="verdict"',
        'id="findings"',
        'id="ga-fig-breakdown"',
        'id="ga-fig-timeline"',
        'id="ga-fig-nvml"',
        'id="kernels"',
        'id="environment"',
        'id="rules"',
    ):
        assert anchor in page
    assert page.count("<script>") == 3  # plotly.js inlined once (+ the error hook and the report JS)
    assert "NVIDIA H100 80GB HBM3" in page
    assert "num_workers" in page and "train.py:25" in page  # DataLoader config with its call site
    assert "allow_tf32_matmul" in page
    for f in plain_result.findings:
        assert f.rule in page


def test_raw_trace_states_what_is_missing(tmp_path: Path) -> None:
    trace = build_trace(steps=4).write(tmp_path / "t.json.gz")
    page = report_html.render_html(analyze(trace), generated_at=FIXED)
    assert "this is a raw trace" in page
    assert 'id="ga-fig-nvml"' not in page
    assert "No settings captured (raw trace)" in page


def test_nvml_unavailable_is_stated(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run", nvml=False)
    page = report_html.render_html(analyze(run), generated_at=FIXED)
    assert "NVML unavailable:" in page
    assert 'id="ga-fig-nvml"' not in page


def test_no_environment_variables_in_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "ga-secret-token-5f1c9"
    monkeypatch.setenv("GA_TEST_SECRET", secret)
    monkeypatch.setenv("HOME", f"/home/{secret}")
    run = build_run(tmp_path / "run")
    page = report_html.render_html(analyze(run), generated_at=FIXED)
    assert secret not in page
    assert "GA_TEST_SECRET" not in page


@pytest.mark.slow
def test_size_is_bounded_for_a_large_trace(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run", steps=8, small_kernels=2500, nvml_samples=20000)
    result = analyze(run)
    out = report_html.write_report(result, tmp_path / "report.html", generated_at=FIXED)
    size = out.stat().st_size
    assert size < report_html.MAX_REPORT_BYTES
    page = out.read_text(encoding="utf-8")
    fig = json.loads(re.search(r'id="ga-fig-timeline-data">(.*?)</script>', page, re.S).group(1))  # type: ignore[union-attr]
    assert sum(len(t["x"]) for t in fig["data"]) <= 2500
    assert "events merged" in page


def test_cdn_links_plotly_instead_of_inlining(plain_result: AnalysisResult) -> None:
    page = report_html.render_html(plain_result, cdn=True, generated_at=FIXED)
    assert re.search(r'<script src="https://cdn\.plot\.ly/plotly-[0-9.]+\.min\.js"', page)
    assert len(page.encode()) < 1_000_000


def test_a_folder_of_reports_shares_one_plotly_js(plain_result: AnalysisResult, tmp_path: Path) -> None:
    """scripts/run.sh wrote 56 reports of ~5 MB, plotly.js inlined in each (issue 30 item 6): with
    shared_plotly they link one copy beside them."""
    a = report_html.write_report(plain_result, tmp_path / "a.html", shared_plotly=True, generated_at=FIXED)
    b = report_html.write_report(plain_result, tmp_path / "b.html", shared_plotly=True, generated_at=FIXED)
    shared = sorted(tmp_path.glob("plotly-*.min.js"))
    assert [p.name for p in shared] == [report_html.shared_plotly_name()]
    assert shared[0].stat().st_size > 1_000_000
    for page in (a, b):
        text = page.read_text(encoding="utf-8")
        assert f'<script src="{shared[0].name}" charset="utf-8"></script>' in text
        assert page.stat().st_size < 1_000_000


def _result_with(finding: Finding, base: AnalysisResult) -> AnalysisResult:
    return AnalysisResult(
        source=base.source,
        environment=base.environment,
        metrics=base.metrics,
        findings=[finding],
        rules=base.rules,
        notes=base.notes,
        trace=base.trace,
        metrics_detail=base.metrics_detail,
        run=base.run,
    )


DOC = """Synthetic rule for the report test.

Why it matters
--------------
Each call waits for the GPU.

How to fix
----------
Accumulate on the device::

    # before
    total += loss.item()
    # after
    total += loss.detach()
"""


def test_source_lines_and_rule_docs(
    tmp_path: Path, plain_result: AnalysisResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "train_src.py").write_text("a = 1\nb = 2\nloss_value = loss.item()\nc = 3\nd = 4\ne = 5\n")
    monkeypatch.chdir(tmp_path)
    finding = Finding(
        rule="GA999",
        name="synthetic-rule",
        category=Category.HOST_SYNC,
        severity=Severity.HIGH,
        impact=0.25,
        title="synthetic: item per step",
        message="synthetic message",
        evidence={"per_step": 1},
        recommendation="Keep the loss on the GPU:\n\n    total += loss.detach()\n",
        locations=(Location(file="train_src.py", line=3), Location(op="aten::_local_scalar_dense")),
    )
    page = report_html.render_html(
        _result_with(finding, plain_result), generated_at=FIXED, rule_docs={"GA999": DOC}
    )
    # a location is shown from what the run recorded, never from a file of this machine (issue 39)
    assert "loss_value = loss.item()" not in page and '<span class="ga-lineno">1</span>a = 1' not in page
    assert "train_src.py:3" in page
    assert "Rule documentation" in page and "Why it matters" in page
    assert "# before\ntotal += loss.item()\n# after\ntotal += loss.detach()" in page  # before/after block
    assert '<pre class="ga-code"><code>total += loss.detach()</code></pre>' in page  # from the recommendation
    assert "aten::_local_scalar_dense" in page


def test_non_python_files_are_never_read(
    tmp_path: Path, plain_result: AnalysisResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "secrets.txt").write_text("password=hunter2\n")
    monkeypatch.chdir(tmp_path)
    finding = Finding(
        rule="GA999",
        name="x",
        category=Category.HOST_SYNC,
        severity=Severity.LOW,
        impact=0.01,
        title="t",
        message="m",
        evidence={},
        recommendation="r",
        locations=(Location(file="secrets.txt", line=1),),
    )
    page = report_html.render_html(_result_with(finding, plain_result), generated_at=FIXED, rule_docs={})
    assert "hunter2" not in page


def test_parse_doc_sections_and_code() -> None:
    sections = report_html.parse_doc(DOC)
    assert [s["heading"] for s in sections] == ["", "Why it matters", "How to fix"]
    fix = sections[2]["blocks"]
    assert fix[0]["kind"] == "p" and fix[0]["text"] == "Accumulate on the device::"
    assert report_html.inline_code("use `x.to(d)` now") == [
        (False, "use "),
        (True, "x.to(d)"),
        (False, " now"),
    ]
    assert report_html.inline_code("a `b` c `d") == [
        (False, "a "),
        (True, "b"),
        (False, " c "),
        (False, "`d"),
    ]
    assert fix[1]["kind"] == "code" and fix[1]["text"].startswith("# before\n")
    fenced = report_html.text_blocks("Do this:\n```python\nx = 1\n```\nthen that.")
    assert [b["kind"] for b in fenced] == ["p", "code", "p"]


# ---- the command ----------------------------------------------------------------------------------------


def test_report_command_default_output_in_run_dir(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run")
    res = CliRunner().invoke(cli, ["report", str(run), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert (run / "report.html").is_file()
    assert res.output.strip().endswith("report.html")


def test_report_command_trace_output_and_select(tmp_path: Path) -> None:
    trace = build_trace(steps=4).write(tmp_path / "step.json.gz")
    res = CliRunner().invoke(cli, ["report", str(trace), "--select", "GA2", "--no-progress"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "step.report.html"
    data = _embedded(out.read_text(encoding="utf-8"))
    statuses = {r["rule"]: r["status"] for r in data["rules"]}
    assert all(s == "deselected" for rule, s in statuses.items() if not rule.startswith("GA2"))


def test_report_command_errors(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["report", str(tmp_path / "missing"), "--no-progress"])
    assert res.exit_code == 2
    assert "gpuadvisor: error:" in res.output
    bad = tmp_path / "bad.json"
    bad.write_text("not json at all")
    assert CliRunner().invoke(cli, ["report", str(bad), "--no-progress"]).exit_code == 2


def test_report_command_unwritable_output(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")  # a file where the output folder should be: fails even as root
    res = CliRunner().invoke(cli, ["report", str(run), "-o", str(blocker / "r.html"), "--no-progress"])
    # refused before the analysis (issue 42 item 9): a usage error, not outputs lost after the work
    assert res.exit_code == 2, res.output
    assert f"cannot write {blocker / 'r.html'}: {blocker} is a file, not a folder" in res.output


def test_write_report_unwritable_raises_output_lost(tmp_path: Path, plain_result: AnalysisResult) -> None:
    from gpuadvisor.errors import OutputLostError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputLostError):
        report_html.write_report(plain_result, blocker / "sub" / "r.html", generated_at=FIXED)


def test_hostile_kernel_name_reaches_the_kernel_table(hostile_result: AnalysisResult) -> None:
    kernels = hostile_result.metrics_detail.kernels if hostile_result.metrics_detail is not None else None
    assert kernels is not None and HOSTILE_KERNEL in set(kernels["name"].astype(str))
    page = report_html.render_html(hostile_result, generated_at=FIXED)
    assert "void evil_kernel&lt;&lt;/script&gt;" in page
    assert 'href="javascript:' not in page  # only http(s) references become links


def test_busy_time_by_kernel_class(plain_result: AnalysisResult) -> None:
    """The report shows the step model's busy time by kernel class (Metrics.busy_classes), read from
    the result: every class of the table with its share (synthetic run: GEMMs, elementwise, optimizer)."""
    page = report_html.render_html(plain_result, generated_at=FIXED)
    assert "Busy time by kernel class" in page
    by_class = plain_result.metrics_detail.busy_classes  # type: ignore[union-attr]
    assert by_class is not None and len(by_class)
    for cls, share in zip(by_class["class"], by_class["share"], strict=True):
        assert f"<td>{cls}</td>" in page
        assert f"{share * 100:.1f}%" in page
