"""Handing the memory an analysis has freed back to the system (issue 43: bounded memory).

A large trace's analysis makes and drops many whole-column temporaries (1.67M rows: 13 MB each).
glibc's malloc keeps freed memory that lies below live allocations in its heap: on the 5M-event
trace 530 MB of the process's 1.5 GB at the start of the idle attribution was free memory that had
not gone back, and the later tables were laid on top of it. `give_back()` asks malloc to return it
(`malloc_trim(0)`, which also releases free pages inside the heap); elsewhere than glibc it does
nothing. Called between the analysis's large phases, where whole tables have just been dropped.
"""

from __future__ import annotations

from collections.abc import Callable

_trim: list[Callable[[int], int] | None] = []


def give_back() -> None:
    """Return the heap's free memory to the system (glibc `malloc_trim`); a no-op where there is none."""
    if not _trim:
        _trim.append(_find_trim())
    trim = _trim[0]
    if trim is not None:
        trim(0)


def _find_trim() -> Callable[[int], int] | None:
    # lazy: ctypes stays out of start-up until a large analysis needs it
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # musl and other C libraries without it
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    trim: Callable[[int], int] = fn
    return trim
