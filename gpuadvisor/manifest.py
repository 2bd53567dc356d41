"""The typed record of a run: `manifest.json` (docs/run-directory.md) and the child's hand-over state.

One module writes and reads the record: the capture's writers (`capture/runner.py`, `capture/rank.py`,
`capture/ranks.py`, `capture/inprocess.py`) build a `Manifest`, the child session hands over a
`ChildState`, and readers (`runinfo.RunInfo.record`, `manifest.host_step_durations`) parse the same
classes. `to_json()` gives the on-disk dict (sorted keys are applied by the writer); `from_json()`
accepts every manifest written so far (schema_version 1, the `sample_runs/` recordings included),
tolerates missing keys and wrong types (a run killed early leaves a partial record) and keeps keys it
does not know in `extra`, so a newer writer's fields survive a read-modify-write.

No torch, pandas or numpy here: the parent process and `gpuadvisor --help` import it.
"""

from __future__ import annotations

import datetime as _dt
import enum
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuadvisor import __version__, rundir
from gpuadvisor.redact import redact_argv
from gpuadvisor.words import after_steps

__all__ = [
    "CaptureState",
    "CaptureWindow",
    "ChildState",
    "Degraded",
    "DegradedFlag",
    "Distributed",
    "ExitReason",
    "Manifest",
    "NvmlGpu",
    "NvmlInfo",
    "RankEntry",
    "StepDetection",
    "StepEvent",
    "Target",
    "TargetKind",
]


# ---------------------------------------------------------------------------------------- enums
class ExitReason(str, enum.Enum):
    """Why the script (or a rank) ended."""

    COMPLETED = "completed"
    STOPPED_AFTER_WINDOW = "stopped_after_window"
    EXCEPTION = "exception"
    SYS_EXIT = "sys_exit"
    SIGNAL = "signal"
    KILLED = "killed"
    # the process ended without python's shutdown (os._exit(), a C extension calling exit()): nothing
    # after that point was flushed
    ABRUPT_EXIT = "abrupt_exit"
    NOT_STARTED = "not_started"
    RUNNING = "running"  # ranks[] only: a rank still running when another rank merged the manifest


class StepDetection(str, enum.Enum):
    """Which signal counted the steps (docs/capture.md, "Steps"), highest priority first."""

    MANUAL = "manual"
    OPTIMIZER_STEP_HOOK = "optimizer_step_hook"
    MODULE_FORWARD = "module_forward"
    DATALOADER = "dataloader"
    TIME = "time"
    NONE = "none"

    @property
    def priority(self) -> int:
        return _PRIORITY[self]


_PRIORITY = {
    StepDetection.MANUAL: 5,
    StepDetection.OPTIMIZER_STEP_HOOK: 4,
    StepDetection.MODULE_FORWARD: 3,
    StepDetection.DATALOADER: 2,
    StepDetection.TIME: 1,
    StepDetection.NONE: 0,
}


class CaptureState(str, enum.Enum):
    """`capture.state`: the window was recorded in full, in part, or not at all."""

    COMPLETE = "complete"
    PARTIAL = "partial"
    NOT_REACHED = "not_reached"


class TargetKind(str, enum.Enum):
    SCRIPT = "script"
    MODULE = "module"
    INPROCESS = "inprocess"


class Degraded(str, enum.Enum):
    """Stable degraded flags of `manifest.degraded` (the report explains each)."""

    NVML_UNAVAILABLE = rundir.DEGRADED_NVML_UNAVAILABLE
    CUDA_UNAVAILABLE = rundir.DEGRADED_CUDA_UNAVAILABLE
    NO_GPU_KERNELS = rundir.DEGRADED_NO_GPU_KERNELS
    TOO_FEW_STEPS = rundir.DEGRADED_TOO_FEW_STEPS
    SHORT_RUN = rundir.DEGRADED_SHORT_RUN
    NO_STEPS_DETECTED = rundir.DEGRADED_NO_STEPS_DETECTED
    SCRIPT_FAILED = rundir.DEGRADED_SCRIPT_FAILED  # written as script_failed_at_step_N when N is known
    INTERRUPTED = rundir.DEGRADED_INTERRUPTED
    KILLED = rundir.DEGRADED_KILLED
    TRACE_NOT_EXPORTED = rundir.DEGRADED_TRACE_NOT_EXPORTED
    USER_PROFILER = rundir.DEGRADED_USER_PROFILER
    OUTPUT_INCOMPLETE = rundir.DEGRADED_OUTPUT_INCOMPLETE


_DEGRADED_PROSE: dict[Degraded, str] = {
    Degraded.NVML_UNAVAILABLE: "GPU samples (NVML) were not recorded.",
    Degraded.CUDA_UNAVAILABLE: "CUDA was not available to torch: only CPU activity was recorded.",
    Degraded.NO_GPU_KERNELS: "No GPU kernels were recorded (CUPTI unavailable or no GPU work).",
    Degraded.TOO_FEW_STEPS: "The script ran too few steps to fill the capture window.",
    Degraded.SHORT_RUN: "The script ended before the capture window: the trace holds its first steps.",
    Degraded.NO_STEPS_DETECTED: "No training step was detected (no optimizer step, model call, batch or time step).",
    Degraded.SCRIPT_FAILED: "The script failed: the record holds what ran before it.",
    Degraded.INTERRUPTED: "The run was interrupted: the record holds what ran before it.",
    Degraded.KILLED: "The training process was killed: the record holds what was saved before it.",
    Degraded.TRACE_NOT_EXPORTED: "The trace was not exported.",
    Degraded.USER_PROFILER: "The script runs its own torch.profiler: gpuadvisor's profiler could not record.",
    Degraded.OUTPUT_INCOMPLETE: "Some output of the capture could not be written.",
}

_FAILED_AT = re.compile(r"^script_failed_at_step_(\d+)$")


@dataclass(frozen=True)
class DegradedFlag:
    """One degraded flag: a `Degraded` kind, plus the step for `script_failed_at_step_N`."""

    kind: Degraded
    step: int | None = None

    def __str__(self) -> str:
        if self.kind is Degraded.SCRIPT_FAILED and self.step is not None:
            return f"script_failed_at_step_{self.step}"
        return self.kind.value

    def describe(self) -> str:
        """The flag in words, for a report's notes (the id itself stays in manifest.json)."""
        if self.kind is Degraded.SCRIPT_FAILED and self.step is not None:
            return f"The script failed {after_steps(self.step)}: the record holds what ran before it."
        return _DEGRADED_PROSE[self.kind]

    @classmethod
    def parse(cls, text: str) -> DegradedFlag | None:
        """The flag of a manifest string; None for a flag this version does not know."""
        m = _FAILED_AT.match(text)
        if m:
            return cls(Degraded.SCRIPT_FAILED, int(m.group(1)))
        try:
            return cls(Degraded(text))
        except ValueError:
            return None


# ---------------------------------------------------------------------------------------- coercion
def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _bool(v: Any, default: bool = False) -> bool:
    return v if isinstance(v, bool) else default


def _strs(v: Any) -> tuple[str, ...]:
    return tuple(str(x) for x in v) if isinstance(v, (list, tuple)) else ()


def _obj(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _enum(cls: type[enum.Enum], v: Any, default: Any) -> Any:
    try:
        return cls(v)
    except ValueError:
        return default


def _extra(data: Mapping[str, Any], known: Iterable[str]) -> dict[str, Any]:
    names = set(known)
    return {k: v for k, v in data.items() if k not in names}


def utc_iso(unix_s: float) -> str:
    """ISO 8601 UTC timestamp for the manifest's *_at fields."""
    return _dt.datetime.fromtimestamp(unix_s, tz=_dt.timezone.utc).isoformat()


# ---------------------------------------------------------------------------------------- capture window
STEP_EVENT_KINDS = ("epoch_start", "epoch_end", "evaluation", "checkpoint", "gc")


@dataclass(frozen=True)
class StepEvent:
    """A cost met between steps (`manifest.capture.step_events`, issue 27): `kind` is `epoch_start`
    (a DataLoader iterator created and its first batch: worker start-up when workers do not persist),
    `epoch_end` (a worker loader's last `__next__`: the workers shut down unless they persist),
    `evaluation` (consecutive model calls with grad off / inference mode / eval mode while the script
    trains), `checkpoint` (one `torch.save`) or `gc` (a full garbage-collector pass, or one of 20 ms or more).
    `step`: the step it fell in (None: before the first step); `start_unix_s`, `seconds`: when and how
    long; `detail`: the kind's own fields (`num_workers`, `persistent_workers`, `first_batch_s`;
    `forward_calls`; `bytes`, `file`, `line`, `code`, `background` (saved from another thread); `generation`)."""

    kind: str
    step: int | None
    start_unix_s: float
    seconds: float
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = dict(self.detail)
        out.update(
            kind=self.kind, step=self.step, start_unix_s=round(self.start_unix_s, 6), seconds=round(self.seconds, 6)
        )
        return out

    @classmethod
    def from_json(cls, data: Any) -> StepEvent:
        d = _obj(data)
        return cls(
            kind=_str(d.get("kind")) or "unknown",
            step=_int(d.get("step")),
            start_unix_s=_float(d.get("start_unix_s")) or 0.0,
            seconds=max(0.0, _float(d.get("seconds")) or 0.0),
            detail={k: v for k, v in d.items() if k not in ("kind", "step", "start_unix_s", "seconds")},
        )


MAX_STEP_RECORDS = 20_000  # step boundaries and per-step waits the capture keeps (capture.window)


@dataclass(frozen=True)
class CaptureWindow:
    """`manifest.capture`: the profiler window and the host-timed step boundaries.

    `step_ends` holds (steps completed, wall-clock time) at every step boundary (all of them, before,
    inside and after the window, up to a bound); step k runs from boundary k to boundary k+1.
    `short_run`: the script ended before the window, and the trace holds the steps recorded
    speculatively from the first step (docs/capture.md, "Short scripts"). `speculation_end_step`: the
    boundary at which that speculative recording stopped (None: no speculative recording), the steps
    before it ran under the profiler. `cupti_teardown`: Kineto was asked to finalize CUPTI when the
    trace stopped (TEARDOWN_CUPTI=1). `step_events`: costs met between steps (`StepEvent`; at most
    2000, `step_events_dropped` more); `observe_steps`/`observe_seconds`: how long the steps were timed
    after the window (None in runs recorded before issue 27: their step events were not recorded).
    """

    skip_steps: int = 10
    warmup_steps: int = 2
    active_steps: int = 10
    first_recorded_step: int | None = None
    last_recorded_step: int | None = None
    state: CaptureState = CaptureState.NOT_REACHED
    full: bool = False
    with_stack: bool = False
    record_shapes: bool = True
    with_flops: bool = False
    window_start_unix_s: float | None = None
    window_end_unix_s: float | None = None
    export_seconds: float | None = None
    step_ends: tuple[tuple[int, float], ...] = ()
    short_run: bool = False
    speculation_end_step: int | None = None
    cupti_teardown: bool = False
    step_events: tuple[StepEvent, ...] = ()
    step_events_dropped: int = 0
    observe_steps: int | None = None
    observe_seconds: float | None = None
    # the run the user pays for (issue 38): the step the window opened at once the step time had settled
    # (`settle_capped`: opened at the cap instead), the seconds the host waited in DataLoader __next__
    # during each timed step (step, s), a window recorded before the optimizer's first step (`provisional`),
    # and torch.compile's compilation seconds (None: not compiled or not known)
    settled_at_step: int | None = None
    settle_capped: bool = False
    step_data_wait: tuple[tuple[int, float], ...] = ()
    provisional: bool = False
    compile_seconds: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)


    @property
    def steps_recorded(self) -> int:
        """How many steps the trace holds (0 when nothing was recorded)."""
        if self.first_recorded_step is None or self.last_recorded_step is None:
            return 0
        return max(0, self.last_recorded_step - self.first_recorded_step + 1)

    @property
    def steps_needed(self) -> int:
        return self.skip_steps + self.warmup_steps + self.active_steps

    def step_end_times(self) -> dict[int, float]:
        """Boundary index -> wall-clock time."""
        return dict(self.step_ends)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.update(
            skip_steps=self.skip_steps,
            warmup_steps=self.warmup_steps,
            active_steps=self.active_steps,
            first_recorded_step=self.first_recorded_step,
            last_recorded_step=self.last_recorded_step,
            state=self.state.value,
            full=self.full,
            with_stack=self.with_stack,
            record_shapes=self.record_shapes,
            with_flops=self.with_flops,
            window_start_unix_s=self.window_start_unix_s,
            window_end_unix_s=self.window_end_unix_s,
            export_seconds=self.export_seconds,
            step_ends=[[c, round(t, 6)] for c, t in self.step_ends],
            short_run=self.short_run,
            speculation_end_step=self.speculation_end_step,
            cupti_teardown=self.cupti_teardown,
        )
        if self.settled_at_step is not None:
            out.update(settled_at_step=self.settled_at_step, settle_capped=self.settle_capped)
        if self.step_data_wait:
            out["step_data_wait"] = [[k, round(v, 6)] for k, v in self.step_data_wait]
        if self.provisional:
            out["provisional"] = True
        if self.compile_seconds is not None:
            out["compile_seconds"] = round(self.compile_seconds, 3)
        if self.observe_steps is not None:
            out.update(
                step_events=[e.to_json() for e in self.step_events],
                step_events_dropped=self.step_events_dropped,
                observe_steps=self.observe_steps,
                observe_seconds=self.observe_seconds,
            )
        return out

    @classmethod
    def from_json(cls, data: Any) -> CaptureWindow:
        d = _obj(data)
        ends: list[tuple[int, float]] = []
        raw_ends = d.get("step_ends")
        if isinstance(raw_ends, (list, tuple)):
            for item in raw_ends:
                if isinstance(item, (list, tuple)) and len(item) == 2:
                    c, t = _int(item[0]), _float(item[1])
                    if c is not None and t is not None:
                        ends.append((c, t))
        waits: list[tuple[int, float]] = []
        raw_waits = d.get("step_data_wait")
        if isinstance(raw_waits, (list, tuple)):
            for item in raw_waits[:MAX_STEP_RECORDS]:
                if isinstance(item, (list, tuple)) and len(item) == 2:
                    k, w = _int(item[0]), _float(item[1])
                    if k is not None and w is not None and 0 <= w < 1e6:
                        waits.append((k, w))
        compile_s = _float(d.get("compile_seconds"))
        defaults = cls()
        return cls(
            skip_steps=_pick_int(d.get("skip_steps"), defaults.skip_steps),
            warmup_steps=_pick_int(d.get("warmup_steps"), defaults.warmup_steps),
            active_steps=_pick_int(d.get("active_steps"), defaults.active_steps),
            first_recorded_step=_int(d.get("first_recorded_step")),
            last_recorded_step=_int(d.get("last_recorded_step")),
            state=_enum(CaptureState, d.get("state"), CaptureState.NOT_REACHED),
            full=_bool(d.get("full")),
            with_stack=_bool(d.get("with_stack")),
            record_shapes=_bool(d.get("record_shapes"), True),
            with_flops=_bool(d.get("with_flops")),
            window_start_unix_s=_float(d.get("window_start_unix_s")),
            window_end_unix_s=_float(d.get("window_end_unix_s")),
            export_seconds=_float(d.get("export_seconds")),
            step_ends=tuple(ends),
            short_run=_bool(d.get("short_run")),
            speculation_end_step=_int(d.get("speculation_end_step")),
            cupti_teardown=_bool(d.get("cupti_teardown")),
            step_events=tuple(
                StepEvent.from_json(e) for e in (d.get("step_events") or ()) if isinstance(e, Mapping)
            )
            if isinstance(d.get("step_events"), (list, tuple))
            else (),
            step_events_dropped=_int(d.get("step_events_dropped")) or 0,
            observe_steps=_int(d.get("observe_steps")),
            observe_seconds=_float(d.get("observe_seconds")),
            settled_at_step=_int(d.get("settled_at_step")),
            settle_capped=_bool(d.get("settle_capped")),
            step_data_wait=tuple(waits),
            provisional=_bool(d.get("provisional")),
            compile_seconds=compile_s if compile_s is not None and 0 <= compile_s < 1e7 else None,
            extra=_extra(d, _known_keys(cls)),
        )


MIN_REFERENCE_STEPS_AFTER = 3  # steps after the window that make it the reference (the capture times 5)


def host_step_durations(capture: CaptureWindow | Mapping[str, Any]) -> tuple[list[float], list[float]]:
    """Host-measured step durations (ms) from the manifest's `capture.step_ends`, split into steps run
    without the profiler and steps inside the recorded window (`timed_steps` says which)."""
    cap = capture if isinstance(capture, CaptureWindow) else CaptureWindow.from_json(capture)
    ends = cap.step_end_times()
    unprofiled, profiled = timed_steps(cap)
    return [1e3 * (ends[k + 1] - ends[k]) for k in unprofiled], [1e3 * (ends[k + 1] - ends[k]) for k in profiled]


def timed_steps(capture: CaptureWindow | Mapping[str, Any]) -> tuple[list[int], list[int]]:
    """The step numbers (run's, 0-based) timed by `capture.step_ends` without the profiler (steady
    state: the second half of the skipped steps, and steps after the window once the export is over)
    and inside the recorded window; `host_step_durations` times them, `capture.step_data_wait` holds
    their DataLoader waits under the same numbers.

    `step_ends` holds (steps completed, wall time) at every step boundary; step k (0-based) runs from
    boundary k to boundary k+1. The profiler starts at boundary `skip_steps` and stops (and exports)
    at boundary `last_recorded_step + 1`, so step `last_recorded_step + 1` carries the export. When the
    first steps were recorded speculatively (`speculation_end_step` s), steps before s ran under the
    profiler and step s carries its stop: the unprofiled steps start at s + 1. A short run (the trace
    holds the speculative steps, no window) has no unprofiled steps to compare with.
    """
    cap = capture if isinstance(capture, CaptureWindow) else CaptureWindow.from_json(capture)
    ends = cap.step_end_times()
    first, last = cap.first_recorded_step, cap.last_recorded_step
    if not ends or first is None or last is None or cap.short_run:
        return [], []
    skip = cap.skip_steps
    keys = sorted(ends)

    def steps(a: int, b: int) -> list[int]:
        """The timed steps a..b, both boundaries recorded (a test of each boundary recorded: no loop
        runs over the span of the recorded step numbers, which a received run directory could make
        1e12)."""
        return [k for k in keys if a <= k <= b and (e := ends.get(k + 1)) is not None and e >= ends[k]]

    lo = max(1, skip // 2)
    if cap.speculation_end_step is not None:
        lo = max(lo, cap.speculation_end_step + 1)
    after = steps(last + 2, keys[-1] - 1)
    if len(after) >= MIN_REFERENCE_STEPS_AFTER:
        # The steps after the window are the cleaner reference: the profiler is gone (CUPTI finalized,
        # the capture's wrappers removed) and the run is warm. Before the window, CUPTI stays attached
        # after a speculative recording and the first steps still warm up (cudnn autotuning, workers):
        # on an H200 those steps ran 1.2-1.4x slower than plain python on host-bound runs.
        return after, steps(first + 1, last)
    return [*steps(lo, skip - 1), *steps(last + 2, keys[-1] - 1)], steps(first + 1, last)


def _pick_int(v: Any, default: int) -> int:
    got = _int(v)
    return default if got is None else got


# ---------------------------------------------------------------------------------------- pieces
@dataclass(frozen=True)
class Target:
    """What ran: a script path, a module name, or an in-process block. `argv` is the script's sys.argv."""

    kind: TargetKind = TargetKind.SCRIPT
    path_or_name: str | None = None
    argv: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "path_or_name": self.path_or_name, "argv": list(self.argv)}

    @classmethod
    def from_json(cls, data: Any) -> Target:
        d = _obj(data)
        return cls(
            kind=_enum(TargetKind, d.get("kind"), TargetKind.SCRIPT),
            path_or_name=_str(d.get("path_or_name")),
            argv=_strs(d.get("argv")),
        )


@dataclass(frozen=True)
class NvmlGpu:
    nvml_index: int
    uuid: str
    name: str
    cuda_index: int | None = None
    mig: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "nvml_index": self.nvml_index,
            "uuid": self.uuid,
            "name": self.name,
            "cuda_index": self.cuda_index,
            "mig": self.mig,
        }

    @classmethod
    def from_json(cls, data: Any) -> NvmlGpu:
        d = _obj(data)
        return cls(
            nvml_index=_pick_int(d.get("nvml_index"), -1),
            uuid=_str(d.get("uuid")) or "",
            name=_str(d.get("name")) or "",
            cuda_index=_int(d.get("cuda_index")),
            mig=_bool(d.get("mig")),
        )


@dataclass(frozen=True)
class NvmlInfo:
    """`manifest.nvml`: whether GPU samples were taken, why not, and of which GPUs."""

    available: bool = False
    reason: str | None = "not started"
    file: str | None = None
    interval_s: float = 0.1
    interval_after_window_s: float | None = None  # slower sampling once the window was exported
    samples: int = 0
    gpus: tuple[NvmlGpu, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "file": self.file,
            "interval_s": self.interval_s,
            "interval_after_window_s": self.interval_after_window_s,
            "samples": self.samples,
            "gpus": [g.to_json() for g in self.gpus],
        }

    @classmethod
    def from_json(cls, data: Any) -> NvmlInfo:
        d = _obj(data)
        gpus = d.get("gpus")
        return cls(
            available=_bool(d.get("available")),
            reason=_str(d.get("reason")),
            file=_str(d.get("file")),
            interval_s=_float(d.get("interval_s")) or 0.1,
            interval_after_window_s=_float(d.get("interval_after_window_s")),
            samples=_pick_int(d.get("samples"), 0),
            gpus=tuple(NvmlGpu.from_json(g) for g in gpus) if isinstance(gpus, list) else (),
        )


@dataclass(frozen=True)
class Distributed:
    """`manifest.distributed` (torchrun runs only). Fields a launcher does not know stay None."""

    launcher: str = "torchrun"
    nproc_per_node: str | None = None
    nnodes: str | None = None
    node_rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    failed_rank: int | None = None
    launcher_exit_status: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)


    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.update(
            launcher=self.launcher,
            nproc_per_node=self.nproc_per_node,
            nnodes=self.nnodes,
            node_rank=self.node_rank,
            world_size=self.world_size,
            backend=self.backend,
            failed_rank=self.failed_rank,
            launcher_exit_status=self.launcher_exit_status,
        )
        return out

    @classmethod
    def from_json(cls, data: Any) -> Distributed:
        d = _obj(data)
        nproc, nnodes = d.get("nproc_per_node"), d.get("nnodes")
        return cls(
            launcher=_str(d.get("launcher")) or "torchrun",
            nproc_per_node=None if nproc is None else str(nproc),
            nnodes=None if nnodes is None else str(nnodes),
            node_rank=_int(d.get("node_rank")),
            world_size=_int(d.get("world_size")),
            backend=_str(d.get("backend")),
            failed_rank=_int(d.get("failed_rank")),
            launcher_exit_status=_int(d.get("launcher_exit_status")),
            extra=_extra(d, _known_keys(cls)),
        )


def _flags(values: Any) -> tuple[tuple[DegradedFlag, ...], tuple[str, ...]]:
    known: list[DegradedFlag] = []
    unknown: list[str] = []
    for text in _strs(values):
        flag = DegradedFlag.parse(text)
        if flag is None:
            unknown.append(text)
        elif flag not in known:
            known.append(flag)
    return tuple(known), tuple(unknown)


@dataclass(frozen=True)
class ChildState:
    """What one training process hands over to the manifest writer (`RUN/.child_state[.rankN].json`).

    Written by `capture.session.CaptureSession` at every state change; read by the parent (single
    process) or merged over the ranks (`capture.ranks`).
    """

    pid: int | None = None
    python: str | None = None
    step_detection: StepDetection = StepDetection.NONE
    steps_seen: int = 0
    capture: CaptureWindow = field(default_factory=CaptureWindow)
    traces: tuple[str, ...] = ()
    degraded: tuple[DegradedFlag, ...] = ()
    unknown_degraded: tuple[str, ...] = ()
    messages: tuple[str, ...] = ()
    exit_reason: ExitReason | None = None
    exit_status: int | None = None
    failed_at_step: int | None = None
    signal: int | None = None
    rank: int = 0
    local_rank: int = 0
    node_rank: int = 0
    world_size: int = 1
    host: str | None = None
    failed_at_unix_s: float | None = None
    ended_unix_s: float | None = None
    distributed_backend: str | None = None

    @property
    def degraded_strings(self) -> list[str]:
        return [str(f) for f in self.degraded] + list(self.unknown_degraded)

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "python": self.python,
            "step_detection": self.step_detection.value,
            "steps_seen": self.steps_seen,
            "capture": self.capture.to_json(),
            "traces": list(self.traces),
            "degraded": self.degraded_strings,
            "messages": list(self.messages),
            "exit_reason": None if self.exit_reason is None else self.exit_reason.value,
            "exit_status": self.exit_status,
            "failed_at_step": self.failed_at_step,
            "signal": self.signal,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "node_rank": self.node_rank,
            "world_size": self.world_size,
            "host": self.host,
            "failed_at_unix_s": self.failed_at_unix_s,
            "ended_unix_s": self.ended_unix_s,
            "distributed_backend": self.distributed_backend,
        }

    @classmethod
    def from_json(cls, data: Any) -> ChildState:
        d = _obj(data)
        flags, unknown = _flags(d.get("degraded"))
        reason = d.get("exit_reason")
        return cls(
            pid=_int(d.get("pid")),
            python=_str(d.get("python")),
            step_detection=_enum(StepDetection, d.get("step_detection"), StepDetection.NONE),
            steps_seen=_pick_int(d.get("steps_seen"), 0),
            capture=CaptureWindow.from_json(d.get("capture")),
            traces=_strs(d.get("traces")),
            degraded=flags,
            unknown_degraded=unknown,
            messages=_strs(d.get("messages")),
            exit_reason=None if reason is None else _enum(ExitReason, reason, None),
            exit_status=_int(d.get("exit_status")),
            failed_at_step=_int(d.get("failed_at_step")),
            signal=_int(d.get("signal")),
            rank=_pick_int(d.get("rank"), 0),
            local_rank=_pick_int(d.get("local_rank"), 0),
            node_rank=_pick_int(d.get("node_rank"), 0),
            world_size=_pick_int(d.get("world_size"), 1),
            host=_str(d.get("host")),
            failed_at_unix_s=_float(d.get("failed_at_unix_s")),
            ended_unix_s=_float(d.get("ended_unix_s")),
            distributed_backend=_str(d.get("distributed_backend")),
        )


@dataclass(frozen=True)
class RankEntry:
    """One item of `manifest.ranks` (torchrun runs). Files are relative to the run directory."""

    rank: int
    local_rank: int | None = None
    node_rank: int | None = None
    host: str | None = None
    pid: int | None = None
    exit_status: int | None = None
    exit_reason: ExitReason = ExitReason.NOT_STARTED
    signal: int | None = None
    failed_at_step: int | None = None
    failed_at_unix_s: float | None = None
    ended_unix_s: float | None = None
    steps_seen: int = 0
    step_detection: StepDetection = StepDetection.NONE
    capture_state: CaptureState = CaptureState.NOT_REACHED
    first_recorded_step: int | None = None
    last_recorded_step: int | None = None
    trace: str | None = None
    environment: str | None = None
    callsites: str | None = None
    degraded: tuple[str, ...] = ()
    # this rank's host-timed step medians outside and inside the window (gpuadvisor.manifest.host_step_durations)
    unprofiled_step_ms: float | None = None
    profiled_step_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "node_rank": self.node_rank,
            "host": self.host,
            "pid": self.pid,
            "exit_status": self.exit_status,
            "exit_reason": self.exit_reason.value,
            "signal": self.signal,
            "failed_at_step": self.failed_at_step,
            "failed_at_unix_s": self.failed_at_unix_s,
            "ended_unix_s": self.ended_unix_s,
            "steps_seen": self.steps_seen,
            "step_detection": self.step_detection.value,
            "capture_state": self.capture_state.value,
            "first_recorded_step": self.first_recorded_step,
            "last_recorded_step": self.last_recorded_step,
            "trace": self.trace,
            "environment": self.environment,
            "callsites": self.callsites,
            "degraded": list(self.degraded),
            "unprofiled_step_ms": self.unprofiled_step_ms,
            "profiled_step_ms": self.profiled_step_ms,
        }

    @classmethod
    def from_json(cls, data: Any) -> RankEntry:
        d = _obj(data)
        return cls(
            rank=_pick_int(d.get("rank"), 0),
            local_rank=_int(d.get("local_rank")),
            node_rank=_int(d.get("node_rank")),
            host=_str(d.get("host")),
            pid=_int(d.get("pid")),
            exit_status=_int(d.get("exit_status")),
            exit_reason=_enum(ExitReason, d.get("exit_reason"), ExitReason.NOT_STARTED),
            signal=_int(d.get("signal")),
            failed_at_step=_int(d.get("failed_at_step")),
            failed_at_unix_s=_float(d.get("failed_at_unix_s")),
            ended_unix_s=_float(d.get("ended_unix_s")),
            steps_seen=_pick_int(d.get("steps_seen"), 0),
            step_detection=_enum(StepDetection, d.get("step_detection"), StepDetection.NONE),
            capture_state=_enum(CaptureState, d.get("capture_state"), CaptureState.NOT_REACHED),
            first_recorded_step=_int(d.get("first_recorded_step")),
            last_recorded_step=_int(d.get("last_recorded_step")),
            trace=_str(d.get("trace")),
            environment=_str(d.get("environment")),
            callsites=_str(d.get("callsites")),
            degraded=_strs(d.get("degraded")),
            unprofiled_step_ms=_float(d.get("unprofiled_step_ms")),
            profiled_step_ms=_float(d.get("profiled_step_ms")),
        )


# ---------------------------------------------------------------------------------------- the manifest
@dataclass(frozen=True)
class Manifest:
    """`manifest.json` of a run directory (docs/run-directory.md).

    Multi-rank runs: `steps_seen`, `step_detection` and `capture` are rank 0's; `traces` lists every
    rank; `degraded`/`messages` are the union. `distributed` and `ranks` are None for single-process runs.
    """

    schema_version: int = rundir.RUN_SCHEMA_VERSION
    tool_name: str = "gpuadvisor"
    tool_version: str | None = None
    command: tuple[str, ...] = ()
    target: Target = field(default_factory=Target)
    cwd: str | None = None
    python: str | None = None
    started_unix_s: float | None = None
    ended_unix_s: float | None = None
    exit_status: int | None = None
    exit_reason: ExitReason = ExitReason.NOT_STARTED
    signal: int | None = None
    failed_at_step: int | None = None
    step_detection: StepDetection = StepDetection.NONE
    steps_seen: int = 0
    capture: CaptureWindow = field(default_factory=CaptureWindow)
    traces: tuple[str, ...] = ()
    nvml: NvmlInfo = field(default_factory=NvmlInfo)
    degraded: tuple[DegradedFlag, ...] = ()
    unknown_degraded: tuple[str, ...] = ()
    messages: tuple[str, ...] = ()
    distributed: Distributed | None = None
    ranks: tuple[RankEntry, ...] | None = None
    # indices into target.argv whose credentials were masked (gpuadvisor.redact); () when none were
    argv_redacted: tuple[int, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)


    # ------------------------------------------------------------------ reading helpers
    def has(self, flag: Degraded) -> bool:
        """True when `flag` is among the degraded flags (any step for SCRIPT_FAILED)."""
        return any(f.kind is flag for f in self.degraded)

    @property
    def degraded_strings(self) -> list[str]:
        """The flags as written in manifest.json, in order (unknown ones last)."""
        return [str(f) for f in self.degraded] + list(self.unknown_degraded)

    # ------------------------------------------------------------------ building helpers
    @classmethod
    def begin(
        cls,
        *,
        command: Sequence[str],
        target: Target,
        capture: CaptureWindow,
        nvml: NvmlInfo,
        started_unix_s: float,
        distributed: Distributed | None = None,
        redact: bool = True,
    ) -> Manifest:
        """The manifest written before the script starts (a parent killed outright still leaves it).
        With `redact`, credentials in the command line are masked (gpuadvisor.redact)."""
        masked: tuple[int, ...] = ()
        if redact:
            command, _ = redact_argv(command)
            argv, masked = redact_argv(target.argv)
            target = replace(target, argv=tuple(argv))
        return cls(
            tool_version=__version__,
            command=tuple(command),
            argv_redacted=masked,
            target=target,
            cwd=os.getcwd(),
            python=sys.executable,
            started_unix_s=started_unix_s,
            capture=capture,
            nvml=nvml,
            distributed=distributed,
        )

    def with_child(self, state: ChildState) -> Manifest:
        """This manifest with what one training process handed over (single-process runs; rank 0 of
        a distributed run for the top-level step keys). Capture keys the child does not know keep the
        parent's values; flags and messages are added to the parent's."""
        capture = state.capture
        if not capture.extra and self.capture.extra:
            capture = replace(capture, extra=self.capture.extra)
        return replace(
            self,
            python=state.python or self.python,
            signal=state.signal if state.signal is not None else self.signal,
            failed_at_step=state.failed_at_step,
            step_detection=state.step_detection,
            steps_seen=state.steps_seen,
            capture=capture,
            degraded=merge_flags(self.degraded, state.degraded),
            unknown_degraded=tuple(dict.fromkeys((*self.unknown_degraded, *state.unknown_degraded))),
            messages=tuple(dict.fromkeys((*self.messages, *state.messages))),
        )

    def with_degraded(self, flag: Degraded, message: str = "", step: int | None = None) -> Manifest:
        """A copy with one more flag (not repeated) and its message (not repeated, empty skipped)."""
        new = DegradedFlag(flag, step)
        flags = self.degraded if new in self.degraded else (*self.degraded, new)
        msgs = self.messages if not message or message in self.messages else (*self.messages, message)
        return replace(self, degraded=flags, messages=msgs)

    def with_message(self, message: str) -> Manifest:
        return self if not message or message in self.messages else replace(self, messages=(*self.messages, message))

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.update(
            schema_version=self.schema_version,
            tool={"name": self.tool_name, "version": self.tool_version},
            command=list(self.command),
            target=self.target.to_json(),
            cwd=self.cwd,
            python=self.python,
            started_at=None if self.started_unix_s is None else utc_iso(self.started_unix_s),
            started_unix_s=self.started_unix_s,
            ended_at=None if self.ended_unix_s is None else utc_iso(self.ended_unix_s),
            ended_unix_s=self.ended_unix_s,
            exit_status=self.exit_status,
            exit_reason=self.exit_reason.value,
            signal=self.signal,
            failed_at_step=self.failed_at_step,
            step_detection=self.step_detection.value,
            steps_seen=self.steps_seen,
            capture=self.capture.to_json(),
            traces=list(self.traces),
            nvml=self.nvml.to_json(),
            degraded=self.degraded_strings,
            messages=list(self.messages),
        )
        if self.argv_redacted:
            out["argv_redacted"] = list(self.argv_redacted)
        if self.distributed is not None:
            out["distributed"] = self.distributed.to_json()
        if self.ranks is not None:
            out["ranks"] = [r.to_json() for r in self.ranks]
        return out

    @classmethod
    def from_json(cls, data: Any) -> Manifest:
        """Parse a manifest dict (any shape: what is missing or malformed gets its default)."""
        d = _obj(data)
        tool = _obj(d.get("tool"))
        flags, unknown = _flags(d.get("degraded"))
        ranks = d.get("ranks")
        return cls(
            schema_version=_pick_int(d.get("schema_version"), rundir.RUN_SCHEMA_VERSION),
            tool_name=_str(tool.get("name")) or "gpuadvisor",
            tool_version=_str(tool.get("version")),
            command=_strs(d.get("command")),
            argv_redacted=_indices(d.get("argv_redacted")),
            target=Target.from_json(d.get("target")),
            cwd=_str(d.get("cwd")),
            python=_str(d.get("python")),
            started_unix_s=_float(d.get("started_unix_s")),
            ended_unix_s=_float(d.get("ended_unix_s")),
            exit_status=_int(d.get("exit_status")),
            exit_reason=_enum(ExitReason, d.get("exit_reason"), ExitReason.NOT_STARTED),
            signal=_int(d.get("signal")),
            failed_at_step=_int(d.get("failed_at_step")),
            step_detection=_enum(StepDetection, d.get("step_detection"), StepDetection.NONE),
            steps_seen=_pick_int(d.get("steps_seen"), 0),
            capture=CaptureWindow.from_json(d.get("capture")),
            traces=_strs(d.get("traces")),
            nvml=NvmlInfo.from_json(d.get("nvml")),
            degraded=flags,
            unknown_degraded=unknown,
            messages=_strs(d.get("messages")),
            distributed=Distributed.from_json(d["distributed"]) if isinstance(d.get("distributed"), Mapping) else None,
            ranks=tuple(RankEntry.from_json(r) for r in ranks) if isinstance(ranks, list) else None,
            extra=_extra(d, _known_keys(cls)),
        )


_KNOWN_KEYS: dict[type, frozenset[str]] = {}


def _indices(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(i for i in value if isinstance(i, int) and not isinstance(i, bool) and i >= 0)


def _known_keys(cls: type) -> frozenset[str]:
    """The JSON keys a class writes itself (everything else read is kept in `extra`)."""
    keys = _KNOWN_KEYS.get(cls)
    if keys is None:
        keys = frozenset(cls().to_json())
        if cls is Manifest:
            keys |= {"distributed", "ranks", "argv_redacted"}  # written only when present
        _KNOWN_KEYS[cls] = keys
    return keys


def merge_flags(
    base: Sequence[DegradedFlag], more: Iterable[DegradedFlag]
) -> tuple[DegradedFlag, ...]:
    """`base` followed by the flags of `more` it does not hold yet (order kept)."""
    out = list(base)
    for f in more:
        if f not in out:
            out.append(f)
    return tuple(out)
