"""One verify trial: `python -m gpuadvisor.verify.trial CONFIG.json`.

Runs the recorded script the way `python SCRIPT ARGS` would (gpuadvisor.capture.execfile, as the
capture's child does) with no profiler, after installing the remedy's injections (none for a baseline
trial). Steps are counted as the capture counts them: the first optimizer that steps (global step
hook), else DataLoader batches (a second batch before any optimizer step), else calls of the top
module (the first module with trainable parameters that the script calls). Higher-priority evidence
restarts the count. While a built optimizer has not stepped, model calls and batches are not steps (an
evaluation before training, nanoGPT's first `estimate_loss()`) until the capture's hold is over
(`gpuadvisor.capture.steps.OptimizerHold`: the same rule, the same seconds). What is measured at the step boundaries is `gpuadvisor.verify.measure.SteadyRegion`:
start-up left out by the settled-step rule (at least `warmup_steps` steps), then at least `steps`
steps timed on the host clock between two device synchronizations (none per step), more where a stall
pattern needs them; the time the loop waits in DataLoader `__next__`. At the end of the timed region
the parameters the optimizers hold and the last loss the script called `backward()` on are checked for
NaN/Inf, the shapes of the model's output are recorded (explore refuses a lever that changes them),
the result is written to the result file, and the script is stopped (a SystemExit at that step
boundary, as `gpuadvisor profile` stops a script after its window).
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuadvisor.capture._io import restore_first_path, write_json_atomic
from gpuadvisor.capture.child import _print_user_traceback, _system_exit_status
from gpuadvisor.capture.execfile import run_module, run_script
from gpuadvisor.capture.hooks import Recorder
from gpuadvisor.capture.steps import OPTIMIZER_HOLD_SECONDS, OptimizerHold
from gpuadvisor.redact import unsealed_argv
from gpuadvisor.remedies import RemedyId
from gpuadvisor.verify import guard
from gpuadvisor.verify.importpatch import patch_on_import
from gpuadvisor.verify.inject import Injections, TrialSkip
from gpuadvisor.verify.measure import SteadyRegion
from gpuadvisor.verify.scriptopts import long_options, record_script_options

__all__ = ["TrialComplete", "TrialConfig", "run_trial"]


class TrialComplete(SystemExit):
    """Raised at the step boundary that ends the timed region (a SystemExit: `except Exception` in the
    script lets it through)."""

    def __init__(self) -> None:
        super().__init__(0)


class _TrialAbort(SystemExit):
    """An error in gpuadvisor's own trial machinery: the trial is failed, never measured wrongly."""

    def __init__(self, reason: str) -> None:
        super().__init__(0)
        self.reason = reason


@dataclass(frozen=True)
class TrialConfig:
    """What the parent hands the trial child (JSON)."""

    target: dict[str, Any]  # {"kind": "script"|"module", "path_or_name": str, "argv": [args]}
    result: str  # where the child writes its result (JSON)
    remedies: tuple[str, ...] = ()
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # remedy -> its lever's parameters
    warmup_steps: int = 10
    steps: int = 20
    num_workers: int = 1
    batch_multiplier: int = 4
    alloc_conf_before: str | None = None
    forward_fallback_calls: int = 3  # top-module calls without optimizer step or batch -> count calls
    guard: dict[str, list[str]] | None = None  # the write guard (gpuadvisor.verify.guard); None: none
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrialConfig:
        data = dict(data)
        data["remedies"] = tuple(data.get("remedies") or ())
        return cls(**data)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["remedies"] = list(self.remedies)
        return out


_PRIORITY = {"optimizer_step_hook": 3, "dataloader": 2, "forward": 1}
MAX_OUTPUT_SHAPES = (
    4  # distinct output shapes recorded per trial (more: the shape varies, as in varlen batches)
)


def _batch_shape(batch: Any, depth: int = 0) -> tuple[int, ...] | None:
    """The shape of a batch's first tensor of rank 1 or more (a DataLoader batch, or the model's
    arguments). Its first dimension is counted as samples; the whole shape is recorded so that a
    comparison can find the batch on another axis (a sequence-first RNN's input: (seq, batch, ...))."""
    # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
    import torch

    if isinstance(batch, torch.Tensor):
        return tuple(int(n) for n in batch.shape) if batch.dim() > 0 else None
    if depth > 3:
        return None
    if isinstance(batch, dict):
        items: Any = batch.values()
    elif isinstance(batch, (list, tuple)):
        items = batch
    else:
        return None
    for item in items:
        shape = _batch_shape(item, depth + 1)
        if shape is not None:
            return shape
    return None


class StepClock:
    """Counts steps, measures the settled region (`SteadyRegion`), checks the parameters and the loss,
    stops the script."""

    def __init__(self, cfg: TrialConfig, injections: Any, started: float | None = None) -> None:
        self.cfg = cfg
        self.injections = injections
        self.started = time.perf_counter() if started is None else started
        self.pid = os.getpid()
        self.method: str | None = None
        self.switches: list[str] = []
        self.count = 0
        self.dl_calls = 0
        self.forward_calls = 0
        self.opt_steps = 0
        self.primary: Any = None
        self.optimizers: list[Any] = []
        self.optimizer_built = False  # an optimizer was constructed (its first step may still be coming)
        self._hold = OptimizerHold(OPTIMIZER_HOLD_SECONDS)
        self.backlog = 0  # batches the script's DataLoader workers hold ahead
        self.region = self._new_region()
        self.samples: int | None = None
        # samples at the top module's input (first dimension of its first tensor argument), for scripts
        # whose batches do not come from a DataLoader
        self.model_samples: int | None = None
        # the shape of the first batch counted in the region (DataLoader batch, model input)
        self.samples_shape: tuple[int, ...] | None = None
        self.model_shape: tuple[int, ...] | None = None
        self.kept: tuple[Any, ...] | None = None  # the sample counters of the region's first `steps`
        self.last_loss: Any = None  # the last scalar the script called backward() on, in the region
        self.output_shapes: list[tuple[int, ...]] = []  # the model's output shapes seen in the region
        self.stop_pending = False
        self.done = False
        self.measure: dict[str, Any] = {}
        self.error: str | None = None

    def _new_region(self) -> SteadyRegion:
        region = SteadyRegion(
            warmup_steps=self.cfg.warmup_steps, steps=self.cfg.steps, started=self.started, sync=_synchronize
        )
        region.loader(self.backlog)
        return region

    @property
    def timing(self) -> bool:
        return self.region.timing

    # ------------------------------------------------------------------ signals from the hooks
    def _ours(self) -> bool:
        return os.getpid() == self.pid and not self.done

    def _guard(self) -> None:
        if self.stop_pending and threading.current_thread() is threading.main_thread():
            self.stop_pending = False
            raise TrialComplete()

    def on_optimizer_step(self, opt: Any) -> None:
        if not self._ours():
            return
        if self.primary is None:
            self.primary = opt
        if all(o is not opt for o in self.optimizers):
            self.optimizers.append(opt)
        if opt is not self.primary:
            return
        self.opt_steps += 1
        if self.method != "optimizer_step_hook":
            self._switch("optimizer_step_hook")
        self._boundary()

    def on_optimizer_built(self) -> None:
        if self._ours():
            self.optimizer_built = True

    def _unheld(self) -> bool:
        """A model call or batch may count steps: no built optimizer waits for its first step, or the
        hold is over (`OptimizerHold`; called once per such signal: it times them)."""
        return not self.optimizer_built or self._hold.over()

    def on_batch_request(self) -> None:
        if not self._ours():
            return
        self.dl_calls += 1
        if self.dl_calls == 1:
            return  # the first batch starts step 0
        if self.method in (None, "forward") and self.opt_steps == 0 and self._unheld():
            self._switch("dataloader")
        if self.method == "dataloader":
            self._boundary()

    def on_loader(self, backlog: int) -> None:
        """A DataLoader iterator whose workers hold `backlog` batches ahead (0 without workers)."""
        if self._ours():
            self.backlog = max(self.backlog, backlog)
            self.region.loader(self.backlog)

    def on_batch(self, batch: Any, waited_s: float = 0.0) -> None:
        """A batch the loop received after waiting `waited_s` in DataLoader `__next__`."""
        if not self._ours():
            return
        if threading.current_thread() is threading.main_thread():
            self.region.waited(waited_s)
        if self.timing and self.samples is not None:
            shape = _batch_shape(batch)
            self.samples = None if shape is None else self.samples + shape[0]
            self.samples_shape = self.samples_shape or shape

    def on_forward(self, inputs: Any = None) -> None:
        if not self._ours():
            return
        self.forward_calls += 1
        if self.timing and self.model_samples is not None and inputs is not None:
            shape = _batch_shape(inputs)
            self.model_samples = None if shape is None else self.model_samples + shape[0]
            self.model_shape = self.model_shape or shape
        if (
            self.method is None
            and self.forward_calls >= self.cfg.forward_fallback_calls
            and self.dl_calls == 0
            and self.opt_steps == 0
            and self._unheld()
        ):
            self._switch("forward")
        elif self.method == "forward":
            self._boundary()

    def on_output(self, output: Any) -> None:
        """The top module returned `output`: its shape is recorded in the region (a few distinct ones)."""
        if self._ours() and self.timing and len(self.output_shapes) < MAX_OUTPUT_SHAPES:
            shape = _batch_shape(output)
            if shape is not None and shape not in self.output_shapes:
                self.output_shapes.append(shape)

    def on_backward(self, tensor: Any) -> None:
        """The script called backward() on `tensor`: a scalar loss is kept (no copy, no sync) to be
        checked for NaN/Inf when the region ends."""
        if self._ours() and self.timing and tensor.numel() == 1:
            self.last_loss = tensor.detach()

    # ------------------------------------------------------------------ the region
    def _switch(self, method: str) -> None:
        if self.method is not None and _PRIORITY[method] <= _PRIORITY[self.method]:
            return
        self.switches.append(method)
        self.method = method
        self.count = 0
        self.region = self._new_region()

    def _boundary(self) -> None:
        self._guard()
        self.count += 1
        c = self.count
        try:
            if c <= self.cfg.warmup_steps:
                self.injections.enforce()
            what = self.region.boundary(c)
            if what == "start":
                self.samples = 0
                self.model_samples = 0
                self.samples_shape = self.model_shape = None
                self.output_shapes = []
            elif what in ("checkpoint", "restart"):
                self.kept = (self.samples, self.model_samples, self.samples_shape, self.model_shape)
                if what == "restart":
                    self.samples = self.model_samples = 0
                    self.samples_shape = self.model_shape = None
            elif what == "done":
                self._finish()
        except (TrialComplete, _TrialAbort):
            raise
        except Exception as err:  # our own bug: fail the trial rather than measure wrongly
            self.done = True
            raise _TrialAbort(f"gpuadvisor verify internal error: {type(err).__name__}: {err}") from err
        if self.done:
            if threading.current_thread() is threading.main_thread():
                raise TrialComplete()
            self.stop_pending = True

    def ended(self) -> bool:
        """The script ended before the region was complete: measured on the region's first `steps` where
        they were kept (True; the result says so), else nothing was measured (False)."""
        if self.done or not self.region.ended():
            return self.done
        if self.kept is not None:
            self.samples, self.model_samples, self.samples_shape, self.model_shape = self.kept
        self._finish()
        return True

    def _finish(self) -> None:
        _synchronize()
        measured = self.region.result()
        elapsed = float(measured["elapsed_s"])
        nonfinite, checked = self._check_params()
        samples, counted_at, shape = (
            (self.samples, "dataloader", self.samples_shape)
            if self.dl_calls
            else (self.model_samples, "model input", self.model_shape)
        )
        loss = self._loss()
        self.measure = {
            **measured,
            "samples": samples,
            "samples_counted_at": counted_at if samples else None,
            "samples_per_s": round(samples / elapsed, 3) if samples and elapsed > 0 else None,
            "samples_shape": list(shape) if samples and shape else None,
            "params_checked": checked,
            "nonfinite_params": nonfinite,
            "loss_checked": loss is not None,
            "loss": loss,
            "output_shapes": [list(s) for s in self.output_shapes],
        }
        self.done = True

    def _loss(self) -> float | None:
        """The last loss of the region as a float (NaN/Inf kept: the caller fails the trial); None
        when the script called backward() on no scalar."""
        if self.last_loss is None:
            return None
        try:
            return float(self.last_loss.float().cpu())
        except Exception as err:  # an unusual tensor (a subclass, a meta tensor): not checked
            del err
            return None

    def _params(self) -> list[Any]:
        params: dict[int, Any] = {}
        for opt in self.optimizers:
            for group in opt.param_groups:
                for p in group.get("params", []):
                    params[id(p)] = p
        top = self.injections.top_module
        if not params and top is not None:
            for p in top.parameters():
                params[id(p)] = p
        return list(params.values())

    def _check_params(self) -> tuple[int, int]:
        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        import torch

        bad = 0
        params = self._params()
        with torch.no_grad():
            for p in params:
                if not bool(torch.isfinite(p).all()):
                    bad += 1
        return bad, len(params)


def _synchronize() -> None:
    # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        torch.cuda.synchronize()


def _install_step_hooks(clock: StepClock, injections: Any) -> None:
    """Optimizer construction and step hooks, DataLoader iterator hook (with the time the loop waits in it), the loss's
    backward() (its last scalar, checked at the end), and the top-module finder (its output's shape)."""
    # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
    import torch
    from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook
    from torch.utils.data import dataloader as dlmod

    register_optimizer_step_post_hook(lambda opt, args, kwargs: clock.on_optimizer_step(opt))
    orig_init = Optimizer.__init__

    @functools.wraps(orig_init)
    def optimizer_init(opt: Any, *args: Any, **kwargs: Any) -> None:
        orig_init(opt, *args, **kwargs)
        clock.on_optimizer_built()

    Optimizer.__init__ = optimizer_init  # type: ignore[method-assign,assignment]

    orig_next = dlmod._BaseDataLoaderIter.__next__

    @functools.wraps(orig_next)
    def __next__(it: Any) -> Any:
        if getattr(it, "_gpuadvisor_backlog", None) is None:
            it._gpuadvisor_backlog = int(getattr(it, "_num_workers", 0) or 0) * int(
                getattr(it, "_prefetch_factor", 0) or 0
            )
            clock.on_loader(it._gpuadvisor_backlog)
        clock.on_batch_request()
        asked = time.perf_counter()
        batch = orig_next(it)
        clock.on_batch(batch, time.perf_counter() - asked)
        return batch

    dlmod._BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign,assignment]

    tensor_cls: Any = torch.Tensor
    orig_backward = tensor_cls.backward

    @functools.wraps(orig_backward)
    def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        clock.on_backward(tensor)
        return orig_backward(tensor, *args, **kwargs)

    tensor_cls.backward = backward

    module_cls: Any = torch.nn.Module
    orig_call = module_cls.__call__
    main = threading.main_thread()
    pid = os.getpid()
    disable = getattr(getattr(torch, "compiler", None), "disable", None)

    def count_forward(module: Any, args: Any, kwargs: Any) -> None:
        clock.on_forward((args, kwargs) if args else kwargs)

    def record_output(module: Any, args: Any, output: Any) -> None:
        # an evaluation (no_grad, inference_mode) runs other batches (timm's last validation batch of
        # 72 beside 128): only training calls' shapes are compared across trials
        if torch.is_grad_enabled():
            clock.on_output(output)

    pre_hook = disable(count_forward) if disable is not None else count_forward
    post_hook = disable(record_output) if disable is not None else record_output

    def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
        if (
            threading.current_thread() is main
            and os.getpid() == pid
            and any(p.requires_grad for p in module.parameters())
        ):
            module_cls.__call__ = orig_call  # found: remove this wrapper before anything else runs
            module.register_forward_pre_hook(pre_hook, with_kwargs=True)
            module.register_forward_hook(post_hook)
            injections.on_top_module(module)
        return orig_call(module, *args, **kwargs)

    module_cls.__call__ = __call__


def _locator() -> Any:
    """`file:line` of the user code that is running (torch, gpuadvisor and the stdlib are skipped)."""

    def noop(*args: Any) -> None:
        return None

    recorder = Recorder(log=noop, on_optimizer_step=noop, on_dataloader_next=noop, on_user_profiler=noop)

    def locate() -> str | None:
        frame = recorder.user_frame(2)
        # generated code (a dataclass's __init__ is "<string>") is no place to show: its caller is
        while frame is not None and frame.f_code.co_filename.startswith("<"):
            frame = frame.f_back
        if frame is None:
            return None
        file, line, _ = recorder.location(frame)
        return f"{file}:{line}"

    return locate


def _compile_error(exc: BaseException) -> bool:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if type(e).__module__.startswith(("torch._dynamo", "torch._inductor")):
            return True
        e = e.__cause__ or e.__context__
    return False


def _exception_text(exc: BaseException) -> str:
    """The message's first line; for an error re-raised from a DataLoader worker ("Caught X in
    DataLoader worker process 0." + the worker's traceback), also the worker's own last line."""
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return ""
    if "Original Traceback" in str(exc) and len(lines) > 1:
        return f"{lines[0]} {lines[-1].strip()}"
    return lines[0]


def run_trial(cfg: TrialConfig, started: float | None = None) -> dict[str, Any]:
    """Install, run the target, and return the result object (never raises for the script's faults).
    `started`: the trial process's start (perf_counter), from which its start-up is counted."""
    # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
    import torch

    injections = Injections(
        cfg.remedies,
        num_workers=cfg.num_workers,
        batch_multiplier=cfg.batch_multiplier,
        alloc_conf_before=cfg.alloc_conf_before,
        locate=_locator(),
        params=cfg.params,
    )
    clock = StepClock(cfg, injections, started)
    result: dict[str, Any] = {
        "pid": os.getpid(),
        "torch": torch.__version__,
        "cuda": bool(torch.cuda.is_available()),
        "remedies": list(cfg.remedies),
    }
    status, reason = "failed", None
    options: list[dict[str, Any]] = []
    try:
        record_script_options(options, patch_on_import)
        injections.install()
        _install_step_hooks(clock, injections)
    except Exception as err:
        reason = f"gpuadvisor verify could not install the remedy: {type(err).__name__}: {err}"
        traceback.print_exc()
    else:
        target = cfg.target
        try:
            argv = unsealed_argv(target["argv"], os.environ)  # the real one, if the file has it masked
            restore_first_path()  # the working directory first again, as `python` gives it to the script
            guard.install(cfg.guard)  # the script's writes stay in the scratch copy of its folder
            if target["kind"] == "module":
                run_module(target["path_or_name"], argv)
            else:
                run_script(target["path_or_name"], argv)
            reason = "ended"
        except TrialComplete:
            status = "ok"
        except TrialSkip as exc:
            status, reason = "skipped", exc.reason
        except _TrialAbort as exc:
            reason = exc.reason
        except SystemExit as exc:
            code = _system_exit_status(exc.code)
            reason = "ended" if code == 0 else f"the script exited with status {code}"
        except KeyboardInterrupt:
            reason = "interrupted"
        except BaseException as exc:
            _print_user_traceback(exc)
            if RemedyId.TORCH_COMPILE.value in cfg.remedies and _compile_error(exc):
                status = "skipped"
                reason = f"torch.compile failed: {type(exc).__name__}: {_exception_text(exc)}"
            else:
                reason = (
                    f"the script raised {type(exc).__name__}: {_exception_text(exc)} "
                    f"(step {clock.count + 1}, counted by {clock.method or 'none'})"
                )
    if not clock.done and reason == "ended":
        if clock.ended():  # measured on the first settled steps; the result's measure_note says so
            status = "ok"
        else:
            reason = clock.region.why_not(clock.method, cfg.warmup_steps, cfg.steps)
    if status == "ok" and cfg.remedies:
        skip = injections.runtime_skip_reason()
        if skip is not None:
            status, reason = "skipped", skip
    if status == "ok" and clock.measure.get("nonfinite_params"):
        status = "failed"
        reason = (
            f"{clock.measure['nonfinite_params']} of {clock.measure['params_checked']} parameter tensors "
            f"hold NaN/Inf after {clock.count} steps"
        )
    loss = clock.measure.get("loss")
    if status == "ok" and isinstance(loss, float) and not math.isfinite(loss):
        status = "failed"
        reason = (
            f"the loss is {loss} after {clock.count} steps (the last loss the script called backward() on)"
        )
    result.update(clock.measure)
    result.update(_peak_memory(torch))
    result.update(
        status=status,
        reason=reason if status != "ok" else None,
        step_detection=clock.method,
        method_switches=clock.switches,
        steps_counted=clock.count,
        changes=[c.to_dict() for c in injections.changes],
        notes=list(injections.notes),
    )
    names, values = long_options(options)
    result.update(script_options=names, script_option_values=values, script_arguments=options)
    result["writes_refused"] = guard.refused()[:20]
    return result


def _peak_memory(torch: Any) -> dict[str, int]:
    """The trial's peak allocated GPU memory and the device's total (remedies that trade memory for time,
    such as running checkpointed functions directly, report what they reached); {} without CUDA."""
    try:
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return {}
        dev = torch.cuda.current_device()
        return {
            "peak_memory_bytes": int(torch.cuda.max_memory_allocated(dev)),
            "memory_total_bytes": int(torch.cuda.get_device_properties(dev).total_memory),
        }
    except Exception:  # a broken CUDA context after the script's own failure: no figure, no new failure
        return {}


def main() -> None:
    started = time.perf_counter()
    with open(sys.argv[1], encoding="utf-8") as fh:
        cfg = TrialConfig.from_json(json.load(fh))
    result = run_trial(cfg, started)
    write_json_atomic(Path(cfg.result), result)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception as err:  # a closed stream: nothing to flush, the result is written
            del err
    # Exit 0 whatever the script did: the result file carries the outcome.
    sys.exit(0)


if __name__ == "__main__":
    # Run from the importable module: the script's module replaces sys.modules["__main__"].
    import gpuadvisor.verify.trial as _trial

    _trial.main()
