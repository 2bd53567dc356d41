"""The capture inside the training process: step counting, the profiler window, the child's files.

Used by the child process (`gpuadvisor.capture.child`) and by the in-process `Capture` context
manager. torch is imported only when a session starts.

`CaptureSession` coordinates four parts, one job each (docs/capture.md, "How it runs"): step
detection (`capture.steps`), the profiler window (`capture.window`), the trace export
(`capture.export`) and the settings snapshot (`capture.settings`); what they say goes through one
`capture.journal.CaptureJournal`, the costs between steps into `capture.between.StepEventLog`.

Step detection (decided at run time, highest priority first; `manifest.StepDetection`):
  1. `optimizer_step_hook`: every `optimizer.step()` of the first optimizer that steps is a boundary.
  2. `module_forward`: every call of the top module (the outermost `nn.Module` with parameters,
     `capture.forward`) after its first is a boundary; chosen at its second call.
  3. `dataloader`: chosen when a second DataLoader batch is requested before any optimizer step;
     every `__next__` on any DataLoader iterator (after the first of the run) is a boundary.
  4. `time`: chosen when none of these was seen within `time_fallback_after` seconds; a boundary
     every `time_step_seconds`.
A higher-priority signal that appears before the window has been exported takes over (an
unfinished window is dropped and counting restarts under the new method); after the export the
method is fixed. `manual` is used by `Capture.step()`.

Short scripts: from the first step signal, the profiler records speculatively until boundary
`skip_steps // 2`, for at most `short_run_seconds` (or until torch.compile is seen). That recording is
stopped and kept in memory; it becomes the trace (flag `short_run`) only if the script ends before the
real window produced one, and is dropped when the window completes.

After the window is exported every wrapper is removed except the one hook that counts steps under the
chosen method (kept for the host-timed step boundaries; O(1) per step), and Kineto is asked to
finalize CUPTI (`TEARDOWN_CUPTI=1`, pytorch PR #146604): the steps after the window run as under plain
python (issue 15). `capture.experiment` switches each of these off for measurements.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuadvisor import rundir
from gpuadvisor.capture import experiment, settings
from gpuadvisor.capture._io import write_json_atomic
from gpuadvisor.capture.between import StepEventLog
from gpuadvisor.capture.export import STATE_FILE, SkipExport, TraceExport, rank_file_name, rank_state_file
from gpuadvisor.capture.forward import ForwardTracker
from gpuadvisor.capture.frameworks import FrameworkRecorder
from gpuadvisor.capture.hooks import Recorder, read_worker_starts
from gpuadvisor.capture.journal import CaptureJournal
from gpuadvisor.capture.options import ProfileOptions
from gpuadvisor.capture.steps import StepDetector, TimeSteps
from gpuadvisor.capture.window import CaptureWindowComplete, ProfilerWindow, WindowState
from gpuadvisor.manifest import (
    CaptureWindow,
    ChildState,
    Degraded,
    DegradedFlag,
    ExitReason,
    StepDetection,
)

__all__ = [
    "STATE_FILE",
    "CaptureSession",
    "CaptureWindowComplete",
    "SessionConfig",
    "WindowState",
    "rank_file_name",
    "rank_state_file",
]

_SkipExport = SkipExport  # the exit path's second Ctrl-C (capture.child raises it during the export)


@dataclass(frozen=True)
class SessionConfig(ProfileOptions):
    """What the child needs to know: the run's `ProfileOptions` (with `out` set) and how it is driven;
    serialised by the parent as JSON."""

    manual_steps: bool = False  # steps come from Capture.step()
    # One process of a torchrun/DDP job: per-rank file names and state hand-over (capture/rank.py).
    distributed: bool = False

    @classmethod
    def from_options(
        cls, options: ProfileOptions, out: str, *, distributed: bool = False, manual_steps: bool = False
    ) -> SessionConfig:
        fields = {**dataclasses.asdict(options), "out": out}
        return cls(**fields, manual_steps=manual_steps, distributed=distributed)


class CaptureSession:
    """One capture in the current process. `start()`, run user code, `finish()`.

    A coordinator of four parts: `steps` (`StepDetector`, which event is a step), `window`
    (`ProfilerWindow`, the profiler's state machine), `trace` (`TraceExport`, the trace file) and the
    settings snapshot (`capture.settings`); `journal` is what they say, `between` the costs between
    steps. The session wires the hooks to them, writes the child's files and builds the state
    hand-over; the exit path (child.py, inprocess.py, watchdog.py) sets `exit_reason`, `exit_status`,
    `signal`, `failed_at_step`, `failed_at_unix_s`."""

    def __init__(self, config: SessionConfig) -> None:
        if config.out is None:
            raise ValueError("SessionConfig.out must name the run directory")
        self.cfg = config
        self.out = Path(config.out)
        self.pid = os.getpid()
        self.rank = int(os.environ.get("RANK", "0") or 0)
        self.world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
        self.node_rank = int(os.environ.get("GROUP_RANK", "0") or 0)
        self.off = experiment.disabled()
        self.failed_at_unix_s: float | None = None
        self.finishing = False  # set when finish() starts: the SIGTERM watchdog then stays out
        # set by the child when the user's code has returned or raised: the main thread is not blocked
        # in it any more and finishes the capture itself (a SIGTERM then interrupts nothing)
        self.script_ended = False
        self.exit_reason: ExitReason | None = None
        self.failed_at_step: int | None = None
        self.exit_status: int | None = None
        self.signal: int | None = None
        self.cuda_available = False
        self.recorder: Any = None
        self.tracker: Any = None
        self.frameworks: Any = None
        self._settings_snapshot: dict[str, Any] | None = None
        self._backend = settings.DistributedBackend()
        self.journal = CaptureJournal(self.out, self.pid, config.quiet)
        self.steps = StepDetector(config, self.journal, self, manual=config.manual_steps)
        self.trace = TraceExport(self.out, self.rank, self.world_size, self.journal)
        self.window = ProfilerWindow(
            config,
            self.journal,
            self.trace,
            self.steps,
            off=self.off,
            world_size=self.world_size,
            window_complete=self._window_complete,
            write_state=self.write_state,
        )
        self.timer = TimeSteps(config, self.journal.log, self.steps.undecided, self.steps.time_step)
        # what happened between steps and cost time (issue 27): epoch starts (DataLoader iterator
        # creation and its first batch), evaluation passes, torch.save, long gc passes
        self.between = StepEventLog(self.steps.current_step, self.steps.trained, self.steps.optimizer_built)

    # ------------------------------------------------------------------ what the exit path reads
    def is_origin(self) -> bool:
        """True in the process that started the capture (not in a fork of it)."""
        return self.journal.is_origin()

    def log(self, msg: str) -> None:
        self.journal.log(msg)

    def say(self, msg: str, *, force: bool = False) -> None:
        """One progress line on stderr (never stdout); rate-limited unless `force`."""
        self.journal.say(msg, force=force)

    def degrade(self, flag: Degraded, message: str, step: int | None = None) -> None:
        self.journal.degrade(flag, message, step)

    def has(self, flag: Degraded) -> bool:
        return self.journal.has(flag)

    @property
    def degraded(self) -> list[DegradedFlag]:
        return self.journal.degraded

    @property
    def messages(self) -> list[str]:
        return self.journal.messages

    @property
    def method(self) -> StepDetection | None:
        return self.steps.method

    @property
    def steps_seen(self) -> int:
        return self.steps.steps_seen

    @property
    def state(self) -> WindowState:
        return self.window.state

    @property
    def trace_written(self) -> bool:
        return self.trace.trace_written

    @property
    def profiler_used(self) -> bool:
        """A torch.profiler was created in this process (the exit path reads it)."""
        return self.window.profiler_used

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Install the hooks (torch is imported here) and the time fallback."""
        # lazy: the capture runs inside the user's process; importing gpuadvisor.capture must not load torch
        import torch

        (self.out / rundir.TRACE_DIR).mkdir(parents=True, exist_ok=True)
        self.cuda_available = bool(torch.cuda.is_available())
        self.trace.request_cupti_teardown(torch, self.off, self.cuda_available)
        self.recorder = Recorder(
            log=self.log,
            on_optimizer_step=self._on_optimizer_step,
            on_dataloader_next=self.steps.on_dataloader_next,
            on_user_profiler=self.window.on_user_profiler,
        )
        self.recorder.off = self.off
        self.recorder.on_step_event = self._on_step_event
        self.recorder.on_data_wait = self._on_data_wait
        self.recorder.worker_probe_path = str(self._worker_starts_path())
        self.recorder.install()
        self.tracker = ForwardTracker(self.recorder, self._on_forward)
        self.tracker.install()
        self.steps.model_call_running = self.tracker.in_call
        self.frameworks = FrameworkRecorder(self.recorder)
        self.frameworks.install()
        self.steps.recorder = self.recorder
        self.window.attach(self.recorder, self.tracker, self.frameworks, self.cuda_available)
        self.log(f"session started; sys.path[0] = {sys.path[0] if sys.path else None}")
        if self.off:
            self.log(f"experiment: disabled {', '.join(sorted(s.value for s in self.off))}")
        if not self.cuda_available:
            self.degrade(
                Degraded.CUDA_UNAVAILABLE,
                "CUDA is not available to torch in the training process: only CPU activity was recorded.",
            )
        if not self.cfg.manual_steps and self.cfg.time_fallback_after > 0:
            self.timer.start()
        self.write_state()

    def step(self) -> None:
        """Manual step boundary (the in-process `Capture.step()`)."""
        self.steps.manual_step()

    # ------------------------------------------------------------------ the hooks' callbacks
    def _on_optimizer_step(self, opt: Any) -> None:
        if self.is_origin():
            self.between.optimizer_step()
        self.steps.on_optimizer_step(opt)

    def _on_forward(self, evaluating: bool = False) -> None:
        """A call of the top module (`capture.forward`). `evaluating`: grad off, inference mode or the
        module in eval mode (an evaluation pass when the script trains)."""
        self.steps.flush_deferred()
        if self.is_origin():
            self.between.model_call(evaluating)
        self.steps.on_forward()

    def _on_data_wait(self, seconds: float) -> None:
        if self.is_origin():
            self.window.add_data_wait(seconds)

    def _on_step_event(self, kind: str, start: float, seconds: float, detail: dict[str, Any]) -> None:
        """A cost between steps (`Recorder.on_step_event`), in this process only."""
        if self.is_origin():
            self.between.add(kind, start, seconds, detail)

    # ------------------------------------------------------------------ StepSink: steps -> window
    def boundary(self) -> None:
        self.window.boundary()

    def step_signal(self, optimizer: bool = False) -> None:
        self.window.signal(optimizer)

    def switching(self, old: StepDetection | None, new: StepDetection) -> None:
        self.window.method_switching(old, new)

    def switched(self) -> None:
        self.write_state()

    def window_done(self) -> bool:
        return self.window.state is WindowState.DONE

    def window_closed(self) -> bool:
        return self.window.state in (WindowState.DONE, WindowState.DISABLED)

    def _window_complete(self) -> None:
        """The window's trace is exported: snapshot the settings, remove the wrappers, write the files."""
        self.snapshot_settings()
        self.window.after_window()
        self.write_outputs()

    # ------------------------------------------------------------------ outputs
    def snapshot_settings(self) -> None:
        self._settings_snapshot = settings.snapshot_settings(
            self.recorder,
            self.tracker,
            self.steps.counts[StepDetection.OPTIMIZER_STEP_HOOK],
            self.off,
            self.window.state is WindowState.DONE,
            self.log,
        )

    def environment_json(self) -> dict[str, Any]:
        return settings.environment_json(self.window, self._settings_snapshot, self.steps_seen, self.log)

    def capture_window(self) -> CaptureWindow:
        return settings.capture_window(self.cfg, self.window, self.trace, self.between, self.off)

    def child_state(self) -> ChildState:
        return ChildState(
            pid=self.pid,
            python=sys.executable,
            step_detection=self.method or StepDetection.NONE,
            steps_seen=self.steps_seen,
            capture=self.capture_window(),
            traces=(f"{rundir.TRACE_DIR}/rank{self.rank}.json.gz",) if self.trace_written else (),
            degraded=tuple(self.degraded),
            messages=tuple(self.messages),
            exit_reason=self.exit_reason,
            exit_status=self.exit_status,
            failed_at_step=self.failed_at_step,
            signal=self.signal,
            rank=self.rank,
            local_rank=self.local_rank,
            node_rank=self.node_rank,
            world_size=self.world_size,
            host=platform.node(),
            failed_at_unix_s=self.failed_at_unix_s,
            ended_unix_s=time.time() if self.exit_reason is not None else None,
            distributed_backend=self._backend.read(),
        )

    def state_file(self) -> Path:
        return self.out / (rank_state_file(self.rank) if self.cfg.distributed else STATE_FILE)

    def file_name(self, name: str) -> str:
        """environment.json / callsites.json, per rank in a distributed capture."""
        return rank_file_name(name, self.rank) if self.cfg.distributed else name

    def write_state(self) -> None:
        if not self.is_origin():
            return
        try:
            write_json_atomic(self.state_file(), self.child_state().to_json())
        except OSError as err:
            self.log(f"state not written: {err}")

    def _worker_starts_path(self) -> Path:
        return self.out / f".worker_starts.{self.pid}"

    def write_outputs(self) -> bool:
        """environment.json, callsites.json and the state hand-over. False if something was lost."""
        if not self.is_origin():
            return True
        with contextlib.suppress(Exception):
            self.between.merge_worker_starts(read_worker_starts(str(self._worker_starts_path())))
        ok = True
        steps = self.window.callsite_steps()  # the steps whose calls were counted
        for name, make in (
            (rundir.ENVIRONMENT, self.environment_json),
            (
                rundir.CALLSITES,
                lambda: self.recorder.callsites_json(steps, self.window.window_steps()) if self.recorder else {},
            ),
        ):
            try:
                write_json_atomic(self.out / self.file_name(name), make())
            except OSError as err:
                ok = False
                self.degrade(
                    Degraded.OUTPUT_INCOMPLETE, f"{name} could not be written ({err.strerror or err})."
                )
            except Exception as err:
                ok = False
                self.degrade(
                    Degraded.OUTPUT_INCOMPLETE,
                    f"{name} could not be built ({type(err).__name__}: {err}).",
                )
        self.write_state()
        return ok

    def finish(
        self, *, skip_export: bool = False, skip_reason: str = "the trace export was skipped by a second Ctrl-C."
    ) -> None:
        """Stop everything (profiler, timer, hooks) and write the child's files. Idempotent.
        `skip_export`: drop the recording instead of exporting it; `skip_reason` says so in the manifest."""
        self.finishing = True
        self.timer.stop()
        if self.is_origin():
            self.between.finish()
        if self.recorder is not None:
            self.recorder.recording_callsites = False
        why = " with an exception" if self.exit_reason is ExitReason.EXCEPTION else ""
        self.window.finish(skip_export=skip_export, skip_reason=skip_reason, why=why)
        self.steps.finish()
        if self._settings_snapshot is None or self.window.state is not WindowState.DONE:
            with contextlib.suppress(Exception):
                self.snapshot_settings()
        if self.frameworks is not None:
            self.frameworks.uninstall()
        if self.recorder is not None:
            self.recorder.uninstall()
            self.recorder.remove_gc_callback()
            for err in self.recorder.hook_errors:
                self.journal.note(err)
        self.write_outputs()
        with contextlib.suppress(OSError):
            self._worker_starts_path().unlink()
        self.journal.close()
