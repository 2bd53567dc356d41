"""What the capture session says, shared by its parts (issue 26): capture.log lines, progress lines on
stderr (never stdout), and the degraded flags and messages that go into the manifest.

A fork of the training process (a DataLoader worker running our hooks) writes nothing: `is_origin()`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from gpuadvisor import rundir
from gpuadvisor.manifest import Degraded, DegradedFlag


class CaptureJournal:
    """The log, the progress lines and the degraded flags of one capture (process `pid`)."""

    def __init__(self, out: Path, pid: int, quiet: bool) -> None:
        self.out = out
        self.pid = pid
        self.quiet = quiet
        self.degraded: list[DegradedFlag] = []
        self.messages: list[str] = []
        self._last_progress = 0.0
        self._log_fh: Any = None

    def is_origin(self) -> bool:
        """True in the process that started the capture (not in a fork of it)."""
        return os.getpid() == self.pid

    def log(self, msg: str) -> None:
        if not self.is_origin():
            return
        try:
            if self._log_fh is None:
                # Kept open for the session (line-buffered); closed by close().
                self._log_fh = open(self.out / rundir.LOG, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
            self._log_fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [child {self.pid}] {msg}\n")
        except OSError:
            pass  # a full disk must not break the user's run; the manifest says what was lost

    def say(self, msg: str, *, force: bool = False) -> None:
        """One progress line on stderr (never stdout); rate-limited unless `force`."""
        self.log(msg)
        if self.quiet or not self.is_origin():
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

    def note(self, message: str) -> None:
        """A message for the manifest that is no degradation (said once)."""
        if message not in self.messages:
            self.messages.append(message)

    def close(self) -> None:
        if self._log_fh is not None:
            with contextlib.suppress(OSError):
                self._log_fh.close()
            self._log_fh = None
