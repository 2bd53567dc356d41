"""SIGTERM deadline for distributed ranks: export what was recorded even when the rank is stuck.

torchrun stops the whole worker group with SIGTERM when one rank fails and sends SIGKILL 30 s later.
A rank blocked inside a collective (C++ waiting for a peer that died, the GIL released) never returns
to the interpreter, so the Python SIGTERM handler of `child.py` never runs and its trace would be lost.
The C-level handler still writes the signal number to the wakeup fd: this thread reads it and, when the
main thread has neither left the user's code nor started `finish()` within the grace period, finishes the
session itself (profiler stopped and exported from this thread, files written) and ends the process with
status 143. A SIGTERM that arrives once the script has ended (a rank whose own collective raised when its
peer died, torchrun's SIGTERM coming while it exports) interrupts nothing: the main thread finishes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpuadvisor.manifest import Degraded, ExitReason

if TYPE_CHECKING:
    from gpuadvisor.capture.session import CaptureSession


class TermWatchdog:
    """Start with `start()` from the main thread (signal.set_wakeup_fd must be set there)."""

    def __init__(
        self,
        session: CaptureSession,
        grace_s: float,
        after_finish: Callable[[CaptureSession], None] | None = None,
    ) -> None:
        self.session = session
        self.grace_s = grace_s
        self.after_finish = after_finish
        self._read_fd = -1

    def start(self) -> bool:
        """Install the wakeup fd and the thread; False (and nothing installed) when impossible."""
        if threading.current_thread() is not threading.main_thread():
            return False
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError) as err:
            os.close(r)
            os.close(w)
            self.session.log(f"no SIGTERM watchdog: {err}")
            return False
        if previous != -1:
            # Someone (asyncio in the script?) already uses it: give it back, go without a watchdog.
            signal.set_wakeup_fd(previous)
            os.close(r)
            os.close(w)
            self.session.log("no SIGTERM watchdog: the wakeup fd is already in use")
            return False
        self._read_fd = r
        threading.Thread(target=self._run, name="gpuadvisor-sigterm", daemon=True).start()
        return True

    def _run(self) -> None:
        while True:
            try:
                data = os.read(self._read_fd, 64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGTERM in data:
                break
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline:
            if self._main_thread_finishes():
                return  # the main thread handles it: the normal path
            time.sleep(0.05)
        if self._main_thread_finishes():
            return
        self._finish_from_here()

    def _main_thread_finishes(self) -> bool:
        """The main thread is out of the user's code (the script ended) or already finishing: it
        exports the trace itself, a second finish() from here would race it."""
        return self.session.finishing or self.session.script_ended

    def _finish_from_here(self) -> None:
        s = self.session
        s.log(f"SIGTERM: the main thread did not respond within {self.grace_s} s; finishing from a thread")
        s.exit_reason = ExitReason.SIGNAL
        s.signal = signal.SIGTERM
        s.exit_status = 128 + signal.SIGTERM
        s.degrade(
            Degraded.INTERRUPTED,
            f"rank {s.rank} was terminated while blocked (in a collective?) at step {s.steps_seen}; "
            "the capture was flushed from a watchdog thread.",
        )
        with contextlib.suppress(BaseException):
            s.finish()
        if self.after_finish is not None:
            with contextlib.suppress(BaseException):
                self.after_finish(s)
        os._exit(128 + signal.SIGTERM)
