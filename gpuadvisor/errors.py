"""Typed errors; each carries the process exit code the CLI returns for it.

Exit codes (documented in the README):
  0   success / nothing at or above --fail-on
  1   analyze/CI: findings at or above --fail-on (profile: the script's own status is passed through)
  2   usage error or unreadable input (bad option, missing script, trace that cannot be parsed)
  3   analyze/CI: a gate (--fail-on) was asked for but a rule raised, so not every rule was evaluated
      (--allow-rule-errors lets the gate pass on the rules that ran)
  70  gpuadvisor's own internal error (a bug in gpuadvisor, not in your script)
  74  the run's outputs could not be written completely (disk full, unwritable directory during export)
  128+N  profile: the script was ended by signal N (130 for Ctrl-C, 143 for SIGTERM, 137 for SIGKILL)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_RULE_ERRORS = 3
EXIT_INTERNAL = 70
EXIT_OUTPUT_LOST = 74


class GpuAdvisorError(Exception):
    """Base class; `exit_code` is what the CLI exits with, `str(err)` is the one-line message."""

    exit_code: int = EXIT_INTERNAL


class UsageError(GpuAdvisorError):
    """Bad arguments, missing/invalid script, output directory problems detected before any work."""

    exit_code = EXIT_USAGE


class OutputExistsError(UsageError):
    """The output directory already holds a run (or other files): refused unless overwriting is asked
    for, in the words of the caller: `--force` on the command line, `force=True` in the Python API."""

    def __init__(self, out: object, what: str, override: str = "--force", *, ours: bool = True) -> None:
        self.out, self.what, self.override, self.ours = out, what, override, ours
        if ours:
            super().__init__(f"output directory {out} already holds {what}; use {override} to overwrite it")
        else:  # a folder of other files: never overwritten (issue 39: a project's own manifest.json)
            super().__init__(
                f"output directory {out} is not empty and holds {what}: choose a new or empty folder "
                f"({override} overwrites only a previous run, never other files)"
            )

    def for_api(self) -> OutputExistsError:
        """The same refusal in the Python API's words (`gpuadvisor.profile`, `gpuadvisor.capture`)."""
        return OutputExistsError(self.out, self.what, "force=True", ours=self.ours)


class InputError(GpuAdvisorError):
    """An input to analyze/report/diff that cannot be read at all (not JSON, not a trace, missing)."""

    exit_code = EXIT_USAGE


class ConfigError(GpuAdvisorError):
    """Bad [tool.gpuadvisor] configuration or bad --select/--ignore/threshold values."""

    exit_code = EXIT_USAGE


class OutputLostError(GpuAdvisorError):
    """Some outputs could not be written (disk full...). What could be kept was kept."""

    exit_code = EXIT_OUTPUT_LOST


class InternalError(GpuAdvisorError):
    exit_code = EXIT_INTERNAL
