"""The supervising process of `gpuadvisor profile`: validate, sample NVML, run the child, keep its status.

Does not import torch: the training process (the child) does.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib.machinery
import importlib.util
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuadvisor import rundir
from gpuadvisor.capture import experiment
from gpuadvisor.capture._io import own_module_argv, read_json, write_json_atomic
from gpuadvisor.capture._lifeline import ENV_PARENT_PID, ENV_SIGNAL_FD
from gpuadvisor.capture.experiment import Suspect
from gpuadvisor.capture.export import TORCH_IMPORT_FILE, torch_import_error
from gpuadvisor.capture.nvml import NvmlSampler
from gpuadvisor.capture.options import ProfileOptions
from gpuadvisor.capture.outdir import (
    clear_out_dir,
    held_out_dirs,
    prepare_out_dir,
    release_out_dir,
    remove_stray_temporaries,
)
from gpuadvisor.capture.ranks import merge_ranks, read_rank_states
from gpuadvisor.capture.session import STATE_FILE, SessionConfig, rank_state_file
from gpuadvisor.errors import EXIT_OUTPUT_LOST, UsageError
from gpuadvisor.manifest import (
    CaptureState,
    CaptureWindow,
    ChildState,
    Degraded,
    Distributed,
    ExitReason,
    Manifest,
    NvmlInfo,
    Target,
    TargetKind,
)
from gpuadvisor.redact import sealed_argv
from gpuadvisor.terminal import strip_controls

CONFIG_FILE = ".child_config.json"
SI_KERNEL = (
    0x80  # siginfo si_code of a signal the kernel sent (the terminal's Ctrl-C goes to the whole group)
)


# Environment every process the launcher starts gets unless the user set it: the multi-GPU machines
# this tool is used on require NVLink multicast (NVLS / symmetric memory) off.
LAUNCH_ENV_DEFAULTS = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


@dataclass(frozen=True)
class LaunchOptions:
    """torchrun options of `gpuadvisor profile --nproc-per-node N` (None: torchrun's default)."""

    nproc_per_node: str
    nnodes: str | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    standalone: bool = False
    term_grace_s: float = 5.0

    def torchrun_args(self) -> list[str]:
        """The launcher's own options; restarts are off (a restart would overwrite the traces)."""
        out = ["--nproc-per-node", self.nproc_per_node, "--max-restarts", "0"]
        for flag, value in (
            ("--nnodes", self.nnodes),
            ("--node-rank", self.node_rank),
            ("--master-addr", self.master_addr),
            ("--master-port", self.master_port),
            ("--rdzv-backend", self.rdzv_backend),
            ("--rdzv-endpoint", self.rdzv_endpoint),
            ("--rdzv-id", self.rdzv_id),
        ):
            if value is not None:
                out += [flag, str(value)]
        if self.standalone:
            out.append("--standalone")
        return out

    def single_node(self) -> bool:
        return self.nnodes in (None, "1", "1:1")

    def world_size(self) -> int | None:
        """nproc x nnodes when both are plain numbers on one node, else None (known from the ranks)."""
        if self.single_node() and self.nproc_per_node.isdigit():
            return int(self.nproc_per_node)
        return None

    def describe(self) -> Distributed:
        return Distributed(
            launcher="torchrun",
            nproc_per_node=self.nproc_per_node,
            nnodes=self.nnodes or "1",
            node_rank=self.node_rank,
        )


def validate_launch(opts: LaunchOptions) -> None:
    """Usage errors for launcher options torchrun would reject only after the parent started."""
    n = opts.nproc_per_node
    if not (n.isdigit() and int(n) >= 1) and n not in ("gpu", "cpu", "auto", "xpu"):
        raise UsageError(f"--nproc-per-node must be a positive integer, gpu, cpu or auto (got {n!r})")
    if opts.term_grace_s < 0:
        raise UsageError(f"--term-grace must be >= 0 (got {opts.term_grace_s})")
    try:
        importlib.util.find_spec("torch.distributed.run")
    except (ImportError, ValueError) as err:
        raise UsageError(f"--nproc-per-node needs torch.distributed ({err})") from err


def launch_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default os.environ) plus LAUNCH_ENV_DEFAULTS where unset."""
    env = dict(os.environ if base is None else base)
    for key, value in LAUNCH_ENV_DEFAULTS.items():
        env.setdefault(key, value)
    return env


@dataclass(frozen=True)
class ProfileOutcome:
    """What `run_profile` returns: where the run is, the exit status, and the manifest written
    (`manifest` as JSON, `record` typed)."""

    run_dir: Path
    exit_status: int
    manifest: dict[str, Any]

    @property
    def record(self) -> Manifest:
        return Manifest.from_json(self.manifest)


def validate_script(path: str) -> Path:
    """Usage errors (exit 2) for a missing, non-file, non-Python or non-compiling script."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"script not found: {path}")
    if not p.is_file():
        raise UsageError(f"not a file: {path}")
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise UsageError(f"cannot read script {path}: {err.strerror or err}") from err
    if b"\x00" in raw[:8192]:
        raise UsageError(f"not a Python script (binary file): {path}")
    try:
        ast.parse(raw, filename=str(p))
    except SyntaxError as err:
        where = f"{path}:{err.lineno}" if err.lineno else path
        raise UsageError(f"not a valid Python script: {where}: {err.msg}") from err
    except ValueError as err:
        raise UsageError(f"not a Python script: {path}: {err}") from err
    return p


def validate_module(name: str) -> None:
    """Usage error unless `name` resolves to a module from the current directory (`find_module`)."""
    find_module(name, Path(os.getcwd()))


def find_module(name: str, cwd: Path) -> None:
    """Usage error unless `name` resolves to a module as `python -m` run from `cwd` would find it.
    Nothing of it runs here: each part is looked up in its package's folders without importing the
    package (importlib.util.find_spec would run the parents' __init__.py in this process; verify
    checks a received run's module this way)."""
    if not name or any(not part.isidentifier() for part in name.split(".")):
        raise UsageError(f"not a module name: {name!r}")
    top, *rest = name.split(".")
    saved = list(sys.path)
    sys.path.insert(0, str(cwd))  # `python -m` looks in the cwd first
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: found, never imported
    except (ImportError, ValueError) as err:
        raise UsageError(f"module not found: {name} ({err})") from err
    finally:
        sys.path[:] = saved
    for part in rest:
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        spec = importlib.machinery.PathFinder.find_spec(part, locations) if locations else None
    if spec is None:
        raise UsageError(f"module not found: {name}")


def default_out_dir(target: str, module: bool, now: float | None = None) -> Path:
    """`gpuadvisor-runs/<script-stem>-<YYYYmmdd-HHMMSS>` (module: its last dotted part)."""
    stem = target.rsplit(".", 1)[-1] if module else Path(target).stem
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    return Path("gpuadvisor-runs") / f"{stem}-{stamp}"


class _SignalRelay:
    """Collects SIGINT/SIGTERM in the supervising thread with sigtimedwait and relays them, so that the
    child gets each signal once.

    A signal the terminal sent to the whole foreground group (si_code SI_KERNEL) already reached the
    child: it is not sent twice. One sent by a process (si_code SI_USER) went either to this process
    alone (`kill PID`: forward it) or to the whole group (`kill -INT -PGID`: the child has it). The
    child says which signals it got on the `receipts` pipe (`_lifeline.report_signals_to_parent`):
    a signal is forwarded only when no receipt of it comes within `RECEIPT_WAIT_S`. Without the pipe
    (torchrun's group) every SI_USER signal is forwarded.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)
    RECEIPT_WAIT_S = 0.25

    def __init__(self, receipts: int | None = None) -> None:
        self.active = threading.current_thread() is threading.main_thread() and hasattr(
            signal, "sigtimedwait"
        )
        self.receipts = receipts
        if receipts is not None:
            os.set_blocking(receipts, False)
        self._echoes: dict[int, int] = {}  # signals forwarded whose receipt has not come back yet
        self._received: dict[int, float] = {}  # signal -> when the last receipt of one not forwarded came
        self.interrupts = 0
        self.terms = 0
        self.kill_deadline: float | None = None
        self.escalated = False  # killed (SIGKILL) because it outlived the SIGTERM timeout

    def __enter__(self) -> _SignalRelay:
        if self.active:
            signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active:
            while signal.sigtimedwait(self.SIGNALS, 0) is not None:
                pass  # drop what arrived while we were finishing: the child has handled it
            signal.pthread_sigmask(signal.SIG_UNBLOCK, self.SIGNALS)

    def _drain(self) -> None:
        """Read the child's receipts: a forwarded signal's own receipt is its echo; any other is one
        the child got by itself."""
        if self.receipts is None:
            return
        now = time.monotonic()
        while True:
            try:
                data = os.read(self.receipts, 4096)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.receipts = None
                return
            if not data:
                return
            for signo in data:
                if self._echoes.get(signo, 0) > 0:
                    self._echoes[signo] -= 1
                else:
                    self._received[signo] = now

    def _child_has(self, signo: int, since: float) -> bool:
        """Whether the child received `signo` on its own at or after `since` (waiting for its receipt
        up to RECEIPT_WAIT_S)."""
        if self.receipts is None:
            return False

        deadline = since + self.RECEIPT_WAIT_S
        while True:
            self._drain()
            if self._received.get(signo, -1.0) >= since:
                return True
            left = deadline - time.monotonic()
            if left <= 0 or self.receipts is None:
                return False
            with contextlib.suppress(InterruptedError, OSError, ValueError):
                select.select([self.receipts], [], [], left)

    def _forward(self, proc: subprocess.Popen[bytes], signo: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signo)
            if self.receipts is not None:
                self._echoes[signo] = self._echoes.get(signo, 0) + 1

    def wait(self, proc: subprocess.Popen[bytes], timeout: float, term_timeout: float) -> None:
        if not self.active:
            time.sleep(timeout)
            return
        self._drain()
        info = signal.sigtimedwait(self.SIGNALS, timeout)
        if info is not None:
            now = time.monotonic()
            # a receipt drained before now belongs to an earlier signal; this one's comes after
            from_terminal = info.si_code == SI_KERNEL
            if info.si_signo == signal.SIGINT:
                self.interrupts += 1
                if self.interrupts >= 3:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                elif not from_terminal and not self._child_has(signal.SIGINT, now):
                    self._forward(proc, signal.SIGINT)
            else:
                self.terms += 1
                if not from_terminal and not self._child_has(signal.SIGTERM, now):
                    self._forward(proc, signal.SIGTERM)
                if self.kill_deadline is None:
                    self.kill_deadline = time.monotonic() + term_timeout
        if self.kill_deadline is not None and time.monotonic() > self.kill_deadline and proc.poll() is None:
            self.escalated = True
            with contextlib.suppress(ProcessLookupError):
                proc.kill()


def run_profile(
    target: str,
    args: list[str] | tuple[str, ...] = (),
    options: ProfileOptions | None = None,
    *,
    module: bool = False,
    command: list[str] | None = None,
    launch: LaunchOptions | None = None,
    **option_kwargs: Any,
) -> ProfileOutcome:
    """Run `target` (a script path, or a module name with `module=True`) under the capture.

    `options` (default `ProfileOptions()`); keyword arguments named like its fields (out=...,
    skip_steps=...) replace single fields. Raises `UsageError` (exit 2) before any work for a bad
    target, bad numbers or an output directory that exists (without `force`) or cannot be written.
    Otherwise always writes `manifest.json` and returns the script's own exit status (128+N for
    signal N; 74 when the script succeeded but outputs were lost).

    With `launch`, the target runs under torchrun (`python -m torch.distributed.run`), every worker
    under `gpuadvisor.capture.rank`: one trace per rank in the one run directory, NVML sampled here
    (once per node), and the manifest lists the ranks; the exit status is the failing rank's own
    (else torchrun's).
    """
    held = held_out_dirs()
    try:
        return _run_profile(target, args, options, module=module, command=command, launch=launch, **option_kwargs)
    finally:
        for out in held_out_dirs() - held:
            release_out_dir(out)


def _run_profile(
    target: str,
    args: list[str] | tuple[str, ...],
    options: ProfileOptions | None,
    *,
    module: bool,
    command: list[str] | None,
    launch: LaunchOptions | None,
    **option_kwargs: Any,
) -> ProfileOutcome:
    opts = ProfileOptions.from_kwargs(options, **option_kwargs).validate()
    args = list(args)
    if launch is not None:
        validate_launch(launch)
    if module:
        validate_module(target)
    else:
        validate_script(target)
    run_dir = Path(opts.out) if opts.out is not None else default_out_dir(target, module)
    existed = run_dir.exists()
    prepare_out_dir(run_dir, opts.force)

    off = experiment.disabled()
    target_rec = Target(TargetKind.MODULE if module else TargetKind.SCRIPT, target, (target, *args))
    manifest = Manifest.begin(
        command=list(command)
        if command is not None
        else [sys.argv[0], "profile", *(["-m"] if module else []), target, *args],
        target=target_rec,
        capture=initial_capture(opts),
        nvml=NvmlInfo(interval_s=opts.nvml_interval),
        started_unix_s=time.time(),
        distributed=launch.describe() if launch is not None else None,
        redact=opts.redact,
    )
    write_manifest(run_dir, manifest)  # a parent killed outright still leaves one

    cfg = dataclasses.asdict(
        SessionConfig.from_options(opts, str(run_dir.resolve()), distributed=launch is not None)
    )
    # a credential of the command line never reaches the disk: the file holds it masked, the child
    # gets the real one in its environment (gpuadvisor.redact.sealed_argv), so a parent killed outright
    # (also under torchrun, whose ranks read the file until the end) leaves no secret behind
    file_args, argv_env = sealed_argv(args) if opts.redact else (args, {})
    cfg["target"] = {"kind": target_rec.kind.value, "path_or_name": target, "argv": file_args}
    write_json_atomic(run_dir / CONFIG_FILE, cfg)
    with contextlib.suppress(OSError):  # owner only
        os.chmod(run_dir / CONFIG_FILE, 0o600)

    sampler = NvmlSampler(run_dir, opts.nvml_interval, pcie_throughput=Suspect.NVML_PCIE not in off)
    # `python -m gpuadvisor.capture.child CONFIG`, never replaced by a gpuadvisor.py of the user's folder
    child_cmd = [sys.executable, *own_module_argv("gpuadvisor.capture.child", str((run_dir / CONFIG_FILE).resolve()))]
    popen_env: dict[str, str] | None = None
    if launch is not None:
        # torchrun starts the workers; each runs `python -u -m gpuadvisor.capture.rank --config ...`
        # (as own_module_argv starts it: --no-python, the interpreter and its arguments given here).
        child_cmd = [
            sys.executable,
            *subprocess._args_from_interpreter_flags(),  # type: ignore[attr-defined]
            "-m",
            "torch.distributed.run",
            *launch.torchrun_args(),
            "--no-python",
            sys.executable,
            "-u",
            *own_module_argv(
                "gpuadvisor.capture.rank",
                "--config",
                str((run_dir / CONFIG_FILE).resolve()),
                "--term-grace",
                str(launch.term_grace_s),
            ),
        ]
        popen_env = {**launch_env(), **argv_env}
    returncode: int
    receipts: tuple[int, int] | None = None
    pass_fds: tuple[int, ...] = ()
    if launch is None:
        # The child ends with this process (its pid, checked first thing) and writes the number of
        # each signal it gets to this pipe (gpuadvisor/capture/_lifeline.py).
        receipts = os.pipe()
        pass_fds = (receipts[1],)
        popen_env = {**os.environ, ENV_PARENT_PID: str(os.getpid()), ENV_SIGNAL_FD: str(receipts[1]), **argv_env}
    with _SignalRelay(receipts[0] if receipts is not None else None) as relay:
        if Suspect.NVML in off:
            sampler.reason = "disabled (overhead experiment)"
        else:
            sampler.start(os.environ.get("CUDA_VISIBLE_DEVICES"))
        try:
            proc = subprocess.Popen(child_cmd, env=popen_env, pass_fds=pass_fds)
        finally:
            if receipts is not None:
                os.close(receipts[1])
        watch = _WindowWatch(run_dir / (rank_state_file(0) if launch is not None else STATE_FILE))
        relax = Suspect.NVML_RELAX not in off
        while True:
            rc = proc.poll()
            if rc is not None:
                returncode = rc
                break
            relay.wait(proc, 0.2, opts.term_timeout)
            if relax and not sampler.relaxed and watch.window_complete():
                sampler.relax()
        sampler.stop()
    if receipts is not None:
        os.close(receipts[0])
    ended = time.time()

    broken = torch_import_error(run_dir)
    if broken is not None:
        _discard_unstarted_run(run_dir, existed)
        raise UsageError(
            f"profile: torch cannot be imported in the training process ({broken}): the script did not "
            "run. Repair the install (pip install --force-reinstall torch, or your CUDA build of torch)."
        )
    if launch is not None:
        return _finish_distributed(run_dir, manifest, launch, returncode, ended, sampler, opts)

    state_raw = read_json(run_dir / STATE_FILE)
    state = ChildState.from_json(state_raw) if isinstance(state_raw, dict) else None
    if state is not None:
        manifest = manifest.with_child(state)

    sig: int | None = None
    reason: ExitReason
    if returncode < 0:
        sig = -returncode
        exit_status = 128 + sig
        reason = ExitReason.SIGNAL if state is not None and state.exit_reason is ExitReason.SIGNAL else ExitReason.KILLED
        if reason is ExitReason.KILLED:
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            manifest = manifest.with_degraded(
                Degraded.KILLED, f"the training process was killed by {name}; only what it had written is kept."
            )
            if state is None or state.capture.state is not CaptureState.COMPLETE:
                manifest = manifest.with_degraded(Degraded.TRACE_NOT_EXPORTED)
    else:
        exit_status = returncode
        if state is None:
            reason = ExitReason.NOT_STARTED
            manifest = manifest.with_degraded(
                Degraded.KILLED,
                f"the training process ended (status {returncode}) before gpuadvisor could start in it.",
            )
        elif state.exit_reason is None:
            # The child hands over its exit reason when it finishes; without one it ended abruptly
            # (os._exit(), a C extension calling exit()) and nothing it had not written is kept.
            reason = ExitReason.ABRUPT_EXIT
            manifest = manifest.with_degraded(
                Degraded.KILLED,
                f"the training process exited abruptly (status {returncode}, e.g. os._exit()) at step "
                f"{state.steps_seen}: python's shutdown did not run; only what gpuadvisor had written is kept.",
            )
            if state.capture.state is not CaptureState.COMPLETE:
                manifest = manifest.with_degraded(Degraded.TRACE_NOT_EXPORTED)
        else:
            reason = state.exit_reason

    manifest = _with_sampler(manifest, sampler)
    if exit_status == 0 and exit_status_for(returncode, manifest.degraded_strings) == EXIT_OUTPUT_LOST:
        exit_status = EXIT_OUTPUT_LOST
        manifest = manifest.with_message("exit status 74: the script succeeded but some outputs could not be written.")
    if relay.terms:
        # A SIGTERM (a scheduler, `kill`) reached the run: say so, and never report success after it,
        # also when the script ignored it and ran on, or was killed when it did not exit in time.
        if relay.escalated:
            manifest = manifest.with_degraded(
                Degraded.INTERRUPTED,
                f"the run got SIGTERM and the script did not exit within {opts.term_timeout:g} s "
                "(--term-timeout): it was killed (SIGKILL); only what it had written is kept.",
            )
        elif reason is not ExitReason.SIGNAL:
            manifest = manifest.with_degraded(
                Degraded.INTERRUPTED,
                f"the run got SIGTERM; the script caught or ignored it and ended with status {exit_status}.",
            )
        if exit_status == 0 or relay.escalated:
            exit_status = 128 + signal.SIGTERM
            if reason is not ExitReason.KILLED:
                reason, sig = ExitReason.SIGNAL, signal.SIGTERM

    manifest = dataclasses.replace(
        manifest,
        ended_unix_s=ended,
        exit_status=exit_status,
        exit_reason=reason,
        signal=sig if sig is not None else manifest.signal,
        traces=tuple(t for t in (state.traces if state is not None else ()) if (run_dir / t).is_file()),
    )
    _add_driver(run_dir, sampler.driver)
    if not write_manifest(run_dir, manifest) and exit_status == 0:
        exit_status = EXIT_OUTPUT_LOST
    for name in (CONFIG_FILE, STATE_FILE):
        with contextlib.suppress(OSError):
            (run_dir / name).unlink()
    remove_stray_temporaries(run_dir)
    lost = _lost_outputs(run_dir)
    if lost is not None and exit_status == 0:
        exit_status = EXIT_OUTPUT_LOST
    if not opts.quiet:
        sys.stderr.write(_last_line(run_dir, exit_status, lost))
    return ProfileOutcome(run_dir=run_dir, exit_status=exit_status, manifest=manifest.to_json())


def _discard_unstarted_run(run_dir: Path, existed: bool) -> None:
    """Nothing ran: what this run wrote goes, so that the next `profile -o` needs no --force (a folder
    made for it goes too; one that existed stays, emptied of the run's files)."""
    with contextlib.suppress(OSError):
        (run_dir / TORCH_IMPORT_FILE).unlink()
    if existed:
        with contextlib.suppress(OSError, UsageError):
            clear_out_dir(run_dir, force=True)
        return
    release_out_dir(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)


def _lost_outputs(run_dir: Path) -> str | None:
    """What of the run directory is gone at the end (the script deleted it, or its manifest), else None."""
    if not run_dir.is_dir():
        return (
            f"the run directory {strip_controls(str(run_dir))} was deleted while the run went on (by the script "
            "or another process): the trace, the samples and the manifest are lost"
        )
    if not (run_dir / "manifest.json").is_file():
        return f"manifest.json is missing from {strip_controls(str(run_dir))}: the run cannot be analyzed"
    return None


def _last_line(run_dir: Path, exit_status: int, lost: str | None) -> str:
    """The closing line: where the run is, or what of it was lost (never "saved" for a run that is not)."""
    if lost is not None:
        return f"gpuadvisor: {lost} (exit status {exit_status})\n"
    return f"gpuadvisor: run saved in {run_dir} (exit status {exit_status})\n"


class _WindowWatch:
    """Tells the parent when the child (rank 0) has exported its window, from its hand-over file;
    the file is read only when its modification time changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mtime: float | None = None
        self._complete = False

    def window_complete(self) -> bool:
        if self._complete:
            return True
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            return False
        if mtime != self._mtime:
            self._mtime = mtime
            raw = read_json(self.path)
            if isinstance(raw, dict):
                self._complete = ChildState.from_json(raw).capture.state is CaptureState.COMPLETE
        return self._complete


def initial_capture(opts: ProfileOptions) -> CaptureWindow:
    """The capture object of a manifest before the child reports (the window as configured)."""
    return CaptureWindow(
        skip_steps=opts.skip_steps,
        warmup_steps=opts.warmup_steps,
        active_steps=opts.active_steps,
        full=opts.full,
        with_stack=opts.with_stack,
    )


def write_manifest(run_dir: Path, manifest: Manifest) -> bool:
    """Write manifest.json atomically; False (and one line on stderr) when it could not be written."""
    try:
        write_json_atomic(run_dir / rundir.MANIFEST, manifest.to_json())
    except OSError as err:
        sys.stderr.write(f"gpuadvisor: manifest.json could not be written: {err.strerror or err}\n")
        return False
    return True


def _with_sampler(manifest: Manifest, sampler: Any) -> Manifest:
    """The manifest with the NVML sampler's record and its degraded flag."""
    manifest = dataclasses.replace(manifest, nvml=sampler.info())
    if not sampler.available:
        return manifest.with_degraded(Degraded.NVML_UNAVAILABLE, f"GPU samples were not recorded: {sampler.reason}.")
    if sampler.write_error:
        return manifest.with_degraded(Degraded.OUTPUT_INCOMPLETE, sampler.write_error)
    return manifest


def _finish_distributed(
    run_dir: Path,
    manifest: Manifest,
    launch: LaunchOptions,
    returncode: int,
    ended: float,
    sampler: Any,
    opts: ProfileOptions,
) -> ProfileOutcome:
    """The manifest of a torchrun run: the ranks' states merged, NVML and the launcher's status added."""
    launcher_status = exit_status_for(returncode, [])
    manifest, exit_status = merge_ranks(
        run_dir,
        manifest,
        world_size=launch.world_size(),
        launcher_status=launcher_status,
        distributed=launch.describe(),
        only_present=not launch.single_node(),
    )
    manifest = _with_sampler(manifest, sampler)
    if exit_status == 0 and manifest.has(Degraded.OUTPUT_INCOMPLETE):
        exit_status = EXIT_OUTPUT_LOST
        manifest = manifest.with_message("exit status 74: the script succeeded but some outputs could not be written.")
    manifest = dataclasses.replace(manifest, ended_unix_s=ended, exit_status=exit_status)
    _add_driver(run_dir, sampler.driver)
    if not write_manifest(run_dir, manifest) and exit_status == 0:
        exit_status = EXIT_OUTPUT_LOST
    stale = [CONFIG_FILE, *(rank_state_file(r) for r in read_rank_states(run_dir, None))]
    for name in stale:
        with contextlib.suppress(OSError):
            (run_dir / name).unlink()
    remove_stray_temporaries(run_dir)
    lost = _lost_outputs(run_dir)
    if lost is not None and exit_status == 0:
        exit_status = EXIT_OUTPUT_LOST
    if not opts.quiet and lost is not None:
        sys.stderr.write(_last_line(run_dir, exit_status, lost))
    elif not opts.quiet:
        failed = manifest.distributed.failed_rank if manifest.distributed is not None else None
        why = f", rank {failed} failed" if failed is not None else ""
        sys.stderr.write(
            f"gpuadvisor: run saved in {run_dir} ({len(manifest.traces)} rank traces{why}; exit status {exit_status})\n"
        )
    return ProfileOutcome(run_dir=run_dir, exit_status=exit_status, manifest=manifest.to_json())


def exit_status_for(returncode: int, degraded: list[str]) -> int:
    """`gpuadvisor profile`'s status from the child's returncode: the script's own status, 128+N for
    signal N, and 74 only when the script succeeded but some outputs were lost."""
    if returncode < 0:
        return 128 - returncode
    if returncode == 0 and rundir.DEGRADED_OUTPUT_INCOMPLETE in degraded:
        return EXIT_OUTPUT_LOST
    return returncode


def _add_driver(run_dir: Path, driver: str | None) -> None:
    if driver is None:
        return
    env_path = run_dir / rundir.ENVIRONMENT
    env = read_json(env_path)
    if isinstance(env, dict):
        env["driver"] = driver
        with contextlib.suppress(OSError):
            write_json_atomic(env_path, env)


def record_lost_outputs(outcome: ProfileOutcome, lost: str) -> ProfileOutcome:
    """The analysis that followed the capture could not write its outputs (`lost` says which and
    why): the manifest says so and a successful run exits 74 (no output of a run is lost silently)."""
    manifest = outcome.record
    status = EXIT_OUTPUT_LOST if outcome.exit_status == 0 else outcome.exit_status
    manifest = dataclasses.replace(manifest.with_degraded(Degraded.OUTPUT_INCOMPLETE, lost + "."), exit_status=status)
    if status != outcome.exit_status:
        manifest = manifest.with_message("exit status 74: the script succeeded but some outputs could not be written.")
    write_manifest(outcome.run_dir, manifest)
    return dataclasses.replace(outcome, exit_status=status, manifest=manifest.to_json())


def _append_log(path: Path, msg: str) -> None:
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [parent {os.getpid()}] {msg}\n")
