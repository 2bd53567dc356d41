"""One rank of a torchrun/DDP job under the capture: `python -m gpuadvisor.capture.rank ...`.

Two ways in:
  * `gpuadvisor profile --nproc-per-node N` starts torchrun with `-m gpuadvisor.capture.rank --config
    CONFIG.json`: the parent prepared the run directory, samples NVML and writes the manifest.
  * Under an existing launcher (multi-node, Slurm):
        torchrun --nproc-per-node 8 -m gpuadvisor.capture.rank -o RUN [OPTIONS] train.py ARGS...
    every rank prepares its own files, LOCAL_RANK 0 starts a separate NVML sampler process (NVML never
    runs inside a training process), and every rank merges the manifest as it exits (under a file
    lock): the last rank to exit writes the complete one and, with --analyze, analyzes the run.

Each rank counts its own optimizer steps; the window is the same step numbers on every rank.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuadvisor import rundir
from gpuadvisor.capture._io import own_module_argv, read_json, write_json_atomic
from gpuadvisor.capture.child import _unblock_signals, run_child
from gpuadvisor.capture.nvml import NvmlSampler
from gpuadvisor.capture.options import ProfileOptions
from gpuadvisor.capture.ranks import manifest_lock, merge_ranks
from gpuadvisor.capture.runner import (
    _add_driver,
    initial_capture,
    validate_module,
    validate_script,
    write_manifest,
)
from gpuadvisor.capture.session import SessionConfig, rank_file_name, rank_state_file
from gpuadvisor.errors import UsageError
from gpuadvisor.manifest import Degraded, Distributed, ExitReason, Manifest, NvmlInfo, Target, TargetKind

if TYPE_CHECKING:
    from gpuadvisor.capture.session import CaptureSession

DEFAULT_TERM_GRACE_S = 5.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gpuadvisor.capture.rank",
        description="Run one rank of a torchrun job under the gpuadvisor capture.",
    )
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("-o", "--out", help="run directory shared by the ranks (required)")
    p.add_argument("-m", dest="module", action="store_true", help="run TARGET as a module")
    p.add_argument("--force", action="store_true", help="replace this run's files in --out")
    p.add_argument("--full", action="store_true", help="run to the end instead of stopping after the window")
    p.add_argument("--skip-steps", type=int, default=10)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--active-steps", type=int, default=10)
    p.add_argument("--with-stack", action="store_true")
    p.add_argument("--nvml-interval", type=float, default=0.1)
    p.add_argument("--no-nvml", action="store_true", help="do not sample NVML on this node")
    p.add_argument("--time-step-seconds", type=float, default=1.0)
    p.add_argument("--time-fallback-after", type=float, default=20.0)
    p.add_argument("--short-run-seconds", type=float, default=2.0)
    p.add_argument("--observe-steps", type=int, default=100)
    p.add_argument("--observe-seconds", type=float, default=20.0)
    p.add_argument("--term-grace", type=float, default=DEFAULT_TERM_GRACE_S)
    p.add_argument("--analyze", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("target", nargs="?")
    p.add_argument("args", nargs=argparse.REMAINDER)
    return p


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        return default


def _fail(msg: str) -> None:
    sys.stderr.write(f"gpuadvisor: error: {msg}\n")
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    _unblock_signals()
    ns = _parser().parse_args(argv)
    if ns.config:
        cfg = read_json(Path(ns.config))
        if not isinstance(cfg, dict):
            _fail(f"cannot read the capture configuration {ns.config}")
        if _env_int("RANK", 0) != 0:
            cfg["quiet"] = True  # one progress stream (rank 0's), not one per rank
        run_child(cfg, term_grace_s=ns.term_grace)
        return
    _external(ns)


# ---------------------------------------------------------------------------------- existing launcher
def _external(ns: argparse.Namespace) -> None:
    rank, local_rank = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    node_rank = _env_int("GROUP_RANK", 0)
    if ns.out is None:
        _fail("-o/--out RUN is required under an existing launcher (every rank must write to the same run)")
    if ns.target is None:
        _fail("missing SCRIPT (or -m MODULE)")
    try:
        opts = _options(ns).validate()
        if ns.module:
            validate_module(ns.target)
        else:
            validate_script(ns.target)
        run_dir = Path(ns.out)
        _prepare_rank_files(run_dir, rank, ns.force)
    except UsageError as err:
        _fail(str(err))
    command = [sys.executable, "-m", "gpuadvisor.capture.rank", *(sys.argv[1:])]
    if rank == 0:
        write_manifest(run_dir, _base_manifest(ns, opts, command, time.time()))
    sampler = None
    if local_rank == 0 and not ns.no_nvml:
        sampler = _start_nvml_process(run_dir, ns.nvml_interval, node_rank)
    cfg = dataclasses.asdict(
        SessionConfig.from_options(
            # one progress stream, not one per rank
            dataclasses.replace(opts, quiet=opts.quiet or rank != 0),
            str(run_dir.resolve()),
            distributed=True,
        )
    )
    cfg["target"] = {
        "kind": "module" if ns.module else "script",
        "path_or_name": ns.target,
        "argv": list(ns.args),
    }

    def after_finish(session: CaptureSession) -> None:
        nvml_state = _stop_nvml_process(sampler, run_dir, node_rank) if sampler is not None else None
        _merge_external(run_dir, ns, opts, command, nvml_state if node_rank == 0 else None)

    run_child(cfg, term_grace_s=ns.term_grace, after_finish=after_finish)


def _options(ns: argparse.Namespace) -> ProfileOptions:
    return ProfileOptions(
        out=ns.out,
        force=ns.force,
        full=ns.full,
        skip_steps=ns.skip_steps,
        warmup_steps=ns.warmup_steps,
        active_steps=ns.active_steps,
        with_stack=ns.with_stack,
        nvml_interval=ns.nvml_interval,
        quiet=ns.quiet,
        time_step_seconds=ns.time_step_seconds,
        time_fallback_after=ns.time_fallback_after,
        short_run_seconds=ns.short_run_seconds,
        observe_steps=ns.observe_steps,
        observe_seconds=ns.observe_seconds,
        analyze=ns.analyze,
    )


def _prepare_rank_files(run_dir: Path, rank: int, force: bool) -> None:
    """Every rank creates the folders and clears only its own files (with --force)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"output path exists and is not a directory: {run_dir}")
    try:
        (run_dir / rundir.TRACE_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"output directory {run_dir} is not writable: {err.strerror or err}") from err
    own = [
        f"{rundir.TRACE_DIR}/rank{rank}.json.gz",
        rank_file_name(rundir.ENVIRONMENT, rank),
        rank_file_name(rundir.CALLSITES, rank),
        rank_state_file(rank),
    ]
    if rank == 0:
        own += [rundir.MANIFEST, rundir.FINDINGS, rundir.REPORT, rundir.NVML, ".analysis.claim"]
    if (run_dir / own[0]).exists() and not force:
        raise UsageError(
            f"output directory {run_dir} already holds rank {rank}'s trace; use --force to overwrite it"
        )
    if force:
        for name in own:
            with contextlib.suppress(FileNotFoundError):
                (run_dir / name).unlink()


def _base_manifest(ns: argparse.Namespace, opts: ProfileOptions, command: list[str], started: float) -> Manifest:
    return Manifest.begin(
        command=command,
        target=Target(
            TargetKind.MODULE if ns.module else TargetKind.SCRIPT, ns.target, (ns.target, *ns.args)
        ),
        capture=initial_capture(opts),
        nvml=NvmlInfo(
            reason="sampled only on node 0 by LOCAL_RANK 0's sampler process (not reported yet)",
            interval_s=ns.nvml_interval,
        ),
        started_unix_s=started,
        distributed=Distributed(launcher="external"),
        redact=opts.redact,
    )


def _merge_external(
    run_dir: Path,
    ns: argparse.Namespace,
    opts: ProfileOptions,
    command: list[str],
    nvml_state: dict[str, Any] | None,
) -> None:
    world = _env_int("WORLD_SIZE", 1)
    with manifest_lock(run_dir):
        raw = read_json(run_dir / rundir.MANIFEST)
        manifest = (
            Manifest.from_json(raw) if isinstance(raw, dict) else _base_manifest(ns, opts, command, time.time())
        )
        # Rebuilt from the ranks every time: drop what the previous merge derived from them.
        manifest = dataclasses.replace(manifest, degraded=(), unknown_degraded=(), messages=())
        if nvml_state is not None and isinstance(nvml_state.get("describe"), dict):
            manifest = dataclasses.replace(manifest, nvml=NvmlInfo.from_json(nvml_state["describe"]))
        manifest, _ = merge_ranks(
            run_dir,
            manifest,
            world_size=world,
            launcher_status=None,
            distributed=Distributed(launcher="external", nnodes=os.environ.get("GROUP_WORLD_SIZE")),
            unfinished_reason=ExitReason.RUNNING,
        )
        if not manifest.nvml.available:
            manifest = manifest.with_degraded(
                Degraded.NVML_UNAVAILABLE, f"GPU samples were not recorded: {manifest.nvml.reason}."
            )
        manifest = dataclasses.replace(manifest, ended_unix_s=time.time())
        if nvml_state is not None and nvml_state.get("driver"):
            _add_driver(run_dir, str(nvml_state["driver"]))
        write_manifest(run_dir, manifest)
        complete = all(r.exit_reason is not ExitReason.RUNNING for r in manifest.ranks or ())
        claim = run_dir / ".analysis.claim"
        if not (complete and ns.analyze):
            return
        try:
            claim.touch(exist_ok=False)  # one rank analyzes: the one that saw every rank finished first
        except FileExistsError:
            return
    # The capture never imports the analysis: a process of its own analyzes the run (errors go to its log).
    root = str(Path(__file__).resolve().parents[2])  # this gpuadvisor, whatever the rank's sys.path
    code = "import sys; sys.path.insert(0, sys.argv[1]); from gpuadvisor.analysis import main; sys.exit(main(sys.argv[2:]))"
    analysis = [sys.executable, "-c", code, root, str(run_dir), *(["--quiet"] if ns.quiet else [])]
    with contextlib.suppress(OSError):
        subprocess.run(analysis, stdin=subprocess.DEVNULL, check=False)


# ---------------------------------------------------------------------------------- NVML, once per node
def _nvml_state_file(node_rank: int) -> str:
    return f".nvml_state.node{node_rank}.json"


def _start_nvml_process(run_dir: Path, interval: float, node_rank: int) -> subprocess.Popen[bytes] | None:
    """A separate sampler process (NVML never runs in a training process); it ends with us."""
    try:
        return subprocess.Popen(
            [
                sys.executable,
                *own_module_argv(
                    "gpuadvisor.capture.rank",
                    "--nvml-sampler",
                    str(run_dir.resolve()),
                    str(interval),
                    str(node_rank),
                    str(os.getpid()),
                    python_flags=False,
                ),
            ],
            stdin=subprocess.DEVNULL,
        )
    except OSError:
        return None


def _stop_nvml_process(proc: subprocess.Popen[bytes], run_dir: Path, node_rank: int) -> dict[str, Any] | None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        return None
    state = read_json(run_dir / _nvml_state_file(node_rank))
    return state if isinstance(state, dict) else None


def nvml_sampler_main(run_dir: str, interval: str, node_rank: str, watch_pid: str) -> None:
    """Sample NVML until SIGTERM or until the process `watch_pid` is gone; write the sampler's state."""
    out = Path(run_dir)
    node = int(node_rank)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the training process decides when we stop
    sampler = NvmlSampler(out, float(interval))
    if node != 0:
        sampler.path = out / f"nvml.node{node}.csv.gz"  # one file per node on a shared file system
    sampler.start(os.environ.get("CUDA_VISIBLE_DEVICES"))
    pid = int(watch_pid)
    while sampler.available and not stop.wait(0.5):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
    sampler.stop()
    describe = sampler.describe()
    if node != 0 and describe.get("file"):
        describe["file"] = sampler.path.name
    write_json_atomic(out / _nvml_state_file(node), {"describe": describe, "driver": sampler.driver})


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--nvml-sampler":
        nvml_sampler_main(*sys.argv[2:6])
    else:
        # Run from the importable module (the script's module replaces sys.modules["__main__"]).
        import gpuadvisor.capture.rank as _rank

        _rank.main()
