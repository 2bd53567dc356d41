"""`gpuadvisor diff BASE NEW`: compare two runs (or traces) and gate CI on step-time regressions."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuadvisor import api
from gpuadvisor.commands._options import (
    emit,
    output_option,
    resolve_options,
    rule_options,
    stdout_color,
    trace_limit_options,
    verbose_option,
)
from gpuadvisor.diff import (
    compare_environments,
    diff_results,
    parse_regression_pct,
    recorded_environment,
    verdict,
)
from gpuadvisor.errors import EXIT_FINDINGS, EXIT_OK, UsageError
from gpuadvisor.outputs import check_output
from gpuadvisor.render._ci import fmt_impact
from gpuadvisor.render._format import Style
from gpuadvisor.render.markdown import render_diff
from gpuadvisor.terminal import terminal_safe_diff

if TYPE_CHECKING:
    from gpuadvisor.diff import DiffResult

FORMATS = ("text", "json", "markdown")


def _fmt_ms(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def render_text(result: DiffResult, fail_on_regression: float | None = None, *, color: bool = False) -> str:
    """The terminal form of a diff (ANSI colours only with `color`)."""
    style = Style(color)
    lines = [style.bold(f"gpuadvisor diff: {result.base_source} -> {result.new_source}")]
    if not result.compatible:
        lines.append(style.bad("WARNING: the runs differ, timings are not comparable:"))
        lines += [f"  - {m}" for m in result.mismatches]
    regressed = fail_on_regression is not None and result.exit_code(fail_on_regression) != 0
    said = verdict(result, fail_on_regression)
    lines.append(f"verdict: {style.bad(said) if regressed else said}")
    st = result.step_time
    if st is not None:
        pct = "n/a" if st.delta_pct is None else f"{st.delta_pct:+.1f}%"
        noise = "unknown" if st.noise_ms is None else f"+/-{st.noise_ms:.2f} ms"
        lines.append(
            f"step time (median, {st.basis}): {st.base_ms:.2f} ms -> {st.new_ms:.2f} ms ({st.delta_ms:+.2f} ms, "
            f"{pct}); noise {noise}; steps {st.base_steps} / {st.new_steps}"
        )
    pst = result.profiled_step_time
    if pst is not None:
        pct = "n/a" if pst.delta_pct is None else f"{pst.delta_pct:+.1f}%"
        lines.append(
            f"step time (median, profiled trace): {pst.base_ms:.2f} ms -> {pst.new_ms:.2f} ms "
            f"({pst.delta_ms:+.2f} ms, {pct})"
        )
    if result.categories:
        width = max(len("per profiled step (ms)"), *(len(c.label) for c in result.categories))
        lines.append("")
        lines.append(f"{'per profiled step (ms)'.ljust(width)}  {'base':>9}  {'new':>9}  {'delta':>9}")
        for c in result.categories:
            lines.append(
                f"{c.label.ljust(width)}  {_fmt_ms(c.base_ms):>9}  {_fmt_ms(c.new_ms):>9}  "
                f"{_fmt_ms(c.delta_ms, True):>9}"
            )
    lines.append("")
    lines.append(
        f"findings: {len(result.new_findings)} new, {len(result.resolved_findings)} resolved, "
        f"{len(result.persisting_findings)} persisting"
    )
    marks = {"new": style.bad("+"), "resolved": style.good("-"), "persisting": "="}
    for f in result.findings:
        where = f" at {f.location}" if f.location else ""
        lines.append(
            f"  {marks[f.status]} {style.bold(f.rule)} {f.name}{where}: {f.title} "
            f"[{f.severity}, {fmt_impact(f.base_impact)} -> {fmt_impact(f.new_impact)}]"
        )
    for note in result.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"


@click.command("diff")
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True, help="Output format."
)
@output_option
@click.option(
    "--fail-on-regression",
    type=float,
    default=None,
    metavar="PCT",
    help="Exit 1 when the median step time grew by more than PCT percent AND by more than "
    "the measured step-time noise.",
)
@click.option(
    "--allow-mismatch",
    is_flag=True,
    default=False,
    help="Compare runs of different scripts, or from different devices (CPU or GPU), GPUs, drivers, CUDA or "
    "torch versions (warns loudly).",
)
@trace_limit_options
@rule_options(thresholds=False, progress=False)
@verbose_option
def diff(
    base: Path,
    new: Path,
    fmt: str,
    output: Path | None,
    fail_on_regression: float | None,
    allow_mismatch: bool,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    rules_dirs: tuple[Path, ...],
    config_file: Path | None,
    verbose: bool,
) -> None:
    """Compare BASE and NEW (run directories or Kineto traces): median step time against the measured
    noise, per-category time per step, new and resolved findings.

    \b
    Exit codes: 0 no regression (or no gate); 1 step time regressed by more than
    --fail-on-regression percent and beyond the noise; 2 usage error, unreadable input, or
    runs of different scripts or from a different device (CPU vs GPU), GPU, driver, CUDA or torch
    without --allow-mismatch; 70 internal error; 130 interrupted.
    """
    del verbose  # nothing in a diff is shortened; the error boundary reads it
    if output is not None:
        check_output(output, [base, new])  # before any analysis: never over an input, exit 2
    pct = parse_regression_pct(fail_on_regression)
    recorded = recorded_environment(base), recorded_environment(new)
    if recorded[0] is not None and recorded[1] is not None and not allow_mismatch:
        # what environment.json recorded already differs: refuse before analyzing either run
        early, _ = compare_environments(recorded[0], recorded[1])
        if early:
            raise UsageError(
                f"runs are not comparable ({'; '.join(early)}); pass --allow-mismatch to compare anyway"
            )
    config = resolve_options(select, ignore, rules_dirs, (), config_file, None, (base, new))
    result = diff_results(api.analyze(base, config=config), api.analyze(new, config=config))
    shown = terminal_safe_diff(result)  # what reaches the terminal: no escape sequence from a trace
    if not result.compatible and not allow_mismatch:
        reasons = "; ".join(result.mismatches)
        raise UsageError(f"runs are not comparable ({reasons}); pass --allow-mismatch to compare anyway")
    if not result.compatible:
        click.echo(
            "gpuadvisor: WARNING: comparing runs that differ "
            f"({'; '.join(shown.mismatches)}): step-time changes may come from that difference, "
            "not from a change of the code.",
            err=True,
        )
    color = fmt == "text" and stdout_color(output)
    if fmt == "json":
        data = result.to_dict()
        data["fail_on_regression"] = pct
        data["regressed"] = None if pct is None else result.regressed(pct)
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    elif fmt == "markdown":
        text = render_diff(result, fail_on_regression=pct)
    else:
        text = render_text(shown, pct, color=color)
    emit(text, output, color=color)
    sys.exit(EXIT_FINDINGS if result.exit_code(pct) else EXIT_OK)
