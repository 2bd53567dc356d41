"""`gpuadvisor analyze PATH`: findings of a run directory, a Kineto trace or a folder of rank traces."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from gpuadvisor.commands._options import (
    analyze_path,
    emit,
    output_option,
    resolve_options,
    rule_options,
    stdout_color,
    step_time_option,
    trace_limit_options,
    verbose_option,
)
from gpuadvisor.outputs import check_output

FORMATS = ("text", "json", "markdown", "github", "junit", "sarif")
_RENDERERS = {
    "text": "gpuadvisor.render.text",
    "json": "gpuadvisor.render.json_out",
    "markdown": "gpuadvisor.render.markdown",
    "github": "gpuadvisor.render.github",
    "junit": "gpuadvisor.render.junit",
    "sarif": "gpuadvisor.render.sarif",
}


@click.command("analyze")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="Output format (github: workflow annotations for GitHub Actions).",
)
@output_option
@click.option(
    "--fail-on",
    type=click.Choice(["high", "medium", "low", "none"]),
    default=None,
    help="Exit 1 when a finding is at or above this severity (default: no gate, or "
    "fail-on from [tool.gpuadvisor]).",
)
@trace_limit_options
@click.option(
    "--allow-rule-errors",
    is_flag=True,
    help="Let the --fail-on gate pass when a rule raised (the error is still reported). Without it a "
    "gate that could not evaluate every rule fails with exit code 3.",
)
@rule_options()
@step_time_option
@verbose_option
def analyze(
    path: Path,
    fmt: str,
    output: Path | None,
    fail_on: str | None,
    allow_rule_errors: bool,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    rules_dirs: tuple[Path, ...],
    threshold_opts: tuple[str, ...],
    config_file: Path | None,
    progress: bool,
    step_time_ms: float | None,
    verbose: bool,
) -> None:
    """Analyze PATH (a run directory, a .json/.json.gz Kineto trace, or a folder of per-rank traces)
    and print the findings. The text summary shortens long findings (ending in …); -v prints them whole.

    \b
    Exit codes: 0 no finding at or above --fail-on (or no gate); 1 findings at or above --fail-on;
    3 a gate was asked for but a rule raised (unless --allow-rule-errors); 2 usage error, bad
    configuration or unreadable input; 70 internal error; 130 interrupted.
    """
    if output is not None:
        check_output(output, [path])  # before any analysis: never over the input, exit 2
    options = resolve_options(select, ignore, rules_dirs, threshold_opts, config_file, fail_on, (path,))
    result = analyze_path(path, options, progress=progress, step_time_ms=step_time_ms)
    renderer = importlib.import_module(_RENDERERS[fmt])
    color = fmt == "text" and stdout_color(output)
    if fmt == "text":
        text = renderer.render(
            result, fail_on=options.fail_on, verbose=verbose, color=color, allow_rule_errors=allow_rule_errors
        )
    else:
        text = renderer.render(result, fail_on=options.fail_on)
    emit(text, output, color=color)
    sys.exit(result.exit_code(options.fail_on, allow_rule_errors=allow_rule_errors) if options.fail_on else 0)
