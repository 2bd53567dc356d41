"""Command-line entry point. Subcommands are loaded lazily so `gpuadvisor --help` stays fast
and imports neither torch, pandas nor plotly."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from gpuadvisor import __version__
from gpuadvisor.errors import EXIT_INTERNAL, GpuAdvisorError

# name -> (module, attribute, one-line help shown by `gpuadvisor --help` without importing the module)
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "profile": ("gpuadvisor.commands.profile", "profile", "Run a training script under the profiler and NVML; save a run."),
    "analyze": ("gpuadvisor.commands.analyze", "analyze", "Analyze a run directory or Kineto trace(s) and print findings."),
    "report": ("gpuadvisor.commands.report", "report", "Write the self-contained HTML report of a run or trace."),
    "diff": ("gpuadvisor.commands.diff", "diff", "Compare two runs: step time, per-category time, new/resolved findings."),
    "rules": ("gpuadvisor.commands.rules", "rules", "List the rules, or print one rule's documentation."),
    "verify": ("gpuadvisor.commands.verify", "verify", "Apply the remedies that need no edit of the script and measure them."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = _COMMANDS.get(cmd_name)
        if spec is None:
            return None
        module = importlib.import_module(spec[0])
        cmd = getattr(module, spec[1])
        assert isinstance(cmd, click.Command)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, spec[2]) for name, spec in _COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuadvisor")
def cli() -> None:
    """gpuadvisor: find what wastes the GPU in a PyTorch training run, and what to change.

    \b
    Exit codes: 0 ok; 1 findings at or above --fail-on (analyze);
    2 usage error or unreadable input; 70 internal error of gpuadvisor;
    74 outputs could not be fully written; profile returns the script's own status
    (128+N when a signal ended it).
    """


def main(argv: list[str] | None = None) -> Any:
    try:
        return cli.main(args=argv, prog_name="gpuadvisor", standalone_mode=True)
    except GpuAdvisorError as err:  # commands normally handle these; this is the safety net
        click.echo(f"gpuadvisor: error: {err}", err=True)
        sys.exit(err.exit_code)
    except Exception as err:  # a bug in gpuadvisor: say so, with its own exit code
        import traceback

        traceback.print_exc()
        click.echo(f"gpuadvisor: internal error: {type(err).__name__}: {err}", err=True)
        sys.exit(EXIT_INTERNAL)
