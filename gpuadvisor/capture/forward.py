"""Steps from the model's forward calls, and where the user calls the model (issue 17, issue 10).

The outermost `nn.Module` call of an iteration (a module called from user code, not from another
module's forward) is the model call. Finding it costs a wrapper on `nn.Module.__call__`, so it runs in
two phases:

1. discovery: `nn.Module.__call__` is wrapped; every outermost call of a module that owns parameters
   is recorded with its call site in user code. The first such module is the *top module*. After its
   `DISCOVERY_CALLS`-th outermost call (or `MAX_DISCOVERY_CALLS` outermost calls of anything) the
   wrapper is removed.
2. the top module alone: a forward pre-hook on that one instance (O(1) per iteration) signals each
   call to the session (a step boundary under `module_forward` step detection) and, until the window
   ends, records its call site and whether grad / inference mode were on.

Calls from other threads and calls traced by torch.compile (dynamo) are ignored. Imported only by the
child (torch is importable).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuadvisor.capture.experiment import Suspect

if TYPE_CHECKING:
    from gpuadvisor.capture.hooks import Recorder

DISCOVERY_CALLS = 3
MAX_DISCOVERY_CALLS = 200


class Phase(enum.Enum):
    DISCOVER = "discover"
    TOP_HOOK = "top_hook"
    OFF = "off"


@dataclass
class ModelCallSite:
    """Outermost calls of one module class from one line of user code."""

    module_class: str
    file: str | None
    line: int | None
    code: str | None
    top: bool = False
    calls: int = 0
    window_calls: int = 0
    source: dict[str, Any] = field(default_factory=dict)  # snippet, file_sha256 (hooks.source_record)


@dataclass
class RunModeCounts:
    """Grad state at the top module's calls (training vs inference as seen at run time)."""

    forward_calls: int = 0
    no_grad_calls: int = 0
    inference_mode_calls: int = 0


def _is_compiling() -> bool:
    try:
        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        import torch

        return bool(torch.compiler.is_compiling())
    except Exception:
        return False


class ForwardTracker:
    """Finds the top module and reports its calls; see the module docstring."""

    def __init__(self, recorder: Recorder, on_top_call: Callable[[bool], None]) -> None:
        self._rec = recorder
        self._on_top_call = on_top_call
        self._main = threading.get_ident()
        self._depth = 0
        self.phase = Phase.OFF
        self._top: weakref.ref[Any] | None = None
        self._top_discovery_calls = 0
        self._outermost_calls = 0
        self.sites: dict[tuple[str, str | None, int | None], ModelCallSite] = {}
        # (module class, code object, line) -> its site: the location is resolved once per line
        self._site_cache: dict[tuple[type, Any, int], ModelCallSite] = {}
        self.mode = RunModeCounts()
        self.record_sites = True  # until the window ends
        self.in_window = False  # the session is recording: count calls per step
        self.top_calls = 0
        self._skip_hook_once = False
        self._torch: Any = None

    def in_call(self) -> bool:
        """The main thread is inside an outermost module call (seen while the calls are discovered: the
        first calls, among them a compiled model's first call, which compiles)."""
        return self._depth > 0

    # ------------------------------------------------------------------ install / remove
    def install(self) -> None:
        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        import torch

        self._torch = torch
        tracker = self

        def make(orig: Any) -> Any:
            @functools.wraps(orig)
            def __call__(mod: Any, *args: Any, **kwargs: Any) -> Any:
                # Order matters: under torch.compile tracing, is_compiling() is a constant and nothing
                # of ours is traced or guarded on.
                if (
                    _is_compiling()
                    or tracker._depth
                    or tracker.phase is not Phase.DISCOVER
                    or threading.get_ident() != tracker._main
                ):
                    return orig(mod, *args, **kwargs)
                tracker._depth = 1
                try:
                    tracker._outermost(mod)
                    return orig(mod, *args, **kwargs)
                finally:
                    tracker._depth = 0

            return __call__

        self._rec._patch(torch.nn.Module, "__call__", make, Suspect.MODULE_HOOKS)
        if "__wrapped__" in vars(torch.nn.Module.__dict__["__call__"]):
            self.phase = Phase.DISCOVER

    def _end_discovery(self, inside_top_call: bool = False) -> None:
        """Remove the nn.Module.__call__ wrapper; keep a pre-hook on the top module if there is one.

        `inside_top_call`: called from the wrapper around a call of the top module, whose pre-hooks
        run next: the new hook must not count that call a second time."""
        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        import torch

        if self.phase is not Phase.DISCOVER:
            return
        self._rec.uninstall(keep=lambda owner, attr, group: not (owner is torch.nn.Module and attr == "__call__"))
        top = self._top() if self._top is not None else None
        if top is None:
            self.phase = Phase.OFF
            return
        try:
            handle = top.register_forward_pre_hook(self._top_hook)
        except Exception as err:
            self._rec._failed("module forward hook", err)
            self.phase = Phase.OFF
            return
        self._rec.add_hook_handle(handle, Suspect.MODULE_HOOKS)
        self._skip_hook_once = inside_top_call
        self.phase = Phase.TOP_HOOK

    def stop(self, keep_step_hook: bool) -> None:
        """After the window: no more call sites; the pre-hook stays only when it counts the steps."""
        self.record_sites = False
        self.in_window = False
        if self.phase is Phase.DISCOVER:
            self._end_discovery()
        if not keep_step_hook:
            self._rec.uninstall(keep=lambda owner, attr, group: group is not Suspect.MODULE_HOOKS)
            self.phase = Phase.OFF

    # ------------------------------------------------------------------ calls
    def _outermost(self, mod: Any) -> None:
        name = "module forward"
        if name in self._rec._disabled:
            return
        try:
            self._outermost_calls += 1
            top = self._top() if self._top is not None else None
            if mod is not top and next(iter(mod.parameters()), None) is None:
                if self._outermost_calls >= MAX_DISCOVERY_CALLS:
                    self._end_discovery()
                return  # a loss module or a parameter-free transform: not a model call
            if top is None:
                self._top = weakref.ref(mod)
                top = mod
            self._record_site(mod, is_top=mod is top)
            if mod is not top:
                if self._outermost_calls >= MAX_DISCOVERY_CALLS:
                    self._end_discovery()
                return
            self._top_discovery_calls += 1
            done = (
                self._top_discovery_calls >= DISCOVERY_CALLS or self._outermost_calls >= MAX_DISCOVERY_CALLS
            )
        except Exception as err:
            self._rec._failed(name, err)
            return
        if done:
            self._end_discovery(inside_top_call=True)
        try:
            self._count_top(mod)
        except BaseException:
            self._skip_hook_once = False  # the call never reaches its pre-hooks
            raise

    def _top_hook(self, mod: Any, args: Any) -> None:
        if self._skip_hook_once:
            self._skip_hook_once = False
            return
        if threading.get_ident() != self._main or _is_compiling():
            return
        if self.record_sites:
            try:
                self._record_site(mod, is_top=True)
            except Exception as err:
                self._rec._failed("module forward site", err)
        self._count_top(mod)

    def _count_top(self, mod: Any) -> None:
        """One call of the top module: grad state, then the session's step signal with whether the call
        evaluates (grad off, inference mode, or the module in eval mode); it may raise the
        window-complete exit, which must reach the user's code."""
        self.top_calls += 1
        evaluating = False
        with contextlib.suppress(Exception):
            no_grad = not self._torch.is_grad_enabled()
            inference = bool(self._torch.is_inference_mode_enabled())
            evaluating = no_grad or inference or not bool(getattr(mod, "training", True))
            if self.record_sites:
                self.mode.forward_calls += 1
                if no_grad:
                    self.mode.no_grad_calls += 1
                if inference:
                    self.mode.inference_mode_calls += 1
        self._on_top_call(evaluating)

    def _record_site(self, mod: Any, is_top: bool) -> None:
        if not self.record_sites:
            return
        frame = self._rec.user_frame(3, skip_frameworks=True)
        cls = type(mod)
        fast = (cls, frame.f_code, frame.f_lineno) if frame is not None else None
        entry = self._site_cache.get(fast) if fast is not None else None
        if entry is None:
            site = self._rec.site(frame)
            key = (f"{cls.__module__}.{cls.__qualname__}", site["file"], site["line"])
            entry = self.sites.get(key)
            if entry is None:
                entry = ModelCallSite(
                    cls.__qualname__,
                    site["file"],
                    site["line"],
                    site["code"],
                    top=is_top,
                    source={k: site[k] for k in ("snippet", "file_sha256") if k in site},
                )
                self.sites[key] = entry
            if fast is not None:
                self._site_cache[fast] = entry
        entry.calls += 1
        if self.in_window:
            entry.window_calls += 1

    # ------------------------------------------------------------------ output
    def model_calls_json(self, steps_in_window: int, steps_seen: int) -> list[dict[str, Any]]:
        """environment.json `model_calls`: the top module first, then by calls."""
        rows: list[dict[str, Any]] = []
        for site in self.sites.values():
            if site.top and steps_in_window > 0 and site.window_calls:
                per_step: float | None = round(site.window_calls / steps_in_window, 4)
            elif site.top and steps_seen > 0:
                per_step = round(site.calls / steps_seen, 4)
            else:
                per_step = None
            rows.append(
                {
                    "module_class": site.module_class,
                    "file": site.file,
                    "line": site.line,
                    "code": site.code,
                    **site.source,
                    "top": site.top,
                    "calls": site.calls,
                    "calls_per_step": per_step,
                }
            )
        rows.sort(key=lambda r: (not r["top"], -r["calls"], str(r["file"]), r["line"] or 0))
        return rows
