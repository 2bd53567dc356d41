"""`gpuadvisor verify RUN`: a thin click layer over `gpuadvisor.verify.verify_run`."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

import click

from gpuadvisor.analysis import analyze
from gpuadvisor.errors import EXIT_INTERNAL, GpuAdvisorError
from gpuadvisor.terminal import strip_controls
from gpuadvisor.verify.runner import VerifyOptions, verify_run


def analysis_document(run_dir: Path) -> dict[str, Any]:
    """The run's analysis as findings.json holds it (its findings and the top findings' combined
    prediction): what verify plans its trials from, and explore prices its remedy sets from, when the
    run has no findings.json yet (`profile --verify`, `profile --explore`)."""
    document: dict[str, Any] = analyze(run_dir).to_dict()
    return document


def verify_options(f: click.decorators.FC) -> click.decorators.FC:
    """The options `verify` shares with `profile --verify`."""
    for opt in reversed(
        (
            click.option(
                "--trials",
                type=click.IntRange(min=1),
                default=3,
                show_default=True,
                help="Trials of the baseline and of each remedy (interleaved).",
            ),
            click.option(
                "--budget",
                "budget_s",
                type=click.FloatRange(min=0.0, min_open=True),
                default=None,
                metavar="SECONDS",
                help="Bound on the total wall time: later trials are skipped (and reported so). Explore "
                "without it: sized by its first baseline trial (its length x the trials it plans).",
            ),
            click.option(
                "--only",
                multiple=True,
                metavar="FINDING_OR_REMEDY",
                help="Only these findings (rule id, e.g. GA301) or remedies (id, e.g. tf32: forces the "
                "trial even without a finding). Repeatable.",
            ),
            click.option(
                "--warmup-steps",
                "verify_warmup_steps",
                type=click.IntRange(min=1),
                default=10,
                show_default=True,
                help="Steps of each trial left out before timing at least (compile, autotuning, workers "
                "starting); more until the step time settles.",
            ),
            click.option(
                "--steps",
                "verify_steps",
                type=click.IntRange(min=1),
                default=20,
                show_default=True,
                help="Settled steps timed in each trial at least (more to cover a stall pattern: 3 of its "
                "periods); the trial compares their mean.",
            ),
            click.option(
                "--num-workers",
                type=click.IntRange(min=1),
                default=None,
                help="DataLoader workers of the dataloader_workers remedy [default: min(8, CPUs - 1); "
                "explore: 3/4 of the CPUs, at most 16].",
            ),
        )
    ):
        f = opt(f)
    return f


@click.command("verify")
@click.argument("run", type=click.Path(path_type=Path))
@verify_options
@click.option(
    "--explore",
    is_flag=True,
    help="Search for the best measured configuration (docs/verify.md): the remedy sets the findings "
    "price first, as sets, then what each configuration's measured bottleneck calls for, through the "
    "script's own switches where it has them; stops when the predicted remaining gain is below the "
    "noise. --only names levers or remedies to measure alone instead; --budget defaults to the first "
    "baseline trial's length x the trials the search plans.",
)
@click.option(
    "--allow-other-machine",
    is_flag=True,
    help="Measure although RUN was recorded on another machine, GPU, torch or working directory "
    "(refused otherwise); every number then says where it was measured.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Write verify.json here (a file, or a folder) instead of RUN/verify.json; needed for a run "
    "directory tracked by git.",
)
@click.option(
    "--python",
    "python",
    type=click.Path(dir_okay=False, path_type=str),
    default=None,
    metavar="PATH",
    help="The interpreter the trials run (default: the one running gpuadvisor). The interpreter "
    "RUN/manifest.json names is never run: a run directory is data.",
)
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Run the trials in the recorded working directory itself instead of a scratch copy (what the "
    "script writes there, checkpoints and logs, replaces your files); needed where the working "
    "directory is too large to copy.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
def verify(
    run: Path,
    trials: int,
    budget_s: float | None,
    only: tuple[str, ...],
    verify_warmup_steps: int,
    verify_steps: int,
    num_workers: int | None,
    explore: bool,
    allow_other_machine: bool,
    output: Path | None,
    python: str | None,
    allow_writes: bool,
    quiet: bool,
) -> None:
    """Apply the remedies of RUN's findings that need no edit of the script, one trial process each,
    interleaved with baseline trials, and measure the speed-up; write RUN/verify.json.

    \b
    With --explore: the best measured configuration of the levers (precision, layout, compile, fused
    optimizer, DataLoader settings, allocator, a larger batch), set through the script's own switches
    where it has them (--amp, -j, --bf16), guided by the findings and each trial's bottleneck.

    \b
    Exit codes: 0 verify.json written; 1 the baseline (the recorded command) failed;
    2 usage error (also: RUN recorded on another machine, or tracked by git without -o);
    70 internal error; 74 verify.json could not be written; 130 Ctrl-C (measured trials written).
    """
    options = VerifyOptions(
        trials=trials,
        budget_s=budget_s,
        only=only,
        warmup_steps=verify_warmup_steps,
        steps=verify_steps,
        num_workers=num_workers,
        quiet=quiet,
        explore=explore,
        allow_other_machine=allow_other_machine,
        output=output,
        python=python,
        allow_writes=allow_writes,
    )
    try:
        outcome = verify_run(run, options, analyze=analysis_document)
    except GpuAdvisorError as err:
        click.echo(f"gpuadvisor: error: {strip_controls(str(err))}", err=True)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as err:  # a bug in gpuadvisor: one line plus the traceback for the bug report

        traceback.print_exc()
        click.echo(f"gpuadvisor: internal error: {type(err).__name__}: {strip_controls(str(err))}", err=True)
        sys.exit(EXIT_INTERNAL)
    sys.exit(outcome.exit_code)
