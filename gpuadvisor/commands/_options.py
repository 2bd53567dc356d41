"""Command-line options shared by the commands that run the analysis (analyze, report, diff)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


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


def output_option(f: F) -> F:
    """-o/--output FILE (default: stdout)."""
    return click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Write the output to FILE instead of stdout.",
    )(f)


def emit(text: str, output: Path | None) -> None:
    """Write `text` to OUTPUT atomically, or to stdout. OutputLostError (exit 74) when it cannot."""
    if output is None:
        click.echo(text, nl=False)
        return
    from gpuadvisor._atomic import write_text_atomic
    from gpuadvisor.errors import OutputLostError

    try:
        write_text_atomic(output, text)
    except OSError as err:
        raise OutputLostError(f"cannot write {output}: {err.strerror or err}") from None
