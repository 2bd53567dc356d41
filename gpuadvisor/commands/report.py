"""`gpuadvisor report PATH`: write the self-contained HTML report of a run directory or trace(s)."""

from __future__ import annotations

import webbrowser
from pathlib import Path

import click

from gpuadvisor import rundir
from gpuadvisor.commands._options import (
    analyze_path,
    check_output_folder,
    resolve_options,
    rule_options,
    step_time_option,
    trace_limit_options,
    verbose_option,
)
from gpuadvisor.errors import UsageError
from gpuadvisor.outputs import check_output
from gpuadvisor.render.html import write_report


def default_output(path: Path) -> Path:
    """Where the report goes without -o: RUN/report.html for a run directory, FOLDER/report.html for
    a folder of traces, and NAME.report.html next to a trace file NAME.json[.gz]."""
    if path.is_dir():
        return path / rundir.REPORT
    name = path.name
    for suffix in (".json.gz", ".json", ".gz"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return path.with_name(f"{name or 'trace'}.report.html")


@click.command("report")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    callback=check_output_folder,
    help="Write the report here (default: RUN/report.html for a run directory, FOLDER/report.html "
    "for a folder of traces, NAME.report.html next to a trace file).",
)
@click.option(
    "--cdn",
    is_flag=True,
    default=False,
    help="Link plotly.js from cdn.plot.ly instead of inlining it (a ~4.8 MB smaller file that needs "
    "network access to show its charts).",
)
@click.option(
    "--shared-plotly",
    is_flag=True,
    default=False,
    help="Link plotly.js from plotly-<version>.min.js beside the report, written there once (for a "
    "folder of reports: one copy of its ~4.8 MB instead of one per report; works offline while the "
    "file stays beside the reports).",
)
@click.option("--open", "open_browser", is_flag=True, default=False, help="Open the report in a web browser.")
@trace_limit_options
@rule_options()
@step_time_option
@verbose_option
def report(
    path: Path,
    output: Path | None,
    cdn: bool,
    shared_plotly: bool,
    open_browser: bool,
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
    and write one self-contained HTML report that works offline.

    Prints the path of the written report on stdout.

    \b
    Exit codes: 0 report written; 2 usage error, bad configuration or unreadable input;
    70 internal error; 74 the report could not be written; 130 interrupted.
    """
    del verbose  # only the error boundary reads it
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    target = output if output is not None else default_output(path)
    check_output(target, [path])  # before any analysis: never over the input, exit 2
    options = resolve_options(select, ignore, rules_dirs, threshold_opts, config_file, None, (path,))
    result = analyze_path(path, options, progress=progress, step_time_ms=step_time_ms)
    written = write_report(result, target, cdn=cdn, shared_plotly=shared_plotly)
    click.echo(str(written))
    if open_browser and not webbrowser.open(written.resolve().as_uri()):
        click.echo("gpuadvisor: could not open a web browser; open the file yourself.", err=True)
