"""`Capture`: the capture in the current process, for notebooks and tests without a script.

    with Capture(out="runs/nb", skip_steps=2, active_steps=5) as cap:
        for batch in loader:
            train_step(batch)
            cap.step()

Same run directory as `gpuadvisor profile`. Differences, by design: there is no child process, so
NVML is sampled by a thread of this process (set `nvml=False` to skip it), nothing is stopped after
the window (the block runs to its end), and signals are not intercepted. Steps are counted by
`cap.step()` (`steps="manual"`, step_detection "manual") or detected as in the CLI (`steps="auto"`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from gpuadvisor import __version__, rundir
from gpuadvisor.capture._io import utc_iso, write_json_atomic


class Capture:
    """In-process capture context manager; see the module docstring."""

    def __init__(
        self,
        out: str | os.PathLike[str],
        *,
        force: bool = False,
        skip_steps: int = 10,
        warmup_steps: int = 2,
        active_steps: int = 10,
        with_stack: bool = False,
        nvml: bool = True,
        nvml_interval: float = 0.1,
        quiet: bool = True,
        steps: str = "manual",
    ) -> None:
        from gpuadvisor.errors import UsageError

        if steps not in ("manual", "auto"):
            raise UsageError(f"steps must be 'manual' or 'auto' (got {steps!r})")
        if active_steps < 1 or skip_steps < 0 or warmup_steps < 0:
            raise UsageError("skip_steps and warmup_steps must be >= 0 and active_steps >= 1")
        self.run_dir = Path(out)
        self._force = force
        self._nvml = nvml
        self._nvml_interval = nvml_interval
        from gpuadvisor.capture.session import SessionConfig

        self._cfg = SessionConfig(
            out=str(self.run_dir.resolve()),
            skip_steps=skip_steps,
            warmup_steps=warmup_steps,
            active_steps=active_steps,
            full=True,
            with_stack=with_stack,
            quiet=quiet,
            time_fallback_after=0.0,
            manual_steps=steps == "manual",
        )
        self.session: Any = None
        self._sampler: Any = None
        self._started = 0.0
        self.manifest: dict[str, Any] | None = None

    def __enter__(self) -> Capture:
        from gpuadvisor.capture.nvml import NvmlSampler
        from gpuadvisor.capture.runner import prepare_out_dir
        from gpuadvisor.capture.session import CaptureSession

        prepare_out_dir(self.run_dir, self._force)
        self._started = time.time()
        self._sampler = NvmlSampler(self.run_dir, self._nvml_interval)
        if self._nvml:
            self._sampler.start(os.environ.get("CUDA_VISIBLE_DEVICES"))
        else:
            self._sampler.reason = "disabled (Capture(nvml=False))"
        self.session = CaptureSession(self._cfg)
        self.session.start()
        return self

    def step(self) -> None:
        """Mark a step boundary (steps="manual")."""
        if self.session is not None:
            self.session.step()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        s = self.session
        if exc is None:
            s.exit_reason, s.exit_status = "completed", 0
        elif isinstance(exc, KeyboardInterrupt):
            s.exit_reason, s.exit_status, s.signal = "signal", 130, 2
            s.degrade(
                rundir.DEGRADED_INTERRUPTED, "the block was interrupted (Ctrl-C); the capture was flushed."
            )
        else:
            s.exit_reason, s.exit_status = "exception", 1
            s.failed_at_step = s.steps_seen
            s.degrade(
                f"script_failed_at_step_{s.steps_seen}",
                f"the block raised {type(exc).__name__} at step {s.steps_seen}.",
            )
        s.finish()
        self._sampler.stop()
        ended = time.time()
        degraded = list(s.degraded)
        messages = list(s.messages)
        if not self._sampler.available:
            degraded.append(rundir.DEGRADED_NVML_UNAVAILABLE)
            messages.append(f"GPU samples were not recorded: {self._sampler.reason}.")
        state = s.state_json()
        self.manifest = {
            "schema_version": rundir.RUN_SCHEMA_VERSION,
            "tool": {"name": "gpuadvisor", "version": __version__},
            "command": list(sys.argv),
            "target": {"kind": "inprocess", "path_or_name": None, "argv": list(sys.argv)},
            "cwd": os.getcwd(),
            "python": sys.executable,
            "started_at": utc_iso(self._started),
            "started_unix_s": self._started,
            "ended_at": utc_iso(ended),
            "ended_unix_s": ended,
            "exit_status": s.exit_status,
            "exit_reason": s.exit_reason,
            "signal": s.signal,
            "failed_at_step": s.failed_at_step,
            "step_detection": state["step_detection"],
            "steps_seen": state["steps_seen"],
            "capture": state["capture"],
            "traces": state["traces"],
            "nvml": self._sampler.describe(),
            "degraded": degraded,
            "messages": messages,
        }
        write_json_atomic(self.run_dir / rundir.MANIFEST, self.manifest)
        from gpuadvisor.capture.session import STATE_FILE

        with contextlib.suppress(OSError):
            (self.run_dir / STATE_FILE).unlink()
