"""The two-process read of a large trace (gpuadvisor/trace/_split.py): the same tables as a
one-process read, and every way the split can go wrong falls back to reading the rest here.

The size threshold is lowered so that the small real recordings of sample_runs/ and SYNTHETIC traces
built here (tests/synth.py) are split. Each test checks that the split really happened, or really
fell back, through a spy on `SplitRead.finish` / `abandon`.
"""

from __future__ import annotations

import gzip
import sys
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from gpuadvisor.trace import _split
from gpuadvisor.trace import load as load_mod
from gpuadvisor.trace.load import load_trace
from tests.trace.test_scale import REAL_CASES, _assert_same, _hostile_events, _synthetic, _whole


class _Spy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.finished: list[bool] = []
        self.abandoned = 0
        self.boundaries: list[int | None] = []
        self.workers: list[str] = []  # how each worker started: "forked" or "interpreter"
        finish, abandon, boundary = _split.SplitRead.finish, _split.SplitRead.abandon, _split.SplitRead.boundary

        def spy_finish(split: _split.SplitRead) -> Any:
            out = finish(split)
            self.finished.append(out is not None)
            return out

        def spy_abandon(split: _split.SplitRead) -> None:
            self.abandoned += 1
            abandon(split)

        def spy_boundary(split: _split.SplitRead) -> int | None:
            self.workers.append("forked" if isinstance(split.proc, _split._Forked) else "interpreter")
            out = boundary(split)
            self.boundaries.append(out)
            return out

        monkeypatch.setattr(_split.SplitRead, "finish", spy_finish)
        monkeypatch.setattr(_split.SplitRead, "abandon", spy_abandon)
        monkeypatch.setattr(_split.SplitRead, "boundary", spy_boundary)
        monkeypatch.setattr(_split, "SPLIT_MIN_BYTES", 0)
        monkeypatch.setattr(_split, "usable_cpus", lambda: 2)
        monkeypatch.setattr(_split, "second_cpu_free", lambda: True)
        monkeypatch.delenv(_split.ENV, raising=False)


def _one_process(path: Path, **kw: Any) -> Any:
    return load_trace(path, split=False, **kw)


@pytest.mark.parametrize("path", REAL_CASES)
def test_real_recordings_split_identical(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _one_process(path, chunk_bytes=64 * 1024)
    spy = _Spy(monkeypatch)
    got = load_trace(path, chunk_bytes=64 * 1024)
    assert spy.finished == [True], (spy.finished, spy.abandoned, spy.boundaries)
    _assert_same(got, expected)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("keep_py", [False, True])
@pytest.mark.parametrize("fork", [True, False])
def test_synthetic_split_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gz: bool, keep_py: bool, fork: bool
) -> None:
    st = _synthetic(200)
    st.events.extend(_hostile_events())
    p = st.write(tmp_path / ("t.json.gz" if gz else "t.json"))
    expected = _whole(p, monkeypatch, keep_python_functions=keep_py)
    spy = _Spy(monkeypatch)
    monkeypatch.setattr(_split, "FORK", fork and _split.FORK)
    got = load_trace(p, chunk_bytes=4096, keep_python_functions=keep_py)
    assert spy.finished == [True]
    assert spy.workers == ["forked" if fork and _forks() else "interpreter"]
    _assert_same(got, expected)
    if keep_py:
        assert got.python_functions is not None and expected.python_functions is not None
        assert got.python_functions.equals(expected.python_functions)


def _trace_with_string_at(tmp_path: Path, share: float) -> tuple[Path, int]:
    """SYNTHETIC: a trace whose text at `share` of its length is inside a long op name full of
    `},{`: the worker's first boundary is not an event boundary. Returns the file and the name's
    offset."""
    st = _synthetic(60)
    events = st.to_dict()["traceEvents"]
    head = orjson.dumps({k: v for k, v in st.top.items()})[:-1] + b', "traceEvents": [\n'
    body = [orjson.dumps(e) for e in events]
    hostile_name = '"},{"ph": "X", "cat": "cpu_op"},{' * 4000
    hostile = {"ph": "X", "cat": "cpu_op", "name": hostile_name, "ts": 10.0, "dur": 1.0, "tid": 1, "args": {}}
    before = b",\n".join(body[: len(body) // 2])
    after = b",\n".join(body[len(body) // 2 :])
    text = head + before + b",\n" + orjson.dumps(hostile) + b",\n" + after + b"\n]}"
    where = text.index(b"},{", len(head) + len(before) + 40)
    p = tmp_path / "hostile.json"
    p.write_bytes(text)
    return p, where


def test_boundary_inside_a_string_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p, where = _trace_with_string_at(tmp_path, 0.5)
    expected = _one_process(p, chunk_bytes=4096)
    spy = _Spy(monkeypatch)
    # the split point lands inside the hostile name
    monkeypatch.setattr(_split, "MAIN_SHARE", (where - 5) / p.stat().st_size)
    monkeypatch.setattr(_split, "MAIN_SHARE_FORKED", (where - 5) / p.stat().st_size)
    got = load_trace(p, chunk_bytes=4096)
    assert spy.boundaries and spy.boundaries[0] is not None and spy.abandoned >= 1 and not spy.finished
    _assert_same(got, expected)
    assert any(len(n) > 1000 for n in got.cpu_ops["name"].astype(str))


def test_worker_that_fails_leaves_the_rest_to_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace cut short in the worker's part: the worker reports a failure, this process reads on
    from the boundary and then salvages the file exactly as a one-process read does."""
    data = _synthetic(200).to_bytes()
    p = tmp_path / "cut.json"
    p.write_bytes(data[: int(len(data) * 0.9)])
    expected = _one_process(p, chunk_bytes=4096)
    spy = _Spy(monkeypatch)
    got = load_trace(p, chunk_bytes=4096)
    assert spy.finished == [False]
    _assert_same(got, expected)
    assert got.truncated == expected.truncated


def test_worker_killed_midway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _synthetic(200).write(tmp_path / "t.json")
    expected = _one_process(p, chunk_bytes=4096)
    spy = _Spy(monkeypatch)
    boundary = _split.SplitRead.boundary

    def kill_after_boundary(split: _split.SplitRead) -> int | None:
        out = boundary(split)
        assert split.proc is not None
        split.proc.kill()
        return out

    monkeypatch.setattr(_split.SplitRead, "boundary", kill_after_boundary)
    got = load_trace(p, chunk_bytes=4096)
    assert spy.finished == [False]
    _assert_same(got, expected)


def test_worker_that_hangs_after_its_boundary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker stopped without dying (SIGSTOP) after reporting its boundary: nothing more arrives, and
    after the stall limit this process kills it and reads the rest itself."""
    import os
    import signal
    import time

    p = _synthetic(200).write(tmp_path / "t.json")
    expected = _one_process(p, chunk_bytes=4096)
    spy = _Spy(monkeypatch)
    monkeypatch.setattr(_split, "_STALL_S", 0.5)
    boundary = _split.SplitRead.boundary
    stopped: list[Any] = []

    def stop_after_boundary(split: _split.SplitRead) -> int | None:
        out = boundary(split)
        assert split.proc is not None
        os.kill(split.proc.pid, signal.SIGSTOP)
        stopped.append(split.proc)
        return out

    monkeypatch.setattr(_split.SplitRead, "boundary", stop_after_boundary)
    t0 = time.monotonic()
    got = load_trace(p, chunk_bytes=4096)
    assert time.monotonic() - t0 < 30
    assert spy.finished == [False]
    assert stopped and stopped[0].poll() is not None  # killed, not left stopped
    _assert_same(got, expected)


def test_worker_that_cannot_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _synthetic(100).write(tmp_path / "t.json")
    expected = _one_process(p, chunk_bytes=4096)
    spy = _Spy(monkeypatch)
    monkeypatch.setattr(_split, "FORK", False)  # a new interpreter, and the one named here is missing
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    got = load_trace(p, chunk_bytes=4096)
    assert spy.finished == [] and spy.boundaries == []
    _assert_same(got, expected)


def _forks() -> bool:
    """Whether a split started now forks its worker (Linux, no other thread in this process: under
    pytest-xdist a worker runs threads of its own)."""
    return _split.FORK and threading.active_count() == 1


@pytest.mark.skipif(not _forks(), reason="the worker is forked on Linux only, without other threads")
def test_worker_forked_only_without_other_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forking a process that runs other threads can copy a lock one of them holds: with a thread
    running (a caller's threads) the worker is a new interpreter; a fork that fails falls back to one
    too."""
    import os

    p = _synthetic(100).write(tmp_path / "t.json")
    expected = _one_process(p, chunk_bytes=4096)
    spy = _Spy(monkeypatch)
    _assert_same(load_trace(p, chunk_bytes=4096), expected)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        _assert_same(load_trace(p, chunk_bytes=4096), expected)
    finally:
        stop.set()
        other.join()

    def no_fork() -> int:
        raise OSError("no fork here")

    monkeypatch.setattr(os, "fork", no_fork)
    _assert_same(load_trace(p, chunk_bytes=4096), expected)
    assert spy.workers == ["forked", "interpreter", "interpreter"] and spy.finished == [True] * 3


def test_off_switch_and_thresholds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _synthetic(100).write(tmp_path / "t.json")
    spy = _Spy(monkeypatch)
    monkeypatch.setenv(_split.ENV, "0")
    load_trace(p, chunk_bytes=4096)
    monkeypatch.delenv(_split.ENV)
    monkeypatch.setattr(_split, "usable_cpus", lambda: 1)
    load_trace(p, chunk_bytes=4096)
    monkeypatch.setattr(_split, "usable_cpus", lambda: 2)
    monkeypatch.setattr(_split, "second_cpu_free", lambda: False)  # the other CPU is busy: no split
    load_trace(p, chunk_bytes=4096)
    monkeypatch.setattr(_split, "second_cpu_free", lambda: True)
    monkeypatch.setattr(_split, "SPLIT_MIN_BYTES", p.stat().st_size + 1)
    load_trace(p, chunk_bytes=4096)
    assert spy.finished == [] and spy.boundaries == []
    load_trace(p, chunk_bytes=4096, split=True)  # still below the threshold
    monkeypatch.setattr(_split, "SPLIT_MIN_BYTES", 0)
    load_trace(p, chunk_bytes=4096)
    assert spy.finished == [True]


def test_gzip_text_size(tmp_path: Path) -> None:
    data = _synthetic(20).to_bytes()
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(data))
    (tmp_path / "a.json").write_bytes(data)
    assert _split.text_size(tmp_path / "a.json.gz") == len(data) == _split.text_size(tmp_path / "a.json")
    (tmp_path / "tiny.gz").write_bytes(b"\x1f\x8b")
    assert _split.text_size(tmp_path / "tiny.gz") is None
    assert _split.text_size(tmp_path / "missing.json") is None


def test_progress_counts_both_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _synthetic(300).write(tmp_path / "t.json")
    spy = _Spy(monkeypatch)
    seen: list[tuple[int, int]] = []
    m = load_trace(p, chunk_bytes=2048, progress=lambda a, b: seen.append((a, b)))
    assert spy.finished == [True]
    size = p.stat().st_size
    assert all(0 < a <= b == size for a, b in seen[:-1])
    assert seen[-1] == (sum(m.counts.values()), sum(m.counts.values()))


def test_module_stays_light() -> None:
    """The worker imports the loader only: no pandas or numpy at import (pandas would cost the worker
    ~0.3 s and 50 MB; numpy comes with the first block it sorts into columns, never pandas)."""
    import subprocess

    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import gpuadvisor.trace._split, gpuadvisor.trace.load; "
        "import gpuadvisor.trace._stream; print(sorted(m for m in ('pandas', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(Path(load_mod.__file__).resolve().parents[2])],
        capture_output=True, text=True, check=True, timeout=60,
    )
    assert out.stdout.strip() == "[]"
