"""What ties the training process to the `gpuadvisor profile` process that started it: it ends when
that process is gone, and it tells it which signals it received.

Imports nothing but the standard library: `die_with_parent` runs as the first instruction of the
child (`gpuadvisor.capture.child`), before anything of the run can start as an orphan.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

ENV_PARENT_PID = "GPUADVISOR_PARENT_PID"
ENV_SIGNAL_FD = "GPUADVISOR_SIGNAL_FD"
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: ask the kernel for SIGTERM when the parent dies (even by SIGKILL: PR_SET_PDEATHSIG), so
    the training process flushes what it captured and ends instead of running on as an orphan; then
    check that the parent is still the process that started this one (`GPUADVISOR_PARENT_PID`): a
    parent that died before the request took effect left this process to init or a subreaper, and it
    exits at once, before the script starts. Elsewhere only the check is done."""
    expected = os.environ.pop(ENV_PARENT_PID, "")
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if expected.isdigit() and os.getppid() != int(expected):
        os._exit(128 + int(signal.SIGTERM))  # as if the SIGTERM had come: the script never ran


def report_signals_to_parent() -> None:
    """Make every signal this process handles write its number to the pipe the parent gave it
    (`GPUADVISOR_SIGNAL_FD`), through `signal.set_wakeup_fd`: the C-level handler writes it whatever
    Python handler the script installs. The parent then knows that a Ctrl-C sent to the whole process
    group already reached this process, and does not send it a second time. A script that installs
    its own wakeup fd (asyncio's signal handlers do) turns this off: the parent then forwards after a
    short wait, as without it."""
    raw = os.environ.pop(ENV_SIGNAL_FD, "")
    if not raw.isdigit():
        return
    fd = int(raw)
    try:
        os.set_blocking(fd, False)
        os.set_inheritable(fd, False)  # the script's own subprocesses do not get it
        signal.set_wakeup_fd(fd, warn_on_full_buffer=False)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.close(fd)
