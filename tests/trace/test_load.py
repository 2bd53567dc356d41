"""Loader on synthetic traces (tests/synth.py, labelled synthetic) and on malformed input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuadvisor.errors import InputError
from gpuadvisor.trace.load import load_trace, load_traces
from gpuadvisor.trace.model import (
    ANNOTATION_COLUMNS,
    COPY_COLUMNS,
    CPU_OP_COLUMNS,
    KERNEL_COLUMNS,
    MEMSET_COLUMNS,
    RUNTIME_COLUMNS,
    STEP_COLUMNS,
)
from tests.synth import K_ADAM, K_NCCL, K_NVJET_BF16, SyntheticTrace


def _basic() -> SyntheticTrace:
    st = SyntheticTrace()
    st.add_step(1, 0, 900, 1000)
    st.add_kernel(
        K_NVJET_BF16,
        100,
        400,
        grid=(2, 66, 1),
        block=(384, 1, 1),
        occupancy=0.0,
        op="aten::mm",
        op_input_types=["c10::BFloat16", "c10::BFloat16"],
        op_input_dims=[[64, 128], [128, 256]],
    )
    st.add_kernel(K_NCCL, 520, 30)
    st.add_kernel(K_ADAM, 560, 20, grid=(320, 1, 1))
    st.add_copy("HtoD", "Pageable", 1 << 20, 20, 50)
    st.add_memset(600, 2)
    st.add_item_read(700, 100)
    st.add_python_function("train.py(10): step", 0, 900)
    return st


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_tables_columns_and_values(tmp_path: Path, name: str) -> None:
    m = load_trace(_basic().write(tmp_path / name))
    assert m.is_synthetic
    assert list(m.kernels.columns) == list(KERNEL_COLUMNS)
    assert list(m.copies.columns) == list(COPY_COLUMNS)
    assert list(m.memsets.columns) == list(MEMSET_COLUMNS)
    assert list(m.runtime.columns) == list(RUNTIME_COLUMNS)
    assert list(m.cpu_ops.columns) == list(CPU_OP_COLUMNS)
    assert list(m.annotations.columns) == list(ANNOTATION_COLUMNS)
    assert list(m.steps.columns) == list(STEP_COLUMNS)
    k = m.kernels
    assert len(k) == 3 and str(k["name"].dtype) == "category"
    gemm = k[k["name"] == K_NVJET_BF16].iloc[0]
    assert gemm["blocks"] == 132 and gemm["threads_per_block"] == 384 and gemm["family"] == "gemm"
    assert gemm["end"] == gemm["ts"] + 400
    assert set(k["family"].astype(str)) == {"gemm", "collective", "optimizer"}
    assert k["is_collective"].tolist() == [False, True, False]
    c = m.copies
    htod = c[c["direction"] == "HtoD"].iloc[0]
    assert (htod["src_kind"], htod["dst_kind"], htod["bytes"]) == ("Pageable", "Device", 1 << 20)
    dtoh = c[c["direction"] == "DtoH"].iloc[0]
    assert dtoh["dst_kind"] == "Pinned" and dtoh["bytes"] == 4
    assert len(m.memsets) == 1 and m.memsets["bytes"].iloc[0] == 1024
    assert m.counts["python_function"] == 1 and m.python_functions is None
    assert m.meta.num_sms == 132 and m.meta.gpu_name == "NVIDIA H100 80GB HBM3"
    # flow links: kernel <-> launch by correlation, kernel <-> op by external id
    kl = m.kernel_launches()
    assert (kl["launch_name"] == "cudaLaunchKernel").all()
    assert (kl["launch_ts"] == kl["ts"] - 10).all()
    ko = m.kernel_ops()
    assert ko.loc[ko["name"] == K_NVJET_BF16, "op_name"].iloc[0] == "aten::mm"
    assert "BFloat16" in ko.loc[ko["name"] == K_NVJET_BF16, "op_input_types"].iloc[0]
    assert m.warnings == []


def test_keep_python_functions(tmp_path: Path) -> None:
    m = load_trace(_basic().write(tmp_path / "t.json"), keep_python_functions=True)
    assert m.python_functions is not None and len(m.python_functions) == 1


def test_progress_called(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    m = load_trace(_basic().write(tmp_path / "t.json"), progress=lambda a, b: seen.append((a, b)))
    assert seen and seen[-1][0] == seen[-1][1] == sum(m.counts.values())


def test_truncated_trace_is_salvaged(tmp_path: Path) -> None:
    data = _basic().to_bytes()
    p = tmp_path / "cut.json"
    p.write_bytes(data[: int(len(data) * 0.7)])
    m = load_trace(p)
    assert any("truncated" in w for w in m.warnings)
    assert 0 < sum(m.counts.values()) < len(_basic().events)


def test_truncated_gzip_is_salvaged(tmp_path: Path) -> None:
    raw = gzip.compress(_basic().to_bytes())
    p = tmp_path / "cut.json.gz"
    p.write_bytes(raw[: int(len(raw) * 0.8)])
    m = load_trace(p)
    assert any("gzip" in w for w in m.warnings)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "empty"),
        (b"hello, not json", "not a JSON trace"),
        (b'{"foo": 1}', "no 'traceEvents'"),
        (b"[1, 2", "not a JSON trace"),
        (b'{"traceEvents": 3}', "not a list"),
        (b'"str"', "a JSON str, not a Kineto trace"),
        (b'[{"name": "a", "value": 1}, {"name": "b", "value": 2}]', "list of 2 objects that are not trace events"),
        (b'{"schema": "1.0.1", "pid": 1, "nodes": []}', "PyTorch execution trace"),
        (b"[[-1, 1, 37888, 7], [5, 2, 512, 7]]", "memory timeline"),
    ],
)
def test_unreadable_inputs_raise_input_error(tmp_path: Path, content: bytes, needle: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(InputError, match=needle) as info:
        load_trace(p)
    assert "\n" not in str(info.value)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_trace(tmp_path / "nope.json")
    with pytest.raises(InputError, match="directory"):
        load_trace(tmp_path)


def test_invalid_utf8_replaced(tmp_path: Path) -> None:
    data = _basic().to_bytes().replace(b"aten::mm", b"aten::m\xff")
    p = tmp_path / "utf.json"
    p.write_bytes(data)
    m = load_trace(p)
    assert any("UTF-8" in w for w in m.warnings)
    assert any("\ufffd" in str(n) for n in m.cpu_ops["name"])


def test_empty_trace_events(tmp_path: Path) -> None:
    p = tmp_path / "e.json"
    p.write_text(json.dumps({"traceEvents": []}))
    m = load_trace(p)
    assert len(m.kernels) == 0 and len(m.steps) == 0 and m.step_source == "none"
    assert any("no events" in w for w in m.warnings)


def test_missing_dur_zero_ts_and_kernel_without_args(tmp_path: Path) -> None:
    st = _basic()
    st.add_event({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": st.base + 5})
    st.add_event({"ph": "X", "cat": "cpu_op", "name": "aten::zero", "pid": 1, "tid": 1, "ts": 0, "dur": 3})
    st.add_kernel("weird_kernel", 850, 5, with_args=False)
    st.add_event("not an object")  # type: ignore[arg-type]
    m = load_trace(st.write(tmp_path / "t.json"))
    joined = " ".join(m.warnings)
    assert (
        "no 'dur'" in joined and "ts <= 0" in joined and "no args" in joined and "not JSON objects" in joined
    )
    assert "aten::zero" not in set(m.cpu_ops["name"].astype(str))
    assert m.cpu_ops.loc[m.cpu_ops["name"] == "aten::add", "dur"].iloc[0] == 0
    weird = m.kernels[m.kernels["name"] == "weird_kernel"].iloc[0]
    assert weird["blocks"] != weird["blocks"]  # NaN
    assert m.meta.trace_span_us < 10_000  # the ts:0 event did not stretch the span


def test_cpu_only_trace_warns(tmp_path: Path) -> None:
    st = SyntheticTrace(device_properties=None)
    st.add_cpu_op("aten::mm", 0, 100)
    m = load_trace(st.write(tmp_path / "cpu.json"))
    assert not m.has_gpu_kernels and m.kind is not None and m.kind.cpu_only
    assert any("CPU-only trace" in label for label in m.kind.labels())


def test_old_category_spelling_and_graphs_and_triton(tmp_path: Path) -> None:
    st = SyntheticTrace()
    st.add_kernel("triton_poi_fused_add_0", 100, 5, launch_name="cuLaunchKernel")
    st.add_runtime("cudaGraphLaunch", 200, 5, correlation=99)
    st.add_event(
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": st.base + 300,
            "dur": 3,
            "args": {"correlation": 100},
        }
    )
    m = load_trace(st.write(tmp_path / "t.json"))
    assert (m.runtime["name"] == "cudaLaunchKernel").sum() == 1
    assert m.kind is not None and m.kind.graph_launches == 1 and m.kind.triton_kernels == 1
    labels = " ".join(m.kind.labels())
    assert "CUDA graphs replayed" in labels and "Triton" in labels
    assert m.kernels["family"].iloc[0] == "elementwise"


def test_load_traces_folder_ranks(tmp_path: Path) -> None:
    SyntheticTrace(rank=1, world_size=2).write(tmp_path / "a.json")
    SyntheticTrace(rank=0, world_size=2).write(tmp_path / "b.json.gz")
    models = load_traces(tmp_path)
    assert [m.rank for m in models] == [0, 1] and models[0].path.name == "b.json.gz"
    d2 = tmp_path / "byname"
    d2.mkdir()
    SyntheticTrace().write(d2 / "rank3.json")
    assert load_traces(d2)[0].rank == 3
    d3 = tmp_path / "dup"
    d3.mkdir()
    SyntheticTrace(rank=0).write(d3 / "x.json")
    SyntheticTrace(rank=0).write(d3 / "y.json")
    with pytest.raises(InputError, match=r"x\.json, y\.json all claim rank 0"):
        load_traces(d3)
    with pytest.raises(InputError, match=r"no \.json"):
        (tmp_path / "empty").mkdir()
        load_traces(tmp_path / "empty")
