"""The Python API for CI jobs, tests and notebooks (re-exported lazily by `gpuadvisor`).

    import gpuadvisor

    run = gpuadvisor.profile("train.py", args=["--epochs", "1"], out="runs/a")  # a child process
    result = run.analyze()                      # or gpuadvisor.analyze("runs/a") / a trace file
    assert result.exit_code(fail_on="high") == 0, result.findings
    delta = gpuadvisor.diff("runs/base", run)   # step time vs noise, new and resolved findings
    assert not delta.regressed(5.0)

    with gpuadvisor.capture(out="runs/nb") as cap:   # in-process, e.g. in a notebook
        for batch in loader:
            train_step(batch)
            cap.step()

Every import inside is lazy: `import gpuadvisor` loads none of torch, pandas or plotly.
Bad input raises the typed errors of `gpuadvisor.errors` (each with its CLI exit code).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuadvisor import analysis
from gpuadvisor.capture import runner as capture_runner
from gpuadvisor.capture.inprocess import Capture
from gpuadvisor.capture.options import ProfileOptions
from gpuadvisor.config import resolve_options
from gpuadvisor.diff import diff as run_diff
from gpuadvisor.errors import InputError, OutputExistsError
from gpuadvisor.rundir import MANIFEST, REPORT
from gpuadvisor.runinfo import read_manifest

if TYPE_CHECKING:
    from gpuadvisor.capture.inprocess import Capture
    from gpuadvisor.capture.runner import ProfileOutcome
    from gpuadvisor.config import AnalysisConfig
    from gpuadvisor.diff import DiffInput, DiffResult
    from gpuadvisor.result import AnalysisResult

__all__ = ["Run", "analyze", "capture", "diff", "profile"]

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class Run:
    """A run directory written by `profile` (or opened with `Run.open`).

    `exit_status` is the script's own exit status (128+N when signal N ended it); `manifest` is
    manifest.json as a dict (see docs/run-directory.md); `degraded` lists what the capture could not
    record. `analyze()` analyzes the run directory.
    """

    run_dir: Path
    exit_status: int
    manifest: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, run_dir: PathLike) -> Run:
        """Open an existing run directory (InputError when it has no readable manifest.json)."""
        path = Path(run_dir)
        manifest_path = path / MANIFEST
        if not manifest_path.exists():
            raise InputError(f"{path} is not a run directory (no {MANIFEST})")
        notes: list[str] = []
        manifest = read_manifest(path, notes)  # read and checked as the analysis reads it
        if not manifest:
            raise InputError(f"{manifest_path}: unreadable: {'; '.join(notes) or 'not a JSON object'}")
        status = manifest.get("exit_status")
        return cls(run_dir=path, exit_status=status if isinstance(status, int) else 0, manifest=manifest)

    @property
    def degraded(self) -> list[str]:
        flags = self.manifest.get("degraded")
        return [str(f) for f in flags] if isinstance(flags, list) else []

    @property
    def ok(self) -> bool:
        """The script exited 0 (a capture stopped after its window counts as 0)."""
        return self.exit_status == 0

    def analyze(
        self,
        *,
        select: Iterable[str] = (),
        ignore: Iterable[str] = (),
        thresholds: Mapping[str, Mapping[str, float]] | None = None,
        rules: Iterable[PathLike] = (),
        config: AnalysisConfig | PathLike | None = None,
    ) -> AnalysisResult:
        """Analyze this run (same options as `gpuadvisor.analyze`)."""
        return analyze(self, select=select, ignore=ignore, thresholds=thresholds, rules=rules, config=config)

    def report_path(self) -> Path:
        return self.run_dir / REPORT


def profile(
    script: PathLike,
    args: Sequence[str] = (),
    *,
    out: PathLike | None = None,
    module: bool = False,
    force: bool = False,
    full: bool = False,
    options: ProfileOptions | None = None,
    **capture_options: Any,
) -> Run:
    """Run `script` (or, with `module=True`, the module named `script`, like `python -m`) under the
    profiler in a child process, exactly as `gpuadvisor profile` does, and return the `Run`.

    `args` are the script's own arguments. `out` is the run directory (default: the one
    `gpuadvisor profile` picks); an existing one is refused unless `force`. `full` runs the script to
    its end instead of stopping after the capture window. `options` is a
    `gpuadvisor.capture.ProfileOptions` (the same object the CLI builds); other keyword arguments
    replace single fields of it: skip_steps, warmup_steps, active_steps, with_stack, nvml_interval,
    quiet, short_run_seconds, analyze (write findings.json and report.html, default True)...

    The script's exit status is in `Run.exit_status`: a failing script does not raise. Usage errors
    (missing script, syntax error, unwritable output, unknown option) raise `UsageError` before anything
    runs.
    """
    # the capture never imports the analysis: it runs here, after the capture returned
    asked = options if options is not None else ProfileOptions()
    analyze = bool(capture_options.get("analyze", asked.analyze))
    quiet = bool(capture_options.get("quiet", asked.quiet))
    if options is not None:
        capture_options["options"] = options
    try:
        outcome = capture_runner.run_profile(
            str(script),
            list(args),
            out=None if out is None else Path(out),
            module=module,
            force=force,
            full=full,
            **capture_options,
        )
    except OutputExistsError as err:
        raise err.for_api() from None
    if analyze:
        outcome = analyze_profiled(outcome, quiet=quiet)
    return Run(run_dir=Path(outcome.run_dir), exit_status=int(outcome.exit_status), manifest=outcome.manifest)


def analyze_profiled(outcome: ProfileOutcome, *, quiet: bool) -> ProfileOutcome:
    """`profile`'s last step, after the capture returned: write findings.json and report.html and print
    the summary (never failing the profile); outputs that could not be written are recorded in the
    manifest, and a successful run then exits 74."""
    lost = analysis.analyze_fresh_run(outcome.run_dir, quiet=quiet)
    return outcome if lost is None else capture_runner.record_lost_outputs(outcome, lost)


def analyze(
    path_or_run: PathLike | Run,
    *,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    rules: Iterable[PathLike] = (),
    config: AnalysisConfig | PathLike | None = None,
) -> AnalysisResult:
    """Analyze a run directory, a Kineto trace (.json/.json.gz), a folder of per-rank traces, or a `Run`.

    `select`/`ignore`: rule ids, id prefixes ("GA2"), names or categories. `thresholds`: {rule id or
    name: {threshold: value}}. `rules`: extra folders of user rules. `config`: an `AnalysisConfig`
    (e.g. `gpuadvisor.config.load_config()` for the nearest pyproject.toml, as the CLI does) or the
    path of a TOML file; the explicit arguments override it (same precedence as the CLI). Without
    `config` no configuration file is read.

    Returns an `AnalysisResult`; `result.exit_code(fail_on=...)` gives the CI verdict.
    Raises InputError / ConfigError for unreadable input or bad options.
    """
    options = resolve_options(config, select, ignore, thresholds, rules)
    target = path_or_run.run_dir if isinstance(path_or_run, Run) else Path(os.fspath(path_or_run))
    return analysis.analyze(
        target,
        select=options.select,
        ignore=options.ignore,
        thresholds=options.thresholds or None,
        rules_dirs=options.rules_dirs,
    )


def diff(
    base: DiffInput,
    new: DiffInput,
    *,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    rules: Iterable[PathLike] = (),
) -> DiffResult:
    """Compare two runs: median step time against the measured noise, per-category time per step,
    new / resolved findings, and whether the environments match (`compatible`, `mismatches`).

    `base`/`new`: run directories, trace files, `Run`s or `AnalysisResult`s. See `gpuadvisor.diff`
    (the module) for the exact definitions; `result.regressed(pct)` is the CI gate.
    """
    return run_diff(base, new, select=select, ignore=ignore, thresholds=thresholds, rules=rules)


if TYPE_CHECKING:
    # For type checkers `capture` is the class: `gpuadvisor.capture(out=..., skip_steps=...)` is checked
    # against Capture.__init__ and gives a `Capture` (a context manager with `.step()`).
    from gpuadvisor.capture.inprocess import Capture as capture
else:

    def capture(out: PathLike, **options: Any) -> Capture:
        """The in-process capture context manager (`gpuadvisor.capture.Capture`), for notebooks and code
        that cannot run as a script: `with gpuadvisor.capture(out="runs/nb") as cap: ...; cap.step()`.
        NVML is sampled from a thread of this process; the run directory has the same layout as
        `profile`'s. Options: force, skip_steps, warmup_steps, active_steps, with_stack, nvml,
        nvml_interval, quiet, steps ("manual" or "auto")."""
        return Capture(Path(out), **options)
