"""The training process: `python -m gpuadvisor.capture.child CONFIG.json`.

Runs the user's script as `python SCRIPT ARGS` would, under a `CaptureSession`, then exits with the
status python would have exited with (re-raising the terminating signal itself for Ctrl-C/SIGTERM,
so the parent sees 128+N exactly as a shell would).
"""

from __future__ import annotations

if __name__ == "__main__":
    # The first instruction: from here on the process ends with its parent (issue 29: killed within
    # 0.3 s of starting the child, the parent left the script running on as an orphan).
    # lazy: run before every other import of the child (they take time, and may start threads)
    from gpuadvisor.capture._lifeline import die_with_parent

    die_with_parent()

import atexit
import contextlib
import gc
import io
import json
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuadvisor.capture import session as session_mod
from gpuadvisor.capture._io import restore_first_path
from gpuadvisor.capture._lifeline import die_with_parent, report_signals_to_parent
from gpuadvisor.capture.execfile import run_module, run_script, set_script_path, strip_own_frames
from gpuadvisor.capture.export import TORCH_IMPORT_FILE
from gpuadvisor.capture.session import CaptureSession, CaptureWindowComplete, SessionConfig
from gpuadvisor.capture.watchdog import TermWatchdog
from gpuadvisor.errors import EXIT_USAGE
from gpuadvisor.manifest import Degraded, ExitReason
from gpuadvisor.redact import unsealed_argv
from gpuadvisor.words import after_steps

if TYPE_CHECKING:
    from gpuadvisor.capture.session import CaptureSession

DEBOUNCE_S = 0.3


class _Terminated(BaseException):
    """SIGTERM arrived: unwind the user's code so the capture can be flushed."""


def _unblock_signals() -> None:
    # The parent blocks SIGINT/SIGTERM in its thread to collect them with sigtimedwait; the mask is
    # inherited across exec, and the script must see the signals as under plain python.
    with contextlib.suppress(AttributeError, OSError, ValueError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _system_exit_status(code: Any) -> int:
    """What python exits with for `SystemExit(code)` (printing a non-int message on stderr)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF  # what the OS keeps of the status: exit(256) -> 0, exit(-1) -> 255
    with contextlib.suppress(Exception):
        sys.stderr.write(f"{code}\n")
    return 1


def _print_user_traceback(exc: BaseException) -> None:
    tb = strip_own_frames(exc.__traceback__)
    exc.__traceback__ = tb  # the default excepthook prints the exception's own traceback
    try:
        sys.excepthook(type(exc), exc, tb)
    except Exception:
        traceback.print_exception(type(exc), exc, tb)


def _die_by_signal(sig: int) -> None:
    """Exit the way python does after an uncaught KeyboardInterrupt: by the signal itself."""
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(sig, signal.SIG_DFL)
    with contextlib.suppress(AttributeError, OSError, ValueError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    os.kill(os.getpid(), sig)
    time.sleep(5)
    os._exit(128 + sig)


def _close_open_files() -> None:
    """Close the files the script left open, as python's shutdown does when it frees them (buffered
    writes reach the disk, a gzip file gets its trailer); not stdin/stdout/stderr. Wrappers first:
    text, then buffered (gzip too), then raw files."""
    base = getattr(__import__("_io"), "_IOBase", io.IOBase)
    std = {id(s) for s in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__)}
    found: list[tuple[int, Any]] = []
    with warnings.catch_warnings():  # isinstance() on deprecated module attributes warns (torch.distributed)
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            with contextlib.suppress(BaseException):  # per object: a proxy's __class__ may raise
                if isinstance(obj, base) and id(obj) not in std and not obj.closed:
                    order = 0 if isinstance(obj, io.TextIOBase) else 1 if isinstance(obj, io.BufferedIOBase) else 2
                    found.append((order, obj))
    for _, obj in sorted(found, key=lambda t: t[0]):
        with contextlib.suppress(BaseException):
            obj.close()


def _exit_now(status: int, origin: bool = False) -> None:
    """End the process the way python's shutdown does (atexit handlers, stdio flushed; in the original
    process also non-daemon threads joined and open files closed), then os._exit: without the C++ static
    destructors, where libkineto can crash once a profiler has run in the process (pytorch #195837:
    SIGSEGV at exit; seen on the H200 in 3 of 6 profiled HF Trainer runs)."""
    if origin:
        with contextlib.suppress(BaseException):
            shutdown = getattr(threading, "_shutdown", None)
            if shutdown is not None:
                shutdown()
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    if origin:
        with contextlib.suppress(BaseException):
            _close_open_files()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def _exit_if_torch_is_broken(run_dir: str | None) -> None:
    """torch found but failing to import (a missing libcudnn.so.9, a CUDA build without its driver): one
    line for the parent (TORCH_IMPORT_FILE), which says it and exits 2, as when torch is not installed;
    the script never starts."""
    try:
        import torch  # noqa: F401  # lazy: the child is where torch is imported; here only to check it can be
    except Exception as exc:  # ImportError, OSError of a shared library, whatever a broken install raises
        line = " ".join(f"{type(exc).__name__}: {exc}".split())
        if run_dir:
            with contextlib.suppress(OSError), open(os.path.join(run_dir, TORCH_IMPORT_FILE), "w", encoding="utf-8") as fh:
                fh.write(line)
        _exit_now(EXIT_USAGE)


def main() -> None:
    die_with_parent()  # done first already when run as a program; again for any other entry
    _unblock_signals()
    report_signals_to_parent()
    with open(sys.argv[1], encoding="utf-8") as fh:
        cfg: dict[str, Any] = json.load(fh)
    # It holds the real command line (credentials too): gone as soon as it is read, so that a parent
    # killed outright leaves nothing of it behind.
    with contextlib.suppress(OSError):
        os.unlink(sys.argv[1])
    run_child(cfg)


def run_child(
    cfg: dict[str, Any],
    *,
    term_grace_s: float | None = None,
    after_finish: Callable[[CaptureSession], None] | None = None,
) -> None:
    """Run the configured target under a capture session and exit the way python would.

    `cfg` is a serialised `SessionConfig` plus `target`. `term_grace_s` (distributed ranks): start the
    SIGTERM watchdog, which exports the trace itself when the main thread has not begun to finish that
    many seconds after a SIGTERM (blocked in a collective). `after_finish` runs once the session's files
    are written (the existing-launcher mode merges the manifest there). Never returns.
    """
    restore_first_path()  # the working directory first again, as `python` gives it to the script
    cfg = dict(cfg)
    target = dict(cfg.pop("target"))
    target["argv"] = unsealed_argv(target["argv"], os.environ)  # the real one, if the file has it masked

    if target["kind"] != "module":
        set_script_path(target["path_or_name"])  # before the session imports torch (PyRunner order)

    config = SessionConfig(**cfg)
    if not config.distributed:
        _exit_if_torch_is_broken(config.out)
    session = CaptureSession(config)
    terminated = {"count": 0, "after_script": 0}

    def on_term(signum: int, frame: Any) -> None:
        # SIGTERM unwinds the user's code, once. After the script has ended (it returned, raised,
        # exited or was stopped after the window) there is nothing left to unwind: the capture is
        # being finished and the trace exported, which is what the SIGTERM would lead to anyway.
        # Raising there would abandon the export half-way: torchrun sends SIGTERM to the surviving
        # ranks as soon as one fails, while they are finishing after their own collective raised.
        if session.script_ended:
            terminated["after_script"] += 1
            return
        terminated["count"] += 1
        if terminated["count"] == 1:
            raise _Terminated()

    # SIGINT keeps python's own handler (signal.default_int_handler): the script sees the Ctrl-C, and
    # prints its traceback, exactly as under python, with no frame of ours. The parent sends no copy of
    # a Ctrl-C this process already got (`_lifeline.report_signals_to_parent`).
    last_int = {"t": -1e9}  # when the script was interrupted (the second Ctrl-C counts from there)
    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGTERM, on_term)
    session.start()
    if term_grace_s is not None:
        TermWatchdog(session, term_grace_s, after_finish).start()

    status = 0
    reason = ExitReason.COMPLETED
    sig: int | None = None
    try:
        try:
            if target["kind"] == "module":
                run_module(target["path_or_name"], list(target["argv"]))
            else:
                run_script(target["path_or_name"], list(target["argv"]))
        finally:
            session.script_ended = True  # from here on a SIGTERM no longer raises (on_term)
    except CaptureWindowComplete:
        reason = ExitReason.STOPPED_AFTER_WINDOW
    except SystemExit as exc:
        status = _system_exit_status(exc.code)
        reason = ExitReason.SYS_EXIT
    except KeyboardInterrupt as exc:
        last_int["t"] = time.monotonic()
        if session.is_origin():
            _print_user_traceback(exc)
        reason, sig = ExitReason.SIGNAL, signal.SIGINT
    except _Terminated:
        reason, sig = ExitReason.SIGNAL, signal.SIGTERM
    except BaseException as exc:
        _print_user_traceback(exc)
        status, reason = 1, ExitReason.EXCEPTION
        if not session.is_origin():
            # A fork of the training process whose code raised: exit 1 as python would, through the
            # fork's exit path below (a normal interpreter exit hung in libkineto's destructors there).
            _exit_now(status)
        session.failed_at_step = session.steps_seen
        session.failed_at_unix_s = time.time()
        session.degrade(
            Degraded.SCRIPT_FAILED,
            f"the script raised {type(exc).__name__} {after_steps(session.steps_seen)}.",
            step=session.steps_seen,
        )
    if not session.is_origin():
        # A fork of the training process that returned here: it writes nothing of ours. It skips
        # interpreter finalisation: a profiler copied mid-recording can hang tearing down threads
        # that do not exist in the fork. atexit handlers and stdio flushing still happen.
        if sig is not None:
            _die_by_signal(sig)
        _exit_now(status)

    session.exit_reason = reason
    session.exit_status = 128 + sig if sig is not None else status
    session.signal = sig
    if sig == signal.SIGINT:
        session.degrade(Degraded.INTERRUPTED, "the run was interrupted (Ctrl-C); the capture was flushed.")
    elif sig == signal.SIGTERM:
        session.degrade(Degraded.INTERRUPTED, "the run was terminated (SIGTERM); the capture was flushed.")

    if sig == signal.SIGINT:
        # A second Ctrl-C while the trace is exported skips the export, keeps everything else.
        def second_interrupt(signum: int, frame: Any) -> None:
            if time.monotonic() - last_int["t"] < DEBOUNCE_S:
                return
            raise session_mod._SkipExport()

        signal.signal(signal.SIGINT, second_interrupt)
    try:
        session.finish()
    except BaseException as exc:  # _SkipExport outside the export proper, or a bug: keep the rest
        session.log(f"finish interrupted: {type(exc).__name__}: {exc}")
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        session.finish(
            skip_export=True,
            skip_reason=(
                "the trace export was skipped by a second Ctrl-C."
                if isinstance(exc, session_mod._SkipExport)
                else f"the trace export was abandoned: finishing the capture failed ({type(exc).__name__}: {exc})."
            ),
        )
    if terminated["after_script"]:
        session.log("SIGTERM arrived after the script had ended: the capture was finished (trace kept) first")
    if after_finish is not None:
        try:
            after_finish(session)
        except Exception as exc:  # never turn a finished run into a traceback
            session.log(f"after-finish step failed: {type(exc).__name__}: {exc}")
    if sig is not None:
        _die_by_signal(sig)
    if session.profiler_used:
        _exit_now(status, origin=True)
    sys.exit(status)


if __name__ == "__main__":
    # Run from the importable module, not from this `__main__` copy: the script's module replaces
    # sys.modules["__main__"], and our globals must stay alive.
    import gpuadvisor.capture.child as _child

    _child.main()
