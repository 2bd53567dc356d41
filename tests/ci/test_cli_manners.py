"""CLI manners (issue 14): colour (NO_COLOR / FORCE_COLOR), -v for the full text and ellipses for
shortened text, exit 130 on Ctrl-C, "did you mean" for subcommands, configuration errors that name
their file and key, natural rule order, human numbers, Markdown code spans, `--format github`, and the
one error boundary in `cli.main`. Inputs are SYNTHETIC (tests/ci/results.py, tests/rules/cases)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuadvisor import analysis
from gpuadvisor.cli import cli
from gpuadvisor.model import Category, Finding, Location, Severity
from gpuadvisor.render import _format, github, markdown, text
from gpuadvisor.result import AnalysisResult, SourceInfo
from tests.rules.cases.ga2_host_sync import _steps, item_read
from tests.rules.harness import write_trace

from .results import HOSTILE, clean_result, sample_result

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LONG = (
    "This synthetic message is long on purpose. It has many sentences, each with a few words, so that "
    "the terminal summary must shorten it after three lines. Sentence four is here. Sentence five "
    "follows it. Sentence six comes after. The very last sentence of the message is THEENDMARKER."
)


@pytest.fixture
def item_trace(tmp_path: Path) -> Path:
    return write_trace(_steps(12, item_read), tmp_path / "trace.json.gz")


def _long_result() -> AnalysisResult:
    result = clean_result()
    long_finding = replace(
        result.findings[0],
        message=LONG,
        recommendation=LONG.replace("message", "fix"),
        locations=tuple(Location(file=f"train{i}.py", line=i + 1) for i in range(5)),
    )
    result.findings = [long_finding]
    return result


# ---------------------------------------------------------------------------------------------- colour


def test_color_enabled_honours_no_color_and_force_color() -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    class Pipe:
        def isatty(self) -> bool:
            return False

    assert _format.color_enabled(Tty(), {}) is True
    assert _format.color_enabled(Pipe(), {}) is False
    assert _format.color_enabled(Tty(), {"NO_COLOR": "1"}) is False
    assert _format.color_enabled(Tty(), {"NO_COLOR": ""}) is True  # empty means unset (no-color.org)
    assert _format.color_enabled(Pipe(), {"FORCE_COLOR": "1"}) is True
    assert _format.color_enabled(Pipe(), {"FORCE_COLOR": "0"}) is False
    assert _format.color_enabled(Pipe(), {"FORCE_COLOR": "1", "NO_COLOR": "1"}) is False
    assert _format.color_enabled(Tty(), {"TERM": "dumb"}) is False


def test_analyze_colours_only_when_asked(item_trace: Path) -> None:
    runner = CliRunner()
    plain = runner.invoke(cli, ["analyze", str(item_trace)], env={"NO_COLOR": None, "FORCE_COLOR": None})
    forced = runner.invoke(cli, ["analyze", str(item_trace)], env={"FORCE_COLOR": "1", "NO_COLOR": None})
    off = runner.invoke(cli, ["analyze", str(item_trace)], env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert plain.exit_code == forced.exit_code == off.exit_code == 0, forced.output
    assert not ANSI.search(plain.stdout) and not ANSI.search(off.stdout)
    assert "\x1b[31m" in forced.stdout  # the HIGH severity in red
    assert ANSI.sub("", forced.stdout) == plain.stdout  # colour changes nothing else


def test_colour_never_goes_into_a_file(item_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "summary.txt"
    res = CliRunner().invoke(cli, ["analyze", str(item_trace), "-o", str(out)], env={"FORCE_COLOR": "1"})
    assert res.exit_code == 0 and "GA201" in out.read_text() and not ANSI.search(out.read_text())


# ---------------------------------------------------------------------------------------------- -v


def test_shortened_text_ends_in_an_ellipsis_and_verbose_prints_all() -> None:
    short = text.render(_long_result())
    full = text.render(_long_result(), verbose=True)
    assert "THEENDMARKER" not in short and short.count("…") >= 2
    wrapped = [line for line in short.splitlines() if "Sentence" in line or "sentences" in line]
    assert len(wrapped) >= 4 and all(len(line) <= text.WIDTH for line in wrapped)
    cut = [line for line in short.splitlines() if line.rstrip().endswith("…")]
    assert len(cut) == 2  # the message and the fix, each cut with an ellipsis
    assert "(+2 more locations)" in short
    assert "-v prints everything" in short
    assert full.count("THEENDMARKER") == 2 and "…" not in full and "more locations" not in full
    assert "train4.py:5" in full and "-v prints everything" not in full


def test_wrap_clipped_marks_the_cut() -> None:
    lines, cut = _format.wrap_clipped("word " * 100, 30, 2, initial_indent="  ")
    assert cut and len(lines) == 2 and lines[-1].endswith(" …") and all(len(x) <= 30 for x in lines)
    lines, cut = _format.wrap_clipped("a short text", 30, 2)
    assert not cut and lines == ["a short text"]
    assert _format.clip("abcdef", 4) == "abc…" and _format.clip("abc", 4) == "abc"


def test_cli_verbose_flag_reaches_the_summary(item_trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    original = text.render

    def spy(result: AnalysisResult, **kw: Any) -> str:
        seen.update(kw)
        return original(result, **kw)

    monkeypatch.setattr(text, "render", spy)
    assert CliRunner().invoke(cli, ["analyze", str(item_trace), "-v"]).exit_code == 0
    assert seen["verbose"] is True


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "{trace}"],
        ["report", "{trace}", "-o", "{tmp}/r.html"],
        ["diff", "{trace}", "{trace}"],
    ],
)
def test_ctrl_c_exits_130_everywhere(
    args: list[str], item_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*_a: Any, **_k: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis, "analyze", interrupted)
    argv = [a.replace("{trace}", str(item_trace)).replace("{tmp}", str(tmp_path)) for a in args]
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == 130, res.output
    assert "interrupted" in res.output and "Traceback" not in res.output


def test_ctrl_c_in_rules_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuadvisor import engine

    def interrupted(*_a: Any, **_k: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "load_rules", interrupted)
    assert CliRunner().invoke(cli, ["rules"]).exit_code == 130


@pytest.mark.slow
def test_real_sigint_during_analysis_exits_130(item_trace: Path, tmp_path: Path) -> None:
    """A real SIGINT in a real process: a rule of a user folder sends it to its own process while the
    analysis runs (rules run inside the engine, which must not swallow it)."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "ctrl_c.py").write_text(
        textwrap.dedent(
            '''
            import os, signal, time
            from gpuadvisor.rules_api import Category, Rule

            class CtrlC(Rule):
                """Sends SIGINT to its own process.

                Why it matters
                --------------
                Tests Ctrl-C.

                How it is detected
                ------------------
                It is not.

                How to fix
                ----------
                Nothing.
                """

                id = "XC001"
                name = "ctrl-c"
                category = Category.CAPTURE

                def check(self, ctx):
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(30)
                    return []
            '''
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "gpuadvisor", "analyze", str(item_trace), "--rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 128 + signal.SIGINT, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "gpuadvisor: interrupted"


def test_internal_error_is_one_line_and_exit_70(item_trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def bug(*_a: Any, **_k: Any) -> Any:
        raise ZeroDivisionError("planted bug")

    monkeypatch.setattr(analysis, "analyze", bug)
    monkeypatch.delenv("GPUADVISOR_DEBUG", raising=False)
    res = CliRunner().invoke(cli, ["analyze", str(item_trace)])
    assert res.exit_code == 70
    lines = res.stderr.strip().splitlines()
    assert lines == [
        "gpuadvisor: internal error: ZeroDivisionError: planted bug "
        "(run with -v or GPUADVISOR_DEBUG=1 for the traceback)"
    ]
    for argv, env in (
        (["analyze", str(item_trace), "-v"], {}),
        (["-v", "analyze", str(item_trace)], {}),
        (["analyze", str(item_trace)], {"GPUADVISOR_DEBUG": "1"}),
    ):
        res = CliRunner().invoke(cli, argv, env=env)
        assert res.exit_code == 70
        assert "Traceback (most recent call last)" in res.output and "planted bug" in res.output


def test_typed_errors_keep_their_exit_codes(item_trace: Path, tmp_path: Path) -> None:
    """An output folder that cannot hold the file is a usage error before any analysis (issue 39)."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    # -o's folder is checked before any analysis (issue 42 item 9): a usage error
    res = CliRunner().invoke(cli, ["analyze", str(item_trace), "-o", str(blocker / "out.txt")])
    assert res.exit_code == 2
    assert res.stderr.splitlines()[-1].startswith("gpuadvisor: error: cannot write")
    assert res.stderr.splitlines()[-1].endswith(f"{blocker} is a file, not a folder")
    res = CliRunner().invoke(cli, ["report", str(item_trace), "-o", str(blocker / "sub" / "r.html")])
    assert res.exit_code == 2
    assert res.stderr.splitlines()[-1] == (
        f"gpuadvisor: error: cannot write {blocker / 'sub' / 'r.html'}: "
        f"{blocker} is a file, not a folder"
    )
    res = CliRunner().invoke(cli, ["analyze", str(tmp_path / "missing.json")])
    assert res.exit_code == 2 and "Traceback" not in res.output


@pytest.mark.parametrize(("typo", "meant"), [("analyse", "analyze"), ("reprot", "report"), ("rule", "rules")])
def test_mistyped_subcommand_suggests(typo: str, meant: str) -> None:
    res = CliRunner().invoke(cli, [typo])
    assert res.exit_code == 2
    assert f"No such command '{typo}'. Did you mean '{meant}'?" in res.output


def test_profile_without_torch_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import importlib.util

    real = importlib.util.find_spec

    def no_torch(name: str, *a: Any, **k: Any) -> Any:
        return None if name == "torch" else real(name, *a, **k)

    monkeypatch.setattr(importlib.util, "find_spec", no_torch)
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    res = CliRunner().invoke(cli, ["profile", str(script)])
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and not res.stdout
    assert "profile needs PyTorch" in res.output and "pip install 'gpuadvisor[profile]'" in res.output


def test_profile_with_a_broken_torch_says_so_in_one_line(tmp_path: Path) -> None:
    """Issue 42 item 7: torch installed but failing to import (a missing libcudnn.so.9) gave exit 1, three
    GA001 findings and 25 lines of "Not applicable". A fake torch package first on sys.path raises that
    ImportError in the training process: one line naming it, exit 2, no run directory left behind."""
    import os
    import subprocess
    import sys

    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        'raise ImportError("libcudnn.so.9: cannot open shared object file: No such file or directory")\n'
    )
    script = tmp_path / "train.py"
    script.write_text("print('the script ran')\n")
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, "-m", "gpuadvisor", "profile", "-o", str(out), str(script)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and not res.stdout, (res.stdout, res.stderr)
    assert "torch cannot be imported" in res.stderr and "libcudnn.so.9: cannot open shared object file" in res.stderr
    assert "the script ran" not in res.stdout and not out.exists()


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('select = ["GA2O1"]\n', "[tool.gpuadvisor] select: unknown rule or category 'GA2O1' (did you mean GA201"),
        ('ignore = ["hostsync"]\n', "[tool.gpuadvisor] ignore: unknown rule or category 'hostsync'"),
        (
            "[tool.gpuadvisor.thresholds.GA201]\nmin_imapct = 0.1\n",
            "[tool.gpuadvisor] thresholds.GA201.min_imapct: unknown threshold of GA201",
        ),
        (
            "[tool.gpuadvisor.thresholds.GA2O1]\nmin_impact = 0.1\n",
            "[tool.gpuadvisor] thresholds.GA2O1.min_impact: unknown rule 'GA2O1'",
        ),
    ],
)
def test_config_errors_name_file_and_key(
    table: str, message: str, item_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        table if table.startswith("[tool.gpuadvisor.") else "[tool.gpuadvisor]\n" + table
    )
    monkeypatch.chdir(project)
    for command in (["analyze", str(item_trace)], ["report", str(item_trace), "-o", str(tmp_path / "r.html")]):
        res = CliRunner().invoke(cli, command)
        assert res.exit_code == 2, res.output
        assert res.stderr.startswith(f"gpuadvisor: error: {project / 'pyproject.toml'}: "), res.output
        assert message in res.output


def test_cli_option_errors_name_the_option(item_trace: Path) -> None:
    res = CliRunner().invoke(cli, ["analyze", str(item_trace), "--threshold", "GA201.min_imapct=0.1"])
    assert res.exit_code == 2 and "--threshold GA201.min_imapct: unknown threshold" in res.output
    res = CliRunner().invoke(cli, ["analyze", str(item_trace), "--ignore", "GA2O1"])
    assert res.exit_code == 2 and "--ignore: unknown rule or category 'GA2O1'" in res.output


# ---------------------------------------------------------------------------------------------- order, numbers


def test_rules_are_listed_in_natural_order() -> None:
    res = CliRunner().invoke(cli, ["rules"], env={"COLUMNS": ""})  # one line per rule
    ids = [line.split()[0] for line in res.output.splitlines()[1:]]
    assert ids == sorted(ids, key=_format.rule_sort_key) and ids.index("GA101") < ids.index("GA1001")
    # GA1004 < GA1101 < GA1106 in natural order (the busy-time rules are the highest numbers)
    assert ids[0] == "GA001" and ids.index("GA1004") < ids.index("GA1101") and ids[-1] == "GA1106"
    assert [_format.rule_sort_key(x)[1] for x in ("GA001", "GA101", "GA902", "GA1001")] == [1, 101, 902, 1001]


def test_human_numbers() -> None:
    assert _format.fmt_number(3100.0) == "3,100" and _format.fmt_number(3099) == "3,099"
    assert _format.fmt_number(54.0) == "54" and _format.fmt_number(12.345) == "12.3"
    assert _format.fmt_number(0.0421) == "0.0421" and _format.fmt_number(1234567.8) == "1,234,568"
    result = clean_result()
    result.metrics = {"step_time_ms": 64.7, "kernels_per_step": 3100.0, "steps_analyzed": 4}
    assert "kernels/step 3,100" in text.render(result)
    from gpuadvisor.render.html import fmt_value

    assert fmt_value(13000, "cuda_runtime_version") == "13000"
    assert fmt_value(91900, "environment.cudnn") == "91900"
    assert fmt_value(150109880320, "memory.total_bytes") == "139.8 GiB (150,109,880,320 bytes)"
    assert fmt_value(123456, "count") == "123,456"


def test_unknown_mfu_is_na_not_zero() -> None:
    result = clean_result()
    result.metrics = {"step_time_ms": 3.0, "matmul_fraction": 0.4, "mfu": None}
    assert "MFU n/a" in text.render(result)
    kernels = __import__("pandas").DataFrame({"family": ["conv", "gemm"], "share": [0.3, 0.7]})
    metrics = {"mfu": 0.00001, "achieved_tflops": 0.01}
    assert _format.mfu_unknown_reason(metrics, kernels) == "convolution FLOPs not recorded (30% of kernel time)"
    assert _format.mfu_unknown_reason({"mfu": 0.25, "achieved_tflops": 250.0}, kernels.iloc[1:]) is None
    assert _format.mfu_unknown_reason({"mfu": None}, None) == "FLOPs not recorded"


# ---------------------------------------------------------------------------------------------- markdown, github


def test_markdown_keeps_code_spans() -> None:
    assert markdown.escape("use `x.to(d, non_blocking=True)` now") == "use `x.to(d, non_blocking=True)` now"
    assert markdown.escape("pipe `a|b` <b>") == "pipe `a\\|b` &lt;b&gt;"
    assert markdown.escape("one ` tick") == "one \\` tick"
    result = clean_result()
    result.findings = [replace(result.findings[0], recommendation="Pin it: `pin_memory=True`, then `.to(d)`.")]
    page = markdown.render(result)
    assert "Pin it: `pin_memory=True`, then `.to(d)`." in page and "\\`" not in page


def _annotations(output: str) -> list[tuple[str, dict[str, str], str]]:
    out = []
    for line in output.splitlines():
        match = re.fullmatch(r"::(error|warning|notice)(?: ([^:]*))?::(.*)", line)
        if match:
            props = dict(p.split("=", 1) for p in (match.group(2) or "").split(",") if p)
            out.append((match.group(1), props, match.group(3)))
    return out


def test_github_annotations() -> None:
    output = github.render(sample_result(), fail_on="high")
    found = _annotations(output)
    assert [level for level, _p, _m in found] == ["error", "warning", "notice", "error"]
    _level, props, message = found[0]
    assert props == {"title": "gpuadvisor GA201 blocking-scalar-reads", "file": "train.py", "line": "36"}
    assert message.startswith("GA201 loss.item() blocks every step (impact 31.0%25, high).")
    assert "%0AFix: synthetic fix for GA201" in message
    assert "file" not in found[1][1]  # a kernel is not a file
    assert found[2][1]["file"] == "/abs/path/data.py" and found[2][1]["line"] == "7"
    assert found[3][1]["title"] == "gpuadvisor internal error in GA999"
    lines = output.splitlines()
    assert len(found) == len(lines) - 1  # every line but the summary is a workflow command
    assert lines[-1] == "gpuadvisor: runs/a: 3 findings (1 high, 1 medium, 1 low); --fail-on high: FAIL"


def test_github_text_cannot_inject_commands() -> None:
    evil = "x\n::error file=evil.py::injected\r\n%0A"
    result = AnalysisResult(
        source=SourceInfo(path="t.json", kind="trace"),
        environment={},
        metrics={},
        findings=[
            Finding(
                rule="GA201",
                name="blocking-scalar-reads",
                category=Category.HOST_SYNC,
                severity=Severity.HIGH,
                impact=0.3,
                title=evil,
                message=evil + HOSTILE,
                evidence={},
                recommendation=evil,
                locations=(Location(file="a,b:c.py", line=3),),
            )
        ],
    )
    output = github.render(result)
    lines = output.splitlines()
    assert len(lines) == 2 and not lines[1].startswith("::")
    # the carriage return is a terminal control: stripped (gpuadvisor/terminal.py) before the encoding
    assert "%0A:\u200b:error file=evil.py::injected%0A%250A" in lines[0]  # escaped, and no line starts with ::
    assert "file=a%2Cb%3Ac.py" in lines[0]


def test_analyze_format_github_cli(item_trace: Path) -> None:
    res = CliRunner().invoke(cli, ["analyze", str(item_trace), "--format", "github", "--fail-on", "high"])
    assert res.exit_code == 1
    assert _annotations(res.output)[0][0] == "error" and "GA201" in res.output


_EXITING_RULE = '''
import sys
from gpuadvisor.rules_api import Category, Rule


class {cls}(Rule):
    """A plugin rule that {what}.

    Why it matters
    --------------
    Tests that one rule cannot end the analysis.

    How it is detected
    ------------------
    It is not.

    How to fix
    ----------
    Nothing.
    """

    id = "{rid}"
    name = "{name}"
    category = Category.CAPTURE

    def check(self, ctx):
        {body}
        return []
'''


@pytest.mark.parametrize("fmt", ["text", "sarif"])
def test_a_rule_that_exits_or_raises_keyboardinterrupt_is_contained(
    item_trace: Path, tmp_path: Path, fmt: str
) -> None:
    """RELIABILITY (issue 12): `sys.exit(0)` or a KeyboardInterrupt raised inside a plugin rule's check()
    becomes that rule's internal error; the other rules' findings and the --fail-on gate stay right."""
    rules = tmp_path / "plugins"
    rules.mkdir()
    (rules / "exits.py").write_text(
        _EXITING_RULE.format(cls="Exits", what="calls sys.exit(0)", rid="XE001", name="exits", body="sys.exit(0)")
    )
    (rules / "kbd.py").write_text(
        _EXITING_RULE.format(
            cls="Kbd", what="raises KeyboardInterrupt", rid="XE002", name="kbd", body="raise KeyboardInterrupt"
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "gpuadvisor", "analyze", str(item_trace), "--rules", str(rules),
         "--fail-on", "high", "--format", fmt],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 1, proc.stderr  # GA201 is high on this trace: the gate fails as it should
    assert "GA201" in proc.stdout
    if fmt == "text":
        assert "XE001" in proc.stdout and "SystemExit" in proc.stdout
        assert "XE002" in proc.stdout and "KeyboardInterrupt" in proc.stdout


_ENTRY = (
    "import atexit, sys; atexit.register(lambda: sys.stderr.write('TEARDOWN\\n')); "
    "sys.argv = ['gpuadvisor', *sys.argv[1:]]; from gpuadvisor.cli import main; main()"
)


def test_entry_point_skips_the_teardown_of_read_only_commands(item_trace: Path, tmp_path: Path) -> None:
    """analyze/report/diff/rules end with os._exit once stdout and stderr are flushed (a large trace's
    tables are not freed one by one): the JSON on a pipe arrives whole, the exit code of --fail-on is
    kept, and the process's atexit hooks do not run. Other commands exit normally."""
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _ENTRY, "analyze", str(item_trace), "--format", "json", "--fail-on", "low"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    import json

    doc = json.loads(proc.stdout)
    assert doc["findings"], doc
    assert proc.returncode == 1, proc.stderr
    assert "TEARDOWN" not in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-c", _ENTRY, "profile", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0 and "TEARDOWN" in proc.stderr, proc.stderr


def test_the_together_line_needs_two_fixes() -> None:
    """The summary's "With the fixes of A, B together" line adds the combined replay of several fixes;
    with one fix it would repeat that finding's own prediction (and read "the fixes of GA502 together")."""
    from gpuadvisor.render import text

    base = _long_result()
    one = {"rules": ["GA502"], "baseline_step_ms": 3.08, "predicted_step_ms": 2.87, "speedup": 1.07}
    two = {**one, "rules": ["GA502", "GA501"], "predicted_step_ms": 2.5, "speedup": 1.23}
    assert "together (predicted" not in text.render(replace(base, prediction=one))
    assert "With the fixes of GA502, GA501 together" in text.render(replace(base, prediction=two))


def test_rules_suggests_only_the_close_names() -> None:
    """Issue 42 item 9: `gpuadvisor rules blocking-scalar-read` suggested clocks-throttled too."""
    res = CliRunner().invoke(cli, ["rules", "blocking-scalar-read"])
    assert res.exit_code == 2
    assert "(did you mean blocking-scalar-reads?)" in res.output and "clocks-throttled" not in res.output
    assert "did you mean" not in CliRunner().invoke(cli, ["rules", "zzzzzz"]).output


def test_rules_catalog_fits_the_terminal_width() -> None:
    """Issue 42 item 9: the catalog ignored the terminal's width (lines of 200+ characters)."""
    piped = CliRunner().invoke(cli, ["rules"], env={"COLUMNS": ""})
    rules_count = len(piped.output.splitlines()) - 1
    for columns in (80, 120):
        res = CliRunner().invoke(cli, ["rules"], env={"COLUMNS": str(columns)})
        assert res.exit_code == 0
        lines = res.output.splitlines()
        assert max(len(line) for line in lines) <= columns, (columns, max(lines, key=len))
        rows = [ln for ln in lines if ln.startswith("GA")]
        assert len(rows) == rules_count
        assert any(line.startswith("    ") for line in lines)  # summaries wrapped, indented
    assert max(len(line) for line in piped.output.splitlines()) > 120  # piped: one line per rule


def test_top_level_help_lists_every_exit_code_of_the_code() -> None:
    """Issue 42 item 9: the top-level help omitted exit code 3 (a rule raised under --fail-on)."""
    import re

    from gpuadvisor import errors

    out = CliRunner().invoke(cli, ["--help"]).output
    said = out.split("Exit codes:")[1].split("Colour on a terminal")[0]
    listed = {int(n) for n in re.findall(r"(?:^|;|\s)(\d+) [a-z]", said)}
    codes = {v for k, v in vars(errors).items() if k.startswith("EXIT_") and isinstance(v, int)}
    assert codes <= listed, (sorted(codes - listed), said)


@pytest.mark.parametrize("command", ["analyze", "report", "diff"])
def test_an_output_folder_that_does_not_exist_is_refused_before_the_analysis(
    command: str, item_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42 item 9: `analyze RUN -o /nonexistent-dir/x.json` analyzed, then exited 74."""
    from gpuadvisor import analysis

    def no_analysis(*a: Any, **k: Any) -> Any:
        raise AssertionError("the analysis ran before -o was checked")

    monkeypatch.setattr(analysis, "analyze", no_analysis)
    out = tmp_path / "nonexistent-dir" / "x.json"
    paths = [str(item_trace)] * (2 if command == "diff" else 1)
    res = CliRunner().invoke(cli, [command, *paths, "-o", str(out)])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == f"gpuadvisor: error: cannot write {out}: the folder {out.parent} does not exist"


def test_a_tiny_share_is_not_printed_as_zero() -> None:
    """Issue 42 item 9: "MFU 0.0%" where "<0.1%" is true."""
    from gpuadvisor.render._ci import fmt_metric

    assert _format.fmt_pct(0.0004) == "<0.1%" and _format.fmt_pct(0.0) == "0.0%"
    assert _format.fmt_pct(0.0004, 0) == "<1%" and _format.fmt_pct(0.0006) == "0.1%"
    assert fmt_metric("mfu", 0.0002) == "<0.1%"


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_step_time_help_says_which_steps_the_code_uses(command: str) -> None:
    """Issue 42 item 8: --help said the run's own reference is the steps timed *before* the window; the
    code (manifest.host_step_durations) prefers those after it."""
    from gpuadvisor.manifest import MIN_REFERENCE_STEPS_AFTER, host_step_durations

    text = " ".join(CliRunner().invoke(cli, [command, "--help"], env={"COLUMNS": "200"}).output.split())
    assert "timed without the profiler after the window (before it when too few ran after)" in text
    # the code: 10 skipped steps at 10 ms, the window (steps 12-16), then steps after it at 5 ms
    ends = [[k, k * 0.010] for k in range(0, 18)]
    t = ends[-1][1] + 0.5  # step 17 carries the export
    ends += [[18 + i, t + i * 0.005] for i in range(MIN_REFERENCE_STEPS_AFTER + 2)]
    capture = {"skip_steps": 10, "warmup_steps": 2, "active_steps": 5, "first_recorded_step": 12,
               "last_recorded_step": 16, "step_ends": ends}  # fmt: skip
    unprofiled, _ = host_step_durations(capture)
    assert unprofiled and all(abs(d - 5.0) < 1e-6 for d in unprofiled), unprofiled
