"""`gpuadvisor profile`: a thin click layer over `gpuadvisor.capture.run_profile`."""

from __future__ import annotations

import importlib.util
import sys
import webbrowser
from collections.abc import Sequence
from typing import IO

import click

from gpuadvisor.api import analyze_profiled
from gpuadvisor.capture.options import ProfileOptions
from gpuadvisor.capture.runner import LaunchOptions, ProfileOutcome, run_profile
from gpuadvisor.commands.verify import analysis_document
from gpuadvisor.errors import GpuAdvisorError, UsageError
from gpuadvisor.terminal import strip_controls
from gpuadvisor.verify.runner import VerifyOptions, verify_run


@click.command(
    "profile",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("-m", "module", is_flag=True, help="Run TARGET as a module, like `python -m`.")
@click.option(
    "-o",
    "--out",
    type=str,
    default=None,
    help="Run directory [default: gpuadvisor-runs/<script-stem>-<YYYYmmdd-HHMMSS>].",
)
@click.option("--force", is_flag=True, help="Overwrite an existing run directory.")
@click.option("--full", is_flag=True, help="Run the script to the end instead of stopping after the window.")
@click.option(
    "--skip-steps",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Steps left out before the warm-up (compilation, autotuning, allocator warm-up).",
)
@click.option(
    "--warmup-steps",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Profiler warm-up steps (profiler on, nothing kept).",
)
@click.option(
    "--active-steps",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Steps recorded in the trace.",
)
@click.option(
    "--with-stack/--no-with-stack",
    default=False,
    show_default=True,
    help="Record Python stacks in the trace (costly; call sites are captured anyway).",
)
@click.option(
    "--nvml-interval",
    type=click.FloatRange(min=0.001),
    default=0.1,
    show_default=True,
    help="Seconds between NVML samples.",
)
@click.option(
    "--time-step-seconds",
    type=click.FloatRange(min=0.001),
    default=1.0,
    show_default=True,
    help="Step length when steps are counted by time (no optimizer step, no DataLoader).",
)
@click.option(
    "--time-fallback-after",
    type=click.FloatRange(min=0.0),
    default=20.0,
    show_default=True,
    help="Seconds without optimizer step or DataLoader batch before counting steps by time (0: never).",
)
@click.option(
    "--short-run-seconds",
    type=click.FloatRange(min=0.0),
    default=2.0,
    show_default=True,
    help="Record the first steps for up to this long, so that a script that ends before the window "
    "is still captured (0: off).",
)
@click.option(
    "--observe-steps",
    type=click.IntRange(min=0),
    default=100,
    show_default=True,
    help="After the window, keep timing the steps (without the profiler) until this step, so that costs "
    "that come every N steps (epoch starts, evaluation, checkpoints) are seen; bounded by --observe-seconds.",
)
@click.option(
    "--observe-seconds",
    type=click.FloatRange(min=0.0),
    default=20.0,
    show_default=True,
    help="At most this long after the window's reference steps (0: stop right after them).",
)
@click.option(
    "--open",
    "open_report",
    is_flag=True,
    default=False,
    help="Open RUN/report.html in a web browser when the run is analyzed.",
)
@click.option(
    "--redact/--no-redact",
    "redact",
    default=True,
    show_default=True,
    help="Mask credentials in the recorded command line (--api-key VALUE, --password=..., sk-/ghp_/hf_ "
    "tokens, URL passwords) in manifest.json, the report and the logs.",
)
@click.option(
    "--analyze/--no-analyze",
    "analyze",
    default=True,
    show_default=True,
    help="Analyze the run when the script ends (findings.json, terminal summary).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@click.option(
    "--nproc-per-node",
    type=str,
    default=None,
    help="Launch N ranks through torchrun (torch.distributed.run); one trace per rank. Also: gpu, cpu, auto.",
)
@click.option("--nnodes", type=str, default=None, help="torchrun --nnodes (with --nproc-per-node).")
@click.option("--node-rank", type=click.IntRange(min=0), default=None, help="torchrun --node-rank.")
@click.option("--master-addr", type=str, default=None, help="torchrun --master-addr.")
@click.option(
    "--master-port", type=click.IntRange(min=0, max=65535), default=None, help="torchrun --master-port."
)
@click.option("--rdzv-backend", type=str, default=None, help="torchrun --rdzv-backend.")
@click.option("--rdzv-endpoint", type=str, default=None, help="torchrun --rdzv-endpoint.")
@click.option("--rdzv-id", type=str, default=None, help="torchrun --rdzv-id.")
@click.option("--standalone", is_flag=True, help="torchrun --standalone (single node, local rendezvous).")
@click.option(
    "--term-timeout",
    type=click.FloatRange(min=0.0),
    default=20.0,
    show_default=True,
    help="Seconds the script may take to exit after a SIGTERM forwarded to it before it is killed (SIGKILL).",
)
@click.option(
    "--term-grace",
    type=click.FloatRange(min=0.0),
    default=5.0,
    show_default=True,
    help="Seconds a rank stopped by the launcher (SIGTERM) may stay blocked before a watchdog thread "
    "exports its trace (torchrun kills it 30 s after SIGTERM).",
)
@click.option(
    "--verify",
    "verify_after",
    is_flag=True,
    help="After the run, measure the findings' injectable remedies (gpuadvisor verify, docs/verify.md).",
)
@click.option(
    "--verify-trials", type=click.IntRange(min=1), default=3, show_default=True, help="verify --trials."
)
@click.option("--verify-only", multiple=True, metavar="FINDING_OR_REMEDY", help="verify --only (repeatable).")
@click.option(
    "--verify-budget",
    type=click.FloatRange(min=0.0, min_open=True),
    default=None,
    help="verify --budget SECONDS.",
)
@click.option(
    "--explore",
    "verify_explore",
    is_flag=True,
    help="After the run, search for the best measured configuration (verify --explore; implies "
    "--verify; --verify-budget bounds it, default: sized by the first baseline trial).",
)
@click.option(
    "--verify-allow-writes",
    is_flag=True,
    help="verify --allow-writes: the trials run in the working directory itself, not a scratch copy.",
)
@click.argument("target", metavar="SCRIPT|MODULE")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def profile(
    module: bool,
    out: str | None,
    force: bool,
    full: bool,
    skip_steps: int,
    warmup_steps: int,
    active_steps: int,
    with_stack: bool,
    nvml_interval: float,
    time_step_seconds: float,
    time_fallback_after: float,
    short_run_seconds: float,
    observe_steps: int,
    observe_seconds: float,
    analyze: bool,
    open_report: bool,
    quiet: bool,
    nproc_per_node: str | None,
    nnodes: str | None,
    node_rank: int | None,
    master_addr: str | None,
    master_port: int | None,
    rdzv_backend: str | None,
    rdzv_endpoint: str | None,
    rdzv_id: str | None,
    standalone: bool,
    term_timeout: float,
    term_grace: float,
    redact: bool,
    verify_after: bool,
    verify_trials: int,
    verify_only: tuple[str, ...],
    verify_budget: float | None,
    verify_explore: bool,
    verify_allow_writes: bool,
    target: str,
    args: tuple[str, ...],
) -> None:
    """Run SCRIPT [ARGS]... (or -m MODULE [ARGS]...) under torch.profiler and NVML; save a run.

    Everything after SCRIPT belongs to the script. Exits with the script's own status
    (128+N when signal N ended it; 74 when the script succeeded but outputs were lost;
    2 for usage errors, before anything runs).

    With --nproc-per-node N the script runs under torchrun, N ranks per node, each under the capture
    (one trace per rank, trace/rank{RANK}.json.gz); the exit status is the failing rank's own status
    (else torchrun's).
    """
    if importlib.util.find_spec("torch") is None:
        raise UsageError(
            "profile needs PyTorch, which is not installed in this environment: "
            "pip install 'gpuadvisor[profile]' (on a GPU machine, install your CUDA build of torch first)"
        )
    launch: LaunchOptions | None = None
    torchrun_only = {
        "--nnodes": nnodes,
        "--node-rank": node_rank,
        "--master-addr": master_addr,
        "--master-port": master_port,
        "--rdzv-backend": rdzv_backend,
        "--rdzv-endpoint": rdzv_endpoint,
        "--rdzv-id": rdzv_id,
        "--standalone": standalone or None,
    }
    try:
        if nproc_per_node is None:
            given = [k for k, v in torchrun_only.items() if v is not None]
            if given:
                raise UsageError(f"{given[0]} needs --nproc-per-node")
        else:
            launch = LaunchOptions(
                nproc_per_node=nproc_per_node,
                nnodes=nnodes,
                node_rank=node_rank,
                master_addr=master_addr,
                master_port=master_port,
                rdzv_backend=rdzv_backend,
                rdzv_endpoint=rdzv_endpoint,
                rdzv_id=rdzv_id,
                standalone=standalone,
                term_grace_s=term_grace,
            )
        options = ProfileOptions(
            out=out,
            force=force,
            full=full,
            skip_steps=skip_steps,
            warmup_steps=warmup_steps,
            active_steps=active_steps,
            with_stack=with_stack,
            nvml_interval=nvml_interval,
            quiet=quiet,
            time_step_seconds=time_step_seconds,
            time_fallback_after=time_fallback_after,
            short_run_seconds=short_run_seconds,
            observe_steps=observe_steps,
            observe_seconds=observe_seconds,
            term_timeout=term_timeout,
            # analyzed once, after verify (findings gain `verified`)
            analyze=analyze and not (verify_after or verify_explore),
            redact=redact,
        )
        outcome = run_profile(
            target, list(args), options, module=module, command=["gpuadvisor", *sys.argv[1:]], launch=launch
        )
    except GpuAdvisorError as err:
        click.echo(f"gpuadvisor: error: {strip_controls(str(err))}", err=True)
        sys.exit(err.exit_code)
    if verify_after or verify_explore:
        outcome = _verify_then_analyze(
            outcome,
            verify_trials,
            verify_only,
            verify_budget,
            analyze=analyze,
            quiet=quiet,
            argv=[target, *args],
            explore=verify_explore,
            allow_writes=verify_allow_writes,
        )
    elif analyze:
        outcome = analyze_profiled(outcome, quiet=quiet)
    report = outcome.run_dir / "report.html"
    if open_report and report.is_file() and not webbrowser.open(report.resolve().as_uri()):
        click.echo(f"gpuadvisor: could not open a web browser; the report is {report}", err=True)
    sys.exit(outcome.exit_status)


def _verify_then_analyze(
    outcome: ProfileOutcome,
    trials: int,
    only: Sequence[str],
    budget_s: float | None,
    *,
    analyze: bool,
    quiet: bool,
    stream: IO[str] | None = None,
    argv: Sequence[str] | None = None,
    explore: bool = False,
    allow_writes: bool = False,
) -> ProfileOutcome:
    """`gpuadvisor profile --verify` (or `--explore`: verify --explore): verify the fresh run (when the script succeeded), then analyze it
    once, so findings.json and report.html carry `verified`. Verify's own errors are printed and never
    change profile's exit status (outputs the analysis could not write do, as without --verify)."""

    out = stream if stream is not None else sys.stderr
    if outcome.exit_status != 0:
        out.write(f"gpuadvisor: verify skipped: the script exited with status {outcome.exit_status}\n")
    else:
        try:
            verify_run(
                outcome.run_dir,
                VerifyOptions(
                    trials=trials,
                    only=tuple(only),
                    budget_s=budget_s,
                    quiet=quiet,
                    explore=explore,
                    allow_writes=allow_writes,
                ),
                stream=out,
                argv=argv,
                analyze=analysis_document,
            )
        except GpuAdvisorError as err:
            out.write(f"gpuadvisor: verify: error: {err}\n")
        except KeyboardInterrupt:
            out.write("gpuadvisor: verify interrupted; what was measured is in verify.json\n")
    out.flush()
    return analyze_profiled(outcome, quiet=quiet) if analyze else outcome
