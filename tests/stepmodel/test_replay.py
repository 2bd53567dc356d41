"""The what-if replay on hand-built programs: every number below is computed by hand from the
program's definition (gpuadvisor/stepmodel/replay.py). No trace is involved."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpuadvisor.stepmodel.replay import (
    EV_LAUNCH,
    EV_SYNC,
    EV_WORK,
    Program,
    as_recorded,
    calibrate_host_scale,
    data_removed_per_step,
    host_work_per_step,
    replay,
)


def program(events: list[dict[str, Any]], ops: list[dict[str, Any]], **over: Any) -> Program:
    """A Program from event dicts (kind, gap, dur, post, block, ops=[op indices]) and op dicts
    (dur, stream, dep, extra)."""
    n = len(events)
    starts, counts = [], []
    for e in events:
        idx = e.get("ops", [])
        starts.append(idx[0] if idx else -1)
        counts.append(len(idx))
    base: dict[str, Any] = {
        "steps": 1,
        "ev_kind": np.array([e["kind"] for e in events], dtype=np.int8),
        "ev_name": np.array([e.get("name", "x") for e in events], dtype=object),
        "ev_sync_kind": np.array([e.get("sync_kind", "") for e in events], dtype=object),
        "ev_in_optimizer": np.array([e.get("opt", False) for e in events], dtype=bool),
        "ev_in_data": np.zeros(n, dtype=bool),
        "ev_in_read": np.array([e.get("read", False) for e in events], dtype=bool),
        "gap_other": np.array([e.get("gap", 0.0) for e in events], dtype=np.float64),
        "gap_data": np.array([e.get("data", 0.0) for e in events], dtype=np.float64),
        "gap_opt": np.zeros(n),
        "gap_read": np.zeros(n),
        "ev_dur": np.array([e.get("dur", 0.0) for e in events], dtype=np.float64),
        "ev_post": np.array([e.get("post", 0.0) for e in events], dtype=np.float64),
        "ev_block": np.array([e.get("block", False) for e in events], dtype=bool),
        "ev_ops_start": np.array(starts, dtype=np.int64),
        "ev_ops_count": np.array(counts, dtype=np.int64),
        "tail_other": 0.0,
        "tail_data": 0.0,
        "tail_opt": 0.0,
        "op_dur": np.array([o["dur"] for o in ops], dtype=np.float64),
        "op_stream": np.array([o.get("stream", 0) for o in ops], dtype=np.int64),
        "op_dep": np.array([o.get("dep", -1) for o in ops], dtype=np.int64),
        "op_extra": np.array([o.get("extra", 0.0) for o in ops], dtype=np.float64),
        "op_row": np.arange(len(ops), dtype=np.int64),
        "op_bytes": np.full(len(ops), np.nan),
        "launch_lag_us": 5.0,
        "queue_depth": 1024,
    }
    base.update(over)
    return Program(**base)


def test_host_bound_step_is_the_host_time() -> None:
    # 3 launches, each after 20 us of host work and a 5 us call; kernels of 2 us: the host sets the pace
    p = program(
        [{"kind": EV_LAUNCH, "gap": 20.0, "dur": 5.0, "ops": [i]} for i in range(3)],
        [{"dur": 2.0} for _ in range(3)],
    )
    r = replay(p)
    assert r.host_period_us == pytest.approx(75.0)
    assert r.period_us == pytest.approx(75.0)
    assert r.gpu_busy_us == pytest.approx(6.0)


def test_gpu_bound_step_is_the_gpu_time() -> None:
    # the host queues 2 kernels of 100 us in 12 us: in steady state the GPU sets the pace
    p = program(
        [{"kind": EV_LAUNCH, "gap": 1.0, "dur": 5.0, "ops": [i]} for i in range(2)],
        [{"dur": 100.0} for _ in range(2)],
    )
    assert replay(p).period_us == pytest.approx(200.0)


def test_a_wait_on_the_device_serializes_host_and_gpu() -> None:
    # launch a 100 us kernel, then wait for it (post 3 us), then 10 us of host work to the next step:
    # period = 1 (gap) + 5 (call... kernel starts at 1 + lag 5) -> kernel ends at 106, +3 post, +10 tail
    p = program(
        [
            {"kind": EV_LAUNCH, "gap": 1.0, "dur": 5.0, "ops": [0]},
            {"kind": EV_SYNC, "gap": 0.0, "dur": 0.0, "post": 3.0, "sync_kind": "scalar_read"},
        ],
        [{"dur": 100.0}],
        tail_other=10.0,
    )
    assert replay(p).period_us == pytest.approx(1 + 5 + 100 + 3 + 10)


def test_blocking_launch_waits_for_its_own_work() -> None:
    # a pageable copy: the host stays in the call until the copy is done
    p = program(
        [
            {"kind": EV_LAUNCH, "gap": 0.0, "dur": 4.0, "post": 1.0, "block": True, "ops": [0]},
            {"kind": EV_WORK, "gap": 10.0, "dur": 0.0},
        ],
        [{"dur": 50.0}],
    )
    # copy starts at lag 5, ends 55, host leaves the call at 56, then 10 us of work
    assert replay(p).host_period_us == pytest.approx(66.0)


def test_cross_stream_dependency_and_side_stream_overlap() -> None:
    # op 1 on stream 1 waits for op 0 (stream 0); op 2 on stream 0 runs beside op 1
    p = program(
        [
            {"kind": EV_LAUNCH, "gap": 0.0, "dur": 1.0, "ops": [0]},
            {"kind": EV_LAUNCH, "gap": 0.0, "dur": 1.0, "ops": [1]},
            {"kind": EV_LAUNCH, "gap": 0.0, "dur": 1.0, "ops": [2]},
        ],
        [{"dur": 50.0}, {"dur": 50.0, "stream": 1, "dep": 0}, {"dur": 50.0}],
    )
    # stream 0 carries 100 us of work per step, stream 1 50 us that overlaps it
    assert replay(p).period_us == pytest.approx(100.0)


def test_queue_depth_holds_the_host_back() -> None:
    # depth 2: the host cannot be more than 2 launches ahead of the GPU
    p = program(
        [{"kind": EV_LAUNCH, "gap": 0.0, "dur": 1.0, "ops": [i]} for i in range(4)],
        [{"dur": 100.0} for _ in range(4)],
        queue_depth=2,
    )
    r = replay(p)
    assert r.period_us == pytest.approx(400.0)
    assert r.host_period_us == pytest.approx(400.0)  # throttled to the GPU's pace


def test_data_wait_is_not_scaled_by_the_host_factor() -> None:
    p = program([{"kind": EV_WORK, "gap": 100.0, "data": 50.0, "dur": 0.0}], [])
    assert replay(p, host_scale=0.5).period_us == pytest.approx(100.0 * 0.5 + 50.0)


def test_host_scale_removes_the_profilers_measured_overhead() -> None:
    # 60 us of host work per step, host-bound; the window's steps took 60 us, the reference steps 30 us:
    # the profiler added 30 us per step, so f = 1 - 30/60
    p = program([{"kind": EV_LAUNCH, "gap": 55.0, "dur": 5.0, "ops": [0]}], [{"dur": 1.0}])
    assert host_work_per_step(p) == pytest.approx(60.0)
    f = calibrate_host_scale(p, 30.0, 60.0, 60.0)
    assert f == pytest.approx(0.5)
    assert replay(p, f).period_us == pytest.approx(30.0)
    assert calibrate_host_scale(p, 60.0, 60.0, 60.0) == 1.0  # no overhead measured
    assert calibrate_host_scale(p, None, None, 60.0) == 1.0  # a raw trace: no reference
    assert calibrate_host_scale(p, 1.0, 1e9, 60.0) == pytest.approx(0.02)  # never below the floor


def test_host_scale_fits_the_rest_once_an_in_process_loaders_time_is_the_runs() -> None:
    # An in-process loader: 400 us in __next__ under the profiler, 100 us outside it (data_scale 0.25,
    # applied by build_program: gap_data holds 100 us), then 60 us of host work; the profiled step 460 us,
    # the unprofiled 130 us. 330 us of profiler cost, 300 of them the loader's: the host work's is 30
    # (f = 1 - 30/60), and the replay then meets the unprofiled step
    p = program(
        [{"kind": EV_LAUNCH, "data": 100.0, "gap": 55.0, "dur": 5.0, "ops": [0]}], [{"dur": 1.0}], data_scale=0.25
    )
    assert data_removed_per_step(p) == pytest.approx(300.0)
    f = calibrate_host_scale(p, 130.0, 460.0, 460.0)
    assert f == pytest.approx(0.5)
    assert replay(p, f).period_us == pytest.approx(130.0)
    # as recorded: the profiled step, profiler cost kept
    assert replay(as_recorded(p)).period_us == pytest.approx(460.0)
    assert as_recorded(p).data_scale == 1.0 and p.gap_data[0] == 100.0
    # with the loader's time as recorded, the profiled wait alone (400 us) is longer than the unprofiled
    # step: the reference reads as a host that ran ahead of the device, no profiler cost comes off the host
    # work, and the replayed baseline stays at the profiled step (3.5x the run's)
    recorded = as_recorded(p)
    assert calibrate_host_scale(recorded, 130.0, 460.0, 460.0) == pytest.approx(1.0)
    assert replay(recorded, 1.0).period_us == pytest.approx(460.0)


def test_host_scale_when_the_reference_steps_ran_ahead_of_the_gpu() -> None:
    # GPU-bound: 100 us of GPU work per step, 60 us of profiled host work. The reference steps took 30 us
    # each on the host, faster than the GPU can run a step: the host ran ahead while the launch queue
    # filled, so 30 us is the host's own pace (f = 30/60), not a steady period to match
    p = program([{"kind": EV_LAUNCH, "gap": 55.0, "dur": 5.0, "ops": [0]}], [{"dur": 100.0}])
    assert replay(p).period_us == pytest.approx(100.0)
    f = calibrate_host_scale(p, 30.0, 100.0, 100.0)
    assert f == pytest.approx(0.5)
    fast_gpu = p.copy()
    fast_gpu.op_dur[:] = 1.0
    assert replay(fast_gpu, f).period_us == pytest.approx(30.0)  # a faster GPU meets the host's own pace
    # the overhead formula would have read 70 us of profiler cost into 60 us of host work (f at the floor)
    assert f > 0.02


def test_copy_returns_an_independent_program() -> None:
    p = program([{"kind": EV_LAUNCH, "gap": 1.0, "dur": 1.0, "ops": [0]}], [{"dur": 5.0}])
    q = p.copy()
    q.op_dur[0] = 99.0
    q.notes.append("edited")
    assert p.op_dur[0] == 5.0 and p.notes == []


def test_a_waits_own_fixed_work_comes_after_the_wait_and_is_not_scaled() -> None:
    # a cudaFree: waits for the 100 us kernel, then frees for 50 us (driver work, fixed); the host factor
    # 0.5 halves the 10 us of host work before the launch and nothing of the free
    p = program(
        [
            {"kind": EV_LAUNCH, "gap": 10.0, "dur": 0.0, "ops": [0]},
            {"kind": EV_SYNC, "gap": 0.0, "dur": 0.0, "post": 0.0, "sync_kind": "allocator"},
        ],
        [{"dur": 100.0}],
        ev_fixed=np.array([0.0, 50.0]),
    )
    assert replay(p, 0.5).period_us == pytest.approx(5.0 + 5.0 + 100.0 + 50.0)


def test_allocator_calls_keep_their_driver_time_under_the_profiler_correction(tmp_path: Any) -> None:
    """SYNTHETIC trace: a cudaMalloc of 400 us and a cudaFree that frees for 300 us after the device drained,
    every step: their time beyond a typical call is the driver's (`ev_fixed`), never scaled."""
    from gpuadvisor.stepmodel import build_step_model
    from gpuadvisor.trace.load import load_trace
    from tests.synth import K_ELEMENTWISE, SyntheticTrace

    st = SyntheticTrace()
    for n in range(5):
        t0 = n * 2000.0
        st.add_step(n + 1, cpu_start=t0, cpu_dur=2000.0, gpu_dur=2000.0)
        st.add_kernel(K_ELEMENTWISE, ts=t0 + 20.0, dur=500.0, launch_ts=t0 + 5.0, op="aten::mul")
        st.add_runtime("cudaFree", t0 + 15.0, 805.0)  # waits for the kernel (ends 520), frees 300 us
        st.add_runtime("cudaMalloc", t0 + 900.0, 400.0)
    model = build_step_model(load_trace(st.write(tmp_path / "t.json.gz")))
    p = model.program
    names = p.ev_name.astype(str)
    fixed = dict(zip(names.tolist(), p.ev_fixed.tolist(), strict=True))
    assert fixed["cudaMalloc"] == pytest.approx(400.0 - model.facts.launch_call_us)
    assert fixed["cudaFree"] == pytest.approx(300.0, abs=1.0)
    # with host work almost free, the step still pays the allocator's driver time
    assert replay(p, 0.02).period_us >= 500.0 + 300.0 + 400.0 - model.facts.launch_call_us
