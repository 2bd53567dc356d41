"""End-to-end: analysis pipeline, `gpuadvisor analyze` and `gpuadvisor rules` on SYNTHETIC traces/runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from gpuadvisor.analysis import analyze, analyze_run_and_write  # noqa: E402
from gpuadvisor.cli import cli  # noqa: E402
from tests.rules.cases.ga2_host_sync import ITEM_SITE, _steps, item_read  # noqa: E402
from tests.rules.harness import write_run_dir, write_trace  # noqa: E402


@pytest.fixture
def item_trace(tmp_path: Path) -> Path:
    return write_trace(_steps(12, item_read), tmp_path / "trace.json.gz")


@pytest.fixture
def item_run(tmp_path: Path) -> Path:
    return write_run_dir(
        tmp_path / "run",
        _steps(12, item_read),
        callsites=[ITEM_SITE],
        environment={
            "cpu_count": 16,
            "cuda_available": True,
            "torch": "2.11.0",
            "gpus": [{"cuda_index": 0, "name": "NVIDIA H100 80GB HBM3"}],
        },
    )


def test_analyze_raw_trace(item_trace: Path) -> None:
    result = analyze(item_trace)
    assert result.source.kind == "trace"
    assert result.findings[0].rule == "GA201"
    status = {r.rule: r for r in result.rules}
    assert status["GA201"].status == "ran"
    na = [r for r in result.rules if r.status == "not_applicable"]
    assert all(r.detail for r in na)
    assert "raw trace: NVML, settings and call sites unavailable" in result.notes
    assert result.environment["gpu"] == "NVIDIA H100 80GB HBM3"
    # deterministic JSON
    from gpuadvisor.render.json_out import render

    assert render(result) == render(analyze(item_trace))


def test_analyze_run_writes_findings_json(item_run: Path) -> None:
    import io

    out = io.StringIO()
    result = analyze_run_and_write(item_run, stream=out)
    data = json.loads((item_run / "findings.json").read_text())
    assert data == json.loads(json.dumps(result.to_dict()))
    assert data["findings"][0]["locations"][0]["file"] == "train.py"
    assert "GA201 blocking-scalar-reads" in out.getvalue()
    assert data["environment"]["gpu"] == "NVIDIA H100 80GB HBM3"


def test_cli_text_json_and_gate(item_trace: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["analyze", str(item_trace)])
    assert res.exit_code == 0, res.output
    assert "HIGH" in res.output and "GA201" in res.output and "Not applicable (" in res.output
    res = runner.invoke(cli, ["analyze", str(item_trace), "--fail-on", "high"])
    assert res.exit_code == 1
    res = runner.invoke(cli, ["analyze", str(item_trace), "--fail-on", "high", "--ignore", "host_sync"])
    assert res.exit_code == 0
    out = tmp_path / "f.json"
    res = runner.invoke(cli, ["analyze", str(item_trace), "--format", "json", "-o", str(out)])
    assert res.exit_code == 0
    data = json.loads(out.read_text())
    assert data["findings"][0]["rule"] == "GA201"
    res = runner.invoke(
        cli, ["analyze", str(item_trace), "--threshold", "GA201.min_impact=0.9", "--fail-on", "high"]
    )
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["analyze", "/nonexistent/trace.json"], "no such file"),
        (["analyze", "{trace}", "--select", "GA2O1"], "did you mean"),
        (["analyze", "{trace}", "--threshold", "GA201.nope=1"], "unknown threshold"),
        (["analyze", "{trace}", "--rules", "/nonexistent/dir"], "does not exist"),
        (["rules", "blocking-scalar-read"], "did you mean"),
    ],
)
def test_cli_usage_errors_exit_2(item_trace: Path, args: list[str], message: str) -> None:
    res = CliRunner().invoke(cli, [a.replace("{trace}", str(item_trace)) for a in args])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "Traceback" not in res.output


def test_cli_bad_trace_is_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("this is not json")
    res = CliRunner().invoke(cli, ["analyze", str(bad)])
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_broken_rule_becomes_internal_error_finding(item_trace: Path, tmp_path: Path) -> None:
    rules_dir = tmp_path / "myrules"
    rules_dir.mkdir()
    (rules_dir / "broken.py").write_text(
        "from gpuadvisor.rules_api import Category, Rule\n"
        "class Broken(Rule):\n"
        '    """Broken.\n\n    Why it matters\n    --\n    x\n    How it is detected\n    --\n    x\n'
        '    How to fix\n    --\n    x\n    """\n'
        '    id = "XB001"\n    name = "broken"\n    category = Category.MEMORY\n'
        "    def check(self, ctx):\n        raise ZeroDivisionError('oops')\n"
    )
    result = analyze(item_trace, rules_dirs=[rules_dir])
    internal = [f for f in result.findings if f.rule == "XB001"]
    assert len(internal) == 1 and internal[0].category.value == "internal"
    assert {r.rule: r.status for r in result.rules}["XB001"] == "error"
    assert any(f.rule == "GA201" for f in result.findings)  # the other rules ran
    assert result.exit_code("high") == 1  # GA201 (not the internal error) fails the gate
    assert result.exit_code("high", allow_rule_errors=True) == 1


def test_a_rule_that_raises_fails_the_gate_with_its_own_exit_code(item_trace: Path, tmp_path: Path) -> None:
    """A gate that did not evaluate all its rules has not passed (issue 30 item 5): exit 3, not 0,
    even when nothing else reaches --fail-on; --allow-rule-errors gates on the rules that ran."""
    rules_dir = tmp_path / "myrules"
    rules_dir.mkdir()
    (rules_dir / "exits.py").write_text(
        "from gpuadvisor.rules_api import Category, Rule\n"
        "class Exits(Rule):\n"
        '    """Exits.\n\n    Why it matters\n    --\n    x\n    How it is detected\n    --\n    x\n'
        '    How to fix\n    --\n    x\n    """\n'
        '    id = "XB002"\n    name = "exits"\n    category = Category.MEMORY\n'
        "    def check(self, ctx):\n        raise SystemExit(0)\n"
    )
    runner = CliRunner()
    # GA201 is deselected: without the rule error this gate would pass
    args = ["analyze", str(item_trace), "--rules", str(rules_dir), "--ignore", "host_sync", "--fail-on", "high"]
    res = runner.invoke(cli, args)
    assert res.exit_code == 3, res.output
    assert "Gate --fail-on high: FAIL (exit 3: rule XB002 raised" in res.output
    res = runner.invoke(cli, [*args, "--allow-rule-errors"])
    assert res.exit_code == 0, res.output
    assert "Gate --fail-on high: pass (on the rules that ran: XB002 raised" in res.output
    # no gate asked for: the error is reported, the exit status is 0
    res = runner.invoke(cli, args[:-2])
    assert res.exit_code == 0 and "raised SystemExit" in res.output


def test_rules_command_lists_and_documents() -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["rules"])
    assert res.exit_code == 0
    assert "GA201" in res.output and "blocking-scalar-reads" in res.output and "host_sync" in res.output
    res = runner.invoke(cli, ["rules", "blocking-scalar-reads"])
    assert res.exit_code == 0
    for text in ("Why it matters", "How to fix", "min_impact = 0.02", "Requires: gpu_kernels, steps"):
        assert text in res.output
    res = runner.invoke(cli, ["rules", "--markdown"])
    assert res.exit_code == 0 and "## GA201 blocking-scalar-reads" in res.output and "```python" in res.output


def test_docs_rules_md_is_up_to_date() -> None:
    """docs/rules.md is generated by `gpuadvisor rules --markdown > docs/rules.md`."""
    doc = Path(_ROOT) / "docs" / "rules.md"
    res = CliRunner().invoke(cli, ["rules", "--markdown"])
    assert doc.is_file(), "run: gpuadvisor rules --markdown > docs/rules.md"
    assert doc.read_text() == res.output, (
        "docs/rules.md is stale: gpuadvisor rules --markdown > docs/rules.md"
    )


def test_step_time_ms_calibrates_the_replay_of_a_raw_trace(item_trace: Path) -> None:
    from gpuadvisor.errors import ConfigError

    plain = analyze(item_trace)
    assert plain.metrics["profiler_host_scale"] == pytest.approx(1.0)  # no reference: host work as recorded
    step = plain.metrics["replay_step_time_ms"]
    # the user's logs say the step takes less than the profiled trace shows: the host work shrinks
    told = analyze(item_trace, step_time_ms=0.8 * step)
    assert told.metrics["profiler_host_scale"] < 1.0
    assert told.metrics["replay_step_time_ms"] < step
    with pytest.raises(ConfigError, match="milliseconds per step"):
        analyze(item_trace, step_time_ms=0.0)


@pytest.mark.parametrize("value", ["-3", "0", "nan", "fast"])
def test_step_time_ms_option_rejects_what_is_not_a_step_time(item_trace: Path, value: str) -> None:
    res = CliRunner().invoke(cli, ["analyze", str(item_trace), "--step-time-ms", value])
    assert res.exit_code == 2
    assert "--step-time-ms" in res.output


def test_step_time_ms_option_reaches_the_analysis(item_trace: Path) -> None:
    base = json.loads(CliRunner().invoke(cli, ["analyze", str(item_trace), "--format", "json"]).output)
    step = base["metrics"]["replay_step_time_ms"]
    res = CliRunner().invoke(
        cli, ["analyze", str(item_trace), "--format", "json", "--step-time-ms", str(0.8 * step)]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["metrics"]["profiler_host_scale"] < 1.0


def test_a_folder_of_runs_says_how_many_it_holds(tmp_path: Path) -> None:
    """Issue 42 item 9: `gpuadvisor analyze sample_runs` said only "no run directory (manifest.json)"."""
    from click.testing import CliRunner

    from gpuadvisor.cli import cli

    for name in ("b-run", "a-run"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text("{}")
    res = CliRunner().invoke(cli, ["analyze", str(tmp_path)])
    assert res.exit_code == 2
    assert "not a run but a folder of 2 run directories (a-run, b-run)" in res.output
    assert f"gpuadvisor analyze {tmp_path / 'a-run'}" in res.output
