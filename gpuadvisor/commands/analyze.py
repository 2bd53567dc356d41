"""`gpuadvisor analyze PATH`: findings of a run directory, a Kineto trace or a folder of rank traces."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import NoReturn

import click

from gpuadvisor.commands._options import emit, output_option, rule_options
from gpuadvisor.errors import EXIT_INTERNAL, EXIT_USAGE, GpuAdvisorError

FORMATS = ("text", "json", "markdown", "junit", "sarif")
_RENDERERS = {
    "text": "gpuadvisor.render.text",
    "json": "gpuadvisor.render.json_out",
    "markdown": "gpuadvisor.render.markdown",
    "junit": "gpuadvisor.render.junit",
    "sarif": "gpuadvisor.render.sarif",
}


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"gpuadvisor: error: {message}", err=True)
    sys.exit(code)


@click.command("analyze")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True, help="Output format."
)
@output_option
@click.option(
    "--fail-on",
    type=click.Choice(["high", "medium", "low", "none"]),
    default=None,
    help="Exit 1 when a finding is at or above this severity (default: no gate, or "
    "fail-on from [tool.gpuadvisor]).",
)
@rule_options()
def analyze(
    path: Path,
    fmt: str,
    output: Path | None,
    fail_on: str | None,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    rules_dirs: tuple[Path, ...],
    threshold_opts: tuple[str, ...],
    config_file: Path | None,
    progress: bool,
) -> None:
    """Analyze PATH (a run directory, a .json/.json.gz Kineto trace, or a folder of per-rank traces)
    and print the findings.

    \b
    Exit codes: 0 no finding at or above --fail-on (or no gate); 1 findings at or above --fail-on;
    2 usage error, bad configuration or unreadable input; 70 internal error.
    """
    try:
        from gpuadvisor.analysis import analyze as run_analysis

        try:
            renderer = importlib.import_module(_RENDERERS[fmt])
        except ImportError:
            _fail(f"format {fmt} not available", EXIT_USAGE)
        select_f, ignore_f, dirs, thresholds, gate = _options(
            select, ignore, rules_dirs, threshold_opts, config_file, fail_on
        )
        result = run_analysis(
            path, select=select_f, ignore=ignore_f, thresholds=thresholds, rules_dirs=dirs, progress=progress
        )
        text = renderer.render(result, fail_on=gate)
        emit(text, output)
        sys.exit(result.exit_code(gate) if gate else 0)
    except GpuAdvisorError as err:
        _fail(str(err), err.exit_code)
    except SystemExit:
        raise
    except Exception as err:  # a bug in gpuadvisor: one line plus the traceback for the bug report
        import traceback

        traceback.print_exc()
        _fail(f"internal error: {type(err).__name__}: {err}", EXIT_INTERNAL)


def _options(
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    rules_dirs: tuple[Path, ...],
    threshold_opts: tuple[str, ...],
    config_file: Path | None,
    fail_on: str | None,
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[Path, ...], dict[str, dict[str, float]], str | None]:
    """Merge command-line options over [tool.gpuadvisor] (CLI > pyproject > defaults).
    Without a configuration file the gate is off unless --fail-on is given."""
    try:
        from gpuadvisor import config as cfg
    except ImportError:  # configuration support not installed: command-line values only
        if threshold_opts:
            raise click.UsageError("--threshold needs gpuadvisor.config") from None
        gate = None if fail_on in (None, "none") else fail_on
        return select, ignore, rules_dirs, {}, gate
    base = cfg.load_config(explicit=config_file) if config_file else cfg.load_config()
    cli_thresholds = cfg.parse_threshold_assignments(threshold_opts)
    merged = cfg.merge(
        base, select=select, ignore=ignore, fail_on=fail_on, thresholds=cli_thresholds, rules_dirs=rules_dirs
    )
    # The gate is off unless asked for (--fail-on, or fail-on in a configuration file).
    gate = merged.fail_on
    thresholds = {rule: dict(values) for rule, values in merged.thresholds.items()}
    return merged.select, merged.ignore, merged.rules_dirs, thresholds, gate
