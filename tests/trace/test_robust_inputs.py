"""No traceback on any input (issues 12 and 13): SYNTHETIC traces (tests/synth.py) shaped like the damaged,
old, foreign and odd files real users feed `gpuadvisor analyze`, through the real API and CLI."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

import gpuadvisor
from gpuadvisor.cli import cli
from gpuadvisor.errors import InputError
from gpuadvisor.trace.kind import SchemaStatus, Vendor, Workload
from gpuadvisor.trace.load import load_trace
from tests.synth import K_ADAM, K_ELEMENTWISE, K_NVJET_BF16, SyntheticTrace
from tests.trace.test_scale import load_in_fresh_process


def _steps(st: SyntheticTrace, n: int = 4, period: float = 1000.0, *, train: bool = True) -> None:
    """n ProfilerSteps, each with one GEMM, one elementwise kernel and (train) an optimizer step."""
    for i in range(n):
        t = i * period
        st.add_step(i + 1, t, period * 0.9, gpu_dur=period * 0.95)
        st.add_kernel(K_NVJET_BF16, t + 100, 300, op="aten::mm", op_input_types=["c10::BFloat16"] * 2)
        st.add_kernel(K_ELEMENTWISE, t + 420, 50, op="aten::add")
        if train:
            st.add_optimizer_step(t + 600, 100)
            st.add_kernel(K_ADAM, t + 650, 40)


def _analyze(path: Path) -> dict[str, Any]:
    return gpuadvisor.analyze(path).to_dict()


def _status(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["rule"]: r for r in result["rules"]}


# ---- bytes: BOM, encodings --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["bom.json", "bom.json.gz"])
@pytest.mark.parametrize("chunk", [None, 2048])
def test_utf8_bom_is_read_like_any_trace(tmp_path: Path, name: str, chunk: int | None) -> None:
    st = SyntheticTrace()
    _steps(st)
    raw = b"\xef\xbb\xbf" + st.to_bytes()
    p = tmp_path / name
    p.write_bytes(gzip.compress(raw) if name.endswith(".gz") else raw)
    m = load_trace(p, chunk_bytes=chunk)
    plain = load_trace(st.write(tmp_path / "plain.json"))
    assert len(m.kernels) == len(plain.kernels) == 12 and m.step_source == "profiler_step"
    assert not [w for w in m.warnings if "UTF-8" in w or "truncated" in w]


def test_bom_trace_of_2mb_loads_in_bounded_memory(tmp_path: Path) -> None:
    """Issue 12 item 3: a 2 MB trace with a BOM used 5.8 GB and ended in RecursionError. Now its load
    grows the RSS of a fresh process by less than 100 MB, and invalid UTF-8 after the BOM is repaired
    once, not in a loop."""
    st = SyntheticTrace()
    _steps(st, n=400)
    body = st.to_bytes()
    assert len(body) > 1_000_000
    p = tmp_path / "big-bom.json"
    p.write_bytes(b"\xef\xbb\xbf" + body.replace(b"aten::add", b"aten::ad\xff", 3))
    before_kb, after_kb, n_ops = load_in_fresh_process(p)
    assert n_ops == sum(1 for e in st.events if e.get("cat") == "cpu_op")
    assert (after_kb - before_kb) * 1024 < 100e6


def test_utf16_text_is_read_as_utf8(tmp_path: Path) -> None:
    st = SyntheticTrace()
    _steps(st, n=2)
    p = tmp_path / "u16.json"
    p.write_bytes(st.to_bytes().decode("utf-8").encode("utf-16"))  # with its BOM
    m = load_trace(p)
    assert len(m.kernels) == 6 and any("UTF-16" in w for w in m.warnings)


# ---- numbers: 64-bit overflow, impossible grids, NaN strings -------------------------------------------


def test_64bit_overflowing_ids_and_grids(tmp_path: Path) -> None:
    st = SyntheticTrace()
    _steps(st, n=3)
    big = 2**64 + 5
    st.add_event(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "overflowed_kernel",
            "pid": 0,
            "tid": 7,
            "ts": st.base + 2500,
            "dur": 10,
            "args": {"grid": [big, 1, 1], "block": [-1, 1, 1], "correlation": big, "External id": 2**63},
        }
    )
    st.add_event(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "record_param_comms",
            "pid": 1,
            "tid": 2**70,
            "ts": st.base + 2600,
            "dur": 5,
            "args": {"Comms Id": 10159970886766084423, "External id": big, "Sequence number": -(2**64)},
        }
    )
    p = st.write(tmp_path / "big.json")
    m = load_trace(p)
    k = m.kernels[m.kernels["name"] == "overflowed_kernel"].iloc[0]
    assert k["blocks"] != k["blocks"] and k["correlation"] is not None  # NaN blocks
    assert bool(m.kernels["correlation"].isna().sum() == 1)
    assert any("impossible launch dimensions" in w for w in m.warnings)
    result = _analyze(p)
    assert result["metrics"]["kernels_total"] == 10


def test_non_finite_numbers_in_strings(tmp_path: Path) -> None:
    st = SyntheticTrace()
    _steps(st, n=2)
    st.add_event(
        {"ph": "X", "cat": "cpu_op", "name": "aten::nan_ts", "pid": 1, "tid": 1, "ts": "nan", "dur": 1}
    )
    st.add_event(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::inf_dur",
            "pid": 1,
            "tid": 1,
            "ts": st.base + 5,
            "dur": "inf",
        }
    )
    m = load_trace(st.write(tmp_path / "nan.json"))
    names = set(m.cpu_ops["name"].astype(str))
    # a duration that is there but not a finite number is set aside and counted (issue 29), not read
    # as 0: an absent `dur` is kept with 0, a broken one is not a measurement
    assert "aten::nan_ts" not in names and "aten::inf_dur" not in names
    assert any("1 events had a 'dur' that is not a finite number" in w for w in m.warnings), m.warnings
    assert any("1 events had no usable 'ts'" in w for w in m.warnings), m.warnings


# ---- shapes of JSON: nesting, arrays, things that are not traces --------------------------------------


def test_absurdly_nested_json_is_an_input_error(tmp_path: Path) -> None:
    deep_args = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1, "args": '
    deep_args += b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}]}"
    for name, data in (("deep-args.json", deep_args), ("deep-list.json", b"[" * 100_000 + b"]" * 100_000)):
        p = tmp_path / name
        p.write_bytes(data)
        res = CliRunner().invoke(cli, ["analyze", str(p)])
        assert res.exit_code == 2, res.output
        assert "Traceback" not in res.output and "nested" in res.output


def test_bare_event_array_is_a_trace(tmp_path: Path) -> None:
    st = SyntheticTrace()
    _steps(st, n=3)
    p = tmp_path / "bare.json"
    p.write_bytes(orjson.dumps(st.events))
    m = load_trace(p)
    assert len(m.kernels) == 9 and m.step_source == "profiler_step" and len(m.steps) == 3
    assert m.kind is not None and m.kind.schema is SchemaStatus.UNVERSIONED
    truncated = tmp_path / "bare-cut.json"
    truncated.write_bytes(p.read_bytes()[:-200])
    m2 = load_trace(truncated)
    assert len(m2.cpu_ops) > 0 and any("truncated" in w for w in m2.warnings)


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ([{"name": "a", "value": 1}, {"name": "b", "value": 2}], "2 objects that are not trace events"),
        ([["x", 1], ["y", 2], ["z", 3]], "list of 3 list values"),
        (
            {"schema": "1.0.1", "pid": 7, "time": "t", "start_ts": 1, "nodes": [], "finish_ts": 2},
            "execution trace",
        ),
        ([[1, 1, 512, 7], [2, 2, 512, 7], [3, 1, 64, 0]], "memory timeline"),
        ([[1.0, 2.0, 3.0], [[0, 1, 2], [3, 4, 5]]], "memory timeline"),
        ({"segments": [], "device_traces": []}, "memory snapshot"),
        ({"schemaVersion": 1, "deviceProperties": []}, "without a 'traceEvents' array"),
        (42, "a JSON int"),
    ],
)
def test_files_that_are_not_kineto_traces_exit_2_naming_what_they_are(
    tmp_path: Path, doc: Any, says: str
) -> None:
    p = tmp_path / "thing.json"
    p.write_bytes(json.dumps(doc).encode())
    res = CliRunner().invoke(cli, ["analyze", str(p), "--format", "json"])
    assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output, res.output
    with pytest.raises(InputError, match=r"not a Kineto trace|without a 'traceEvents'"):
        load_trace(p)


def test_other_file_names_are_sniffed(tmp_path: Path) -> None:
    st = SyntheticTrace()
    _steps(st, n=3)
    named = tmp_path / "worker0.pt.trace"
    named.write_bytes(gzip.compress(st.to_bytes()))
    assert _analyze(named)["metrics"]["kernels_total"] == 9
    timeline = tmp_path / "memory_timeline.raw.gz"
    timeline.write_bytes(gzip.compress(b"[[-1, 1, 37888, 7], [5, 2, 512, 7]]"))
    res = CliRunner().invoke(cli, ["analyze", str(timeline)])
    assert res.exit_code == 2 and "memory timeline" in res.output
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    res = CliRunner().invoke(cli, ["analyze", str(text)])
    assert res.exit_code == 2 and "not JSON" in res.output


# ---- schema versions and the 2021 schema ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "status"), [(0, SchemaStatus.UNKNOWN), (99, SchemaStatus.UNKNOWN), (1, SchemaStatus.CURRENT)]
)
def test_schema_version_is_labelled(tmp_path: Path, version: int, status: SchemaStatus) -> None:
    st = SyntheticTrace()
    _steps(st, n=3)
    st.top["schemaVersion"] = version
    p = st.write(tmp_path / "v.json")
    assert load_trace(p).kind is not None and load_trace(p).kind.schema is status  # type: ignore[union-attr]
    notes = " | ".join(_analyze(p)["notes"])
    assert (f"unknown trace schema {version}, read as schema 1" in notes) == (status is SchemaStatus.UNKNOWN)


def _old_schema_trace() -> list[dict[str, Any]]:
    """A SYNTHETIC bare array in the 2021 Kineto schema (kineto tb_plugin samples): categories Operator /
    Runtime / Kernel, `ProfilerStep#N` and `Optimizer.step#` as Operator spans, `external id` lower case,
    `Input dims`, string thread ids."""
    base = 1_606_910_596_297_094
    events: list[dict[str, Any]] = []
    corr = 100
    for n in range(3):
        t = base + n * 10_000
        events.append(
            {
                "ph": "X",
                "cat": "Operator",
                "name": f"ProfilerStep#{n + 5}",
                "pid": 1,
                "tid": "4093687616",
                "ts": t,
                "dur": 9000,
                "args": {"External id": 1 + n},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "Operator",
                "name": "aten::addmm",
                "pid": 1,
                "tid": "4093687616",
                "ts": t + 100,
                "dur": 50,
                "args": {"Input dims": [[64], [64, 128], [128, 64]], "External id": 10 + n},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "Operator",
                "name": "AddmmBackward",
                "pid": 1,
                "tid": "4093687616",
                "ts": t + 3000,
                "dur": 60,
                "args": {"External id": 20 + n},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "Operator",
                "name": "Optimizer.step#SGD.step",
                "pid": 1,
                "tid": "4093687616",
                "ts": t + 6000,
                "dur": 500,
                "args": {"External id": 30 + n},
            }
        )
        for k in range(3):
            corr += 1
            events.append(
                {
                    "ph": "X",
                    "cat": "Runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": "4093687616",
                    "ts": t + 110 + k * 1000,
                    "dur": 5,
                    "args": {"cbid": 211, "correlation": corr, "external id": 10 + n},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "Kernel",
                    "name": "volta_sgemm_128x64_nn",
                    "pid": 0,
                    "tid": "stream 7",
                    "ts": t + 200 + k * 1000,
                    "dur": 700,
                    "args": {
                        "device": 0,
                        "stream": 7,
                        "correlation": corr,
                        "external id": 10 + n,
                        "grid": [64, 1, 1],
                        "block": [256, 1, 1],
                    },
                }
            )
    return events


def test_2021_schema_steps_and_labels(tmp_path: Path) -> None:
    p = tmp_path / "worker0.pt.trace.json"
    p.write_bytes(orjson.dumps(_old_schema_trace()))
    m = load_trace(p)
    assert m.step_source == "profiler_step" and list(m.steps["step"]) == [5, 6, 7]
    assert set(m.annotations["name"].astype(str)) >= {"ProfilerStep#5", "Optimizer.step#SGD.step"}
    assert "ProfilerStep#5" not in set(m.cpu_ops["name"].astype(str))
    assert m.cpu_ops["input_dims"].notna().any()
    assert m.kernels["external_id"].notna().all() and m.runtime["external_id"].notna().all()
    assert m.kind is not None and m.kind.schema is SchemaStatus.OLD and m.kind.is_training
    result = _analyze(p)
    status = _status(result)
    assert status["GA001"]["status"] == "ran"
    assert not [
        f for f in result["findings"] if f["rule"] == "GA001" and "no step markers" in f["message"].lower()
    ]
    assert any("old Kineto schema" in n for n in result["notes"])


# ---- kernels without launch args, graphs, captures ----------------------------------------------------


def _raw_kernel(st: SyntheticTrace, name: str, ts: float, dur: float, corr: int, **args: Any) -> None:
    st.add_event(
        {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": 0,
            "tid": 7,
            "ts": st.base + ts,
            "dur": dur,
            "args": {"correlation": corr, "stream": 7, "device": 0, **args},
        }
    )


def _raw_runtime(
    st: SyntheticTrace, name: str, ts: float, dur: float, corr: int | None = None, tid: int = 1234
) -> None:
    args: dict[str, Any] = {"cbid": 1}
    if corr is not None:
        args["correlation"] = corr
    st.add_event(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": name,
            "pid": 1234,
            "tid": tid,
            "ts": st.base + ts,
            "dur": dur,
            "args": args,
        }
    )


def test_cuda_graph_replay_one_launch_many_kernels_without_launch_args(tmp_path: Path) -> None:
    st = SyntheticTrace()
    for i in range(4):
        t = i * 2000.0
        st.add_step(i + 1, t, 1800, gpu_dur=1900)
        corr = 1000 + i
        _raw_runtime(st, "cudaGraphLaunch", t + 50, 20, corr)
        for j in range(6):  # graph kernels: the launch's correlation, no grid/block (Kineto writes none)
            _raw_kernel(st, K_ELEMENTWISE if j % 2 else K_NVJET_BF16, t + 100 + j * 200, 150, corr)
    p = st.write(tmp_path / "graphs.json")
    m = load_trace(p)
    assert m.kind is not None and m.kind.graph_launches == 4 and m.kind.graph_kernels == 24
    launches = m.kernel_launches()
    assert (launches["launch_name"] == "cudaGraphLaunch").all()
    assert m.kernels["blocks"].isna().all()
    result = _analyze(p)
    assert not [r for r in result["rules"] if r["status"] == "error"]
    assert any("CUDA graphs replayed: 4 graph launches ran 24 kernels" in n for n in result["notes"])


def _capture_trace(api: str, capture_step: int) -> SyntheticTrace:
    """4 steps of real work; inside step `capture_step` a stream capture records 40 launches that never run."""
    st = SyntheticTrace(device_properties=None) if api == "hip" else SyntheticTrace()
    launch = "hipLaunchKernel" if api == "hip" else "cudaLaunchKernel"
    for i in range(4):
        t = i * 5000.0
        st.add_step(i + 1, t, 4800, gpu_dur=4900)
        st.add_kernel(K_ELEMENTWISE, t + 100, 200, launch_name=launch, op="aten::add")
        if i + 1 == capture_step:
            _raw_runtime(st, f"{api}StreamBeginCapture", t + 400, 5)
            for j in range(40):
                _raw_runtime(st, launch, t + 500 + j * 100, 8, 90_000 + i * 100 + j)
            _raw_runtime(st, f"{api}StreamEndCapture", t + 4500, 20)
            _raw_runtime(st, f"{api}GraphInstantiate", t + 4550, 100)
    return st


def test_hip_graph_capture_is_not_gpu_work(tmp_path: Path) -> None:
    p = _capture_trace("hip", capture_step=3).write(tmp_path / "capture.json")
    m = load_trace(p)
    assert m.kind is not None and m.kind.vendor is Vendor.AMD
    assert m.kind.graph_capture_calls == 1 and m.kind.captured_launches == 40 and m.kind.capture_in_window
    assert int((m.runtime["name"] == "hipLaunchKernel").sum()) == 4  # the captured 40 are gone
    result = _analyze(p)
    status = _status(result)
    for rule in ("GA401", "GA501"):
        assert status[rule]["status"] == "not_applicable"
        assert "HIP graph capture in the analyzed steps: 40 launches" in status[rule]["detail"]
    for rule in ("GA601", "GA701"):
        assert status[rule]["detail"] == "AMD GPU (ROCm): CUDA-specific advice does not apply"
    assert not [f for f in result["findings"] if f["rule"] in ("GA401", "GA501", "GA601", "GA701")]
    assert any(
        n.startswith("HIP graph capture: 1 stream capture(s) recorded 40 launches") for n in result["notes"]
    )


def test_capture_in_the_outlier_step_leaves_steady_state_rules_on(tmp_path: Path) -> None:
    p = _capture_trace("cuda", capture_step=1).write(tmp_path / "capture1.json")
    m = load_trace(p)
    assert m.kind is not None and m.kind.captured_launches == 40 and not m.kind.capture_in_window
    status = _status(_analyze(p))
    assert status["GA401"]["status"] == "ran" and status["GA501"]["status"] == "ran"


# ---- what the trace is, used by the rules -----------------------------------------------------------


def test_inference_run_gets_no_training_advice(tmp_path: Path) -> None:
    st = SyntheticTrace()
    _steps(st, train=False)
    p = st.write(tmp_path / "infer.json")
    result = _analyze(p)
    assert result["environment"]["trace_kind"]["workload"] == "inference"
    status = _status(result)
    for rule in ("GA502", "GA1004"):
        assert status[rule]["status"] == "not_applicable"
        assert "inference run: no optimizer step or backward pass in the trace" in status[rule]["detail"]
    train = SyntheticTrace()
    _steps(train, train=True)
    assert _status(_analyze(train.write(tmp_path / "train.json")))["GA502"]["status"] == "ran"


def test_mtia_device_events_are_not_called_cpu_only(tmp_path: Path) -> None:
    st = SyntheticTrace(device_properties=[{"id": 17, "name": "ARTEMIS"}])
    for i in range(3):
        st.add_step(i + 1, i * 1000.0, 900)
        st.add_cpu_op("aten::mm", i * 1000.0 + 10, 100)
        st.add_event(
            {
                "ph": "X",
                "cat": "mtia_ccp_events",
                "name": "pe_exe",
                "pid": 17,
                "tid": 3,
                "ts": st.base + i * 1000 + 50,
                "dur": 300,
                "args": {"stream": 1},
            }
        )
        st.add_event(
            {
                "ph": "X",
                "cat": "mtia_runtime",
                "name": "runFunction - job_prep_and_submit_for_execution",
                "pid": 1,
                "tid": 1,
                "ts": st.base + i * 1000 + 20,
                "dur": 10,
                "args": {"correlation": i},
            }
        )
    result = _analyze(st.write(tmp_path / "mtia.json"))
    kind = result["environment"]["trace_kind"]
    assert kind["vendor"] == "mtia" and kind["device_events_not_analyzed"] == 3 and not kind["cpu_only"]
    notes = " | ".join(result["notes"])
    assert "CPU-only" not in notes and "CUPTI" not in notes and "MTIA accelerator trace" in notes
    assert "MTIA device events are not analyzed" in _status(result)["GA401"]["detail"]


def test_kind_is_said_once_in_notes_and_environment(tmp_path: Path) -> None:
    st = SyntheticTrace()
    _steps(st)
    result = _analyze(st.write(tmp_path / "t.json"))
    kind = result["environment"]["trace_kind"]
    assert kind["vendor"] == "nvidia" and kind["workload"] == "training" and kind["schema"] == "current"
    assert sum(1 for n in result["notes"] if n.startswith("trace kind:")) == 1
    assert "trace_kind" not in result["metrics"]


def test_cpu_only_trace_with_launch_calls_blames_cupti(tmp_path: Path) -> None:
    st = SyntheticTrace()
    for i in range(3):
        st.add_step(i + 1, i * 1000.0, 900)
        st.add_cpu_op("aten::mm", i * 1000.0 + 10, 100)
        st.add_runtime("cudaLaunchKernel", i * 1000.0 + 20, 5, correlation=i + 1)
    m = load_trace(st.write(tmp_path / "nocupti.json"))
    assert m.kind is not None and m.kind.cpu_only and m.kind.launches_without_kernels == 3
    assert m.kind.workload is Workload.INFERENCE or m.kind.workload is Workload.UNKNOWN
    assert any("CUPTI was unavailable" in label for label in m.kind.labels())


# ---- values validated once at the loader (issue 39 items 9 and 10; the CLI checks: tests/reliability/test_trace_content.py)


def test_input_dims_that_are_not_shapes_are_left_out_with_a_note(tmp_path: Path) -> None:
    """Input Dims with text, numbers beyond 2^53 or past float64, or not a list: the op's shapes are
    None (no FLOPs from them), counted in one note; a valid value next to them is kept as it was."""
    st = SyntheticTrace()
    _steps(st, n=6)
    doc = json.loads(st.to_bytes())  # a copy to change
    mms = [e for e in doc["traceEvents"] if e.get("name") == "aten::mm"]
    for e in mms:
        e["args"]["Input Dims"] = [[64, 128], [128, 64]]
    bad = [[[10**400, 4]], [["64", "x"]], [[2**60, 2**60]], "x", [[1.5, 2]]]
    for e, dims in zip(mms, bad, strict=False):
        e["args"]["Input Dims"] = dims
    raw = json.dumps(doc).encode()  # 10**400 as a JSON integer
    for chunk in (None, 1024):  # one block (its events parsed as dicts), and streamed blocks (msgspec)
        p = tmp_path / f"dims-{chunk}.json"
        p.write_bytes(raw)
        m = load_trace(p, chunk_bytes=chunk)
        ops = m.cpu_ops[m.cpu_ops["name"] == "aten::mm"]
        assert ops["input_dims"].tolist() == [None] * 5 + ["[[64, 128], [128, 64]]"], chunk
        assert ops["input_types"].isna().tolist() == [True] * 5 + [False], chunk  # the op's shapes go together
        assert "5 ops carry Input Dims or Input type that are not shapes and type names" in " ".join(m.warnings)
    assert not [r for r in _status(_analyze(p)).values() if r["status"] == "error"]


def test_profiler_step_numbers_beyond_int64_are_no_steps(tmp_path: Path) -> None:
    st = SyntheticTrace()
    _steps(st)
    doc = json.loads(st.to_bytes())  # a copy to change
    for e in doc["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{2**63 + int(e['name'].split('#')[1])}"
    p = tmp_path / "steps.json"
    p.write_text(json.dumps(doc))
    m = load_trace(p)
    assert m.step_source == "optimizer_step" and len(m.steps) == 4
    assert any("carry a step number beyond 64 bits (ProfilerStep#9223372036854775809)" in w for w in m.warnings)
    doc["traceEvents"][0]["name"] = f"ProfilerStep#{2**63 - 1}"  # the largest int64 still is one
    p.write_text(json.dumps(doc))
    assert 2**63 - 1 in load_trace(p).steps["step"].tolist()


def test_device_properties_are_validated_once(tmp_path: Path) -> None:
    st = SyntheticTrace()
    _steps(st)
    doc = json.loads(st.to_bytes())  # a copy to change
    props = doc["deviceProperties"][0]
    props.update(numSms="132", computeMinor=[0], totalGlobalMem=1e30, warpSize=True, name=7)
    p = tmp_path / "props.json"
    p.write_text(json.dumps(doc))
    m = load_trace(p)
    kept = m.meta.device(0)
    assert kept is not None
    assert not {"numSms", "computeMinor", "totalGlobalMem", "warpSize", "name"} & set(kept)
    assert kept["computeMajor"] == 9 and m.meta.num_sms is None
    note = next(w for w in m.warnings if w.startswith("deviceProperties of GPU 0: "))
    assert "numSms '132'" in note and "totalGlobalMem 1e+30" in note and "name 7" in note
    assert not [w for w in load_trace(st.write(tmp_path / "good.json")).warnings if "deviceProperties" in w]


def test_events_that_appear_twice_are_kept_once(tmp_path: Path) -> None:
    st = SyntheticTrace()
    _steps(st)
    once = load_trace(st.write(tmp_path / "once.json"))
    doc = json.loads(st.to_bytes())  # a copy to change
    doc["traceEvents"] = doc["traceEvents"] * 2
    p = tmp_path / "twice.json"
    p.write_text(json.dumps(doc))
    twice = load_trace(p)
    for table in ("kernels", "runtime", "cpu_ops", "annotations", "steps"):
        pd_testing_equal(getattr(once, table), getattr(twice, table))
    assert any("appeared again, equal in every field" in w for w in twice.warnings)
    assert not [w for w in twice.warnings if "correlation ids" in w]  # no link was dropped as colliding


def pd_testing_equal(a: Any, b: Any) -> None:
    import pandas as pd

    pd.testing.assert_frame_equal(a, b, check_exact=True)


@pytest.mark.parametrize("where", ["block", "tail", "whole"])
def test_an_escaped_lone_surrogate_is_read_as_a_replacement_character(tmp_path: Path, where: str) -> None:
    """`\\ud800` alone is valid JSON text (Python reads it) that msgspec and orjson refuse: in a streamed
    block, in the last block, or in a file read whole (a bare array), it reads as U+FFFD."""
    st = SyntheticTrace()
    _steps(st, n=40)
    doc: Any = json.loads(st.to_bytes())
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    victim = ops[0] if where == "block" else ops[-1]
    victim["name"] += "\ud800"
    if where == "whole":
        doc = doc["traceEvents"]
    p = tmp_path / "s.json"
    p.write_text(json.dumps(doc))
    m = load_trace(p, chunk_bytes=2048)
    assert (m.cpu_ops["name"].astype(str) == victim["name"][:-1] + "\ufffd").sum() == 1
    assert "s.json holds 1 escaped lone surrogate (half a UTF-16 pair" in " ".join(m.warnings)


@pytest.mark.parametrize("old_spelling", [False, True])
def test_ops_with_and_without_input_dims_in_one_block(tmp_path: Path, old_spelling: bool) -> None:
    """SYNTHETIC: ops with Input Dims, ops without, and (old_spelling) one op with only the 2021
    "Input dims", in the same streamed block: each op keeps its own shapes, the 2021 value read where
    the new one is absent."""
    st = SyntheticTrace()
    _steps(st, n=6)
    doc = json.loads(st.to_bytes())
    mms = [e for e in doc["traceEvents"] if e.get("name") == "aten::mm"]
    for i, e in enumerate(mms):
        e["args"].pop("Input Dims", None)
        if i % 2:
            e["args"]["Input Dims"] = [[64, i], [i, 64]]
    if old_spelling:
        mms[0]["args"]["Input dims"] = [[8, 8]]
    p = tmp_path / "mixed.json"
    p.write_bytes(orjson.dumps(doc))
    m = load_trace(p, chunk_bytes=1 << 20)
    got = m.cpu_ops[m.cpu_ops["name"] == "aten::mm"]["input_dims"].tolist()
    want = [str([[64, i], [i, 64]]) if i % 2 else None for i in range(len(mms))]
    if old_spelling:
        want[0] = "[[8, 8]]"
    assert got == want
