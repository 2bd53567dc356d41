"""The profiler window: one of the jobs of the capture session (issue 26).

`ProfilerWindow` is the state machine skip -> warm-up -> record -> done (or disabled), driven by the
step boundaries the `StepDetector` finds: it prepares, starts and stops torch.profiler, annotates the
recorded steps (`ProfilerStep#N`), records the first steps speculatively for short scripts, stands
aside when the script runs its own profiler, times the steps after the window and asks the script to
stop (`CaptureWindowComplete`) once the unprofiled reference steps ran. The trace file itself is
written by `TraceExport` (capture.export).

torch is imported only inside the methods that drive the profiler (the session imports it first).
"""

from __future__ import annotations

import contextlib
import enum
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuadvisor.capture.experiment import Suspect
from gpuadvisor.capture.export import SkipExport, TraceExport
from gpuadvisor.capture.journal import CaptureJournal
from gpuadvisor.capture.options import ProfileOptions
from gpuadvisor.capture.steps import StepDetector
from gpuadvisor.manifest import Degraded, StepDetection
from gpuadvisor.steptimes import SettleWatch

# Step end times kept for the profiler-overhead estimate and the costs that come every N steps
# (bounded: 20k boundaries are about 320 kB in the manifest).
MAX_STEP_TIMES = 20_000

# steps timed after the window (without --full) as the unprofiled reference of the analysis
REFERENCE_STEPS_AFTER = 5

# The window opens once the step time has settled (`steptimes.SettleWatch` over the unprofiled steps
# before it, in windows of SETTLE_WINDOW steps), at --skip-steps at the earliest; at the latest this many
# steps or seconds after --skip-steps (said in the log and `capture.settle_capped`).
SETTLE_WINDOW = 2
SETTLE_CAP_STEPS = 40
SETTLE_CAP_SECONDS = 60.0


class CaptureWindowComplete(SystemExit):
    """Raised in the main thread at the step boundary that ends the window (unless --full).

    A SystemExit (code 0) so that `except Exception:` in user code lets it through, and so that an
    uncaught one ends the process quietly with status 0.
    """

    def __init__(self) -> None:
        super().__init__(0)


class WindowState(enum.Enum):
    IDLE = "idle"
    SPECULATE = "speculate"  # recording the first steps in case the script ends before the window
    WARMUP = "warmup"
    RECORD = "record"
    # a window recorded while an optimizer exists and has not stepped (provisional step counting):
    # exported and kept until a training window replaces it; the script is not stopped after it
    KEPT = "kept"
    DONE = "done"
    DISABLED = "disabled"


@dataclass
class _Recording:
    """A stopped profiler whose trace can still be exported, and the steps it annotated."""

    prof: Any
    first_step: int
    last_step: int
    window_start_unix_s: float | None
    window_end_unix_s: float | None


class ProfilerWindow:
    """The profiler window of one capture.

    `state`: where the window is; `record_start`/`record_end`: the recorded steps; `short_run`: the
    trace is the speculative recording of the first steps; `step_ends`: (steps completed, host
    wall-clock time) at every step boundary. `window_complete` is called once the window's trace is
    exported (the session snapshots the settings, removes the wrappers and writes its files);
    `write_state` writes the state hand-over."""

    def __init__(
        self,
        cfg: ProfileOptions,
        journal: CaptureJournal,
        trace: TraceExport,
        steps: StepDetector,
        *,
        off: frozenset[Suspect],
        world_size: int,
        window_complete: Callable[[], None],
        write_state: Callable[[], None],
    ) -> None:
        self.cfg = cfg
        self.journal = journal
        self.trace = trace
        self.steps = steps
        self.off = off
        self.world_size = world_size
        self.window_complete = window_complete
        self.write_state = write_state
        self.cuda_available = False
        self.recorder: Any = None
        self.tracker: Any = None
        self.frameworks: Any = None
        self.state = WindowState.IDLE
        self._prof: Any = None
        self._step_rec: Any = None
        self._warmup_start = 0
        self.record_start: int | None = None
        self.record_end: int | None = None
        self.window_start_unix_s: float | None = None
        self.window_end_unix_s: float | None = None
        self.short_run = False
        # speculative recording of the first steps (short scripts)
        self._spec_started_mono = 0.0
        self._spec_start_step = 0
        self._spec_done = False
        self._spec: _Recording | None = None
        self.speculation_end_step: int | None = None
        self.stop_requested = False
        self._stop_at_step: int | None = None  # without --full: stop at this boundary, after the reference steps
        self._stop_announced = False
        self._preparing_ours = False
        self._callsite_steps: int | None = None  # steps counted while call sites were recorded
        # the unprofiled reference steps run without the Tensor wrappers: steps [removed at, installed again)
        self._wrappers_off_since: int | None = None
        self._wrappers_off_steps = 0
        self.profiler_used = False  # a torch.profiler was created in this process (the exit path reads it)
        self.in_boundary = False
        # (steps completed, host wall-clock time) at every step boundary: analysis compares the steps
        # outside the profiler window with the window's steps to measure how much the profiler itself
        # slowed the step (per-op CPU overhead), see docs/metrics.md.
        self.step_ends: list[tuple[int, float]] = []
        self._min_stop_step: int | None = None  # after the window: the reference steps, at least
        self._observe_deadline: float | None = None
        # seconds the host waited in DataLoader __next__ during each step (step -> s), every step timed
        self.data_wait: dict[int, float] = {}
        # the settled-step rule before the window (issue 38): fed with the unprofiled steps' times
        self._settle = SettleWatch(window=SETTLE_WINDOW)
        self._settle_since: float | None = None  # when --skip-steps was reached without a settled step
        self.settled_at_step: int | None = None
        self.settle_capped = False
        # a provisional window kept aside (KEPT) after a switch to the optimizer's steps, until the
        # training window replaces it: (first step, last step, start, end)
        self._kept: tuple[int | None, int | None, float | None, float | None] | None = None

    def attach(self, recorder: Any, tracker: Any, frameworks: Any, cuda_available: bool) -> None:
        """The hooks the window switches on and off (installed by the session's start())."""
        self.recorder, self.tracker, self.frameworks = recorder, tracker, frameworks
        self.cuda_available = cuda_available

    # ------------------------------------------------------------------ step boundaries
    def boundary(self) -> None:
        """A step just ended: `steps_seen` completed steps, the next step's index is `steps_seen`."""
        if self.state is WindowState.DONE:  # after the window: O(1)
            self._boundary_after_window()
            return
        if self.in_boundary:
            return  # a time tick delivered while a boundary is being handled: the next one catches up
        c = self.steps.steps_seen
        if len(self.step_ends) < MAX_STEP_TIMES:
            now = time.time()
            if self.state is WindowState.IDLE and self.step_ends and self.step_ends[-1][0] == c - 1:
                self._feed_settle(c - 1, (now - self.step_ends[-1][1]) * 1e3)
            self.step_ends.append((c, now))
        if self.stop_requested:
            self._raise_stop()
        self.in_boundary = True
        try:
            self._advance(c)
        except (KeyboardInterrupt, CaptureWindowComplete, SkipExport):
            raise
        except Exception as err:  # the profiler failed: keep the user's run alive, say why
            self.journal.degrade(
                Degraded.TRACE_NOT_EXPORTED,
                f"the profiler failed at step {c}: {type(err).__name__}: {err}",
            )
            self._drop_profiler()
            self.state = WindowState.DISABLED
        finally:
            self.in_boundary = False
        if self.stop_requested:
            self._raise_stop()

    def _boundary_after_window(self) -> None:
        steps_seen = self.steps.steps_seen
        full = len(self.step_ends) >= MAX_STEP_TIMES
        if not full:
            self.step_ends.append((steps_seen, time.time()))
        if self._stop_at_step is not None and (
            steps_seen >= self._stop_at_step
            or full
            or (
                self._min_stop_step is not None
                and steps_seen >= self._min_stop_step
                and self._observe_deadline is not None
                and time.monotonic() >= self._observe_deadline
            )
        ):
            self.stop_requested = True
        if self.stop_requested:
            self._raise_stop()

    def add_data_wait(self, seconds: float) -> None:
        """The host waited `seconds` in a DataLoader `__next__` during the step running now."""
        if seconds <= 0 or len(self.data_wait) >= MAX_STEP_TIMES:
            return
        k = self.steps.steps_seen
        self.data_wait[k] = self.data_wait.get(k, 0.0) + seconds

    def _feed_settle(self, k: int, ms: float) -> None:
        """Step k (just ended, unprofiled and without the Tensor wrappers) goes into the settle watch."""
        first = max(1, self.cfg.skip_steps // 2)
        if self.speculation_end_step is not None:
            first = max(first, self.speculation_end_step)
        if k > first:  # step `first` carries the wrappers' removal or the speculative stop
            self._settle.add(ms)

    def _settled(self, c: int) -> bool:
        """May the window open at boundary `c` (>= --skip-steps)? Once the step time has settled, or at
        the cap; time-based and manual steps open at --skip-steps."""
        if (
            self.steps.method in (StepDetection.TIME, StepDetection.MANUAL)
            or self.cfg.skip_steps == 0
            or self.world_size > 1  # every rank must open (and stop) at the same step: no rank-local rule
        ):
            return True
        if self._settle.settled or (c == self.cfg.skip_steps and self._settle.settled_so_far()):
            self.settled_at_step = c
            return True
        now = time.monotonic()
        if self._settle_since is None:
            self._settle_since = now
        if c >= self.cfg.skip_steps + SETTLE_CAP_STEPS or now - self._settle_since >= SETTLE_CAP_SECONDS:
            self.settled_at_step = c
            self.settle_capped = True
            self.journal.log(
                f"step {c}: the step time had not settled (still falling) {c - self.cfg.skip_steps} steps after "
                "--skip-steps: the window opens here (the cap)"
            )
            return True
        return False

    def _advance(self, c: int) -> None:
        """The window's next state at boundary `c`."""
        cfg = self.cfg
        announced = False
        if self.state is WindowState.KEPT:
            return  # a provisional window is kept; the next one waits for the optimizer's steps
        if self.state is WindowState.SPECULATE:
            self._exit_step_annotation()
            if self._speculation_over(c):
                self._end_speculation(c)
            else:
                self._enter_step_annotation(c)
        if self.state is WindowState.IDLE and c < cfg.skip_steps:
            self.maybe_speculate(c)
        if c == max(1, cfg.skip_steps // 2) and self.state is WindowState.IDLE and self.recorder is not None:
            # The steps from here to the window are the unprofiled reference of the analysis
            # (gpuadvisor.manifest.host_step_durations): without the per-call Tensor wrappers.
            self.recorder.remove_tensor_hooks()
            self._wrappers_off_since = c
        if self.state is WindowState.IDLE and c >= cfg.skip_steps and self._settled(c):
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
                self.journal.say(f"step {c}: recording ({c - self.record_start + 1}/{cfg.active_steps})")
        elif self.state in (WindowState.IDLE, WindowState.SPECULATE):
            if c < cfg.skip_steps:
                self.journal.say(f"step {c}: skipping ({c}/{cfg.skip_steps})")
            else:
                self.journal.say(f"step {c}: waiting for the step time to settle")
        elif self.state is WindowState.WARMUP:
            self.journal.say(f"step {c}: warm-up ({c - self._warmup_start + 1}/{cfg.warmup_steps})")

    def _raise_stop(self) -> None:
        if threading.current_thread() is threading.main_thread():
            raise CaptureWindowComplete()

    def signal(self, optimizer: bool = False) -> None:
        """Any step signal: the first one starts the speculative recording (not the model calls or
        batches held back while an optimizer has not stepped yet: an evaluation pass is not recorded)."""
        if self.state is WindowState.IDLE and not self.in_boundary:
            if not optimizer and self.steps.holding():
                return
            self.maybe_speculate(self.steps.steps_seen)

    def method_switching(self, old: StepDetection | None, new: StepDetection) -> None:
        """The step detection changes: what was numbered by the old method is dropped."""
        if self.state in (WindowState.WARMUP, WindowState.RECORD):
            self._abort_window(f"step detection switched from {old.value if old else None} to {new.value}")
        if self.state is WindowState.KEPT:
            # the provisional window stays on disk until the training window replaces it
            self._kept = (self.record_start, self.record_end, self.window_start_unix_s, self.window_end_unix_s)
            self.record_start = self.record_end = None
            self.window_start_unix_s = self.window_end_unix_s = None
            self.state = WindowState.IDLE
            self.journal.log(f"step detection switched to {new.value}: the provisional window is kept aside")
        # what the old method numbered is not a step of the new one
        self.step_ends.clear()
        self.data_wait.clear()
        self._settle = SettleWatch(window=SETTLE_WINDOW)
        self._settle_since = None
        self.settled_at_step = None
        self.settle_capped = False
        if old is not None and (self.state is WindowState.SPECULATE or self._spec is not None):
            # The speculative recording numbered its steps by the old method: start it over.
            self._drop_speculation(f"step detection switched from {old.value} to {new.value}")

    # ------------------------------------------------------------------ the profiler
    def _user_profiler_active(self) -> bool:
        # lazy: the capture runs inside the user's process; torch is loaded by the session's start()
        import torch

        try:
            return bool(torch.autograd._profiler_enabled())  # type: ignore[attr-defined]
        except Exception:
            return False

    def _new_profiler(self) -> Any:
        """A prepared (warming-up) torch.profiler with what the rules read: CPU ops with shapes
        (dtypes, FLOPs from Input Dims), CUDA activity; no flops (computed from shapes), no memory."""
        # lazy: the capture runs inside the user's process; torch is loaded by the session's start()
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
            # lazy: the capture runs inside the user's process; torch is loaded by the session's start()
            import torch.distributed as dist

            dist_initialized = bool(dist.is_available() and dist.is_initialized())
        if not dist_initialized:
            # HTA refuses traces without distributedInfo.rank; torch adds it only under torch.distributed.
            prof.preset_metadata_json("distributedInfo", self.trace.dist_info_json())
        self._preparing_ours = True
        try:
            with self.trace.native_stderr_filtered():
                prof.prepare_trace()
        finally:
            self._preparing_ours = False
        return prof

    def _begin_warmup(self, c: int) -> None:
        if self._user_profiler_active():
            self.journal.degrade(
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
        self.journal.say(f"step {c}: warm-up starts ({self.cfg.warmup_steps} steps)", force=True)

    def _wrappers_back_on(self, c: int) -> None:
        if self._wrappers_off_since is not None:
            self._wrappers_off_steps += max(0, c - self._wrappers_off_since)
            self._wrappers_off_since = None

    def callsite_steps(self) -> int:
        """The steps whose calls the Tensor wrappers counted (not the unprofiled reference steps, nor
        those after the window)."""
        steps = self._callsite_steps if self._callsite_steps is not None else self.steps.steps_seen
        self._wrappers_back_on(steps)
        return max(0, steps - self._wrappers_off_steps)

    def _begin_record(self, c: int) -> None:
        with self.trace.native_stderr_filtered():
            self._prof.start_trace()
        self.state = WindowState.RECORD
        self.record_start = c
        self.window_start_unix_s = time.time()
        self._set_in_window(True)
        self._enter_step_annotation(c)
        self.journal.say(f"step {c}: recording (1/{self.cfg.active_steps})", force=True)
        self.write_state()

    def _set_in_window(self, on: bool) -> None:
        """Call sites and model calls are also counted per recorded step."""
        if self.tracker is not None:
            self.tracker.in_window = on
        if self.recorder is not None:
            self.recorder.in_window = on

    def window_steps(self) -> int:
        """Steps of the recorded window (0 without one, or for a short run)."""
        if (
            self.record_start is None
            or self.record_end is None
            or self.short_run
            or not self.trace.trace_written
        ):
            return 0
        return max(0, self.record_end - self.record_start + 1)

    def _enter_step_annotation(self, c: int) -> None:
        # lazy: the capture runs inside the user's process; torch is loaded by the session's start()
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
        if self.steps.awaiting_training():
            self._keep_provisional(c)
            return
        self.stop_and_export()
        self.state = WindowState.DONE
        self._spec = None  # the real window replaces the speculative recording
        self._kept = None  # and a provisional one
        self.window_complete()
        if not self.cfg.full:
            self._plan_stop(c)
        else:
            self.journal.say(f"capture window complete after step {c}; the script continues (--full)", force=True)

    def _keep_provisional(self, c: int) -> None:
        """A window recorded while an optimizer exists and has not stepped (PROVISIONAL steps): export it
        (CUPTI stays initialized: a training window may follow) and keep it; the wrappers stay and the
        script is never stopped before a training window exists (issue 38)."""
        self.stop_and_export(final=False)
        self.state = WindowState.KEPT
        self._spec = None
        msg = (
            f"a window was recorded on {self.steps.method.value if self.steps.method else 'steps'} while an optimizer "
            "exists but has not stepped; the script runs on: its first optimizer step starts the training window, "
            "which replaces this one (the script is not stopped before a training window exists)"
        )
        self.journal.say(msg, force=True)
        self.write_state()

    def _plan_stop(self, c: int) -> None:
        """Step c carries the export; the REFERENCE_STEPS_AFTER after it run as under plain python
        (profiler detached, CUPTI finalized, wrappers removed): the analysis's unprofiled reference
        (gpuadvisor.manifest.host_step_durations). Then the script is stopped.

        Not for time-based steps (seconds of wall time, not the script's steps), nor when no step hook
        stays installed after the window (an overhead experiment): no boundary would come. Then the
        steps go on being timed (unprofiled) until step `observe_steps` or for `observe_seconds`,
        whichever comes first, so that costs that come every N steps (epoch starts, evaluation,
        checkpoints) are seen: docs/capture.md, "Costs between steps"."""
        no_steps_after = self.steps.method is StepDetection.TIME or Suspect.STEP_TIMER in self.off
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
        if not self._stop_announced and self.journal.is_origin():
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
            self.journal.log(msg)
            if not self.cfg.quiet:
                sys.stderr.write(f"gpuadvisor: {msg}\n")
                sys.stderr.flush()

    def after_window(self) -> None:
        """Remove every wrapper but the step-counting hook of the chosen method (issue 15)."""
        if self.recorder is None:
            return
        keep_steps = Suspect.STEP_TIMER not in self.off
        method = self.steps.method
        if Suspect.UNINSTALL_AFTER_WINDOW in self.off:
            if not keep_steps:
                self.recorder.uninstall(keep=lambda owner, attr, group: not self._is_step_hook(attr, group, method))
            self.journal.log("experiment: wrappers kept after the window")
            return
        self._callsite_steps = self.steps.steps_seen
        self.recorder.recording_callsites = False
        # optimizer steps taken inside backward become boundaries at the model's next call: keep it
        deferring = method is StepDetection.OPTIMIZER_STEP_HOOK and self.steps.deferring
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
        self.journal.log(f"after the window: wrappers left installed: {', '.join(left) if left else 'none'}")

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
                self.trace.stop(self._prof, final=False)
        self._drop_profiler()
        self._set_in_window(False)
        self.state = WindowState.IDLE
        self.record_start = None
        self.window_start_unix_s = None
        self.journal.log(f"window dropped: {why}")

    def _drop_profiler(self) -> None:
        # Let go of the profiler completely so later steps run without it (pytorch PR #146604).
        self._exit_step_annotation()
        self._prof = None

    def stop_and_export(self, final: bool = True) -> None:
        """Stop recording, export the trace as torch writes it, gzip it into trace/rankN.json.gz."""
        self._exit_step_annotation()
        prof = self._prof
        if prof is None:
            return
        self.trace.stop(prof, final=final)
        self.window_end_unix_s = time.time()
        self._prof = None
        self.trace.export(prof, self.record_start, self.record_end)

    # ------------------------------------------------------------------ short scripts
    def _speculation_possible(self, c: int) -> bool:
        seen = self.recorder.settings if self.recorder is not None else None
        return (
            not self._spec_done
            and self.cfg.short_run_seconds > 0
            and Suspect.SHORT_RUN not in self.off
            and c < self.cfg.skip_steps // 2
            and (seen is None or seen.compile_count == 0)  # never record a compilation speculatively
            and self.journal.is_origin()
            and not self.journal.has(Degraded.USER_PROFILER)
        )

    def maybe_speculate(self, c: int) -> None:
        if not self._speculation_possible(c) or self._user_profiler_active():
            return
        try:
            self._prof = self._new_profiler()
            with self.trace.native_stderr_filtered():
                self._prof.start_trace()
        except Exception as err:
            self.journal.log(f"no speculative recording: {type(err).__name__}: {err}")
            self._prof = None
            self._spec_done = True
            return
        self.state = WindowState.SPECULATE
        self._spec_started_mono = time.monotonic()
        self._spec_start_step = c
        self.window_start_unix_s = time.time()
        self._enter_step_annotation(c)
        self.journal.log(f"step {c}: recording the first steps speculatively (short-script capture)")

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
        self.trace.stop(prof, final=False)
        self._spec = _Recording(prof, self._spec_start_step, c - 1, self.window_start_unix_s, time.time())
        self.window_start_unix_s = None
        self._spec_done = True
        self.speculation_end_step = c
        self.state = WindowState.IDLE
        self.journal.log(f"step {c}: speculative recording of steps {self._spec_start_step}-{c - 1} kept in memory")

    def _drop_speculation(self, why: str) -> None:
        if self.state is WindowState.SPECULATE:
            self._exit_step_annotation()
            with contextlib.suppress(Exception):
                self.trace.stop(self._prof, final=False)
            self._prof = None
            self.window_start_unix_s = None
            self.state = WindowState.IDLE
        self._spec = None
        self._spec_done = False
        self.speculation_end_step = None
        self.journal.log(f"speculative recording dropped: {why}")

    def _export_short_run(self, rec: _Recording, why: str) -> None:
        """Make a speculative recording the run's trace (the script ended before the window)."""
        self.record_start, self.record_end = rec.first_step, rec.last_step
        self.window_start_unix_s, self.window_end_unix_s = rec.window_start_unix_s, rec.window_end_unix_s
        self.trace.export(rec.prof, self.record_start, self.record_end)
        if not self.trace.trace_written:
            return
        self.short_run = True
        cfg = self.cfg
        self.journal.degrade(
            Degraded.SHORT_RUN,
            f"the script ended{why} after {self.steps.steps_seen} steps, before the capture window (--skip-steps "
            f"{cfg.skip_steps} + --warmup-steps {cfg.warmup_steps} + --active-steps {cfg.active_steps}); "
            f"the trace holds steps {rec.first_step}-{rec.last_step}, recorded from the first step (no warm-up "
            "skipped: first-call costs are included).",
        )

    # ------------------------------------------------------------------ the user's own profiler
    def on_user_profiler(self, inner: Any) -> None:
        if self._preparing_ours:
            return
        msg = (
            "the script started its own torch.profiler; only one profiler can run per process, so "
            "gpuadvisor stopped its own capture and left the script's profiler alone."
        )
        if self.state is WindowState.SPECULATE:
            with contextlib.suppress(Exception):
                self._exit_step_annotation()
                self._end_speculation(self.steps.steps_seen)
        if self.state in (WindowState.WARMUP, WindowState.RECORD):
            if self.state is WindowState.RECORD:
                self.record_end = self.steps.steps_seen - 1
                with contextlib.suppress(Exception):
                    self.stop_and_export(final=False)  # the script's profiler starts next
            else:
                self._abort_window("the script started its own profiler")
            self.state = WindowState.DISABLED
            self.journal.degrade(Degraded.USER_PROFILER, msg)
            self.journal.say(msg, force=True)
        elif self.state is WindowState.IDLE:
            self.journal.degrade(
                Degraded.USER_PROFILER,
                "the script runs its own torch.profiler; gpuadvisor captures only while it is not running.",
            )

    # ------------------------------------------------------------------ the end of the run
    def finish(self, *, skip_export: bool, skip_reason: str, why: str) -> None:
        """The run ended: stop what records, export the window or the speculative recording (unless
        `skip_export`: `skip_reason` says so in the manifest), and say when too few steps came.
        `why`: how the script ended, in the short-run message (" with an exception" or "")."""
        steps_seen = self.steps.steps_seen
        if self.state is WindowState.SPECULATE:
            self._exit_step_annotation()
            prof, self._prof = self._prof, None
            with contextlib.suppress(Exception):
                self.trace.stop(prof, final=True)
            self.state = WindowState.IDLE
            # The step the script ended in is annotated too (the last batch of an inference loop).
            self._spec = _Recording(prof, self._spec_start_step, steps_seen, self.window_start_unix_s, time.time())
        if self.state is WindowState.RECORD:
            self.record_end = steps_seen - 1 if steps_seen > (self.record_start or 0) else self.record_start
            self._set_in_window(False)
            if skip_export:
                self._exit_step_annotation()
                with contextlib.suppress(Exception):
                    self.trace.stop(self._prof, final=True)
                self._drop_profiler()
                self.journal.degrade(Degraded.TRACE_NOT_EXPORTED, skip_reason)
            else:
                self.stop_and_export()
            self.state = WindowState.DISABLED if not self.trace.trace_written else self.state
        elif self.state is WindowState.WARMUP:
            self._abort_window("the run ended during warm-up")
        unreplaced = self.state not in (WindowState.DONE, WindowState.RECORD, WindowState.KEPT)
        if self._kept is not None and unreplaced and self.trace.trace_written:
            # the training window never completed: the trace on disk is the provisional one
            self.record_start, self.record_end, self.window_start_unix_s, self.window_end_unix_s = self._kept
            self.state = WindowState.KEPT
        if self.state is WindowState.KEPT and self.trace.trace_written:
            self.journal.note(
                "the trace holds a window counted by model calls or batches while an optimizer existed but had not "
                "stepped: the script never stepped its optimizer after it (or ended before its training window)."
            )
        if not self.trace.trace_written and self._spec is not None and not skip_export:
            spec, self._spec = self._spec, None
            self._export_short_run(spec, why)
        self._spec = None
        self._too_few_steps(steps_seen)

    def _too_few_steps(self, steps_seen: int) -> None:
        cfg = self.cfg
        needed = cfg.skip_steps + cfg.warmup_steps + cfg.active_steps
        if (
            self.state is WindowState.DONE
            or steps_seen >= needed
            or self.journal.has(Degraded.USER_PROFILER)
        ):
            return
        self.journal.degrade(
            Degraded.TOO_FEW_STEPS,
            f"too few steps ({steps_seen} seen, {needed} needed: --skip-steps "
            f"{cfg.skip_steps} + --warmup-steps {cfg.warmup_steps} + --active-steps "
            f"{cfg.active_steps}); "
            + (
                "the first steps were recorded instead (short run)."
                if self.short_run
                else "a partial window was saved."
                if self.trace.trace_written
                else "no trace was recorded."
            ),
        )
