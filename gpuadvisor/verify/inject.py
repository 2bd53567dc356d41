"""The remedies, applied inside a verify trial's process before the user's script runs.

Each remedy is an injection that changes one documented thing and records what it changed
(`Change`): a constructor argument (DataLoader, optimizer, a framework's trainer), a global switch
(TF32, cudnn.benchmark), or the top module (bf16 autocast around its forward, channels_last,
torch.compile). Imported only by the trial child (`gpuadvisor.verify.trial`), after torch.

The top module is the first module with trainable parameters that user code calls from the main
thread: a class-level `nn.Module.__call__` wrapper finds it and removes itself at once.
Global switches are applied before the script runs and applied again at every step boundary until
the timed region starts, so a script that sets them itself (`allow_tf32 = False`) still gets the
remedy; the change list says so.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuadvisor.remedies import REMEDIES, RemedyId, apply_order
from gpuadvisor.verify import inject_memory as _inject_memory  # noqa: F401 (registers its injectors)
from gpuadvisor.verify.importpatch import PostImportPatcher
from gpuadvisor.verify.injectors import INJECTORS, injector
from gpuadvisor.verify.plan import ALLOC_CONF, EXPANDABLE

__all__ = ["INJECTORS", "Change", "Injections", "TrialSkip"]

class TrialSkip(SystemExit):
    """The remedy cannot apply to this script (found out while it runs): stop it, report `skipped`.

    A SystemExit so that `except Exception` in user code lets it through."""

    def __init__(self, reason: str) -> None:
        super().__init__(0)
        self.reason = reason


@dataclass(frozen=True)
class Change:
    """One thing an injection changed, e.g. `num_workers=0 -> 8 at train.py:31`."""

    remedy: str
    what: str
    before: str
    after: str
    where: str | None = None

    def text(self) -> str:
        at = f" at {self.where}" if self.where else ""
        return f"{self.what}={self.before} -> {self.after}{at}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "remedy": self.remedy,
            "what": self.what,
            "before": self.before,
            "after": self.after,
            "where": self.where,
            "text": self.text(),
        }


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


class Injections:
    """Installs the injections of `remedies` and keeps the changes they made.

    `locate()` returns the user call site (`file:line`) of the code that is running, or None.
    """

    def __init__(
        self,
        remedies: Sequence[str],
        *,
        num_workers: int,
        batch_multiplier: int,
        alloc_conf_before: str | None,
        locate: Callable[[], str | None],
        params: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.remedies = frozenset(RemedyId(r) for r in remedies)
        self.num_workers = num_workers
        self.batch_multiplier = batch_multiplier
        self.alloc_conf_before = alloc_conf_before
        self.locate = locate
        self.changes: list[Change] = []
        self.notes: list[str] = []
        self.framework_precision = False  # a framework's own bf16 switch was applied
        self.user_autocast_entries = 0
        self.grad_scaler_enabled = False
        self.top_module: Any = None
        self.grad_scaler: Any = None  # fp16_autocast: the GradScaler of the injected autocast
        self.top_listeners: list[Callable[[Any], None]] = []
        self._enforcers: list[Callable[[], None]] = []
        self._installed: set[str] = set()
        self.lever_params: dict[RemedyId, dict[str, Any]] = {
            RemedyId(k): dict(v) for k, v in (params or {}).items()
        }
        self._tls = threading.local()
        self._pid = os.getpid()

    # ------------------------------------------------------------------ bookkeeping
    def change(
        self,
        remedy: RemedyId,
        what: str,
        before: Any,
        after: Any,
        where: str | None = None,
        *,
        literal: bool = True,
    ) -> None:
        """Record a change; `literal` values are shown as Python literals (strings quoted)."""
        show = _show if literal else str
        item = Change(remedy.value, what, show(before), show(after), where)
        if item not in self.changes:
            self.changes.append(item)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _origin(self) -> bool:
        return os.getpid() == self._pid

    @contextlib.contextmanager
    def _outermost(self) -> Any:
        """Only the outermost of nested patched constructors changes arguments (AdamW -> Adam)."""
        depth = getattr(self._tls, "depth", 0)
        self._tls.depth = depth + 1
        try:
            yield depth == 0
        finally:
            self._tls.depth = depth

    def enforce(self) -> None:
        """Apply the global switches again (called at step boundaries until the timed region)."""
        for fn in self._enforcers:
            fn()

    # ------------------------------------------------------------------ install
    def params(self, remedy: RemedyId) -> dict[str, Any]:
        """The lever parameters of `remedy` in this trial (its record's first lever's when not given)."""
        given = self.lever_params.get(remedy)
        if given is not None:
            return dict(given)
        levers = REMEDIES[remedy].levers
        return levers[0].param_dict() if levers else {}

    def install(self) -> None:
        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        import torch

        for remedy in sorted(self.remedies, key=apply_order):
            INJECTORS[remedy](self, torch)

    def _install_once(self, key: str, fn: Callable[[], None]) -> None:
        if key not in self._installed:
            self._installed.add(key)
            fn()

    def needs_top_module(self) -> bool:
        return bool(self.top_listeners)

    def on_top_module(self, module: Any) -> None:
        self.top_module = module
        for listener in self.top_listeners:
            listener(module)

    # ------------------------------------------------------------------ DataLoader
    def _install_dataloader(self, torch: Any) -> None:
        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        from torch.utils.data import DataLoader, IterableDataset

        orig = DataLoader.__init__
        sig = inspect.signature(orig)
        cuda = bool(torch.cuda.is_available())
        r = self.remedies

        @functools.wraps(orig)
        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            with self._outermost() as outer:
                if not outer or not self._origin():
                    return orig(loader, *args, **kwargs)
                try:
                    bound = sig.bind(loader, *args, **kwargs)
                except TypeError:
                    return orig(loader, *args, **kwargs)  # let DataLoader raise its own error
                self._edit_dataloader(bound, sig, r, cuda, IterableDataset)
                return orig(*bound.args, **bound.kwargs)

        DataLoader.__init__ = __init__  # type: ignore[method-assign,assignment]

    def _edit_dataloader(
        self,
        bound: inspect.BoundArguments,
        sig: inspect.Signature,
        r: frozenset[RemedyId],
        cuda: bool,
        iterable: type,
    ) -> None:
        a = bound.arguments

        def get(name: str) -> Any:
            return a[name] if name in a else sig.parameters[name].default

        where = self.locate()
        at = f" at {where}" if where else ""
        if RemedyId.DATALOADER_WORKERS in r:
            self._edit_workers(a, get, where, at, cuda, iterable)
        if RemedyId.PERSISTENT_WORKERS in r:
            if int(get("num_workers") or 0) == 0:
                self.note(f"DataLoader{at} has no workers: persistent_workers not changed")
            elif not get("persistent_workers"):
                a["persistent_workers"] = True
                self.change(RemedyId.PERSISTENT_WORKERS, "persistent_workers", False, True, where)
            else:
                self.note(f"DataLoader{at} already has persistent_workers=True")
        if RemedyId.DATALOADER_PIN_MEMORY in r:
            if not cuda:
                self.note(f"DataLoader{at}: no CUDA device, pin_memory not changed")
            elif not get("pin_memory"):
                a["pin_memory"] = True
                self.change(RemedyId.DATALOADER_PIN_MEMORY, "pin_memory", False, True, where)
        if RemedyId.LARGER_BATCH in r:
            size = get("batch_size")
            multiplier = self.params(RemedyId.LARGER_BATCH).get("multiplier", "auto")
            m = self.batch_multiplier if multiplier == "auto" else int(multiplier)
            if get("batch_sampler") is not None or size is None:
                self.note(f"DataLoader{at} takes a batch_sampler: batch size not changed")
            else:
                a["batch_size"] = int(size) * m
                self.change(RemedyId.LARGER_BATCH, "batch_size", size, a["batch_size"], where)

    def _edit_workers(
        self, a: dict[str, Any], get: Callable[[str], Any], where: str | None, at: str, cuda: bool, iterable: type
    ) -> None:
        """dataloader_workers with its lever's parameters: `num_workers` ("auto": --num-workers) and,
        on the loaders it gives workers (or, without `num_workers`, those that have them),
        `persistent_workers`, `prefetch_factor`, `pin_memory` ("cuda": on a CUDA machine)."""
        p = self.params(RemedyId.DATALOADER_WORKERS)
        workers = int(get("num_workers") or 0)
        if "num_workers" in p:
            want = self.num_workers if p["num_workers"] == "auto" else int(p["num_workers"])
            if isinstance(get("dataset"), iterable):
                self.note(
                    f"DataLoader{at}: an IterableDataset yields its whole stream in every worker unless it "
                    "shards by worker; num_workers not changed"
                )
                return
            if workers >= want:
                self.note(f"DataLoader{at} already has num_workers={workers}")
                return
            a["num_workers"] = want
            self.change(RemedyId.DATALOADER_WORKERS, "num_workers", workers, want, where)
        elif workers == 0:
            self.note(f"DataLoader{at} has no workers: prefetch_factor not changed")
            return
        if p.get("persistent_workers") and not get("persistent_workers"):
            a["persistent_workers"] = True
            self.change(RemedyId.DATALOADER_WORKERS, "persistent_workers", False, True, where)
        want_prefetch = p.get("prefetch_factor")
        if want_prefetch:
            prefetch = get("prefetch_factor")
            if prefetch is None or prefetch < int(want_prefetch):
                a["prefetch_factor"] = int(want_prefetch)
                self.change(RemedyId.DATALOADER_WORKERS, "prefetch_factor", prefetch or 2, int(want_prefetch), where)
            elif "num_workers" not in p:
                self.note(f"DataLoader{at} already has prefetch_factor={prefetch}")
        if p.get("pin_memory") == "cuda" and cuda and not get("pin_memory"):
            # Workers hand batches over in shared memory; pinning lets the copy to the GPU be async.
            a["pin_memory"] = True
            self.change(RemedyId.DATALOADER_WORKERS, "pin_memory", False, True, where)

    # ------------------------------------------------------------------ optimizer
    def _install_optimizer(self, torch: Any) -> None:
        seen: set[Any] = set()
        for name in dir(torch.optim):
            cls: Any = getattr(torch.optim, name)
            if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)) or cls in seen:
                continue
            seen.add(cls)
            if "__init__" not in vars(cls):
                continue
            init = vars(cls)["__init__"]
            params = inspect.signature(init).parameters
            if "fused" in params or "foreach" in params:
                type.__setattr__(
                    cls, "__init__", self._optimizer_init(cls, init, "fused" in params, "foreach" in params)
                )

    def _optimizer_init(self, cls: type, orig: Any, has_fused: bool, has_foreach: bool) -> Any:
        sig = inspect.signature(orig)

        @functools.wraps(orig)
        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            with self._outermost() as outer:
                if not outer or not self._origin():
                    orig(opt, *args, **kwargs)
                    return
                try:
                    bound = sig.bind(opt, *args, **kwargs)
                except TypeError:
                    orig(opt, *args, **kwargs)
                    return
                self._fuse(cls, orig, bound, has_fused, has_foreach)

        return __init__

    def _fuse(
        self, cls: type, orig: Any, bound: inspect.BoundArguments, has_fused: bool, has_foreach: bool
    ) -> None:
        a = bound.arguments
        where = self.locate()
        name = cls.__name__
        params = a.get("params")
        if params is not None and not isinstance(params, (list, tuple)):
            a["params"] = list(params)  # a generator would be used up by a failed first attempt
        fused_before, foreach_before = a.get("fused"), a.get("foreach")
        attempts: list[tuple[str, dict[str, Any]]] = []
        if has_fused and not fused_before:
            attempts.append(("fused", {"fused": True, "foreach": None}))
        if has_foreach and not foreach_before and not fused_before:
            attempts.append(("foreach", {"foreach": True}))  # when fused is refused (device, dtype)
        if not attempts:
            self.note(f"{name} at {where} already uses fused={fused_before} foreach={foreach_before}")
        for flag, values in attempts:
            saved = {k: a.get(k) for k in values}
            a.update(values)
            try:
                orig(*bound.args, **bound.kwargs)
            except (RuntimeError, ValueError, TypeError) as err:
                a.update(saved)
                self.note(f"{name}({flag}=True) is not supported here ({err})")
                continue
            self.change(RemedyId.FUSED_OPTIMIZER, f"{name}({flag})", saved[flag], True, where)
            return
        orig(*bound.args, **bound.kwargs)

    # ------------------------------------------------------------------ global switches
    def _install_switches(self, remedy: RemedyId, switches: list[_Switch]) -> None:
        before = [sw.read() for sw in switches]  # first: one switch may move another (allow_tf32)
        for sw, value in zip(switches, before, strict=True):
            if value != sw.value:
                sw.write()
                self.change(remedy, sw.name, value, sw.value)

        def enforce() -> None:
            for sw in switches:
                now = sw.read()
                if now != sw.value:
                    sw.write()
                    self.change(
                        remedy,
                        sw.name,
                        now,
                        sw.value,
                        "the script's own setting, overridden at each warm-up step",
                    )

        self._enforcers.append(enforce)

    # ------------------------------------------------------------------ precision
    def _install_autocast_watch(self, torch: Any) -> None:
        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        from torch.amp import autocast_mode

        orig_enter = autocast_mode.autocast.__enter__

        @functools.wraps(orig_enter)
        def __enter__(ac: Any) -> Any:
            if not getattr(self._tls, "ours", False) and getattr(ac, "_enabled", True):
                self.user_autocast_entries += 1
            return orig_enter(ac)  # type: ignore[no-untyped-call]

        autocast_mode.autocast.__enter__ = __enter__  # type: ignore[method-assign,assignment]
        scaler_init = torch.amp.GradScaler.__init__

        @functools.wraps(scaler_init)
        def scaler(s: Any, *args: Any, **kwargs: Any) -> None:
            scaler_init(s, *args, **kwargs)
            if getattr(s, "_enabled", False) and not getattr(self._tls, "ours", False):
                self.grad_scaler_enabled = True

        torch.amp.GradScaler.__init__ = scaler  # type: ignore[method-assign]

    def _autocast(self, torch: Any, module: Any) -> None:
        if self.framework_precision:
            return  # the framework's own switch does it
        param = next((p for p in module.parameters()), None)
        device = param.device.type if param is not None else None
        if device not in ("cuda", "cpu"):
            self.note(f"bf16 autocast: parameters on {device}, not injected")
            return
        forward = module.forward
        tls = self._tls
        dtype_name = self.half_dtype()
        dtype = getattr(torch, dtype_name)
        if dtype_name == "float16":
            self._tls.ours = True  # not the script's own GradScaler
            try:
                self.grad_scaler = torch.amp.GradScaler(device)  # the hooks installed up front start scaling
            finally:
                self._tls.ours = False
            self.change(
                RemedyId.BF16_AUTOCAST,
                "GradScaler",
                "none",
                f"torch.amp.GradScaler({device!r}) on loss.backward() and optimizer.step()",
                self.locate(),
                literal=False,
            )

        def already_on() -> bool:
            try:
                return bool(torch.is_autocast_enabled(device))
            except TypeError:  # torch < 2.4: no device argument
                return bool(torch.is_autocast_enabled() if device == "cuda" else torch.is_autocast_cpu_enabled())

        @functools.wraps(forward)
        def autocast_forward(*args: Any, **kwargs: Any) -> Any:
            if already_on():  # the script's own autocast: leave its precision alone
                return forward(*args, **kwargs)
            tls.ours = True
            try:
                ctx = torch.autocast(device_type=device, dtype=dtype)
                ctx.__enter__()
            finally:
                tls.ours = False
            try:
                out = forward(*args, **kwargs)
            finally:
                ctx.__exit__(None, None, None)
            return _outputs_to_fp32(torch, out, dtype)

        module.forward = autocast_forward
        self.change(
            RemedyId.BF16_AUTOCAST,
            f"{type(module).__name__}.forward",
            "float32",
            f"autocast({device}, {dtype_name}) with float32 outputs",
            self.locate(),
            literal=False,
        )

    def half_dtype(self) -> str:
        """The autocast dtype of the bf16_autocast lever: "bfloat16", or "float16" (fp16_autocast)."""
        return str(self.params(RemedyId.BF16_AUTOCAST).get("dtype") or "bfloat16")

    def _install_grad_scaler(self, torch: Any) -> None:
        """fp16 autocast needs loss scaling: once the injected autocast is on (`self.grad_scaler`, made
        at the top module's first call, on its device), a GradScaler scales the loss at
        `loss.backward()` (a one-element tensor's backward, in the main thread) and runs each
        optimizer's step through `scaler.step` + `scaler.update` (an instance attribute set at the
        optimizer's construction, so installed before the script builds it). Steps away when the
        script makes its own enabled GradScaler."""
        tls = self._tls
        main = threading.main_thread()
        orig_backward = torch.Tensor.backward

        def ours() -> bool:
            return (
                self.grad_scaler is not None
                and not self.grad_scaler_enabled
                and threading.current_thread() is main
                and self._origin()
                and not getattr(tls, "scaling", False)
            )

        @functools.wraps(orig_backward)
        def backward(t: Any, *args: Any, **kwargs: Any) -> Any:
            if ours() and t.numel() == 1 and t.requires_grad:
                tls.scaling = True
                try:
                    return orig_backward(self.grad_scaler.scale(t), *args, **kwargs)
                finally:
                    tls.scaling = False
            return orig_backward(t, *args, **kwargs)

        torch.Tensor.backward = backward
        orig_init = torch.optim.Optimizer.__init__

        @functools.wraps(orig_init)
        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            orig_init(opt, *args, **kwargs)
            step = opt.step  # the class's step, bound

            def scaled_step(*a: Any, **k: Any) -> Any:
                if not ours():
                    return step(*a, **k)
                tls.scaling = True
                try:
                    out = self.grad_scaler.step(opt, *a, **k)  # calls opt.step: `scaling` passes it through
                    self.grad_scaler.update()
                finally:
                    tls.scaling = False
                return out

            opt.step = scaled_step

        torch.optim.Optimizer.__init__ = __init__

    def _install_framework_switches(self) -> None:
        patches: dict[str, Callable[[types.ModuleType], None]] = {
            "transformers.training_args": self._patch_hf_training_args,
            "lightning.pytorch.trainer.trainer": self._patch_lightning_trainer,
            "pytorch_lightning.trainer.trainer": self._patch_lightning_trainer,
        }
        for name, patch in list(patches.items()):
            module = sys.modules.get(name)
            if module is not None:
                patch(module)
                del patches[name]
        if patches:
            sys.meta_path.insert(0, PostImportPatcher(patches))

    def _patch_hf_training_args(self, module: types.ModuleType) -> None:
        cls = getattr(module, "TrainingArguments", None)
        if cls is None or not hasattr(cls, "__post_init__"):
            self.note("transformers.TrainingArguments not found: no framework switch")
            return
        orig = cls.__post_init__
        r = self.remedies

        def cuda_available() -> bool:  # TrainingArguments(tf32=True) refuses to run without a GPU
            # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
            import torch

            return bool(torch.cuda.is_available())

        @functools.wraps(orig)
        def __post_init__(args: Any, *a: Any, **k: Any) -> Any:
            where = self.locate()
            if RemedyId.BF16_AUTOCAST in r:
                flag = "fp16" if self.half_dtype() == "float16" else "bf16"
                if getattr(args, "fp16", False):
                    self.note(f"TrainingArguments at {where} already sets fp16=True")
                elif not getattr(args, "bf16", False):
                    setattr(args, flag, True)  # fp16: the Trainer brings its own GradScaler
                    self.framework_precision = True
                    self.change(RemedyId.BF16_AUTOCAST, f"TrainingArguments.{flag}", False, True, where)
                else:
                    self.framework_precision = True
            if RemedyId.TF32 in r and getattr(args, "tf32", None) is not True and cuda_available():
                before = getattr(args, "tf32", None)
                args.tf32 = True
                self.change(RemedyId.TF32, "TrainingArguments.tf32", before, True, where)
            return orig(args, *a, **k)

        cls.__post_init__ = __post_init__

    def _patch_lightning_trainer(self, module: types.ModuleType) -> None:
        cls = getattr(module, "Trainer", None)
        if cls is None or RemedyId.BF16_AUTOCAST not in self.remedies:
            return
        orig = cls.__init__
        sig = inspect.signature(orig)

        @functools.wraps(orig)
        def __init__(trainer: Any, *args: Any, **kwargs: Any) -> None:
            try:
                bound = sig.bind(trainer, *args, **kwargs)
            except TypeError:
                return orig(trainer, *args, **kwargs)  # type: ignore[no-any-return]
            before = bound.arguments.get("precision", sig.parameters["precision"].default)
            if before in (None, 32, "32", "32-true"):
                mixed = "16-mixed" if self.half_dtype() == "float16" else "bf16-mixed"
                bound.arguments["precision"] = mixed
                self.framework_precision = True
                self.change(RemedyId.BF16_AUTOCAST, "Trainer.precision", before, mixed, self.locate())
            else:
                self.note(f"Lightning Trainer already sets precision={before!r}")
            return orig(*bound.args, **bound.kwargs)  # type: ignore[no-any-return]

        cls.__init__ = __init__

    # ------------------------------------------------------------------ layout, compile
    def _channels_last(self, torch: Any, module: Any) -> None:
        """The module's 4-D floating parameters and buffers to channels_last in place (a Conv3d's 5-D
        weight, a Linear's 2-D one stay), and at each call of the module its 4-D floating inputs (other
        inputs untouched): `Module.to(memory_format=channels_last)` would also reach 5-D tensors and
        raise "required rank 4 tensor to use channels_last format"."""
        if not any(isinstance(m, torch.nn.Conv2d) for m in module.modules()):
            self.note(f"{type(module).__name__} has no Conv2d: channels_last not applied")
            return
        fmt = torch.channels_last
        converted = 0
        with torch.no_grad():
            for tensor in (*module.parameters(), *module.buffers()):
                if tensor.dim() == 4 and tensor.is_floating_point() and not tensor.is_contiguous(memory_format=fmt):
                    tensor.data = tensor.data.contiguous(memory_format=fmt)  # same Parameter object
                    converted += 1

        def convert(x: Any, depth: int = 0) -> Any:
            if isinstance(x, torch.Tensor):
                return x.contiguous(memory_format=fmt) if x.dim() == 4 and x.is_floating_point() else x
            if depth < 2 and isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
                return type(x)(convert(v, depth + 1) for v in x)
            return x

        def pre_hook(mod: Any, args: Any, kwargs: Any) -> Any:
            return tuple(convert(x) for x in args), {k: convert(v) for k, v in kwargs.items()}

        self.note(f"channels_last: {converted} 4-D parameter/buffer tensors of {type(module).__name__} converted")
        disable = getattr(getattr(torch, "compiler", None), "disable", None)
        module.register_forward_pre_hook(disable(pre_hook) if disable else pre_hook, with_kwargs=True)
        self.change(
            RemedyId.CHANNELS_LAST,
            f"{type(module).__name__} and its 4-D inputs memory_format",
            "contiguous",
            "channels_last",
            self.locate(),
            literal=False,
        )

    def _compile(self, torch: Any, module: Any) -> None:
        if type(module).__name__ == "OptimizedModule" or getattr(module, "_compiled_call_impl", None):
            raise TrialSkip(f"{type(module).__name__} is already compiled by the script")
        name = type(module).__name__
        mode = str(self.params(RemedyId.TORCH_COMPILE).get("mode") or "default")
        kwargs = {} if mode == "default" else {"mode": mode}
        if hasattr(module, "compile"):
            module.compile(**kwargs)  # in place: the module object, its parameters and state_dict keys stay
        else:  # torch < 2.2
            module.forward = torch.compile(module.forward, **kwargs)
        self.change(
            RemedyId.TORCH_COMPILE,
            name,
            "eager",
            f"torch.compile ({mode} mode)",
            self.locate(),
            literal=False,
        )

    # ------------------------------------------------------------------ verdict helpers
    def runtime_skip_reason(self) -> str | None:
        """Why the remedy turned out not to apply (after the script ran), else None."""
        if RemedyId.BF16_AUTOCAST in self.remedies and not self.framework_precision:
            if self.user_autocast_entries:
                return "the script enters torch.autocast itself"
            if self.grad_scaler_enabled:
                return "the script uses a GradScaler (fp16 mixed precision)"
        if not self.changes:
            why = "; ".join(self.notes)
            return "nothing to change" + (f": {why}" if why else "")
        return None




@injector(
    RemedyId.DATALOADER_WORKERS,
    RemedyId.DATALOADER_PIN_MEMORY,
    RemedyId.PERSISTENT_WORKERS,
    RemedyId.LARGER_BATCH,
)
def _inject_dataloader(inj: Injections, torch: Any) -> None:
    inj._install_once("dataloader", lambda: inj._install_dataloader(torch))


@injector(RemedyId.FUSED_OPTIMIZER)
def _inject_fused_optimizer(inj: Injections, torch: Any) -> None:
    inj._install_optimizer(torch)


@injector(RemedyId.TF32)
def _inject_tf32(inj: Injections, torch: Any) -> None:
    inj._install_switches(RemedyId.TF32, _tf32_switches(torch))
    inj._install_once("framework", inj._install_framework_switches)


@injector(RemedyId.CUDNN_BENCHMARK)
def _inject_cudnn_benchmark(inj: Injections, torch: Any) -> None:
    inj._install_switches(RemedyId.CUDNN_BENCHMARK, _cudnn_benchmark_switch(torch))


@injector(RemedyId.EXPANDABLE_SEGMENTS)
def _inject_expandable_segments(inj: Injections, torch: Any) -> None:
    # the setting itself is in the trial's environment (runner.trial_environment): check and record it
    now = os.environ.get(ALLOC_CONF)
    if now and EXPANDABLE in now:
        inj.change(
            RemedyId.EXPANDABLE_SEGMENTS, ALLOC_CONF, inj.alloc_conf_before or "unset", now, literal=False
        )
    else:
        inj.note(f"{ALLOC_CONF} does not hold {EXPANDABLE} in the trial process")


# The top-module remedies wrap in the records' order: layout first, precision around it, compile outermost.
@injector(RemedyId.CHANNELS_LAST)
def _inject_channels_last(inj: Injections, torch: Any) -> None:
    inj.top_listeners.append(lambda m: inj._channels_last(torch, m))


@injector(RemedyId.BF16_AUTOCAST)
def _inject_autocast(inj: Injections, torch: Any) -> None:
    inj._install_autocast_watch(torch)
    if inj.half_dtype() == "float16":
        inj._install_grad_scaler(torch)
    inj._install_once("framework", inj._install_framework_switches)
    inj.top_listeners.append(lambda m: inj._autocast(torch, m))


@injector(RemedyId.TORCH_COMPILE)
def _inject_compile(inj: Injections, torch: Any) -> None:
    inj.top_listeners.append(lambda m: inj._compile(torch, m))


@injector(RemedyId.ALL_SAFE)
def _inject_all_safe(inj: Injections, torch: Any) -> None:
    # all_safe never reaches a trial process: the runner hands the trial its members
    raise _InjectionError("all_safe is expanded into its members by the runner, never injected as such")


class _InjectionError(RuntimeError):
    pass


@dataclass(frozen=True)
class _Switch:
    name: str
    value: Any
    read: Callable[[], Any]
    write: Callable[[], None]


def _tf32_switches(torch: Any) -> list[_Switch]:
    def set_matmul() -> None:
        torch.backends.cuda.matmul.allow_tf32 = True

    def set_cudnn() -> None:
        torch.backends.cudnn.allow_tf32 = True

    def set_precision() -> None:
        torch.set_float32_matmul_precision("high")

    return [
        _Switch(
            "torch.backends.cuda.matmul.allow_tf32",
            True,
            lambda: bool(torch.backends.cuda.matmul.allow_tf32),
            set_matmul,
        ),
        _Switch(
            "torch.backends.cudnn.allow_tf32", True, lambda: bool(torch.backends.cudnn.allow_tf32), set_cudnn
        ),
        _Switch(
            "float32_matmul_precision",
            "high",
            lambda: str(torch.get_float32_matmul_precision()),
            set_precision,
        ),
    ]


def _cudnn_benchmark_switch(torch: Any) -> list[_Switch]:
    def write() -> None:
        torch.backends.cudnn.benchmark = True

    return [
        _Switch("torch.backends.cudnn.benchmark", True, lambda: bool(torch.backends.cudnn.benchmark), write)
    ]


def _outputs_to_fp32(torch: Any, out: Any, dtype: Any = None) -> Any:
    """bf16 tensors in the top module's output back to float32, so a loss computed outside the module
    runs in float32 as it would under autocast (Accelerate's `convert_outputs_to_fp32` does the same)."""
    low = (torch.bfloat16, torch.float16) if dtype is None else (dtype,)
    if isinstance(out, torch.Tensor):
        return out.float() if out.dtype in low else out
    if isinstance(out, tuple):
        items = [_outputs_to_fp32(torch, v, dtype) for v in out]
        return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
    if isinstance(out, list):
        return type(out)(_outputs_to_fp32(torch, v, dtype) for v in out)
    if isinstance(out, dict):
        try:
            for key in list(out.keys()):
                out[key] = _outputs_to_fp32(torch, out[key], dtype)
        except (TypeError, KeyError):
            return out
        return out
    return out
