"""The capture inside the training process: step counting, the profiler window, the child's files.

Used by the child process (`gpuadvisor.capture.child`) and by the in-process `Capture` context
manager. torch is imported only when a session starts.

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
import enum
import gzip
import os
import platform
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuadvisor import rundir
from gpuadvisor.capture import experiment
from gpuadvisor.capture._io import write_json_atomic
from gpuadvisor.capture.between import StepEventLog
from gpuadvisor.capture.experiment import Suspect
from gpuadvisor.capture.forward import ForwardTracker
from gpuadvisor.capture.frameworks import FrameworkRecorder
from gpuadvisor.capture.hooks import Recorder, read_worker_starts
from gpuadvisor.capture.options import ProfileOptions
from gpuadvisor.manifest import (
    CaptureState,
    CaptureWindow,
    ChildState,
    Degraded,
    DegradedFlag,
    ExitReason,
    StepDetection,
    StepEvent,
)

STATE_FILE = ".child_state.json"  # child -> parent hand-over, merged into manifest.json then removed


def rank_state_file(rank: int) -> str:
    """The hand-over file of one rank of a distributed capture (every rank, rank 0 included)."""
    return f".child_state.rank{rank}.json"


def rank_file_name(name: str, rank: int) -> str:
    """Per-rank name of a child file: rank 0 keeps the classic name (single-rank readers work),
    rank N writes `environment.rankN.json`, `callsites.rankN.json`."""
    if rank == 0:
        return name
    stem, dot, ext = name.partition(".")
    return f"{stem}.rank{rank}{dot}{ext}"


# Step end times kept for the profiler-overhead estimate and the costs that come every N steps
# (bounded: 20k boundaries are about 320 kB in the manifest).
MAX_STEP_TIMES = 20_000


def _in_backward() -> bool:
    """True inside the autograd engine's backward pass (a hook running in it)."""
    try:
        import torch

        return bool(torch._C._current_graph_task_id() != -1)
    except Exception:
        return False


# steps timed after the window (without --full) as the unprofiled reference of the analysis
REFERENCE_STEPS_AFTER = 5
# how long model calls and batches wait for a constructed optimizer's first step when
# --time-fallback-after is 0 (never count by time)
OPTIMIZER_HOLD_SECONDS = 20.0


class CaptureWindowComplete(SystemExit):
    """Raised in the main thread at the step boundary that ends the window (unless --full).

    A SystemExit (code 0) so that `except Exception:` in user code lets it through, and so that an
    uncaught one ends the process quietly with status 0.
    """

    def __init__(self) -> None:
        super().__init__(0)


class _SkipExport(BaseException):
    """Second Ctrl-C during the export: give up the trace, keep the rest."""


class WindowState(enum.Enum):
    IDLE = "idle"
    SPECULATE = "speculate"  # recording the first steps in case the script ends before the window
    WARMUP = "warmup"
    RECORD = "record"
    DONE = "done"
    DISABLED = "disabled"


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


@dataclass
class _Recording:
    """A stopped profiler whose trace can still be exported, and the steps it annotated."""

    prof: Any
    first_step: int
    last_step: int
    window_start_unix_s: float | None
    window_end_unix_s: float | None


def _cuda_version_at_least(version: str | None, major: int, minor: int) -> bool:
    try:
        parts = [int(p) for p in (version or "").split(".")[:2]]
    except ValueError:
        return False
    return len(parts) == 2 and (parts[0], parts[1]) >= (major, minor)


class CaptureSession:
    """One capture in the current process. `start()`, run user code, `finish()`."""

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
        self._backend_seen: str | None = None
        self.finishing = False  # set when finish() starts: the SIGTERM watchdog then stays out
        # set by the child when the user's code has returned or raised: the main thread is not blocked
        # in it any more and finishes the capture itself (a SIGTERM then interrupts nothing)
        self.script_ended = False
        self.method: StepDetection | None = StepDetection.MANUAL if config.manual_steps else None
        self.counts: dict[StepDetection, int] = {m: 0 for m in StepDetection}
        self._dl_calls = 0
        self._fwd_calls = 0
        self._primary_optimizer: Any = None
        self.state = WindowState.IDLE
        self._prof: Any = None
        self._step_rec: Any = None
        self._warmup_start = 0
        self.record_start: int | None = None
        self.record_end: int | None = None
        self.window_start_unix_s: float | None = None
        self.window_end_unix_s: float | None = None
        self.export_seconds: float | None = None
        self.trace_written = False
        self.short_run = False
        self.cupti_teardown = False  # CUPTI finalized after the window (ours or the user's setting)
        self._manage_teardown = False  # we set TEARDOWN_CUPTI (the user did not)
        # speculative recording of the first steps (short scripts)
        self._spec_started_mono = 0.0
        self._spec_start_step = 0
        self._spec_done = False
        self._spec: _Recording | None = None
        self.speculation_end_step: int | None = None
        self.degraded: list[DegradedFlag] = []
        self.messages: list[str] = []
        self.stop_requested = False
        self._stop_at_step: int | None = None  # without --full: stop at this boundary, after the reference steps
        self._stop_announced = False
        self._preparing_ours = False
        self._last_progress = 0.0
        self._started_mono = time.monotonic()
        self._settings_snapshot: dict[str, Any] | None = None
        self._callsite_steps: int | None = None  # steps counted while call sites were recorded
        # the unprofiled reference steps run without the Tensor wrappers: steps [removed at, installed again)
        self._wrappers_off_since: int | None = None
        self._wrappers_off_steps = 0
        self.profiler_used = False  # a torch.profiler was created in this process (the exit path reads it)
        self._deferred_boundaries = 0  # optimizer steps taken inside backward, not yet made boundaries
        self._deferral_logged = False
        self._lock = threading.RLock()
        self._timer: threading.Thread | None = None
        self._timer_stop = threading.Event()
        self._time_pending = False
        self._in_boundary = False
        self._prev_winch: Any = None
        self._log_fh: Any = None
        self.recorder: Any = None
        self.tracker: Any = None
        self.frameworks: Any = None
        self.exit_reason: ExitReason | None = None
        self.failed_at_step: int | None = None
        self.exit_status: int | None = None
        self.signal: int | None = None
        # (steps completed, host wall-clock time) at every step boundary: analysis compares the steps
        # outside the profiler window with the window's steps to measure how much the profiler itself
        # slowed the step (per-op CPU overhead), see docs/metrics.md.
        self.step_ends: list[tuple[int, float]] = []
        # what happened between steps and cost time (issue 27): epoch starts (DataLoader iterator
        # creation and its first batch), evaluation passes, torch.save, long gc passes
        self.between = StepEventLog(
            self._current_step,
            self._trained,
            lambda: self.recorder is not None and bool(self.recorder.optimizers),
        )
        self._expect_since: float | None = None  # first held forward call / batch (optimizer not stepped yet)
        self._held_logged = False
        self._min_stop_step: int | None = None  # after the window: the reference steps, at least
        self._observe_deadline: float | None = None

    # ------------------------------------------------------------------ plumbing
    def is_origin(self) -> bool:
        """True in the process that started the capture (not in a fork of it)."""
        return os.getpid() == self.pid

    def log(self, msg: str) -> None:
        if not self.is_origin():
            return
        try:
            if self._log_fh is None:
                # Kept open for the session (line-buffered); closed by finish().
                self._log_fh = open(self.out / rundir.LOG, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
            self._log_fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [child {self.pid}] {msg}\n")
        except OSError:
            pass  # a full disk must not break the user's run; the manifest says what was lost

    def say(self, msg: str, *, force: bool = False) -> None:
        """One progress line on stderr (never stdout); rate-limited unless `force`."""
        self.log(msg)
        if self.cfg.quiet or not self.is_origin():
            return
        now = time.monotonic()
        if not force and now - self._last_progress < 1.0:
            return
        self._last_progress = now
        try:
            sys.stderr.write(f"gpuadvisor: {msg}\n")
            sys.stderr.flush()
        except Exception:
            pass

    def degrade(self, flag: Degraded, message: str, step: int | None = None) -> None:
        entry = DegradedFlag(flag, step)
        if entry not in self.degraded:
            self.degraded.append(entry)
        if message and message not in self.messages:
            self.messages.append(message)
        self.log(f"degraded {entry}: {message}")

    def has(self, flag: Degraded) -> bool:
        return any(f.kind is flag for f in self.degraded)

    @property
    def steps_seen(self) -> int:
        return self.counts[self.method] if self.method else 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Install the hooks (torch is imported here) and the time fallback."""
        import torch

        (self.out / rundir.TRACE_DIR).mkdir(parents=True, exist_ok=True)
        self.cuda_available = bool(torch.cuda.is_available())
        self._request_cupti_teardown(torch)
        self.recorder = Recorder(
            log=self.log,
            on_optimizer_step=self._on_optimizer_step,
            on_dataloader_next=self._on_dataloader_next,
            on_user_profiler=self._on_user_profiler,
        )
        self.recorder.off = self.off
        self.recorder.on_step_event = self._on_step_event
        self.recorder.worker_probe_path = str(self._worker_starts_path())
        self.recorder.install()
        self.tracker = ForwardTracker(self.recorder, self._on_forward)
        self.tracker.install()
        self.frameworks = FrameworkRecorder(self.recorder)
        self.frameworks.install()
        self.log(f"session started; sys.path[0] = {sys.path[0] if sys.path else None}")
        if self.off:
            self.log(f"experiment: disabled {', '.join(sorted(s.value for s in self.off))}")
        if not self.cuda_available:
            self.degrade(
                Degraded.CUDA_UNAVAILABLE,
                "CUDA is not available to torch in the training process: only CPU activity was recorded.",
            )
        if not self.cfg.manual_steps and self.cfg.time_fallback_after > 0:
            self._start_timer()
        self.write_state()

    def _request_cupti_teardown(self, torch: Any) -> None:
        """Ask Kineto to finalize CUPTI when a trace stops, so that no CUPTI callback stays attached to
        the steps after the window (pytorch PR #146604 measured 10-20% on later steps without it).

        Kineto reads TEARDOWN_CUPTI at each stop. Not set when the user set it, when CUDA is older
        than 12.6 (teardown crashes next to CUDA graphs there; torch itself then sets it to 0), or in
        an experiment that disables it."""
        if Suspect.CUPTI_TEARDOWN in self.off or "TEARDOWN_CUPTI" in os.environ or not self.cuda_available:
            self.cupti_teardown = os.environ.get("TEARDOWN_CUPTI") == "1"
            return
        if not _cuda_version_at_least(getattr(torch.version, "cuda", None), 12, 6):
            return
        self._manage_teardown = True  # set per stop by _stop_trace
        self.cupti_teardown = True

    def _start_timer(self) -> None:
        # Time-based steps are delivered in the main thread through a simulated SIGWINCH (ignored by
        # default, so no behaviour changes): the profiler must be driven from the training thread.
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            prev = signal.getsignal(signal.SIGWINCH)
            if prev not in (signal.SIG_DFL, signal.SIG_IGN, None):
                self.log("SIGWINCH already handled by someone else: no time-based step fallback")
                return
            self._prev_winch = prev
            signal.signal(signal.SIGWINCH, self._on_winch)
        except (ValueError, OSError, AttributeError) as err:
            self.log(f"no time-based step fallback: {err}")
            return
        self._timer = threading.Thread(target=self._timer_loop, name="gpuadvisor-steps", daemon=True)
        self._timer.start()

    def _timer_loop(self) -> None:
        import _thread

        if self._timer_stop.wait(self.cfg.time_fallback_after):
            return
        while not self._timer_stop.is_set():
            with self._lock:
                undecided = (
                    self.method in (None, StepDetection.TIME) and self._dl_calls <= 1 and self._fwd_calls <= 1
                )
                if not undecided or self.state in (WindowState.DONE, WindowState.DISABLED):
                    return
                already = self._time_pending
                self._time_pending = True
            if not already:  # ticks coalesce while the main thread is busy
                _thread.interrupt_main(signal.SIGWINCH)
            if self._timer_stop.wait(self.cfg.time_step_seconds):
                return

    def _on_winch(self, signum: int, frame: Any) -> None:
        if not self._time_pending:
            return  # a real terminal resize
        self._time_pending = False
        self._signal()
        if self.method is None:
            self._switch_method(StepDetection.TIME, "no optimizer step, model forward or DataLoader batch was seen")
        if self.method is StepDetection.TIME:
            self.counts[StepDetection.TIME] += 1
            self._boundary()

    def _stop_timer(self) -> None:
        self._timer_stop.set()
        if self._prev_winch is not None and threading.current_thread() is threading.main_thread():
            with contextlib.suppress(Exception):
                signal.signal(signal.SIGWINCH, self._prev_winch)
            self._prev_winch = None

    # ------------------------------------------------------------------ step signals
    def _on_optimizer_step(self, opt: Any) -> None:
        if self.is_origin():
            self.between.optimizer_step()
        if self.state is WindowState.DONE:
            if self.method is StepDetection.OPTIMIZER_STEP_HOOK and opt is self._primary_optimizer:
                self.counts[StepDetection.OPTIMIZER_STEP_HOOK] += 1
                self._optimizer_boundary()
            return
        if not self.is_origin():
            return  # a forked worker running our hooks: its calls are not the run's steps
        if self._primary_optimizer is None:
            self._primary_optimizer = opt
        elif opt is not self._primary_optimizer:
            return  # only the first optimizer that steps counts (GANs and friends step several)
        self._signal(optimizer=True)
        self.counts[StepDetection.OPTIMIZER_STEP_HOOK] += 1
        method = StepDetection.OPTIMIZER_STEP_HOOK
        if self.method is not method and self._may_switch(method):
            self._switch_method(method, "optimizer.step() was seen")
        if self.method is method:
            self._optimizer_boundary()

    def _optimizer_boundary(self) -> None:
        """An optimizer step ended a step. Stepped from inside the backward pass (per-parameter
        optimizers in `register_post_accumulate_grad_hook`, the "optimizer step in backward" recipe),
        the profiler must not be started, stopped or stepped there (the engine restores its own
        thread-local profiler state after the hook; the stop crashed): the boundary is taken at the
        next safe point, the model's next call or DataLoader batch."""
        if _in_backward():
            self._deferred_boundaries += 1
            if not self._deferral_logged:
                self._deferral_logged = True
                self.log("optimizer steps inside the backward pass: step boundaries are taken at the model's next call")
            return
        self._boundary()

    def _flush_deferred(self) -> None:
        while self._deferred_boundaries > 0 and self.method is StepDetection.OPTIMIZER_STEP_HOOK:
            self._deferred_boundaries -= 1
            self._boundary()

    def _on_forward(self, evaluating: bool = False) -> None:
        """A call of the top module (`capture.forward`): the first starts step 0, each later one ends
        a step. `evaluating`: grad off, inference mode or the module in eval mode (an evaluation pass
        when the script trains)."""
        self._flush_deferred()
        if self.is_origin():
            self.between.model_call(evaluating)
        if self.state is WindowState.DONE:
            if self.method is StepDetection.MODULE_FORWARD:
                self.counts[StepDetection.MODULE_FORWARD] += 1
                self._boundary()
            return
        if not self.is_origin():
            return  # e.g. a module applied in a forked DataLoader worker
        self._signal()
        self._fwd_calls += 1
        if self._fwd_calls == 1:
            return
        method = StepDetection.MODULE_FORWARD
        self.counts[method] += 1
        if (
            self.method is not method
            and self.counts[StepDetection.OPTIMIZER_STEP_HOOK] == 0
            and not self._optimizer_expected()
            and self._may_switch(method)
        ):
            self._switch_method(method, "the model's forward was called again")
        if self.method is method:
            self._boundary()

    def _on_dataloader_next(self) -> None:
        self._flush_deferred()
        if self.state is WindowState.DONE:
            if self.method is StepDetection.DATALOADER:
                self.counts[StepDetection.DATALOADER] += 1
                self._boundary()
            return
        if not self.is_origin():
            return
        self._signal()
        self._dl_calls += 1
        if self._dl_calls == 1:
            return  # the first batch starts step 0; it ends nothing
        method = StepDetection.DATALOADER
        self.counts[method] += 1
        if (
            self.method is not method
            and self.counts[StepDetection.OPTIMIZER_STEP_HOOK] == 0
            and not self._optimizer_expected()
            and self._may_switch(method)
        ):
            self._switch_method(method, "a second DataLoader batch came before any optimizer step")
        if self.method is method:
            self._boundary()

    def _optimizer_hold_seconds(self) -> float:
        return self.cfg.time_fallback_after if self.cfg.time_fallback_after > 0 else OPTIMIZER_HOLD_SECONDS

    def _optimizer_expected(self, announce: bool = True) -> bool:
        """The training loop first (issue 27): an optimizer was constructed but has not stepped yet, so
        forward calls and DataLoader batches seen now (an evaluation before training: nanoGPT's
        `estimate_loss()` at iteration 0, a validation sanity check) are not made steps. The hold ends
        at the first optimizer step, or `time_fallback_after` seconds (default 20) after the first
        held call: a script that builds an optimizer and never steps it is then stepped by its
        forward calls or batches as before."""
        if self.counts[StepDetection.OPTIMIZER_STEP_HOOK] > 0 or self.method is not None:
            return False
        if self.recorder is None or not self.recorder.optimizers:
            return False
        now = time.monotonic()
        if self._expect_since is None:
            self._expect_since = now
        if now - self._expect_since >= self._optimizer_hold_seconds():
            return False
        if announce and not self._held_logged:
            self._held_logged = True
            self.say(
                "an optimizer exists but has not stepped yet: model calls and batches before the first "
                "optimizer step are not counted as steps (evaluation before training)",
                force=True,
            )
        return True

    def _trained(self) -> bool:
        """An optimizer stepped or a backward pass ran: the script trains."""
        rec = self.recorder
        return self.counts[StepDetection.OPTIMIZER_STEP_HOOK] > 0 or (
            rec is not None and rec.settings.backward_calls > 0
        )

    # ------------------------------------------------------------------ costs between steps
    def _current_step(self) -> int | None:
        return self.steps_seen if self.method is not None and self.steps_seen > 0 else None

    def _on_step_event(self, kind: str, start: float, seconds: float, detail: dict[str, Any]) -> None:
        """A cost between steps (`Recorder.on_step_event`), in this process only."""
        if self.is_origin():
            self.between.add(kind, start, seconds, detail)

    def step(self) -> None:
        """Manual step boundary (the in-process `Capture.step()`)."""
        self._signal()
        self.counts[StepDetection.MANUAL] += 1
        if self.method is StepDetection.MANUAL:
            self._boundary()

    def _may_switch(self, new: StepDetection) -> bool:
        if self.method is None:
            return True
        if new.priority <= self.method.priority:
            return False
        return self.state not in (WindowState.DONE, WindowState.DISABLED)

    def _switch_method(self, new: StepDetection, why: str) -> None:
        old = self.method
        if self.state in (WindowState.WARMUP, WindowState.RECORD):
            self._abort_window(f"step detection switched from {old.value if old else None} to {new.value}")
        if old is not None and (self.state is WindowState.SPECULATE or self._spec is not None):
            # The speculative recording numbered its steps by the old method: start it over.
            self._drop_speculation(f"step detection switched from {old.value} to {new.value}")
        self.method = new
        self.say(f"counting steps by {new.value} ({why})", force=True)
        self.write_state()

    # ------------------------------------------------------------------ the window
    def _boundary(self) -> None:
        """A step just ended: `steps_seen` completed steps, the next step's index is `steps_seen`."""
        if self.state is WindowState.DONE:  # after the window: O(1)
            full = len(self.step_ends) >= MAX_STEP_TIMES
            if not full:
                self.step_ends.append((self.steps_seen, time.time()))
            if self._stop_at_step is not None and (
                self.steps_seen >= self._stop_at_step
                or full
                or (
                    self._min_stop_step is not None
                    and self.steps_seen >= self._min_stop_step
                    and self._observe_deadline is not None
                    and time.monotonic() >= self._observe_deadline
                )
            ):
                self.stop_requested = True
            if self.stop_requested:
                self._raise_stop()
            return
        if self._in_boundary:
            return  # a time tick delivered while a boundary is being handled: the next one catches up
        c = self.steps_seen
        cfg = self.cfg
        if len(self.step_ends) < MAX_STEP_TIMES:
            self.step_ends.append((c, time.time()))
        if self.stop_requested:
            self._raise_stop()
        self._in_boundary = True
        announced = False
        try:
            if self.state is WindowState.SPECULATE:
                self._exit_step_annotation()
                if self._speculation_over(c):
                    self._end_speculation(c)
                else:
                    self._enter_step_annotation(c)
            if self.state is WindowState.IDLE and c < cfg.skip_steps:
                self._maybe_speculate(c)
            if c == max(1, cfg.skip_steps // 2) and self.state is WindowState.IDLE and self.recorder is not None:
                # The steps from here to the window are the unprofiled reference of the analysis
                # (gpuadvisor.manifest.host_step_durations): without the per-call Tensor wrappers.
                self.recorder.remove_tensor_hooks()
                self._wrappers_off_since = c
            if self.state is WindowState.IDLE and c >= cfg.skip_steps:
                self._begin_warmup(c)
                announced = True
            if self.state is WindowState.WARMUP and c >= self._warmup_start + cfg.warmup_steps:
                self._begin_record(c)
            elif announced:
                pass
            elif self.state is WindowState.RECORD:
                assert self.record_start is not None
                self._exit_step_annotation()
                if c >= self.record_start + cfg.active_steps:
                    self._complete_window(c)
                else:
                    self._enter_step_annotation(c)
                    self.say(f"step {c}: recording ({c - self.record_start + 1}/{cfg.active_steps})")
            elif self.state in (WindowState.IDLE, WindowState.SPECULATE):
                self.say(f"step {c}: skipping ({c}/{cfg.skip_steps})")
            elif self.state is WindowState.WARMUP:
                self.say(f"step {c}: warm-up ({c - self._warmup_start + 1}/{cfg.warmup_steps})")
        except (KeyboardInterrupt, CaptureWindowComplete, _SkipExport):
            raise
        except Exception as err:  # the profiler failed: keep the user's run alive, say why
            self.degrade(
                Degraded.TRACE_NOT_EXPORTED,
                f"the profiler failed at step {c}: {type(err).__name__}: {err}",
            )
            self._drop_profiler()
            self.state = WindowState.DISABLED
        finally:
            self._in_boundary = False
        if self.stop_requested:
            self._raise_stop()

    def _raise_stop(self) -> None:
        if threading.current_thread() is threading.main_thread():
            raise CaptureWindowComplete()

    def _user_profiler_active(self) -> bool:
        import torch

        try:
            return bool(torch.autograd._profiler_enabled())  # type: ignore[attr-defined]
        except Exception:
            return False

    def _new_profiler(self) -> Any:
        """A prepared (warming-up) torch.profiler with what the rules read: CPU ops with shapes
        (dtypes, FLOPs from Input Dims), CUDA activity; no flops (computed from shapes), no memory."""
        from torch.profiler import ProfilerActivity, profile

        self.profiler_used = True
        activities = [ProfilerActivity.CPU]
        if self.cuda_available:
            activities.append(ProfilerActivity.CUDA)
        prof = profile(
            activities=activities,
            record_shapes=True,
            with_flops=False,
            with_stack=self.cfg.with_stack,
            profile_memory=False,
        )
        dist_initialized = False
        with contextlib.suppress(Exception):
            import torch.distributed as dist

            dist_initialized = bool(dist.is_available() and dist.is_initialized())
        if not dist_initialized:
            # HTA refuses traces without distributedInfo.rank; torch adds it only under torch.distributed.
            import json

            prof.preset_metadata_json(
                "distributedInfo",
                json.dumps({"backend": None, "rank": self.rank, "world_size": self.world_size}),
            )
        self._preparing_ours = True
        try:
            with self._native_stderr_filtered():
                prof.prepare_trace()
        finally:
            self._preparing_ours = False
        return prof

    def _begin_warmup(self, c: int) -> None:
        if self._user_profiler_active():
            self.degrade(
                Degraded.USER_PROFILER,
                "the script runs its own torch.profiler; gpuadvisor waits until it is stopped (one profiler per process).",
            )
            return
        self._prof = self._new_profiler()
        if self.recorder is not None:
            self.recorder.install_tensor_hooks()
            self._wrappers_back_on(c)
        self.state = WindowState.WARMUP
        self._warmup_start = c
        self.say(f"step {c}: warm-up starts ({self.cfg.warmup_steps} steps)", force=True)

    def _wrappers_back_on(self, c: int) -> None:
        if self._wrappers_off_since is not None:
            self._wrappers_off_steps += max(0, c - self._wrappers_off_since)
            self._wrappers_off_since = None

    def _begin_record(self, c: int) -> None:
        with self._native_stderr_filtered():
            self._prof.start_trace()
        self.state = WindowState.RECORD
        self.record_start = c
        self.window_start_unix_s = time.time()
        self._set_in_window(True)
        self._enter_step_annotation(c)
        self.say(f"step {c}: recording (1/{self.cfg.active_steps})", force=True)
        self.write_state()

    def _set_in_window(self, on: bool) -> None:
        """Call sites and model calls are also counted per recorded step."""
        if self.tracker is not None:
            self.tracker.in_window = on
        if self.recorder is not None:
            self.recorder.in_window = on

    def _window_steps(self) -> int:
        """Steps of the recorded window (0 without one, or for a short run)."""
        if self.record_start is None or self.record_end is None or self.short_run or not self.trace_written:
            return 0
        return max(0, self.record_end - self.record_start + 1)

    def _enter_step_annotation(self, c: int) -> None:
        from torch.profiler import record_function

        # The same name torch.profiler's own schedule uses, so HTA and our analysis find the steps.
        self._step_rec = record_function(f"ProfilerStep#{c}")
        self._step_rec.__enter__()

    def _exit_step_annotation(self) -> None:
        rec, self._step_rec = self._step_rec, None
        if rec is not None:
            rec.__exit__(None, None, None)

    def _complete_window(self, c: int) -> None:
        self.record_end = c - 1
        self._set_in_window(False)
        self._stop_and_export()
        self.state = WindowState.DONE
        self._spec = None  # the real window replaces the speculative recording
        self.snapshot_settings()
        self._after_window()
        self.write_outputs()
        if not self.cfg.full:
            # Step c carries the export; the REFERENCE_STEPS_AFTER after it run as under plain python
            # (profiler detached, CUPTI finalized, wrappers removed): the analysis's unprofiled
            # reference (gpuadvisor.manifest.host_step_durations). Then the script is stopped.
            # Not for time-based steps (seconds of wall time, not the script's steps), nor when no step
            # hook stays installed after the window (an overhead experiment): no boundary would come.
            # Then the steps go on being timed (unprofiled) until step `observe_steps` or for
            # `observe_seconds`, whichever comes first, so that costs that come every N steps (epoch
            # starts, evaluation, checkpoints) are seen: docs/capture.md, "Costs between steps".
            no_steps_after = self.method is StepDetection.TIME or Suspect.STEP_TIMER in self.off
            extra = 0 if no_steps_after else REFERENCE_STEPS_AFTER
            if extra:
                self._min_stop_step = c + 1 + extra
                self._stop_at_step = self._min_stop_step
                if self.world_size <= 1:
                    # Not under torch.distributed: a time bound would stop the ranks at different steps
                    # (a rank left in a collective hangs); every rank stops at the same step there.
                    self._stop_at_step = max(self._min_stop_step, self.cfg.observe_steps)
                    self._observe_deadline = time.monotonic() + self.cfg.observe_seconds
            else:
                self.stop_requested = True
            if not self._stop_announced and self.is_origin():
                self._stop_announced = True
                observing = extra and self._stop_at_step is not None and self._stop_at_step > c + 1 + extra
                msg = f"capture window complete after step {c}; " + (
                    f"timing the steps without the profiler until step {self._stop_at_step} (at most "
                    f"{self.cfg.observe_seconds:g} s after {extra} steps), then stopping the script"
                    if observing
                    else f"timing {extra} more steps without the profiler, then stopping the script"
                    if extra
                    else "stopping the script"
                ) + " (use --full to run to the end)"
                self.log(msg)
                if not self.cfg.quiet:
                    sys.stderr.write(f"gpuadvisor: {msg}\n")
                    sys.stderr.flush()
        else:
            self.say(f"capture window complete after step {c}; the script continues (--full)", force=True)

    def _after_window(self) -> None:
        """Remove every wrapper but the step-counting hook of the chosen method (issue 15)."""
        if self.recorder is None:
            return
        keep_steps = Suspect.STEP_TIMER not in self.off
        method = self.method
        if Suspect.UNINSTALL_AFTER_WINDOW in self.off:
            if not keep_steps:
                self.recorder.uninstall(keep=lambda owner, attr, group: not self._is_step_hook(attr, group, method))
            self.log("experiment: wrappers kept after the window")
            return
        self._callsite_steps = self.steps_seen
        self.recorder.recording_callsites = False
        # optimizer steps taken inside backward become boundaries at the model's next call: keep it
        deferring = method is StepDetection.OPTIMIZER_STEP_HOOK and self._deferral_logged
        # The top module's pre-hook stays to tell evaluation passes apart (O(1) per model call), as do
        # DataLoader __iter__/__next__ (epoch starts), torch.save and the gc callback: the costs that
        # come every N steps are timed after the window too.
        if self.tracker is not None:
            self.tracker.stop(keep_step_hook=keep_steps)
        if self.frameworks is not None:
            self.frameworks.uninstall()
        self.recorder.uninstall(
            keep=lambda owner, attr, group: keep_steps
            and (self._is_step_hook(attr, group, method, deferring) or self._is_periodic_hook(attr, group))
        )
        if not keep_steps:
            self.recorder.remove_gc_callback()
        left = self.recorder.installed()
        self.log(f"after the window: wrappers left installed: {', '.join(left) if left else 'none'}")

    @staticmethod
    def _is_periodic_hook(attr: str, group: Suspect) -> bool:
        """Hooks kept after the window to time the costs between steps (each O(1) per step or rarer)."""
        if group is Suspect.PERIODIC_HOOKS:
            return True
        if group is Suspect.DATALOADER_HOOKS:
            return attr in ("__iter__", "__next__")
        return attr == "<hook>" and group is Suspect.MODULE_HOOKS

    @staticmethod
    def _is_step_hook(attr: str, group: Suspect, method: StepDetection | None, deferring: bool = False) -> bool:
        if method is StepDetection.OPTIMIZER_STEP_HOOK:
            # steps taken inside backward become boundaries at the model's next call: keep that hook too;
            # GradScaler.step counts the steps it skips (inf/NaN gradients)
            return (attr in ("<hook>", "step") and group is Suspect.STEP_TIMER) or (
                deferring and attr == "<hook>" and group is Suspect.MODULE_HOOKS
            )
        if method is StepDetection.MODULE_FORWARD:
            return attr == "<hook>" and group is Suspect.MODULE_HOOKS
        if method is StepDetection.DATALOADER:
            return attr == "__next__" and group is Suspect.DATALOADER_HOOKS
        return False

    def _abort_window(self, why: str) -> None:
        self._exit_step_annotation()
        if self._prof is not None and self.state is WindowState.RECORD:
            with contextlib.suppress(Exception):
                self._stop_trace(self._prof, final=False)
        self._drop_profiler()
        self._set_in_window(False)
        self.state = WindowState.IDLE
        self.record_start = None
        self.window_start_unix_s = None
        self.log(f"window dropped: {why}")

    def _drop_profiler(self) -> None:
        # Let go of the profiler completely so later steps run without it (pytorch PR #146604).
        self._exit_step_annotation()
        self._prof = None

    # ------------------------------------------------------------------ short scripts
    def _speculation_possible(self, c: int) -> bool:
        seen = self.recorder.settings if self.recorder is not None else None
        return (
            not self._spec_done
            and self.cfg.short_run_seconds > 0
            and Suspect.SHORT_RUN not in self.off
            and c < self.cfg.skip_steps // 2
            and (seen is None or seen.compile_count == 0)  # never record a compilation speculatively
            and self.is_origin()
            and not self.has(Degraded.USER_PROFILER)
        )

    def _signal(self, optimizer: bool = False) -> None:
        """Any step signal: the first one starts the speculative recording (not the model calls or
        batches held back while an optimizer has not stepped yet: an evaluation pass is not recorded)."""
        if self.state is WindowState.IDLE and not self._in_boundary:
            if not optimizer and self._optimizer_expected(announce=False):
                return
            self._maybe_speculate(self.steps_seen)

    def _maybe_speculate(self, c: int) -> None:
        if not self._speculation_possible(c) or self._user_profiler_active():
            return
        try:
            self._prof = self._new_profiler()
            with self._native_stderr_filtered():
                self._prof.start_trace()
        except Exception as err:
            self.log(f"no speculative recording: {type(err).__name__}: {err}")
            self._prof = None
            self._spec_done = True
            return
        self.state = WindowState.SPECULATE
        self._spec_started_mono = time.monotonic()
        self._spec_start_step = c
        self.window_start_unix_s = time.time()
        self._enter_step_annotation(c)
        self.log(f"step {c}: recording the first steps speculatively (short-script capture)")

    def _speculation_over(self, c: int) -> bool:
        seen = self.recorder.settings if self.recorder is not None else None
        return (
            c >= self.cfg.skip_steps // 2
            or time.monotonic() - self._spec_started_mono > self.cfg.short_run_seconds
            or (seen is not None and seen.compile_count > 0)
        )

    def _end_speculation(self, c: int) -> None:
        """Stop the speculative recording at boundary `c`; keep it in memory, unexported."""
        prof, self._prof = self._prof, None
        self._stop_trace(prof, final=False)
        self._spec = _Recording(prof, self._spec_start_step, c - 1, self.window_start_unix_s, time.time())
        self.window_start_unix_s = None
        self._spec_done = True
        self.speculation_end_step = c
        self.state = WindowState.IDLE
        self.log(f"step {c}: speculative recording of steps {self._spec_start_step}-{c - 1} kept in memory")

    def _drop_speculation(self, why: str) -> None:
        if self.state is WindowState.SPECULATE:
            self._exit_step_annotation()
            with contextlib.suppress(Exception):
                self._stop_trace(self._prof, final=False)
            self._prof = None
            self.window_start_unix_s = None
            self.state = WindowState.IDLE
        self._spec = None
        self._spec_done = False
        self.speculation_end_step = None
        self.log(f"speculative recording dropped: {why}")

    def _on_user_profiler(self, inner: Any) -> None:
        if self._preparing_ours:
            return
        msg = (
            "the script started its own torch.profiler; only one profiler can run per process, so "
            "gpuadvisor stopped its own capture and left the script's profiler alone."
        )
        if self.state is WindowState.SPECULATE:
            with contextlib.suppress(Exception):
                self._exit_step_annotation()
                self._end_speculation(self.steps_seen)
        if self.state in (WindowState.WARMUP, WindowState.RECORD):
            if self.state is WindowState.RECORD:
                self.record_end = self.steps_seen - 1
                with contextlib.suppress(Exception):
                    self._stop_and_export(final=False)  # the script's profiler starts next
            else:
                self._abort_window("the script started its own profiler")
            self.state = WindowState.DISABLED
            self.degrade(Degraded.USER_PROFILER, msg)
            self.say(msg, force=True)
        elif self.state is WindowState.IDLE:
            self.degrade(
                Degraded.USER_PROFILER,
                "the script runs its own torch.profiler; gpuadvisor captures only while it is not running.",
            )

    # ------------------------------------------------------------------ export
    @contextlib.contextmanager
    def _native_stderr_filtered(self) -> Iterator[None]:
        """Drop the `USDT:... profiler_start/stop` lines torch's C++ writes to fd 2; keep the rest."""
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError, AttributeError):
            yield
            return
        path = self.out / f".stderr.{os.getpid()}.tmp"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            os.close(saved)
            yield
            return
        os.dup2(fd, 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            try:
                os.lseek(fd, 0, os.SEEK_SET)
                data = b""
                while chunk := os.read(fd, 65536):
                    data += chunk
            finally:
                os.close(fd)
                with contextlib.suppress(OSError):
                    path.unlink()
            kept = b"".join(line for line in data.splitlines(keepends=True) if not line.startswith(b"USDT:"))
            if kept:
                with contextlib.suppress(OSError):
                    os.write(2, kept)

    def _stop_trace(self, prof: Any, final: bool) -> None:
        """Stop a profiler. CUPTI is finalized only at the last stop of the session (`final`): a
        teardown followed by a re-initialization for the next recording is the path that crashed
        next to CUDA graphs, and it would cost a re-init for nothing."""
        if self._manage_teardown:
            os.environ["TEARDOWN_CUPTI"] = "1" if final else "0"  # Kineto reads it at each stop
        with self._native_stderr_filtered():
            prof.stop_trace()

    def _stop_and_export(self, final: bool = True) -> None:
        """Stop recording, export the trace as torch writes it, gzip it into trace/rankN.json.gz."""
        self._exit_step_annotation()
        prof = self._prof
        if prof is None:
            return
        self._stop_trace(prof, final=final)
        self.window_end_unix_s = time.time()
        self._prof = None
        self._export(prof)

    def _export(self, prof: Any) -> None:
        """Export a stopped profiler's trace into trace/rankN.json.gz (through temporary files)."""
        if not self.is_origin():
            return
        t0 = time.monotonic()
        final = rundir.trace_path(self.out, self.rank)
        tmp_json = final.with_name(f".{final.name}.json.tmp")
        tmp_gz = final.with_name(f".{final.name}.tmp")
        # torch writes through its own `<path>.tmp` first (disk full left it behind)
        temporaries = (tmp_json, tmp_gz, tmp_json.with_name(tmp_json.name + ".tmp"))
        for p in temporaries:
            # a file or a symbolic link already there (left over, or planted) is replaced, never
            # written through: the trace must not land outside the run directory
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        try:
            prof.export_chrome_trace(str(tmp_json))
            self._gzip_with_dist_info(tmp_json, tmp_gz)
            os.replace(tmp_gz, final)
            self.trace_written = True
        except _SkipExport:
            self.degrade(Degraded.TRACE_NOT_EXPORTED, "the trace export was skipped by a second Ctrl-C.")
        except OSError as err:
            self.degrade(
                Degraded.OUTPUT_INCOMPLETE,
                f"the trace could not be written ({err.strerror or err}); the trace of steps "
                f"{self.record_start}-{self.record_end} was lost.",
            )
            self.degrade(Degraded.TRACE_NOT_EXPORTED, "")
        finally:
            for p in temporaries:
                with contextlib.suppress(OSError):
                    p.unlink()
            del prof
        self.export_seconds = round(time.monotonic() - t0, 3)
        self.log(f"trace export took {self.export_seconds} s")

    def _gzip_with_dist_info(self, src: Path, dst: Path) -> None:
        import json

        head_checked = False
        with open(src, "rb") as fin, gzip.open(dst, "wb", compresslevel=6) as fout:
            while chunk := fin.read(1 << 20):
                if not head_checked:
                    head_checked = True
                    if b'"distributedInfo"' not in chunk:
                        # Insert right after the opening brace; the rest stays byte-identical.
                        brace = chunk.index(b"{")
                        info = json.dumps({"backend": None, "rank": self.rank, "world_size": self.world_size})
                        chunk = (
                            chunk[: brace + 1]
                            + f'\n  "distributedInfo": {info},'.encode()
                            + chunk[brace + 1 :]
                        )
                fout.write(chunk)

    def _export_short_run(self, rec: _Recording, why: str) -> None:
        """Make a speculative recording the run's trace (the script ended before the window)."""
        self.record_start, self.record_end = rec.first_step, rec.last_step
        self.window_start_unix_s, self.window_end_unix_s = rec.window_start_unix_s, rec.window_end_unix_s
        self._export(rec.prof)
        if not self.trace_written:
            return
        self.short_run = True
        cfg = self.cfg
        self.degrade(
            Degraded.SHORT_RUN,
            f"the script ended{why} after {self.steps_seen} steps, before the capture window (--skip-steps "
            f"{cfg.skip_steps} + --warmup-steps {cfg.warmup_steps} + --active-steps {cfg.active_steps}); "
            f"the trace holds steps {rec.first_step}-{rec.last_step}, recorded from the first step (no warm-up "
            "skipped: first-call costs are included).",
        )

    # ------------------------------------------------------------------ outputs
    def snapshot_settings(self) -> None:
        import warnings

        import torch

        s: dict[str, Any] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for key, read in (
                ("allow_tf32_matmul", lambda: bool(torch.backends.cuda.matmul.allow_tf32)),
                ("allow_tf32_cudnn", lambda: bool(torch.backends.cudnn.allow_tf32)),
                ("float32_matmul_precision", lambda: str(torch.get_float32_matmul_precision())),
                ("cudnn_benchmark", lambda: bool(torch.backends.cudnn.benchmark)),
                ("cudnn_deterministic", lambda: bool(torch.backends.cudnn.deterministic)),
            ):
                try:
                    s[key] = read()
                except Exception as err:
                    s[key] = None
                    self.log(f"setting {key} unreadable: {err}")
        seen = self.recorder.settings if self.recorder is not None else None
        if seen is not None:
            s["autocast"] = {
                "used": seen.autocast_count > 0,
                "count": seen.autocast_count,
                "dtypes": sorted(seen.autocast_dtypes),
                "device_types": sorted(seen.autocast_device_types),
            }
            s["grad_scaler"] = {
                "used": seen.grad_scaler_count > 0,
                "enabled": seen.grad_scaler_enabled,
            }
            s["torch_compile"] = {
                "used": seen.compile_count > 0,
                "count": seen.compile_count,
                "modes": sorted(seen.compile_modes),
                "backends": sorted(seen.compile_backends),
            }
            graphs = seen.graph_captures + seen.graphed_callables
            s["cuda_graphs"] = {
                "used": graphs > 0 or seen.graph_replays > 0,
                "count": graphs,
                "replays": seen.graph_replays,
            }
            s["run_mode"] = self._run_mode(seen.backward_calls)
        s["snapshot"] = "window_end" if self.state is WindowState.DONE else "run_end"
        self._settings_snapshot = s

    def _run_mode(self, backward_calls: int) -> dict[str, Any]:
        """Training or inference, as seen at run time: optimizer steps, backward passes, and the grad
        mode at the top module's calls."""
        opt_steps = self.counts[StepDetection.OPTIMIZER_STEP_HOOK]
        mode = self.tracker.mode if self.tracker is not None else None
        fwd = mode.forward_calls if mode is not None else 0
        if Suspect.SETTINGS_HOOKS in self.off and opt_steps == 0:
            kind = "unknown"  # backward passes were not counted (experiment)
        elif opt_steps > 0 or backward_calls > 0:
            kind = "training"
        elif fwd > 0:
            kind = "inference"
        else:
            kind = "unknown"
        return {
            "kind": kind,
            "optimizer_steps": opt_steps,
            "backward_calls": backward_calls,
            "forward_calls": fwd,
            "forward_calls_no_grad": mode.no_grad_calls if mode is not None else 0,
            "forward_calls_inference_mode": mode.inference_mode_calls if mode is not None else 0,
        }

    def environment_json(self) -> dict[str, Any]:
        import torch

        steps_in_window = self._window_steps()
        env: dict[str, Any] = {
            "schema_version": rundir.RUN_SCHEMA_VERSION,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "cuda_runtime": torch.version.cuda,
            "cudnn": None,
            "driver": None,  # filled in by the parent from NVML (NVML never runs in this process)
            "cuda_available": self.cuda_available,
            "gpus": [],
            "settings": self._settings_snapshot or {},
            "dataloaders": list(self.recorder.dataloaders) if self.recorder else [],
            "optimizers": list(self.recorder.optimizers) if self.recorder else [],
            "framework": self.frameworks.framework_json() if self.frameworks is not None else None,
            "model_calls": (
                self.tracker.model_calls_json(steps_in_window, self.steps_seen) if self.tracker is not None else []
            ),
            "memory": None,
        }
        with contextlib.suppress(Exception):
            env["cudnn"] = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
        # Only describe the GPUs when the script initialised CUDA: initialising it here would cost
        # seconds and change nothing the script did.
        if self.cuda_available and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            try:
                for i in range(torch.cuda.device_count()):
                    p = torch.cuda.get_device_properties(i)
                    uuid = str(getattr(p, "uuid", "") or "")
                    if uuid and not uuid.startswith(("GPU-", "MIG-")):
                        uuid = f"GPU-{uuid}"
                    env["gpus"].append(
                        {
                            "cuda_index": i,
                            "name": p.name,
                            "uuid": uuid or None,
                            "sm_count": p.multi_processor_count,
                            "compute_capability": f"{p.major}.{p.minor}",
                            "total_memory_bytes": int(p.total_memory),
                        }
                    )
                dev = torch.cuda.current_device()
                env["memory"] = {
                    "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(dev)),
                    "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(dev)),
                    "total_bytes": int(torch.cuda.get_device_properties(dev).total_memory),
                    "device": dev,
                }
            except Exception as err:
                self.log(f"GPU description failed: {err}")
        return env

    def capture_window(self) -> CaptureWindow:
        if self.state is WindowState.DONE:
            state = CaptureState.COMPLETE
        elif self.trace_written:
            state = CaptureState.PARTIAL
        else:
            state = CaptureState.NOT_REACHED
        extra: dict[str, Any] = {}
        if self.off:
            extra["experiment_disabled"] = sorted(s.value for s in self.off)
        return CaptureWindow(
            skip_steps=self.cfg.skip_steps,
            warmup_steps=self.cfg.warmup_steps,
            active_steps=self.cfg.active_steps,
            first_recorded_step=self.record_start if self.trace_written else None,
            last_recorded_step=self.record_end if self.trace_written else None,
            state=state,
            full=self.cfg.full,
            with_stack=self.cfg.with_stack,
            record_shapes=True,
            with_flops=False,
            window_start_unix_s=self.window_start_unix_s,
            window_end_unix_s=self.window_end_unix_s,
            export_seconds=self.export_seconds,
            step_ends=tuple(self.step_ends),
            step_events=tuple(StepEvent.from_json(e) for e in self.between.events),
            step_events_dropped=self.between.dropped,
            observe_steps=self.cfg.observe_steps,
            observe_seconds=self.cfg.observe_seconds,
            short_run=self.short_run,
            speculation_end_step=self.speculation_end_step,
            cupti_teardown=self.cupti_teardown,
            extra=extra,
        )

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
            distributed_backend=self._dist_backend(),
        )

    def _dist_backend(self) -> str | None:
        # torch is imported by start(); never imported here (sys.modules only). The last backend seen
        # is kept: scripts often destroy the process group before they end.
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                self._backend_seen = str(dist.get_backend())
        except Exception:
            pass
        return self._backend_seen

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

    def _merge_worker_starts(self) -> None:
        """When each epoch's first new DataLoader worker was ready (noted by the workers themselves:
        `hooks.WorkerStartProbe`), into its `epoch_start` event as `worker_ready_s`."""
        starts = read_worker_starts(str(self._worker_starts_path()))
        if not starts:
            return
        for ev in self.between.events:
            if ev.get("kind") == "epoch_start" and "worker_ready_s" not in ev:
                ready = starts.get((int(ev.get("dataloader", -1)), int(ev.get("epoch", -1))))
                if ready is not None:
                    ev["worker_ready_s"] = round(ready, 6)

    def write_outputs(self) -> bool:
        """environment.json, callsites.json and the state hand-over. False if something was lost."""
        if not self.is_origin():
            return True
        with contextlib.suppress(Exception):
            self._merge_worker_starts()
        ok = True
        steps = self._callsite_steps if self._callsite_steps is not None else self.steps_seen
        self._wrappers_back_on(steps)
        steps = max(0, steps - self._wrappers_off_steps)  # the steps whose calls were counted
        for name, make in (
            (rundir.ENVIRONMENT, self.environment_json),
            (
                rundir.CALLSITES,
                lambda: self.recorder.callsites_json(steps, self._window_steps()) if self.recorder else {},
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
        self._stop_timer()
        if self.is_origin():
            self.between.finish()
        if self.recorder is not None:
            self.recorder.recording_callsites = False
        why = " with an exception" if self.exit_reason is ExitReason.EXCEPTION else ""
        if self.state is WindowState.SPECULATE:
            self._exit_step_annotation()
            prof, self._prof = self._prof, None
            with contextlib.suppress(Exception):
                self._stop_trace(prof, final=True)
            self.state = WindowState.IDLE
            # The step the script ended in is annotated too (the last batch of an inference loop).
            self._spec = _Recording(
                prof, self._spec_start_step, self.steps_seen, self.window_start_unix_s, time.time()
            )
        if self.state is WindowState.RECORD:
            self.record_end = (
                self.steps_seen - 1 if self.steps_seen > (self.record_start or 0) else self.record_start
            )
            self._set_in_window(False)
            if skip_export:
                self._exit_step_annotation()
                with contextlib.suppress(Exception):
                    self._stop_trace(self._prof, final=True)
                self._drop_profiler()
                self.degrade(Degraded.TRACE_NOT_EXPORTED, skip_reason)
            else:
                self._stop_and_export()
            self.state = WindowState.DISABLED if not self.trace_written else self.state
        elif self.state is WindowState.WARMUP:
            self._abort_window("the run ended during warm-up")
        if not self.trace_written and self._spec is not None and not skip_export:
            spec, self._spec = self._spec, None
            self._export_short_run(spec, why)
        self._spec = None
        needed = self.cfg.skip_steps + self.cfg.warmup_steps + self.cfg.active_steps
        if self.state is not WindowState.DONE and self.steps_seen < needed and not self.has(Degraded.USER_PROFILER):
            self.degrade(
                Degraded.TOO_FEW_STEPS,
                f"too few steps ({self.steps_seen} seen, {needed} needed: --skip-steps "
                f"{self.cfg.skip_steps} + --warmup-steps {self.cfg.warmup_steps} + --active-steps "
                f"{self.cfg.active_steps}); "
                + (
                    "the first steps were recorded instead (short run)."
                    if self.short_run
                    else "a partial window was saved."
                    if self.trace_written
                    else "no trace was recorded."
                ),
            )
        if self.method is None:
            self.degrade(
                Degraded.NO_STEPS_DETECTED,
                "no step was detected (no optimizer step, model forward call, DataLoader batch or time step): "
                "nothing was recorded; mark steps with gpuadvisor.capture(...).step() or lower "
                "--time-fallback-after.",
            )
        elif self.method in (StepDetection.DATALOADER, StepDetection.TIME, StepDetection.MODULE_FORWARD):
            msg = f"steps were counted by {self.method.value}: the script never called optimizer.step() (or not before the window)."
            if msg not in self.messages:
                self.messages.append(msg)
        if self._settings_snapshot is None or self.state is not WindowState.DONE:
            with contextlib.suppress(Exception):
                self.snapshot_settings()
        if self.frameworks is not None:
            self.frameworks.uninstall()
        if self.recorder is not None:
            self.recorder.uninstall()
            self.recorder.remove_gc_callback()
            for err in self.recorder.hook_errors:
                if err not in self.messages:
                    self.messages.append(err)
        self.write_outputs()
        with contextlib.suppress(OSError):
            self._worker_starts_path().unlink()
        if self._log_fh is not None:
            with contextlib.suppress(OSError):
                self._log_fh.close()
            self._log_fh = None
