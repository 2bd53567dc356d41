"""What the capture tells about the run: one of the jobs of the capture session (issue 26).

The settings snapshot (TF32, cuDNN, autocast, GradScaler, torch.compile, CUDA graphs, training or
inference) taken at the window's end or the run's end, environment.json (versions, GPUs, memory,
DataLoaders, optimizers, model calls), and the manifest's `CaptureWindow`. Plain functions of what the
other parts hold; torch is imported inside the functions that read it (the session imports it first).
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import warnings
from collections.abc import Callable
from typing import Any

from gpuadvisor import rundir
from gpuadvisor.capture.between import StepEventLog
from gpuadvisor.capture.experiment import Suspect
from gpuadvisor.capture.export import TraceExport
from gpuadvisor.capture.options import ProfileOptions
from gpuadvisor.capture.window import ProfilerWindow, WindowState
from gpuadvisor.manifest import CaptureState, CaptureWindow, StepEvent


def snapshot_settings(
    recorder: Any,
    tracker: Any,
    optimizer_steps: int,
    off: frozenset[Suspect],
    at_window_end: bool,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """The run's settings now (`snapshot`: "window_end" or "run_end")."""
    # lazy: the capture runs inside the user's process; torch is loaded by the session's start()
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
                log(f"setting {key} unreadable: {err}")
    seen = recorder.settings if recorder is not None else None
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
        s["run_mode"] = run_mode(seen.backward_calls, optimizer_steps, tracker, off)
    s["snapshot"] = "window_end" if at_window_end else "run_end"
    return s


def run_mode(backward_calls: int, opt_steps: int, tracker: Any, off: frozenset[Suspect]) -> dict[str, Any]:
    """Training or inference, as seen at run time: optimizer steps, backward passes, and the grad
    mode at the top module's calls."""
    mode = tracker.mode if tracker is not None else None
    fwd = mode.forward_calls if mode is not None else 0
    if Suspect.SETTINGS_HOOKS in off and opt_steps == 0:
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


def environment_json(
    window: ProfilerWindow, settings: dict[str, Any] | None, steps_seen: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """environment.json: versions, the GPUs (when the script initialised CUDA), the settings
    snapshot, and what the hooks saw (DataLoaders, optimizers, framework, model calls)."""
    # lazy: the capture runs inside the user's process; torch is loaded by the session's start()
    import torch

    recorder, tracker, frameworks = window.recorder, window.tracker, window.frameworks
    steps_in_window = window.window_steps()
    env: dict[str, Any] = {
        "schema_version": rundir.RUN_SCHEMA_VERSION,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": None,
        "driver": None,  # filled in by the parent from NVML (NVML never runs in this process)
        "cuda_available": window.cuda_available,
        "gpus": [],
        "settings": settings or {},
        "dataloaders": list(recorder.dataloaders) if recorder else [],
        "optimizers": list(recorder.optimizers) if recorder else [],
        "framework": frameworks.framework_json() if frameworks is not None else None,
        "model_calls": (tracker.model_calls_json(steps_in_window, steps_seen) if tracker is not None else []),
        "memory": None,
    }
    with contextlib.suppress(Exception):
        env["cudnn"] = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
    # Only describe the GPUs when the script initialised CUDA: initialising it here would cost
    # seconds and change nothing the script did.
    if window.cuda_available and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        try:
            _describe_gpus(torch, env)
        except Exception as err:
            log(f"GPU description failed: {err}")
    return env


def _describe_gpus(torch: Any, env: dict[str, Any]) -> None:
    """The visible GPUs and the current one's peak memory, into `env` (as far as they can be read)."""
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


def capture_window(
    cfg: ProfileOptions,
    window: ProfilerWindow,
    trace: TraceExport,
    between: StepEventLog,
    off: frozenset[Suspect],
) -> CaptureWindow:
    """The manifest's `capture` block: the window asked for, the steps recorded, the step times."""
    if window.state is WindowState.DONE or (window.state is WindowState.KEPT and trace.trace_written):
        state = CaptureState.COMPLETE  # a provisional window is complete too (`provisional` says what it is)
    elif trace.trace_written:
        state = CaptureState.PARTIAL
    else:
        state = CaptureState.NOT_REACHED
    extra: dict[str, Any] = {}
    if off:
        extra["experiment_disabled"] = sorted(s.value for s in off)
    return CaptureWindow(
        skip_steps=cfg.skip_steps,
        warmup_steps=cfg.warmup_steps,
        active_steps=cfg.active_steps,
        first_recorded_step=window.record_start if trace.trace_written else None,
        last_recorded_step=window.record_end if trace.trace_written else None,
        state=state,
        full=cfg.full,
        with_stack=cfg.with_stack,
        record_shapes=True,
        with_flops=False,
        window_start_unix_s=window.window_start_unix_s,
        window_end_unix_s=window.window_end_unix_s,
        export_seconds=trace.export_seconds,
        step_ends=tuple(window.step_ends),
        step_events=tuple(StepEvent.from_json(e) for e in between.events),
        step_events_dropped=between.dropped,
        observe_steps=cfg.observe_steps,
        observe_seconds=cfg.observe_seconds,
        short_run=window.short_run,
        speculation_end_step=window.speculation_end_step,
        cupti_teardown=trace.cupti_teardown,
        settled_at_step=window.settled_at_step,
        settle_capped=window.settle_capped,
        step_data_wait=tuple(sorted(window.data_wait.items())),
        provisional=window.state is WindowState.KEPT and trace.trace_written,
        compile_seconds=compile_seconds(),
        extra=extra,
    )


def compile_seconds() -> float | None:
    """Seconds torch.compile spent compiling in this process (Dynamo's own timing of its compile
    phases), None when nothing was compiled or this torch does not tell. Read only where torch is
    already imported: the capture never imports it for this."""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    if dynamo_utils is None:
        return None
    try:
        metrics = getattr(dynamo_utils, "compilation_time_metrics", None)
        if not isinstance(metrics, dict):
            return None
        # the outermost compile entry point's times (the phases inside it are counted in it), and the
        # backward graphs, which AOT autograd compiles at the first backward, outside it
        total = 0.0
        for key, times in metrics.items():
            if key == "_compile.compile_inner" or str(key).endswith("bw_compiler"):
                total += float(sum(times))
    except Exception:
        return None
    return total if total > 0 else None


class DistributedBackend:
    """The torch.distributed backend, read from sys.modules only (torch is never imported here). The
    last backend seen is kept: scripts often destroy the process group before they end."""

    def __init__(self) -> None:
        self.seen: str | None = None

    def read(self) -> str | None:
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                self.seen = str(dist.get_backend())
        except Exception:
            pass
        return self.seen
