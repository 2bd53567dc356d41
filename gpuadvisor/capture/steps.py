"""Which event is a step: one of the jobs of the capture session (issues 26 and 38).

`StepDetector` is the one state machine that decides which signal counts a step. The hooks only
report signals (an optimizer step, a call of the top module, a DataLoader batch, `Capture.step()`, a
time tick); this module alone says which of them is a step boundary, and when the method changes.
`TimeSteps` delivers the time ticks in the main thread. It knows nothing of the profiler: it tells a
`StepSink` (the session) that a step ended, that a step signal came, or that the method is about to
change. No torch import at module level.

The phases (`StepPhase`; docs/capture.md, "Steps", has the same table):

  phase         what counts a step                 left by
  ------------  ---------------------------------  ------------------------------------------------
  WAITING       nothing yet (the first model call  an optimizer is built -> HELD; the first optimizer
                or batch starts step 0)            step -> TRAINING; a second model call ->
                                                   MODEL_CALLS; a second batch -> BATCHES; a time tick
                                                   -> TIME
  HELD          nothing: an optimizer exists and   its first step -> TRAINING; model calls or batches
                has not stepped (an evaluation     still coming `hold` seconds after the second one,
                before training, a first call      with no gap over 5 s between them (a compilation
                that compiles for a minute)        starts the hold over) -> PROVISIONAL
  TRAINING      the first optimizer that steps     never (the run's steps)
                (GradScaler's skipped steps too)
  MODEL_CALLS   calls of the top module            an optimizer step -> TRAINING (before the window
                                                   is exported)
  BATCHES       DataLoader batches                 a model call -> MODEL_CALLS, an optimizer step ->
                                                   TRAINING (before the window is exported)
  PROVISIONAL   model calls (or batches), while an its first step -> TRAINING: a window recorded
                optimizer exists and never stepped meanwhile is kept only until the training
                                                   window replaces it; the script is never stopped
                                                   before a training window exists
  TIME          a tick every `time_step_seconds`   any other signal (before the window is exported)
  MANUAL        `Capture.step()`                   never

Priorities: an optimizer step beats a model call, which beats a batch, which beats time. A signal of
higher priority takes over until the window has been exported (an unfinished window is dropped and
counting restarts); PROVISIONAL is the exception the other way: its window is kept aside and the
optimizer's first step still takes over. Time ticks come only while nothing else was seen, no optimizer
exists and no model call is running (the first call of a compiled model can take minutes: no tick
may land inside it).
"""

from __future__ import annotations

import _thread
import contextlib
import enum
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from gpuadvisor.capture.journal import CaptureJournal
from gpuadvisor.capture.options import ProfileOptions
from gpuadvisor.manifest import Degraded, StepDetection

# how long model calls and batches may keep coming without the constructed optimizer's first step
# before they are counted provisionally, when --time-fallback-after is 0 (never count by time)
OPTIMIZER_HOLD_SECONDS = 20.0
# a gap this long between two held model calls or batches (a compilation) starts the hold over
HOLD_RESTART_GAP_SECONDS = 5.0


class OptimizerHold:
    """The hold of HELD -> PROVISIONAL, one rule for the capture (`StepDetector`) and a verify trial's
    step clock: model calls or batches that come while a built optimizer has not stepped are not steps
    (an evaluation before training) until they have kept coming for `seconds` since the second of them,
    with no gap over `HOLD_RESTART_GAP_SECONDS` between two (a call that long is a one-time cost, the
    training graph's compilation after an evaluation compiled its own: the hold starts over)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._since: float | None = None  # the second held model call / batch (the first one ended)
        self._last: float | None = None  # the latest held model call / batch

    def over(self) -> bool:
        """A held model call or batch came: True once the hold is over (count them provisionally)."""
        now = self._clock()
        if self._since is None or (self._last is not None and now - self._last > HOLD_RESTART_GAP_SECONDS):
            self._since = now
        self._last = now
        return now - self._since >= self.seconds


class StepPhase(str, enum.Enum):
    """Where the step detection is (see the module docstring's table)."""

    WAITING = "waiting"
    HELD = "held"
    TRAINING = "training"
    MODEL_CALLS = "model_calls"
    BATCHES = "batches"
    PROVISIONAL = "provisional"
    TIME = "time"
    MANUAL = "manual"


def _in_backward() -> bool:
    """True inside the autograd engine's backward pass (a hook running in it)."""
    try:
        # lazy: the capture runs inside the user's process; torch is loaded by the session's start()
        import torch

        return bool(torch._C._current_graph_task_id() != -1)
    except Exception:
        return False


class StepSink(Protocol):
    """What the step detector tells (the session, which drives the profiler window)."""

    def boundary(self) -> None:
        """A step ended: `steps_seen` steps are complete."""

    def step_signal(self, optimizer: bool = False) -> None:
        """A step signal came (counted or not)."""

    def switching(self, old: StepDetection | None, new: StepDetection) -> None:
        """The method changes from `old` to `new` (what the old one numbered is dropped)."""

    def switched(self) -> None:
        """The method changed (the state hand-over is written)."""

    def window_done(self) -> bool:
        """The window has been exported: the method is fixed, boundaries are O(1)."""

    def window_closed(self) -> bool:
        """The window is done or disabled: no method switch any more."""


class StepDetector:
    """The step counting of one capture: the state machine of the module docstring.

    `method`: the chosen `StepDetection` (None until a signal decides it); `phase`: the `StepPhase`;
    `counts`: the signals of each method (after the first of DataLoader batches and model calls);
    `steps_seen`: the steps completed under the chosen method. `recorder` (the `hooks.Recorder`, set
    when the session starts) tells which optimizers exist and how many backward passes ran;
    `model_call_running` (set by the session) tells whether the main thread is inside a model call."""

    def __init__(self, cfg: ProfileOptions, journal: CaptureJournal, sink: StepSink, *, manual: bool) -> None:
        self.cfg = cfg
        self.journal = journal
        self.sink = sink
        self.method: StepDetection | None = StepDetection.MANUAL if manual else None
        self.counts: dict[StepDetection, int] = {m: 0 for m in StepDetection}
        self.recorder: Any = None
        self.model_call_running: Callable[[], bool] = lambda: False
        self.dl_calls = 0
        self.fwd_calls = 0
        self._primary_optimizer: Any = None
        self._deferred_boundaries = 0  # optimizer steps taken inside backward, not yet made boundaries
        self.deferring = False  # an optimizer step was taken inside backward (its boundary deferred)
        self._hold = OptimizerHold(
            cfg.time_fallback_after if cfg.time_fallback_after > 0 else OPTIMIZER_HOLD_SECONDS
        )
        self._held_logged = False
        self._provisional_logged = False

    @property
    def steps_seen(self) -> int:
        return self.counts[self.method] if self.method else 0

    def current_step(self) -> int | None:
        """The step running now (None before the first step boundary)."""
        return self.steps_seen if self.method is not None and self.steps_seen > 0 else None

    def trained(self) -> bool:
        """An optimizer stepped or a backward pass ran: the script trains."""
        rec = self.recorder
        return self.counts[StepDetection.OPTIMIZER_STEP_HOOK] > 0 or (
            rec is not None and rec.settings.backward_calls > 0
        )

    def optimizer_built(self) -> bool:
        return self.recorder is not None and bool(self.recorder.optimizers)

    def optimizer_stepped(self) -> bool:
        return self.counts[StepDetection.OPTIMIZER_STEP_HOOK] > 0

    @property
    def phase(self) -> StepPhase:
        m = self.method
        if m is StepDetection.MANUAL:
            return StepPhase.MANUAL
        if m is StepDetection.OPTIMIZER_STEP_HOOK:
            return StepPhase.TRAINING
        awaiting = self.optimizer_built() and not self.optimizer_stepped()
        if m in (StepDetection.MODULE_FORWARD, StepDetection.DATALOADER) and awaiting:
            return StepPhase.PROVISIONAL
        if m is StepDetection.MODULE_FORWARD:
            return StepPhase.MODEL_CALLS
        if m is StepDetection.DATALOADER:
            return StepPhase.BATCHES
        if m is StepDetection.TIME:
            return StepPhase.TIME
        return StepPhase.HELD if awaiting else StepPhase.WAITING

    def awaiting_training(self) -> bool:
        """An optimizer exists and has not stepped: a window recorded now is provisional (kept aside
        until the training window replaces it) and the script is not stopped after it."""
        return self.method is not StepDetection.MANUAL and self.optimizer_built() and not self.optimizer_stepped()

    # ------------------------------------------------------------------ the signals
    def on_optimizer_step(self, opt: Any) -> None:
        if self.sink.window_done():
            if self.method is StepDetection.OPTIMIZER_STEP_HOOK and opt is self._primary_optimizer:
                self.counts[StepDetection.OPTIMIZER_STEP_HOOK] += 1
                self._optimizer_boundary()
            return
        if not self.journal.is_origin():
            return  # a forked worker running our hooks: its calls are not the run's steps
        if self._primary_optimizer is None:
            self._primary_optimizer = opt
        elif opt is not self._primary_optimizer:
            return  # only the first optimizer that steps counts (GANs and friends step several)
        self.sink.step_signal(optimizer=True)
        self.counts[StepDetection.OPTIMIZER_STEP_HOOK] += 1
        method = StepDetection.OPTIMIZER_STEP_HOOK
        if self.method is not method and self.may_switch(method):
            self.switch_method(method, "optimizer.step() was seen")
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
            if not self.deferring:
                self.deferring = True
                self.journal.log(
                    "optimizer steps inside the backward pass: step boundaries are taken at the model's next call"
                )
            return
        self.sink.boundary()

    def flush_deferred(self) -> None:
        """The boundaries of optimizer steps taken inside backward, at a safe point."""
        while self._deferred_boundaries > 0 and self.method is StepDetection.OPTIMIZER_STEP_HOOK:
            self._deferred_boundaries -= 1
            self.sink.boundary()

    def on_forward(self) -> None:
        """A call of the top module (`capture.forward`): the first starts step 0, each later one ends
        a step (the deferred boundaries are flushed by the caller first)."""
        if self.sink.window_done():
            if self.method is StepDetection.MODULE_FORWARD:
                self.counts[StepDetection.MODULE_FORWARD] += 1
                self.sink.boundary()
            return
        if not self.journal.is_origin():
            return  # e.g. a module applied in a forked DataLoader worker
        self.sink.step_signal()
        self.fwd_calls += 1
        if self.fwd_calls == 1:
            return
        self._loop_signal(StepDetection.MODULE_FORWARD, "the model's forward was called again")

    def on_dataloader_next(self) -> None:
        self.flush_deferred()
        if self.sink.window_done():
            if self.method is StepDetection.DATALOADER:
                self.counts[StepDetection.DATALOADER] += 1
                self.sink.boundary()
            return
        if not self.journal.is_origin():
            return
        self.sink.step_signal()
        self.dl_calls += 1
        if self.dl_calls == 1:
            return  # the first batch starts step 0; it ends nothing
        self._loop_signal(StepDetection.DATALOADER, "a second DataLoader batch came before any optimizer step")

    def _loop_signal(self, method: StepDetection, why: str) -> None:
        """A model call or a batch after the first: a step of its method unless the optimizer is held
        for (HELD), or a higher-priority method counts already."""
        self.counts[method] += 1
        if self.method is not method and not self.optimizer_stepped() and self.may_switch(method):
            if not self.optimizer_built():
                self.switch_method(method, why)
            elif self._hold_over():
                self.switch_method(method, f"{why}; provisionally: an optimizer exists but has not stepped")
        if self.method is method:
            self.sink.boundary()

    def manual_step(self) -> None:
        """Manual step boundary (the in-process `Capture.step()`)."""
        self.sink.step_signal()
        self.counts[StepDetection.MANUAL] += 1
        if self.method is StepDetection.MANUAL:
            self.sink.boundary()

    def time_step(self) -> None:
        """A tick of the time fallback (in the main thread)."""
        if not self.tick_allowed():
            return
        self.sink.step_signal()
        if self.method is None:
            self.switch_method(StepDetection.TIME, "no optimizer step, model forward or DataLoader batch was seen")
        if self.method is StepDetection.TIME:
            self.counts[StepDetection.TIME] += 1
            self.sink.boundary()

    def finish(self) -> None:
        """The run ended: say how the steps were counted when no optimizer step counted them."""
        if self.method is None:
            held = self.optimizer_built() and (self.fwd_calls > 1 or self.dl_calls > 1)
            self.journal.degrade(
                Degraded.NO_STEPS_DETECTED,
                "no step was detected: an optimizer was built but never stepped, and the model calls or "
                "batches before the script ended did not last long enough to be counted instead"
                if held
                else "no step was detected (no optimizer step, model forward call, DataLoader batch or time step): "
                "nothing was recorded; mark steps with gpuadvisor.capture(...).step() or lower "
                "--time-fallback-after.",
            )
        elif self.method in (StepDetection.DATALOADER, StepDetection.TIME, StepDetection.MODULE_FORWARD):
            self.journal.note(
                f"steps were counted by {self.method.value}: the script never called optimizer.step() (or not before the window)."
            )

    def undecided(self) -> bool:
        """No signal other than time ticks has come yet and none can still make the time fallback
        pointless: the time fallback's thread goes on while this is true."""
        return (
            self.method in (None, StepDetection.TIME)
            and self.dl_calls <= 1
            and self.fwd_calls <= 1
            and not self.optimizer_built()
            and not self.sink.window_closed()
        )

    def tick_allowed(self) -> bool:
        """A time tick may count now: still undecided, and the main thread is not inside a model call
        (the first call of a compiled model can take minutes; a tick there would start the profiler
        inside the compilation)."""
        return self.undecided() and not self.model_call_running()

    # ------------------------------------------------------------------ the training loop first
    def _hold_over(self) -> bool:
        """HELD -> PROVISIONAL (`OptimizerHold`): model calls or batches have kept coming for the hold's
        seconds and the optimizer has still not stepped."""
        if not self._held_logged:
            self._held_logged = True
            self.journal.say(
                "an optimizer exists but has not stepped yet: model calls and batches before the first "
                "optimizer step are not counted as steps (evaluation before training)",
                force=True,
            )
        return self._hold.over()

    def holding(self) -> bool:
        """HELD: model calls and batches seen now are not steps (no speculative recording for them)."""
        return self.phase is StepPhase.HELD

    # ------------------------------------------------------------------ the method
    def may_switch(self, new: StepDetection) -> bool:
        if self.method is None:
            return True
        if new.priority <= self.method.priority:
            return False
        return not self.sink.window_closed()

    def switch_method(self, new: StepDetection, why: str) -> None:
        self.sink.switching(self.method, new)
        self.method = new
        self.journal.say(f"counting steps by {new.value} ({why})", force=True)
        self.sink.switched()


class TimeSteps:
    """The time fallback: a boundary every `time_step_seconds` once `time_fallback_after` seconds
    passed without another signal. The ticks are delivered in the main thread through a simulated
    SIGWINCH (ignored by default, so no behaviour changes): the profiler must be driven from the
    training thread."""

    def __init__(
        self,
        cfg: ProfileOptions,
        log: Callable[[str], None],
        undecided: Callable[[], bool],
        tick: Callable[[], None],
    ) -> None:
        self.cfg = cfg
        self.log = log
        self.undecided = undecided
        self.tick = tick
        self._lock = threading.RLock()
        self._timer: threading.Thread | None = None
        self._timer_stop = threading.Event()
        self._time_pending = False
        self._prev_winch: Any = None

    def start(self) -> None:
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
        if self._timer_stop.wait(self.cfg.time_fallback_after):
            return
        while not self._timer_stop.is_set():
            with self._lock:
                if not self.undecided():
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
        self.tick()

    def stop(self) -> None:
        self._timer_stop.set()
        if self._prev_winch is not None and threading.current_thread() is threading.main_thread():
            with contextlib.suppress(Exception):
                signal.signal(signal.SIGWINCH, self._prev_winch)
            self._prev_winch = None
