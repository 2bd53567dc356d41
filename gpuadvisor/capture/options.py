"""`ProfileOptions`: how `gpuadvisor profile` records a run, shared by the CLI, the API and the runner.

One frozen dataclass instead of a keyword argument per option in every layer: the CLI
(`commands/profile.py`) builds it from its flags, `gpuadvisor.profile(...)` from its keyword
arguments (`ProfileOptions.from_kwargs`), `gpuadvisor.capture.rank` from its argparse namespace, and
`capture.runner.run_profile` validates it once (`validate()`, usage errors exit 2) and derives the
child's `SessionConfig` from it. No torch import.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from gpuadvisor.errors import UsageError


@dataclass(frozen=True)
class ProfileOptions:
    """Options of one capture (defaults: those of `gpuadvisor profile`, docs/capture.md).

    out: run directory (None: `gpuadvisor-runs/<stem>-<timestamp>`); force: reuse an existing one;
    full: run the script to its end instead of stopping after the window; skip_steps, warmup_steps,
    active_steps: the window; with_stack: Python stacks in the trace; nvml_interval: seconds between
    NVML samples; quiet: no progress lines; time_step_seconds / time_fallback_after: steps by time;
    short_run_seconds: how long the first steps are recorded speculatively so that a script that ends
    before the window is still captured (0: never); term_timeout: seconds between a forwarded SIGTERM
    and SIGKILL; analyze: analyze the run at the end (done by the caller, `gpuadvisor.api.profile` or
    the profile command, after `run_profile` returns: the capture never imports the analysis); redact: mask credentials of the command line in
    everything written (gpuadvisor.redact); observe_steps / observe_seconds: after the window (without
    `full`) the steps go on being timed, without the profiler, until step `observe_steps` or for
    `observe_seconds`, whichever comes first (costs that come every N steps: docs/capture.md).
    """

    out: str | None = None
    force: bool = False
    full: bool = False
    skip_steps: int = 10
    warmup_steps: int = 2
    active_steps: int = 10
    with_stack: bool = False
    nvml_interval: float = 0.1
    quiet: bool = False
    time_step_seconds: float = 1.0
    time_fallback_after: float = 20.0
    short_run_seconds: float = 2.0
    observe_steps: int = 100
    observe_seconds: float = 20.0
    term_timeout: float = 20.0
    analyze: bool = True
    redact: bool = True

    def validate(self) -> ProfileOptions:
        """Raise `UsageError` for a value the capture cannot use; return self."""
        for name, value in (("--skip-steps", self.skip_steps), ("--warmup-steps", self.warmup_steps)):
            if value < 0:
                raise UsageError(f"{name} must be >= 0 (got {value})")
        if self.active_steps < 1:
            raise UsageError(f"--active-steps must be >= 1 (got {self.active_steps})")
        if self.nvml_interval <= 0:
            raise UsageError(f"--nvml-interval must be > 0 (got {self.nvml_interval})")
        if self.time_step_seconds <= 0:
            raise UsageError(f"--time-step-seconds must be > 0 (got {self.time_step_seconds})")
        for name, fvalue in (
            ("--time-fallback-after", self.time_fallback_after),
            ("--short-run-seconds", self.short_run_seconds),
            ("--observe-seconds", self.observe_seconds),
        ):
            if fvalue < 0:
                raise UsageError(f"{name} must be >= 0 (got {fvalue})")
        if self.observe_steps < 0:
            raise UsageError(f"--observe-steps must be >= 0 (got {self.observe_steps})")
        return self

    @classmethod
    def from_kwargs(cls, base: ProfileOptions | None = None, **kwargs: Any) -> ProfileOptions:
        """`base` (default: the defaults) with the named fields replaced; an unknown name is a
        `UsageError` that lists the valid ones."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise UsageError(f"unknown profile option(s) {', '.join(unknown)}; valid: {', '.join(sorted(names))}")
        if kwargs.get("out") is not None:
            kwargs["out"] = os.fspath(kwargs["out"])
        return dataclasses.replace(base or cls(), **kwargs)
