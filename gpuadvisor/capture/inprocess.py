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
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from gpuadvisor.capture.nvml import NvmlSampler
from gpuadvisor.capture.options import ProfileOptions
from gpuadvisor.capture.outdir import prepare_out_dir, release_out_dir
from gpuadvisor.capture.runner import (
    _with_sampler,
    initial_capture,
    write_manifest,
)
from gpuadvisor.capture.session import STATE_FILE, CaptureSession, SessionConfig
from gpuadvisor.errors import OutputExistsError, UsageError
from gpuadvisor.manifest import Degraded, ExitReason, Manifest, NvmlInfo, Target, TargetKind
from gpuadvisor.words import after_steps


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
        short_run_seconds: float = 2.0,
    ) -> None:
        if steps not in ("manual", "auto"):
            raise UsageError(f"steps must be 'manual' or 'auto' (got {steps!r})")
        if active_steps < 1 or skip_steps < 0 or warmup_steps < 0:
            raise UsageError("skip_steps and warmup_steps must be >= 0 and active_steps >= 1")
        self.run_dir = Path(out)
        self._force = force
        self._nvml = nvml
        self._nvml_interval = nvml_interval
        self._options = ProfileOptions(
            out=str(self.run_dir),
            force=force,
            full=True,
            skip_steps=skip_steps,
            warmup_steps=warmup_steps,
            active_steps=active_steps,
            with_stack=with_stack,
            nvml_interval=nvml_interval,
            quiet=quiet,
            time_fallback_after=0.0,
            short_run_seconds=short_run_seconds,
        ).validate()
        self._cfg = SessionConfig.from_options(
            self._options, str(self.run_dir.resolve()), manual_steps=steps == "manual"
        )
        self.session: Any = None
        self._sampler: Any = None
        self._started = 0.0
        self.manifest: dict[str, Any] | None = None

    def __enter__(self) -> Capture:
        try:
            prepare_out_dir(self.run_dir, self._force)
        except OutputExistsError as err:
            raise err.for_api() from None
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
            s.exit_reason, s.exit_status = ExitReason.COMPLETED, 0
        elif isinstance(exc, KeyboardInterrupt):
            s.exit_reason, s.exit_status, s.signal = ExitReason.SIGNAL, 130, 2
            s.degrade(Degraded.INTERRUPTED, "the block was interrupted (Ctrl-C); the capture was flushed.")
        else:
            s.exit_reason, s.exit_status = ExitReason.EXCEPTION, 1
            s.failed_at_step = s.steps_seen
            s.degrade(
                Degraded.SCRIPT_FAILED,
                f"the block raised {type(exc).__name__} {after_steps(s.steps_seen)}.",
                step=s.steps_seen,
            )
        s.finish()
        self._sampler.stop()
        record = Manifest.begin(
            command=list(sys.argv),
            target=Target(TargetKind.INPROCESS, None, tuple(sys.argv)),
            capture=initial_capture(self._options),
            nvml=NvmlInfo(interval_s=self._nvml_interval),
            started_unix_s=self._started,
        ).with_child(s.child_state())
        record = _with_sampler(record, self._sampler)
        record = replace(
            record,
            ended_unix_s=time.time(),
            exit_status=s.exit_status,
            exit_reason=s.exit_reason,
            signal=s.signal,
            traces=s.child_state().traces,
        )
        self.manifest = record.to_json()
        write_manifest(self.run_dir, record)
        with contextlib.suppress(OSError):
            (self.run_dir / STATE_FILE).unlink()
        release_out_dir(self.run_dir)
