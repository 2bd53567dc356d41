"""Recording wrappers installed in the training process.

Every wrapper calls the original first-class function with the same arguments and returns its result
unchanged; what it records goes into a `Recorder`. A failure inside a wrapper's own bookkeeping is
logged once and that hook is switched off: it never reaches user code. Imported only by the child
(and the in-process `Capture`), after torch is importable.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import linecache
import os
import sys
import sysconfig
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

from gpuadvisor.capture.experiment import Suspect
from gpuadvisor.redact import redact_lines, redact_text


def _default_is_device_tensor(t: Any) -> bool:
    return bool(t.is_cuda)


# Which tensors count as "on the device". Tests on a CPU-only machine swap this for a synthetic
# predicate to exercise the recording machinery; in real runs it is `tensor.is_cuda`.
is_device_tensor: Callable[[Any], bool] = _default_is_device_tensor


def batch_ready(it: Any) -> bool | None:
    """For a DataLoader iterator with worker processes: has a worker already delivered the next batch
    (True: `__next__` only takes it over from the queue), or will `__next__` wait for one (False)?
    None for a single-process iterator or one whose internals this torch does not have.

    Reads what `_MultiProcessingDataLoaderIter._next_data` reads first: the out-of-order cache
    (`_task_info[_rcvd_idx]` holding the data) and the result queue (`_data_queue`: the workers'
    multiprocessing queue, or the pin-memory thread's queue)."""
    if not getattr(it, "_num_workers", 0):
        return None
    info = getattr(it, "_task_info", None)
    queue = getattr(it, "_data_queue", None)
    rcvd = getattr(it, "_rcvd_idx", None)
    if not isinstance(info, dict) or queue is None or not hasattr(queue, "empty") or not isinstance(rcvd, int):
        return None
    if rcvd == 0:
        return None  # the epoch's first batch also waits for the workers to start: not counted
    entry = info.get(rcvd)
    if isinstance(entry, tuple) and len(entry) == 2:
        return True
    return not queue.empty()


SNIPPET_CONTEXT = 2  # lines recorded either side of a call site (callsites.json `snippet`)
SNIPPET_MAX_CHARS = 400  # per line: a minified line must not bloat the run directory


def file_sha256(path: str) -> str | None:
    """sha256 (hex) of a source file's bytes; None when it cannot be read (or is over 16 MB)."""
    try:
        if os.path.getsize(path) > 16 * 1024 * 1024:
            return None
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


def _profiler_recording() -> bool:
    """Is a torch profiler recording in this process now (gpuadvisor's window or the script's own)?"""
    try:
        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        import torch

        return bool(getattr(torch.autograd, "_profiler_enabled")())  # noqa: B009 (not in the stubs)
    except Exception:
        return True  # unknown: counted with the profiled calls only


def record_next_time(rec: dict[str, Any], ready: bool, seconds: float, profiled: bool = False) -> None:
    """Count one timed worker-loader `__next__` in its DataLoader record; calls made while no profiler
    records (the steps before the capture window) are also counted apart (`*_unprofiled`): the profiler
    slows the main loop, so inside the window the workers are ahead more often than in the real run."""
    kind = "ready" if ready else "waited"
    rec[f"batches_{kind}"] = int(rec.get(f"batches_{kind}", 0)) + 1
    rec[f"next_{kind}_s"] = float(rec.get(f"next_{kind}_s", 0.0)) + seconds
    if not profiled:
        rec[f"batches_{kind}_unprofiled"] = int(rec.get(f"batches_{kind}_unprofiled", 0)) + 1
        rec[f"next_{kind}_unprofiled_s"] = float(rec.get(f"next_{kind}_unprofiled_s", 0.0)) + seconds


class WorkerStartProbe:
    """A DataLoader `worker_init_fn` that appends `dataloader epoch worker_id started ready` (wall clock)
    to a file of the run directory, then calls the loader's own `worker_init_fn`. Picklable (spawn and
    forkserver workers) when the loader's own function is; never raises into the worker."""

    def __init__(self, orig: Any, path: str, dataloader: int, epoch: int, started: float) -> None:
        self.orig = orig
        self.path = path
        self.dataloader = dataloader
        self.epoch = epoch
        self.started = started

    def __call__(self, worker_id: int) -> Any:
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(f"{self.dataloader} {self.epoch} {worker_id} {self.started:.6f} {time.time():.6f}\n")
        except Exception:
            pass
        return self.orig(worker_id) if self.orig is not None else None


def read_worker_starts(path: str) -> dict[tuple[int, int], float]:
    """(dataloader id, epoch) -> seconds from the iterator's creation to its first worker being ready."""
    out: dict[tuple[int, int], float] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) != 5:
            continue
        try:
            key = (int(parts[0]), int(parts[1]))
            ready = float(parts[4]) - float(parts[3])
        except ValueError:
            continue
        if ready >= 0 and (key not in out or ready < out[key]):
            out[key] = ready
    return out


def _internal_prefixes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(torch and gpuadvisor folders, stdlib folders): code under them is not user code."""
    # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
    import torch

    always = (
        os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # gpuadvisor/
    )
    stdlib = set()
    for key in ("stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            stdlib.add(os.path.abspath(p) + os.sep)
    return always, tuple(sorted(stdlib))


@dataclass
class CallsiteStat:
    """Aggregated calls of one kind from one line of user code."""

    kind: str
    call: str
    file: str
    line: int
    function: str
    count: int = 0
    window_count: int = 0  # calls inside the recorded window
    pinned: bool | None = None
    non_blocking: bool | None = None
    dtype: str | None = None
    total_bytes: int = 0


@dataclass
class SettingsSeen:
    """Settings-like facts counted by the wrappers while they are installed (until the window ends)."""

    autocast_count: int = 0
    autocast_dtypes: set[str] = field(default_factory=set)
    autocast_device_types: set[str] = field(default_factory=set)
    compile_count: int = 0
    compile_modes: set[str] = field(default_factory=set)
    compile_backends: set[str] = field(default_factory=set)
    graph_captures: int = 0
    graph_replays: int = 0
    graphed_callables: int = 0
    grad_scaler_count: int = 0
    grad_scaler_enabled: bool | None = None
    backward_calls: int = 0  # torch.autograd.backward (Tensor.backward) and torch.autograd.grad


class Recorder:
    """Installs the wrappers and holds what they saw.

    Callbacks: `on_optimizer_step(optimizer)` after every optimizer step, `on_dataloader_next()` at
    the entry of every DataLoader iterator `__next__`, `on_user_profiler()` just before a profiler
    that is not ours prepares (only one profiler may run per process).
    """

    def __init__(
        self,
        log: Callable[[str], None],
        on_optimizer_step: Callable[[Any], None],
        on_dataloader_next: Callable[[], None],
        on_user_profiler: Callable[[Any], None],
        cwd: str | None = None,
    ) -> None:
        self._log = log
        self._on_optimizer_step = on_optimizer_step
        self._on_dataloader_next = on_dataloader_next
        self._on_user_profiler = on_user_profiler
        self._cwd = os.path.abspath(cwd or os.getcwd()) + os.sep
        self._always_internal, self._stdlib = _internal_prefixes()
        self._code_internal: dict[CodeType, bool] = {}
        self._file_hashes: dict[str, str | None] = {}  # source file -> sha256 at profile time
        self._disabled: set[str] = set()
        # (owner, attribute, original own attribute or None, had own attribute, group, wrapper)
        self._patches: list[tuple[Any, str, Any, bool, Suspect, Any]] = []
        self._tls = threading.local()
        self._hook_handles: list[tuple[Any, Suspect]] = []
        self.off: frozenset[Suspect] = frozenset()  # suspects not installed (overhead experiments)
        self.skip_dirs: tuple[str, ...] = ()  # framework packages: their frames are not the user's line
        self.callsites: dict[tuple[Any, ...], CallsiteStat] = {}
        self.dataloaders: list[dict[str, Any]] = []
        self.optimizers: list[dict[str, Any]] = []
        self._dl_records: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
        self._iter_records: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
        self._opt_records: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
        self.settings = SettingsSeen()
        self.hook_errors: list[str] = []
        self.own_profiler_inner: Any = None  # set by the session while our profiler prepares
        self.recording_callsites = True
        self.in_window = False  # set by the session while the window records
        # Costs between steps (issue 27): `on_step_event(kind, start perf_counter, seconds, detail)` for
        # each DataLoader epoch start (iterator creation + its first batch), torch.save and long gc pass.
        self.on_step_event: Callable[[str, float, float, dict[str, Any]], None] | None = None
        # the run the user pays for (issue 38): `on_data_wait(seconds)` after every DataLoader __next__
        self.on_data_wait: Callable[[float], None] | None = None
        self._first_batch: weakref.WeakKeyDictionary[Any, tuple[dict[str, Any], float]] = (
            weakref.WeakKeyDictionary()
        )
        self._gc_started: float | None = None
        self._gc_installed = False
        self._opt_step_calls = 0  # optimizer step post-hook calls (GradScaler.step compares)
        # where new DataLoader workers note when they are ready (set by the session; None: not noted)
        self.worker_probe_path: str | None = None

    # ---------------------------------------------------------------- failure isolation
    def _failed(self, name: str, err: BaseException) -> None:
        if name in self._disabled:
            return
        self._disabled.add(name)
        detail = "".join(traceback.format_exception_only(type(err), err)).strip()
        msg = f"hook {name} failed and was disabled: {detail}"
        self.hook_errors.append(msg)
        with contextlib.suppress(Exception):  # the log itself must not break user code either
            self._log(msg)

    # ---------------------------------------------------------------- user frames
    def _is_internal(self, code: CodeType) -> bool:
        cached = self._code_internal.get(code)
        if cached is not None:
            return cached
        fn = code.co_filename
        if fn.startswith("<"):
            internal = fn.startswith("<frozen")
        else:
            path = os.path.abspath(fn)
            # Without a venv, third-party packages live under the stdlib folder
            # (.../lib/python3.X/site-packages): those count as user code, torch does not.
            internal = path.startswith(self._always_internal) or (
                path.startswith(self._stdlib) and "site-packages" not in path and "dist-packages" not in path
            )
        self._code_internal[code] = internal
        return internal

    def user_frame(self, depth: int = 2, skip_frameworks: bool = False) -> FrameType | None:
        """The first frame, walking outwards, whose code is outside torch, gpuadvisor and the stdlib
        (and, with `skip_frameworks`, outside the framework packages in `skip_dirs`: the user's line
        that called `Trainer(...)`, not the framework's own frame)."""
        f: FrameType | None = sys._getframe(depth)
        while f is not None:
            code = f.f_code
            if not self._is_internal(code) and not (skip_frameworks and self._in_framework(code.co_filename)):
                return f
            f = f.f_back
        return None

    def _in_framework(self, filename: str) -> bool:
        # Generated code (a dataclass's __init__ is "<string>") belongs to whoever called it.
        return filename.startswith("<") or bool(
            self.skip_dirs and os.path.abspath(filename).startswith(self.skip_dirs)
        )

    def site(self, frame: FrameType | None) -> dict[str, Any]:
        """{file, line, code} of a frame (all None without one), paths as in callsites.json."""
        if frame is None:
            return {"file": None, "line": None, "code": None}
        file, line, _ = self.location(frame)
        return {
            "file": file,
            "line": line,
            "code": self.source_line(frame.f_code.co_filename, line),
            **self.source_record(frame.f_code.co_filename, line),
        }

    def location(self, frame: FrameType) -> tuple[str, int, str]:
        path = os.path.abspath(frame.f_code.co_filename)
        shown = path[len(self._cwd) :] if path.startswith(self._cwd) else frame.f_code.co_filename
        if frame.f_code.co_filename.startswith("<"):
            shown = frame.f_code.co_filename
        return shown, frame.f_lineno, frame.f_code.co_name

    @staticmethod
    def source_line(frame_file: str, line: int) -> str:
        return redact_text(linecache.getline(frame_file, line).strip())[0]  # credentials masked

    def source_record(self, frame_file: str, line: int) -> dict[str, Any]:
        """What a report needs to show this line as it was when the run was profiled, whatever the file
        says later: `snippet` ({first_line, lines}: the line and SNIPPET_CONTEXT lines either side, as
        the interpreter read them) and `file_sha256` (of the file's bytes at profile time, to tell
        whether today's file is still the one that ran). Either key is left out when unknown."""
        out: dict[str, Any] = {}
        lines = linecache.getlines(frame_file)
        if lines and 1 <= line <= len(lines):
            lo, hi = max(1, line - SNIPPET_CONTEXT), min(len(lines), line + SNIPPET_CONTEXT)
            out["snippet"] = {
                "first_line": lo,
                "lines": redact_lines([lines[n - 1].rstrip("\r\n")[:SNIPPET_MAX_CHARS] for n in range(lo, hi + 1)]),
            }
        digest = self._file_hashes.get(frame_file, "")
        if digest == "" and not frame_file.startswith("<"):
            digest = file_sha256(frame_file)
            self._file_hashes[frame_file] = digest
        if digest:
            out["file_sha256"] = digest
        return out

    # ---------------------------------------------------------------- patching
    def _patch(self, owner: Any, attr: str, make: Callable[[Any], Any], group: Suspect) -> None:
        if group in self.off:
            return
        try:
            had_own = attr in vars(owner)
            raw = vars(owner)[attr] if had_own else None
            wrapper = make(getattr(owner, attr))
            setattr(owner, attr, wrapper)
            self._patches.append((owner, attr, raw, had_own, group, wrapper))
        except Exception as err:
            self._failed(f"patch {getattr(owner, '__name__', owner)}.{attr}", err)

    def add_hook_handle(self, handle: Any, group: Suspect) -> None:
        """A torch hook handle (`.remove()`) removed with its group."""
        self._hook_handles.append((handle, group))

    def installed(self) -> list[str]:
        """`Owner.attr` of every wrapper still installed, and `hook:<group>` of every torch hook (empty
        once uninstalled)."""
        return [f"{getattr(o, '__name__', o)}.{a}" for o, a, *_ in self._patches] + [
            f"hook:{group.value}" for _, group in self._hook_handles
        ]

    def uninstall(self, keep: Callable[[Any, str, Suspect], bool] | None = None) -> None:
        """Restore every patched attribute and remove the hooks (idempotent); `keep(owner, attr, group)`
        (with attr "<hook>" for hook handles) names those to leave in place."""
        kept: list[tuple[Any, str, Any, bool, Suspect, Any]] = []
        for entry in reversed(self._patches):
            owner, attr, orig, had_own, group, wrapper = entry
            if keep is not None and keep(owner, attr, group):
                kept.append(entry)
                continue
            try:
                if getattr(owner, attr, None) is not wrapper:
                    # Someone re-patched it after us (their wrapper may call ours): leave theirs in
                    # place, ours stays reachable but is switched off below.
                    self._disabled.add(f"unpatched {attr}")
                elif had_own:
                    setattr(owner, attr, orig)
                else:
                    delattr(owner, attr)
            except Exception as err:
                self._failed(f"unpatch {attr}", err)
        self._patches = list(reversed(kept))
        handles: list[tuple[Any, Suspect]] = []
        for handle, group in self._hook_handles:
            if keep is not None and keep(handle, "<hook>", group):
                handles.append((handle, group))
                continue
            try:
                handle.remove()
            except Exception as err:
                self._failed("remove hook", err)
        self._hook_handles = handles

    def install(self) -> None:
        """Patch torch once. Call before the user's code runs."""
        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        import torch

        self.install_tensor_hooks()
        self._install_dataloader_hooks()
        self._install_optimizer_hooks()
        self._install_settings_hooks(torch)
        self._install_backward_hooks(torch)
        self._install_profiler_guard()
        self._install_periodic_hooks(torch)

    def install_tensor_hooks(self) -> None:
        """The per-call Tensor wrappers (host-sync and host-to-device call sites). The session removes
        them for the steps it uses as the unprofiled reference and installs them again before the
        window: each call costs microseconds, which the unprofiled step time must not include."""
        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        import torch

        if any(group is Suspect.TENSOR_HOOKS for *_, group, _w in self._patches):
            return
        self._install_sync_hooks(torch)
        self._install_h2d_hooks(torch)

    def remove_tensor_hooks(self) -> None:
        self.uninstall(keep=lambda owner, attr, group: group is not Suspect.TENSOR_HOOKS)

    # ---------------------------------------------------------------- host syncs
    def _nested(self) -> bool:
        return bool(getattr(self._tls, "depth", 0))

    def _record(self, key_extra: tuple[Any, ...], kind: str, call: str, frame: FrameType) -> CallsiteStat:
        file, line, func = self.location(frame)
        key = (kind, call, file, line, func, *key_extra)
        stat = self.callsites.get(key)
        if stat is None:
            stat = CallsiteStat(kind=kind, call=call, file=file, line=line, function=func)
            stat_file = frame.f_code.co_filename
            stat.__dict__["_source_file"] = stat_file
            self.callsites[key] = stat
        stat.count += 1
        if self.in_window:
            stat.window_count += 1
        return stat

    def _sync_wrapper(self, call: str, orig: Any, needs_device: bool = True) -> Any:
        name = f"host_sync {call}"

        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.recording_callsites and name not in self._disabled and not self._nested():
                try:
                    if not needs_device or (args and is_device_tensor(args[0])):
                        frame = self.user_frame(2)
                        if frame is not None:
                            self._record((), "host_sync", call, frame)
                except Exception as err:
                    self._failed(name, err)
            # Calls made by the original (print -> item) are not separate call sites.
            self._tls.depth = getattr(self._tls, "depth", 0) + 1
            try:
                return orig(*args, **kwargs)
            finally:
                self._tls.depth -= 1

        return wrapper

    def _install_sync_hooks(self, torch: Any) -> None:
        def sync_maker(call: str) -> Callable[[Any], Any]:
            return lambda orig: self._sync_wrapper(call, orig)

        for meth in ("item", "cpu", "tolist", "numpy", "__repr__", "__format__", "__bool__", "nonzero"):
            self._patch(torch.Tensor, meth, sync_maker(f"Tensor.{meth}"), Suspect.TENSOR_HOOKS)
        self._patch(
            torch.cuda,
            "synchronize",
            lambda orig: self._sync_wrapper("torch.cuda.synchronize", orig, False),
            Suspect.TENSOR_HOOKS,
        )

    # ---------------------------------------------------------------- host -> device copies
    def _h2d_record(self, call: str, src: Any, dst: Any, non_blocking: bool) -> None:
        name = f"host_to_device {call}"
        if not self.recording_callsites or name in self._disabled or self._nested():
            return
        try:
            if dst is src or not is_device_tensor(dst) or is_device_tensor(src):
                return
            frame = self.user_frame(3)
            if frame is None:
                return
            pinned = bool(src.is_pinned()) if src.device.type == "cpu" else False
            dtype = str(src.dtype)
            stat = self._record((pinned, non_blocking, dtype), "host_to_device", call, frame)
            stat.pinned, stat.non_blocking, stat.dtype = pinned, non_blocking, dtype
            stat.total_bytes += int(src.numel()) * int(src.element_size())
        except Exception as err:
            self._failed(name, err)

    @staticmethod
    def _non_blocking(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        if "non_blocking" in kwargs:
            return bool(kwargs["non_blocking"])
        # Positional forms: to(device, dtype, non_blocking), to(dtype, non_blocking), to(tensor, non_blocking)
        return any(type(a) is bool and a for a in args[1:3])

    def _install_h2d_hooks(self, torch: Any) -> None:
        def make_to(orig: Any) -> Any:
            @functools.wraps(orig)
            def to(t: Any, *args: Any, **kwargs: Any) -> Any:
                out = orig(t, *args, **kwargs)
                self._h2d_record("Tensor.to", t, out, self._non_blocking((t, *args), kwargs))
                return out

            return to

        def make_cuda(orig: Any) -> Any:
            @functools.wraps(orig)
            def cuda(t: Any, *args: Any, **kwargs: Any) -> Any:
                out = orig(t, *args, **kwargs)
                nb = bool(kwargs.get("non_blocking", args[1] if len(args) > 1 else False))
                self._h2d_record("Tensor.cuda", t, out, nb)
                return out

            return cuda

        def make_copy(orig: Any) -> Any:
            @functools.wraps(orig)
            def copy_(t: Any, src: Any, *args: Any, **kwargs: Any) -> Any:
                out = orig(t, src, *args, **kwargs)
                nb = bool(kwargs.get("non_blocking", args[0] if args else False))
                self._h2d_record("Tensor.copy_", src, t, nb)
                return out

            return copy_

        self._patch(torch.Tensor, "to", make_to, Suspect.TENSOR_HOOKS)
        self._patch(torch.Tensor, "cuda", make_cuda, Suspect.TENSOR_HOOKS)
        self._patch(torch.Tensor, "copy_", make_copy, Suspect.TENSOR_HOOKS)

    # ---------------------------------------------------------------- DataLoader
    def _install_dataloader_hooks(self) -> None:
        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        from torch.utils.data import dataloader as dlmod

        def make_init(orig: Any) -> Any:
            @functools.wraps(orig)
            def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
                orig(loader, *args, **kwargs)
                if "dataloader init" in self._disabled:
                    return
                try:
                    self._record_dataloader(loader)
                except Exception as err:
                    self._failed("dataloader init", err)

            return __init__

        def make_iter(orig: Any) -> Any:
            @functools.wraps(orig)
            def __iter__(loader: Any) -> Any:
                t0 = time.perf_counter()
                probe = self._worker_probe(loader, time.time())
                try:
                    it = orig(loader)
                finally:
                    if probe is not None:
                        with contextlib.suppress(Exception):
                            loader.worker_init_fn = probe.orig  # the workers got the probe; the loader keeps its own
                try:
                    rec = self._dl_records.get(loader)
                    if rec is not None:
                        self._iter_records[it] = rec
                        rec["epochs"] = int(rec.get("epochs", 0)) + 1
                        if self.on_step_event is not None:
                            # creating the iterator starts the workers (unless they persist); the
                            # epoch's first batch waits for them: both are the epoch's start-up cost
                            detail = {
                                "dataloader": rec["id"],
                                "num_workers": rec["num_workers"],
                                "persistent_workers": rec["persistent_workers"],
                                "epoch": rec["epochs"],
                                "iter_s": round(time.perf_counter() - t0, 6),
                            }
                            self._first_batch[it] = (detail, t0)
                except Exception as err:
                    self._failed("dataloader iter", err)
                return it

            return __iter__

        def make_next(orig: Any) -> Any:
            @functools.wraps(orig)
            def __next__(it: Any) -> Any:
                if "dataloader next" not in self._disabled:
                    pending = None
                    try:
                        rec = self._iter_records.get(it)
                        if rec is not None:
                            rec["iterations"] += 1
                        self._on_dataloader_next()
                        ready = batch_ready(it) if rec is not None else None
                        pending = self._first_batch.pop(it, None) if self._first_batch else None
                    except Exception as err:
                        self._failed("dataloader next", err)
                        ready = None
                    if pending is not None:
                        t1 = time.perf_counter()
                        try:
                            return orig(it)
                        finally:
                            waited = time.perf_counter() - t1
                            self._epoch_start_event(pending, waited)
                            self._data_wait(waited)
                    if ready is not None and rec is not None:
                        profiled = _profiler_recording()
                        t0 = time.perf_counter()
                        try:
                            out = orig(it)
                        except StopIteration:
                            # the epoch's end: a worker loader without persistent workers shuts
                            # its workers down here
                            self._epoch_end_event(rec, t0, time.perf_counter() - t0)
                            raise
                        waited = time.perf_counter() - t0
                        record_next_time(rec, ready, waited, profiled)
                        self._data_wait(waited)
                        return out
                    if self.on_data_wait is not None:
                        t0 = time.perf_counter()
                        out = orig(it)
                        self._data_wait(time.perf_counter() - t0)
                        return out
                return orig(it)

            return __next__

        self._patch(dlmod.DataLoader, "__init__", make_init, Suspect.DATALOADER_HOOKS)
        self._patch(dlmod.DataLoader, "__iter__", make_iter, Suspect.DATALOADER_HOOKS)
        self._patch(dlmod._BaseDataLoaderIter, "__next__", make_next, Suspect.DATALOADER_HOOKS)

    def _data_wait(self, seconds: float) -> None:
        """The host waited `seconds` for a batch (`on_data_wait`: the capture times every step's wait)."""
        cb = self.on_data_wait
        if cb is not None and "dataloader next" not in self._disabled:
            try:
                cb(seconds)
            except Exception as err:
                self._failed("data wait", err)

    def _worker_probe(self, loader: Any, started: float) -> WorkerStartProbe | None:
        """A `worker_init_fn` that notes when each new worker process is ready (issue 27): the workers'
        start-up is what `persistent_workers=True` saves, the first batch's making is not. Only for an
        iterator that starts workers (not a persistent loader's later epochs); the loader's own
        `worker_init_fn` runs right after, unchanged."""
        if self.worker_probe_path is None or "worker probe" in self._disabled:
            return None
        try:
            rec = self._dl_records.get(loader)
            if rec is None or not loader.num_workers:
                return None
            if loader.persistent_workers and getattr(loader, "_iterator", None) is not None:
                return None
            probe = WorkerStartProbe(
                loader.worker_init_fn, self.worker_probe_path, int(rec["id"]), int(rec.get("epochs", 0)) + 1, started
            )
            loader.worker_init_fn = probe
            return probe
        except Exception as err:
            self._failed("worker probe", err)
            return None

    def _epoch_start_event(self, pending: tuple[dict[str, Any], float], first_batch_s: float) -> None:
        detail, t0 = pending
        sink = self.on_step_event
        if sink is None or "epoch start" in self._disabled:
            return
        try:
            detail["first_batch_s"] = round(first_batch_s, 6)
            sink("epoch_start", t0, float(detail["iter_s"]) + first_batch_s, detail)
        except Exception as err:
            self._failed("epoch start", err)

    def _epoch_end_event(self, rec: dict[str, Any], t0: float, seconds: float) -> None:
        sink = self.on_step_event
        if sink is None or "epoch end" in self._disabled:
            return
        try:
            sink(
                "epoch_end",
                t0,
                seconds,
                {
                    "dataloader": rec["id"],
                    "num_workers": rec["num_workers"],
                    "persistent_workers": rec["persistent_workers"],
                    "epoch": rec.get("epochs"),
                },
            )
        except Exception as err:
            self._failed("epoch end", err)

    # ---------------------------------------------------------------- costs between steps
    def _install_periodic_hooks(self, torch: Any) -> None:
        """torch.save (checkpoints: count, time, bytes, call site) and long garbage-collector passes.
        Each costs nothing per step: they run when the script saves or the collector runs."""

        def make_save(orig: Any) -> Any:
            @functools.wraps(orig)
            def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return orig(obj, f, *args, **kwargs)
                finally:
                    self._save_event(f, t0, time.perf_counter() - t0, obj)

            return save

        self._patch(torch, "save", make_save, Suspect.PERIODIC_HOOKS)
        if Suspect.PERIODIC_HOOKS not in self.off:
            gc.callbacks.append(self._gc_callback)
            self._gc_installed = True

    def _save_event(self, f: Any, t0: float, seconds: float, obj: Any = None) -> None:
        sink = self.on_step_event
        if sink is None or "torch.save" in self._disabled:
            return
        try:
            size: int | None = None
            if isinstance(f, (str, os.PathLike)):
                with contextlib.suppress(OSError):
                    size = os.path.getsize(f)
            elif hasattr(f, "tell"):
                with contextlib.suppress(Exception):
                    size = int(f.tell())
            frame = self.user_frame(3)
            site = self.site(frame)
            detail = {"bytes": size, "file": site["file"], "line": site["line"], "code": site["code"]}
            device = _device_bytes(obj)
            if device is not None:
                # what a save from pinned memory would still copy on the step (the async remedy's price)
                detail["device_bytes"] = device
            if threading.current_thread() is not threading.main_thread():
                detail["background"] = True  # saved from another thread: the training loop did not wait
            sink("checkpoint", t0, seconds, detail)
        except Exception as err:
            self._failed("torch.save", err)

    # a collection shorter than this is not recorded (young generations take microseconds; on a busy
    # machine a descheduled one can take milliseconds): full collections are always recorded
    GC_MIN_SECONDS = 0.02

    def _gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        try:
            if phase == "start":
                self._gc_started = time.perf_counter()
                return
            t0, self._gc_started = self._gc_started, None
            if t0 is None or self.on_step_event is None:
                return
            dt = time.perf_counter() - t0
            if dt >= self.GC_MIN_SECONDS or info.get("generation") == 2:
                self.on_step_event(
                    "gc", t0, dt, {"generation": info.get("generation"), "collected": info.get("collected")}
                )
        except Exception:
            pass  # never raise inside the collector

    def remove_gc_callback(self) -> None:
        if self._gc_installed:
            with contextlib.suppress(ValueError):
                gc.callbacks.remove(self._gc_callback)
            self._gc_installed = False

    def _record_dataloader(self, loader: Any) -> None:
        frame = self.user_frame(3)
        file, line, code = (None, None, None)
        source: dict[str, Any] = {}
        if frame is not None:
            file, line, _ = self.location(frame)
            code = self.source_line(frame.f_code.co_filename, frame.f_lineno)
            source = self.source_record(frame.f_code.co_filename, frame.f_lineno)
        try:
            dataset_len: int | None = len(loader.dataset)
        except Exception:  # IterableDataset or a dataset without __len__
            dataset_len = None
        ctx = loader.multiprocessing_context
        collate = loader.collate_fn
        rec: dict[str, Any] = {
            "id": len(self.dataloaders),
            "file": file,
            "line": line,
            "code": code,
            **source,
            "batch_size": loader.batch_size,
            "num_workers": loader.num_workers,
            "pin_memory": bool(loader.pin_memory),
            "persistent_workers": bool(loader.persistent_workers),
            "prefetch_factor": loader.prefetch_factor,
            "drop_last": bool(loader.drop_last),
            "multiprocessing_context": None
            if ctx is None
            else (ctx if isinstance(ctx, str) else ctx.get_start_method()),
            "dataset_type": type(loader.dataset).__name__,
            "dataset_len": dataset_len,
            "sampler_type": type(loader.sampler).__name__,
            "collate_fn": getattr(collate, "__name__", type(collate).__name__),
            "iterations": 0,
            "epochs": 0,  # iterators created (`for batch in loader` once per epoch)
            # worker loaders: __next__ calls that found a batch already delivered by a worker
            # (the main process only takes it over) and those that waited for the workers
            "batches_ready": 0,
            "batches_waited": 0,
            "next_ready_s": 0.0,
            "next_waited_s": 0.0,
            # the same, for the calls made while no profiler recorded (before the capture window)
            "batches_ready_unprofiled": 0,
            "batches_waited_unprofiled": 0,
            "next_ready_unprofiled_s": 0.0,
            "next_waited_unprofiled_s": 0.0,
        }
        self.dataloaders.append(rec)
        self._dl_records[loader] = rec

    # ---------------------------------------------------------------- optimizers
    def _install_optimizer_hooks(self) -> None:
        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook

        def make_init(orig: Any) -> Any:
            @functools.wraps(orig)
            def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
                orig(opt, *args, **kwargs)
                if "optimizer init" in self._disabled or opt in self._opt_records:
                    return
                try:
                    self._record_optimizer(opt)
                except Exception as err:
                    self._failed("optimizer init", err)

            return __init__

        def post_hook(opt: Any, args: Any, kwargs: Any) -> None:
            self._opt_step_calls += 1
            if "optimizer step" in self._disabled:
                return
            try:
                rec = self._opt_records.get(opt)
                if rec is not None:
                    rec["steps"] += 1
                self._on_optimizer_step(opt)
            except Exception as err:
                self._failed("optimizer step", err)

        def make_scaler_step(orig: Any) -> Any:
            @functools.wraps(orig)
            def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
                before = self._opt_step_calls
                out = orig(scaler, optimizer, *args, **kwargs)
                if self._opt_step_calls == before and "grad scaler step" not in self._disabled:
                    # GradScaler skipped optimizer.step() (inf/NaN gradients): still a step of the loop
                    try:
                        rec = self._opt_records.get(optimizer)
                        if rec is not None:
                            rec["skipped_steps"] = int(rec.get("skipped_steps", 0)) + 1
                        self._on_optimizer_step(optimizer)
                    except Exception as err:
                        self._failed("grad scaler step", err)
                return out

            return step

        self._patch(Optimizer, "__init__", make_init, Suspect.OPTIMIZER_HOOKS)
        # The step post-hook counts steps: it is installed even when the __init__ wrapper is not.
        self.add_hook_handle(register_optimizer_step_post_hook(post_hook), Suspect.STEP_TIMER)
        with contextlib.suppress(Exception):  # builds without torch.amp.GradScaler
            # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
            import torch

            self._patch(torch.amp.GradScaler, "step", make_scaler_step, Suspect.STEP_TIMER)

    def _record_optimizer(self, opt: Any) -> None:
        frame = self.user_frame(3)
        file, line, code = (None, None, None)
        source: dict[str, Any] = {}
        if frame is not None:
            file, line, _ = self.location(frame)
            code = self.source_line(frame.f_code.co_filename, frame.f_lineno)
            source = self.source_record(frame.f_code.co_filename, frame.f_lineno)
        defaults = getattr(opt, "defaults", {}) or {}
        params = [p for g in opt.param_groups for p in g.get("params", [])]
        lr = opt.param_groups[0].get("lr") if opt.param_groups else None
        try:
            lr = float(lr) if lr is not None else None
        except Exception:
            lr = None
        rec: dict[str, Any] = {
            "id": len(self.optimizers),
            "class": type(opt).__name__,
            "file": file,
            "line": line,
            "code": code,
            **source,
            "foreach": defaults.get("foreach"),
            "fused": defaults.get("fused"),
            "capturable": defaults.get("capturable"),
            "param_tensors": len(params),
            "param_count": int(sum(int(p.numel()) for p in params)),
            "lr": lr,
            "steps": 0,
            "skipped_steps": 0,  # GradScaler.step calls that skipped optimizer.step() (inf/NaN gradients)
        }
        self.optimizers.append(rec)
        self._opt_records[opt] = rec

    # ---------------------------------------------------------------- settings
    def _install_settings_hooks(self, torch: Any) -> None:
        s = self.settings

        def counting(name: str, orig: Any, note: Callable[..., None]) -> Any:
            @functools.wraps(orig)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if name not in self._disabled:
                    try:
                        note(*args, **kwargs)
                    except Exception as err:
                        self._failed(name, err)
                return orig(*args, **kwargs)

            return wrapper

        def note_autocast(ac: Any, *a: Any, **k: Any) -> None:
            s.autocast_count += 1
            if getattr(ac, "_enabled", True):
                s.autocast_dtypes.add(str(ac.fast_dtype))
                s.autocast_device_types.add(str(ac.device))

        def note_compile(*args: Any, **kwargs: Any) -> None:
            s.compile_count += 1
            s.compile_modes.add(str(kwargs.get("mode") or "default"))
            backend = kwargs.get("backend", "inductor")
            s.compile_backends.add(
                backend if isinstance(backend, str) else getattr(backend, "__name__", type(backend).__name__)
            )

        def note_graph(*a: Any, **k: Any) -> None:
            s.graph_captures += 1

        def note_replay(*a: Any, **k: Any) -> None:
            s.graph_replays += 1

        def note_graphed(*a: Any, **k: Any) -> None:
            s.graphed_callables += 1

        def note_scaler(scaler: Any, *args: Any, **kwargs: Any) -> None:
            s.grad_scaler_count += 1
            enabled = kwargs.get("enabled", True)
            s.grad_scaler_enabled = bool(enabled) or bool(s.grad_scaler_enabled)

        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        from torch.amp import autocast_mode

        g = Suspect.SETTINGS_HOOKS
        self._patch(autocast_mode.autocast, "__enter__", lambda o: counting("autocast", o, note_autocast), g)
        self._patch(torch, "compile", lambda o: counting("torch.compile", o, note_compile), g)
        try:
            # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
            from torch.cuda import graphs

            self._patch(graphs.graph, "__enter__", lambda o: counting("cuda graph", o, note_graph), g)
            self._patch(graphs.CUDAGraph, "replay", lambda o: counting("cuda graph replay", o, note_replay), g)
            for owner in (torch.cuda, graphs):
                self._patch(
                    owner,
                    "make_graphed_callables",
                    lambda o: counting("make_graphed_callables", o, note_graphed),
                    g,
                )
        except Exception as err:  # builds without CUDA graph classes
            self._failed("cuda graph hooks", err)
        try:
            self._patch(torch.amp.GradScaler, "__init__", lambda o: counting("GradScaler", o, note_scaler), g)
        except Exception as err:
            self._failed("GradScaler hook", err)

    # ---------------------------------------------------------------- training or inference
    def _install_backward_hooks(self, torch: Any) -> None:
        """Count backward passes: `Tensor.backward` calls `torch.autograd.backward` by module lookup."""
        s = self.settings
        is_compiling = torch.compiler.is_compiling

        def make(name: str) -> Callable[[Any], Any]:
            def wrap(orig: Any) -> Any:
                @functools.wraps(orig)
                def wrapper(*args: Any, **kwargs: Any) -> Any:
                    if not is_compiling():  # inside torch.compile tracing: nothing of ours is traced
                        s.backward_calls += 1
                    return orig(*args, **kwargs)

                return wrapper

            return wrap

        self._patch(torch.autograd, "backward", make("backward"), Suspect.SETTINGS_HOOKS)
        self._patch(torch.autograd, "grad", make("grad"), Suspect.SETTINGS_HOOKS)

    # ---------------------------------------------------------------- other profilers
    def _install_profiler_guard(self) -> None:
        # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
        from torch.autograd import profiler as aprof

        def make(orig: Any) -> Any:
            @functools.wraps(orig)
            def _prepare_trace(p: Any, *args: Any, **kwargs: Any) -> Any:
                if p is not self.own_profiler_inner and "profiler guard" not in self._disabled:
                    try:
                        self._on_user_profiler(p)
                    except Exception as err:
                        self._failed("profiler guard", err)
                return orig(p, *args, **kwargs)

            return _prepare_trace

        self._patch(aprof.profile, "_prepare_trace", make, Suspect.SETTINGS_HOOKS)

    # ---------------------------------------------------------------- output
    def callsites_json(self, steps_counted: int, window_steps: int = 0) -> dict[str, Any]:
        """callsites.json. `per_step` is measured inside the recorded window when there was one
        (`window_steps` > 0: calls there / its steps), else over every counted step."""
        rows: list[dict[str, Any]] = []
        for stat in self.callsites.values():
            if window_steps > 0:
                per_step: float | None = round(stat.window_count / window_steps, 4)
            else:
                per_step = round(stat.count / steps_counted, 4) if steps_counted else None
            row: dict[str, Any] = {
                "kind": stat.kind,
                "call": stat.call,
                "file": stat.file,
                "line": stat.line,
                "function": stat.function,
                "code": self.source_line(stat.__dict__.get("_source_file", stat.file), stat.line),
                **self.source_record(stat.__dict__.get("_source_file", stat.file), stat.line),
                "count": stat.count,
                "count_in_window": stat.window_count,
                "per_step": per_step,
            }
            if stat.kind == "host_to_device":
                row.update(
                    pinned=stat.pinned,
                    non_blocking=stat.non_blocking,
                    dtype=stat.dtype,
                    bytes_per_call=stat.total_bytes // stat.count if stat.count else 0,
                )
            rows.append(row)
        rows.sort(key=lambda r: (-r["count"], r["kind"], r["call"], str(r["file"]), r["line"]))
        return {
            "schema_version": 1,
            "steps_counted": steps_counted,
            "window_steps": window_steps,
            "callsites": rows,
        }


def _device_bytes(obj: Any, limit: int = 100_000) -> int | None:
    """Bytes of the distinct GPU tensors in a saved object (dicts, lists and tuples of tensors: a
    state_dict, {"model": ..., "optimizer": ...}); None when it holds none or is not such a container.
    Bounded: at most `limit` items are looked at (a pathological object is not walked to the end)."""
    seen: set[int] = set()
    total = 0
    stack = [(obj, 0)]
    looked = 0
    while stack and looked < limit:
        value, depth = stack.pop()
        looked += 1
        if isinstance(value, dict):
            if depth < 8:
                stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, tuple)):
            if depth < 8:
                stack.extend((v, depth + 1) for v in value)
        elif getattr(value, "is_cuda", None) is True and hasattr(value, "untyped_storage"):
            try:
                ptr = int(value.untyped_storage().data_ptr())
                if ptr not in seen:
                    seen.add(ptr)
                    total += int(value.untyped_storage().nbytes())
            except Exception:  # a tensor subclass without storage: counted by its elements
                total += int(value.numel()) * int(value.element_size())
    return total or None
