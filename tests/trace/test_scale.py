"""Streaming loader (gpuadvisor/trace/_stream.py): same tables as the whole-document path, bounded memory.

The whole-document path (`_collect_whole`) is the previous implementation of `load_trace`, kept for
damaged files; these tests force it by making the streaming path fall back, and compare every table,
count, warning and metadata field. Traces are the real H200 probe traces when present and SYNTHETIC
ones built here (tests/synth.py, labelled synthetic), including hostile layouts for the block cutter.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.trace import load as load_mod
from gpuadvisor.trace._stream import EventStream, StreamFallback
from gpuadvisor.trace.load import load_trace, load_trace_files, load_traces
from gpuadvisor.trace.model import TraceModel
from tests.synth import K_ADAM, K_NCCL, K_NVJET_BF16, SyntheticTrace, rank_traces, write_ranks

# Real traces: the H200 recordings of sample_runs/ (part of every checkout, see sample_runs/README.md).
# The first runs in the quick tier, all of them in CI (`slow`).
REAL_TRACES = sorted((Path(__file__).resolve().parents[2] / "sample_runs").glob("*/trace/*.json.gz"))
REAL_CASES = [
    pytest.param(p, id=f"{p.parent.parent.name}-{p.name}", marks=() if i == 0 else pytest.mark.slow)
    for i, p in enumerate(REAL_TRACES)
]
TABLES = ("kernels", "copies", "memsets", "runtime", "cpu_ops", "annotations", "steps")


def _whole(path: Path, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> TraceModel:
    """load_trace through the whole-document (previous) implementation."""

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise StreamFallback("forced by the test")

    with monkeypatch.context() as m:
        m.setattr(load_mod, "_collect_streaming", refuse)
        return load_trace(path, **kw)


def _assert_same(a: TraceModel, b: TraceModel) -> None:
    for t in TABLES:
        pd.testing.assert_frame_equal(getattr(a, t), getattr(b, t), check_exact=True)
    assert a.counts == b.counts
    assert a.warnings == b.warnings
    assert a.meta == b.meta
    assert (a.rank, a.step_source) == (b.rank, b.step_source)


def _synthetic(n_steps: int = 6) -> SyntheticTrace:
    st = SyntheticTrace(rank=0)
    for i in range(n_steps):
        t0 = i * 1000.0
        st.add_step(i + 1, t0, 900, 1000)
        st.add_kernel(K_NVJET_BF16, t0 + 100, 400, grid=(2, 66, 1), op="aten::mm", op_input_dims=[[64, 128]])
        st.add_kernel(K_NCCL, t0 + 520, 30)
        st.add_kernel(K_ADAM, t0 + 560, 20, grid=(320, 1, 1))
        st.add_copy("HtoD", "Pageable", 1 << 20, t0 + 20, 50)
        st.add_memset(t0 + 600, 2)
        st.add_python_function("train.py(10): step", t0, 900)
    return st


def _hostile_events() -> list[Any]:
    """Events whose text contains what the block cutter looks for, in strings and nested args."""
    return [
        {"ph": "X", "cat": "cpu_op", "name": 'aten::x"},{"', "ts": 10.0, "dur": 1.0, "tid": 1, "args": {}},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "a},\n  {b",
            "ts": 11.0,
            "dur": 1.0,
            "tid": 1,
            "args": {"Input Dims": [[1, 2]], "nested": [{"a": 1}, {"b": {"c": [{}, {}]}}], "s": "}, {"},
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": '"traceEvents": [',
            "ts": 12.0,
            "dur": 5.0,
            "tid": "main",
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": 'k\\"},{\\',
            "ts": 13.0,
            "dur": 2.0,
            "pid": 0,
            "tid": 7,
            "args": {"correlation": 5, "grid": [1, 1, 1], "block": [32, 1, 1]},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "ts": 12.5,
            "dur": 0.5,
            "tid": 1,
            "args": {"correlation": 5},
        },
        {"ph": "X", "cat": "cpu_op", "name": "ünïcode ✓", "ts": 14.0, "tid": 1},
        3,
        {"ph": "X", "cat": "kernel", "name": "noargs", "ts": 0, "dur": 1.0},
    ]


@pytest.mark.parametrize("path", REAL_CASES)
def test_real_traces_identical(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 256 KiB blocks: many cuts per file, so every cut position logic is exercised on real text.
    _assert_same(load_trace(path, chunk_bytes=256 * 1024), _whole(path, monkeypatch))


def test_real_traces_are_in_the_checkout() -> None:
    assert len(REAL_TRACES) >= 20, REAL_TRACES


@pytest.mark.parametrize("chunk", [1024, 4096, 1 << 20])
@pytest.mark.parametrize("gz", [False, True])
def test_synthetic_identical_and_streamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, gz: bool
) -> None:
    st = _synthetic(40)
    st.events.extend(_hostile_events())
    p = st.write(tmp_path / ("t.json.gz" if gz else "t.json"))
    _assert_same(load_trace(p, chunk_bytes=chunk), _whole(p, monkeypatch))
    _assert_same(
        load_trace(p, chunk_bytes=chunk, keep_python_functions=True),
        _whole(p, monkeypatch, keep_python_functions=True),
    )
    # and it really streamed (no fallback): blocks concatenate to exactly the parsed array
    stream = EventStream(p, chunk_bytes=chunk)
    chunks = list(stream.chunks())
    assert [e for c in chunks for e in c] == json.loads(st.to_bytes())["traceEvents"]
    assert stream.top["traceName"] == "gpuadvisor synthetic trace"
    assert "traceEvents" not in stream.top
    if chunk <= 4096:
        assert len(chunks) > 2


def test_keys_after_the_array_and_compact_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    st = _synthetic(10)
    events = st.to_dict()["traceEvents"]
    top = {k: v for k, v in st.top.items()}
    # traceEvents first, metadata after it, no whitespace at all
    data = b'{"traceEvents":' + orjson.dumps(events) + b"," + orjson.dumps(top)[1:]
    p = tmp_path / "compact.json"
    p.write_bytes(data)
    m = load_trace(p, chunk_bytes=1024)
    _assert_same(m, _whole(p, monkeypatch))
    assert m.meta.synthetic and m.meta.distributed_info == {"backend": "nccl", "rank": 0, "world_size": 1}


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda b: b[: int(len(b) * 0.6)], id="truncated"),
        pytest.param(lambda b: b.replace(b"aten::mm", b"aten::\xff\xfe", 1), id="invalid-utf8"),
        pytest.param(lambda b: orjson.dumps(json.loads(b)["traceEvents"]), id="bare-list"),
        pytest.param(lambda b: b.replace(b'"traceEvents": [', b'"traceEvents": [ ]], "x": [', 1), id="odd"),
        pytest.param(lambda b: b'{"traceEvents": []}', id="empty"),
    ],
)
def test_damaged_files_match_previous_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mutate: Any
) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(mutate(_synthetic(30).to_bytes()))
    try:
        expected = _whole(p, monkeypatch)
    except InputError as err:
        with pytest.raises(InputError) as info:
            load_trace(p, chunk_bytes=1024)
        assert str(info.value) == str(err)
        return
    _assert_same(load_trace(p, chunk_bytes=1024), expected)


def test_truncated_gzip_matches_previous_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = gzip.compress(_synthetic(30).to_bytes())
    p = tmp_path / "cut.json.gz"
    p.write_bytes(raw[: int(len(raw) * 0.7)])
    m = load_trace(p, chunk_bytes=1024)
    _assert_same(m, _whole(p, monkeypatch))
    assert any("gzip" in w for w in m.warnings)


def test_progress_in_bytes_then_events(tmp_path: Path) -> None:
    p = _synthetic(40).write(tmp_path / "t.json")
    seen: list[tuple[int, int]] = []
    m = load_trace(p, chunk_bytes=2048, progress=lambda a, b: seen.append((a, b)))
    size = p.stat().st_size
    byte_calls = [s for s in seen[:-1]]
    assert len(byte_calls) > 3 and all(b == size and 0 < a <= size for a, b in byte_calls)
    assert [a for a, _ in byte_calls] == sorted(a for a, _ in byte_calls)
    assert seen[-1] == (sum(m.counts.values()), sum(m.counts.values()))


def test_parallel_folder_equals_serial(tmp_path: Path) -> None:
    folder = write_ranks(tmp_path / "ranks", rank_traces(3))
    files = sorted(folder.glob("*.json*"))
    serial = load_trace_files(files, workers=1)
    parallel = load_trace_files(files, workers=2)
    assert [m.rank for m in parallel] == [m.rank for m in serial] == [0, 1, 2]
    for a, b in zip(serial, parallel, strict=True):
        _assert_same(a, b)
    assert [m.rank for m in load_traces(folder)] == [0, 1, 2]


def test_parallel_error_is_one_line_input_error(tmp_path: Path) -> None:
    (tmp_path / "rank0.json").write_bytes(_synthetic(2).to_bytes())
    (tmp_path / "rank1.json").write_bytes(b"not json")
    with pytest.raises(InputError, match="not a JSON trace") as info:
        load_trace_files(sorted(tmp_path.iterdir()), workers=2)
    assert "\n" not in str(info.value)


_MEMORY_CHILD = """
import resource, sys
from gpuadvisor.trace.load import load_trace
import pandas, numpy, orjson  # baseline: the libraries every load needs
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
m = load_trace(sys.argv[1])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(before, after, len(m.cpu_ops))
"""


def load_in_fresh_process(path: Path) -> tuple[int, int, int]:
    """Load `path` in a fresh Python process: (max RSS in KB before, after, cpu ops loaded)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_CHILD, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    before_kb, after_kb, n_ops = (int(x) for x in out.stdout.split())
    return before_kb, after_kb, n_ops


@pytest.mark.slow
def test_50mb_trace_memory_bound(tmp_path: Path) -> None:
    """A ~50 MB SYNTHETIC trace loads with a peak RSS growth below 3x its size, measured in a fresh
    subprocess. The previous whole-document loader needed about 9x; the streaming loader needs
    about 2.6x here (one 8 MiB block of parsed dicts is a fixed ~80 MB on top of the tables), and
    1.4x on a 1 GB trace (docs/performance.md)."""
    # one synthetic step is ~3.3 KB of JSON: enough distinct steps (their own times and correlation ids;
    # copies of one step would be dropped as duplicates) for ~50 MB
    unit = len(b",\n".join(orjson.dumps(e) for e in _synthetic(1).to_dict()["traceEvents"]))
    st = _synthetic(int(50e6 / unit) + 1)
    p = tmp_path / "big.json"
    p.write_bytes(orjson.dumps(st.to_dict()))
    size = p.stat().st_size
    assert size > 45e6
    before_kb, after_kb, n_ops = load_in_fresh_process(p)
    assert n_ops == sum(1 for e in st.events if e.get("cat") == "cpu_op")
    delta = (after_kb - before_kb) * 1024
    assert delta < 3 * size, f"RSS grew {delta / 1e6:.0f} MB for a {size / 1e6:.0f} MB trace"
