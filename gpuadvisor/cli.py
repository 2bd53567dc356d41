"""Command-line entry point. Subcommands are loaded lazily so `gpuadvisor --help` stays fast
and imports neither torch, pandas nor plotly.

`LazyGroup.main` is the one error boundary of every command (also under click's CliRunner): typed
errors (gpuadvisor.errors) print one line and exit with their code, click's usage errors exit 2, Ctrl-C
exits 130, and anything else is an internal error: one line, exit 70, and the traceback only with -v
or GPUADVISOR_DEBUG=1.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from gpuadvisor import __version__
from gpuadvisor.commands._options import VERBOSE, verbose_option
from gpuadvisor.errors import EXIT_INTERNAL, EXIT_USAGE, GpuAdvisorError
from gpuadvisor.render._format import Style, color_enabled
from gpuadvisor.terminal import strip_controls

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C
DEBUG_ENV = "GPUADVISOR_DEBUG"

# name -> (module, attribute, one-line help shown by `gpuadvisor --help` without importing the module)
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "profile": ("gpuadvisor.commands.profile", "profile", "Run a training script under the profiler and NVML; save a run."),
    "analyze": ("gpuadvisor.commands.analyze", "analyze", "Analyze a run directory or Kineto trace(s) and print findings."),
    "report": ("gpuadvisor.commands.report", "report", "Write the self-contained HTML report of a run or trace."),
    "diff": ("gpuadvisor.commands.diff", "diff", "Compare two runs: step time, per-category time, new/resolved findings."),
    "rules": ("gpuadvisor.commands.rules", "rules", "List the rules, or print one rule's documentation."),
    "verify": ("gpuadvisor.commands.verify", "verify", "Apply the remedies that need no edit of the script and measure them."),
}


def _debug() -> bool:
    return VERBOSE.get() or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _error_line(prefix: str, message: str = "") -> None:
    """One line on stderr: `gpuadvisor: error: message`, the prefix in red on a colour terminal."""
    style = Style(color_enabled(sys.stderr))
    message = strip_controls(message)  # it can quote a file name or a value from the input
    text = f"gpuadvisor: {style.bad(prefix)}" + (f" {message}" if message else "")
    click.echo(text, err=True, color=style.enabled or None)


def _exit(code: int) -> NoReturn:
    sys.exit(code)


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

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in _COMMANDS:
            close = difflib.get_close_matches(name, list(_COMMANDS), n=2, cutoff=0.6)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint} Commands: {', '.join(_COMMANDS)}.")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, spec[2]) for name, spec in _COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> NoReturn:
        """Run the command line and exit; the single place where errors become exit codes."""
        del standalone_mode  # always exits: the exit code is the interface
        token = VERBOSE.set(False)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            _exit(rv if isinstance(rv, int) else 0)  # --help / --version return their code here
        except GpuAdvisorError as err:
            _error_line("error:", str(err))
            _exit(err.exit_code)
        except click.ClickException as err:  # usage errors: the message and `--help` hint, exit 2
            err.show()
            _exit(err.exit_code)
        except click.exceptions.Abort as err:  # click's wrapper of Ctrl-C (and of end of input)
            if isinstance(err.__cause__, KeyboardInterrupt):
                _error_line("interrupted")
                _exit(EXIT_INTERRUPTED)
            _error_line("aborted", "(end of input)")
            _exit(EXIT_USAGE)
        except KeyboardInterrupt:
            _error_line("interrupted")
            _exit(EXIT_INTERRUPTED)
        except Exception as err:  # a bug in gpuadvisor, not in the user's input
            if _debug():
                traceback.print_exc()
                hint = "please report it with the traceback above"
            else:
                hint = f"run with -v or {DEBUG_ENV}=1 for the traceback"
            text = str(err).strip().splitlines()[0] if str(err).strip() else ""
            _error_line("internal error:", f"{type(err).__name__}{': ' + text if text else ''} ({hint})")
            _exit(EXIT_INTERNAL)
        finally:
            VERBOSE.reset(token)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuadvisor")
@verbose_option
def cli(verbose: bool) -> None:
    """gpuadvisor: find what wastes the GPU in a PyTorch training run, and what to change.

    \b
    Exit codes: 0 ok; 1 findings at or above --fail-on (analyze);
    2 usage error or unreadable input; 3 a rule raised, so --fail-on could not
    judge every rule (analyze; --allow-rule-errors); 70 internal error of gpuadvisor;
    74 outputs could not be fully written; 130 interrupted (Ctrl-C);
    profile returns the script's own status (128+N when a signal ended it).

    \b
    Colour on a terminal; NO_COLOR=1 turns it off, FORCE_COLOR=1 keeps it when piped.
    """
    del verbose  # recorded by the option's callback for the error boundary


# Commands that only read files and write their outputs (closed before they return): as the process's
# entry point they end with os._exit once stdout and stderr are flushed, skipping the interpreter's
# teardown, which frees every table and string of a large trace one by one (0.13-0.21 s after a 99 MB
# analyze; mypy ends the same way). `profile` and `verify` run scripts and keep the normal exit.
_HARD_EXIT_COMMANDS = frozenset({"analyze", "report", "diff", "rules"})


def main(argv: list[str] | None = None) -> NoReturn:
    if argv is not None:  # called from Python (tests, notebooks): a normal SystemExit
        cli.main(args=argv, prog_name="gpuadvisor")
    words = [a for a in sys.argv[1:] if not a.startswith("-")]
    try:
        cli.main(args=None, prog_name="gpuadvisor")
    except SystemExit as done:
        code = done.code
        if (code is None or isinstance(code, int)) and words[:1] and words[0] in _HARD_EXIT_COMMANDS:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(code or 0)
        raise
