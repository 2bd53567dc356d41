"""Command-line options shared by the commands that run the analysis (analyze, report, diff)."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gpuadvisor._atomic import why_not_written, write_text_atomic
from gpuadvisor.errors import OutputLostError, UsageError
from gpuadvisor.outputs import folder_refusal
from gpuadvisor.render._format import color_enabled
from gpuadvisor.terminal import strip_controls
from gpuadvisor.trace import limits

if TYPE_CHECKING:
    from gpuadvisor.config import AnalysisConfig
    from gpuadvisor.result import AnalysisResult

F = TypeVar("F", bound=Callable[..., Any])

# Set by any -v/--verbose of this command line; read by the error boundary (gpuadvisor.cli) to show
# an internal error's traceback.
VERBOSE: ContextVar[bool] = ContextVar("gpuadvisor_verbose", default=False)


def _record_verbose(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    del ctx, param
    if value:
        VERBOSE.set(True)
    return value


def verbose_option(f: F) -> F:
    """-v/--verbose: the full text of every finding (no shortening) and, on an internal error, the
    traceback."""
    return click.option(
        "-v",
        "--verbose",
        is_flag=True,
        default=False,
        callback=_record_verbose,
        help="Full text (nothing shortened) and, on an internal error, the traceback.",
    )(f)


def stdout_color(output: Path | None) -> bool:
    """Colour for text written to stdout (never into a file given with -o)."""
    return output is None and color_enabled(sys.stdout)


def rule_options(*, thresholds: bool = True, progress: bool = True) -> Callable[[F], F]:
    """--select, --ignore, --rules DIR, --config FILE, and (optionally) --threshold and --progress."""

    def decorate(f: F) -> F:
        opts = [
            click.option(
                "--select",
                multiple=True,
                metavar="RULE",
                help="Run only these rules: id, id prefix (GA2), name or category. Repeatable.",
            ),
            click.option(
                "--ignore", multiple=True, metavar="RULE", help="Skip these rules (same forms). Repeatable."
            ),
            click.option(
                "--rules",
                "rules_dirs",
                multiple=True,
                type=click.Path(path_type=Path),
                metavar="DIR",
                help="Also load rules from the *.py files of DIR. Repeatable.",
            ),
        ]
        if thresholds:
            opts.append(
                click.option(
                    "--threshold",
                    "threshold_opts",
                    multiple=True,
                    metavar="RULE.KEY=VALUE",
                    help="Override a rule threshold, e.g. GA201.min_impact=0.03. Repeatable.",
                )
            )
        opts.append(
            click.option(
                "--config",
                "config_file",
                type=click.Path(dir_okay=False, path_type=Path),
                default=None,
                help="Read [tool.gpuadvisor] from this file instead of the nearest pyproject.toml.",
            )
        )
        if progress:
            opts.append(
                click.option(
                    "--progress/--no-progress",
                    default=True,
                    show_default=True,
                    help="Show loading progress on stderr for large traces.",
                )
            )
        for opt in reversed(opts):
            f = opt(f)
        return f

    return decorate


def _set_limit(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Check a --max-trace-bytes / --max-events value and put it in the environment, where the trace
    reader and its worker processes read it (`gpuadvisor.trace.limits`)."""
    del ctx
    if value is None:
        return
    if param.name == "max_trace_bytes":
        parse, env = limits.parse_size, limits.ENV_MAX_TRACE_BYTES
    else:
        parse, env = limits.parse_count, limits.ENV_MAX_EVENTS
    try:
        os.environ[env] = str(parse(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def trace_limit_options(f: F) -> F:
    """--max-trace-bytes SIZE and --max-events N: how much of a trace is read before refusing it."""
    f = click.option(
        "--max-events",
        metavar="N",
        default=None,
        expose_value=False,
        callback=_set_limit,
        help="Refuse a trace with more events than this (default 20M, about 7 GB of memory once "
        "loaded; 0: no limit). Also GPUADVISOR_MAX_EVENTS.",
    )(f)
    return click.option(
        "--max-trace-bytes",
        metavar="SIZE",
        default=None,
        expose_value=False,
        callback=_set_limit,
        help="Refuse a trace whose decompressed text is larger than this (default 2GB; e.g. 4GB, "
        "512MiB; 0: no limit). Guards against decompression bombs. Also GPUADVISOR_MAX_TRACE_BYTES.",
    )(f)


def check_output_folder(ctx: click.Context | None, param: click.Parameter | None, output: Path | None) -> Path | None:
    """-o FILE's folder must exist and be writable: checked when the option is read, before any analysis
    (a usage error, exit 2), not found out when the result is written (exit 74). A click callback."""
    del ctx, param
    if output is None:
        return None
    why = folder_refusal(output)  # the one decision (gpuadvisor/outputs.py)
    if why is not None:
        raise UsageError(f"cannot write {output}: {why}")
    return output


def output_option(f: F) -> F:
    """-o/--output FILE (default: stdout)."""
    return click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        callback=check_output_folder,
        help="Write the output to FILE instead of stdout (its folder must exist).",
    )(f)


def emit(text: str, output: Path | None, *, color: bool = False) -> None:
    """Write `text` to OUTPUT atomically, or to stdout (keeping ANSI styles when `color`).
    OutputLostError (exit 74) when it cannot."""
    if output is None:
        click.echo(text, nl=False, color=color or None)
        return
    try:
        write_text_atomic(output, text)
    except OSError as err:
        raise OutputLostError(f"cannot write {output}: {why_not_written(output, err)}") from None


def resolve_options(
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    rules_dirs: tuple[Path, ...],
    threshold_opts: tuple[str, ...],
    config_file: Path | None,
    fail_on: str | None,
    inputs: tuple[Path, ...] = (),
) -> AnalysisConfig:
    """Command-line options over [tool.gpuadvisor] (CLI > pyproject > defaults), checked against the
    rules that will run, so that a bad value names its file and key, or its option. Without a
    configuration file the gate is off unless --fail-on is given. The nearest pyproject.toml is the
    user's own only: one inside an input or a run directory (`inputs`: what is analyzed) is passed
    over, and said so on stderr; the rules folders a found pyproject.toml names are said too (their
    code is imported)."""
    # lazy: `gpuadvisor --help` imports this module; the rule engine loads when a command runs
    from gpuadvisor import config as cfg

    ignored: list[Path] = []
    if config_file:
        base = cfg.load_config(explicit=config_file)
    else:
        base = cfg.load_config(inputs=inputs, ignored=ignored)
    for path in ignored:
        click.echo(
            f"gpuadvisor: not using {strip_controls(str(path))}: it lies in what is analyzed (a run "
            "directory is data, not configuration); pass --config FILE to use it",
            err=True,
        )
    if base.rules_dirs and not config_file and base.source is not None:
        shown = ", ".join(strip_controls(str(d)) for d in base.rules_dirs)
        click.echo(f"gpuadvisor: loading rules from {shown} (rules-dirs of {strip_controls(str(base.source))})", err=True)
    cli_thresholds = cfg.parse_threshold_assignments(threshold_opts)
    merged = cfg.merge(
        base, select=select, ignore=ignore, fail_on=fail_on, thresholds=cli_thresholds, rules_dirs=rules_dirs
    )
    cfg.check_against_rules(base, merged.rules_dirs, select=select, ignore=ignore, thresholds=cli_thresholds)
    return merged


def _check_step_time(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    del ctx, param

    if value is not None and (not math.isfinite(value) or value <= 0):
        raise click.BadParameter(f"{value} is not a step time: give the milliseconds per step, > 0")
    return value


def step_time_option(f: F) -> F:
    """--step-time-ms MS: the step time measured outside the profiler (analyze, report)."""
    return click.option(
        "--step-time-ms",
        type=float,
        default=None,
        metavar="MS",
        callback=_check_step_time,
        help="The step time your run reaches without the profiler (from its logs: batch size / "
        "samples per second). The replay calibrates its host work to it; without it a run directory "
        "uses the steps gpuadvisor timed without the profiler after the window (before it when too few "
        "ran after), and a trace from another tool its host work as recorded.",
    )(f)


def analyze_path(
    path: Path, options: AnalysisConfig, *, progress: bool, step_time_ms: float | None = None
) -> AnalysisResult:
    """Analyze PATH with the resolved options (what analyze and report share)."""
    # lazy: `gpuadvisor --help` imports this module; the analysis loads when a command runs
    from gpuadvisor.analysis import analyze

    return analyze(
        path,
        select=options.select,
        ignore=options.ignore,
        thresholds=options.threshold_dict(),
        rules_dirs=options.rules_dirs,
        progress=progress,
        step_time_ms=step_time_ms,
    )
