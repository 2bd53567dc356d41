"""Metrics on hand-computed synthetic cases (tests/synth.py) and the vectorized interval helpers."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuadvisor.hardware import gpu_peak_for
from gpuadvisor.metrics import WINDOW_KEYS, compute_metrics, covered, union_intervals
from gpuadvisor.runinfo import load_run_info
from gpuadvisor.trace.kernels import kernel_family, tensor_core_from_name
from gpuadvisor.trace.load import load_trace
from tests.synth import (
    K_ADAM,
    K_ELEMENTWISE,
    K_FLASH,
    K_NCCL,
    K_NVJET_BF16,
    K_REDUCE,
    K_SIMT_SGEMM,
    K_TENSOROP,
    K_XMMA_BF16,
    K_XMMA_FFMA,
    SyntheticTrace,
)


def test_union_and_covered() -> None:
    s, e = union_intervals([5, 0, 2, 20], [7, 3, 4, 25])
    assert s.tolist() == [0, 5, 20] and e.tolist() == [4, 7, 25]
    assert covered(s, e, np.array([0, 3, 6, 30]), np.array([10, 21, 22, 40])).tolist() == [6, 4, 3, 0]


def _step_trace() -> SyntheticTrace:
    """4 steps of 1000 us. In each step (offset b):
    DataLoader wait [b, b+50); HtoD pageable copy [b+50, b+150) launched at b+45;
    GEMM [b+200, b+500) launched at b+190 (after the copy ended: launch overhead gap 150..200);
    .item(): _local_scalar_dense [b+510, b+800) with its sync; the GPU is idle 500..798, copy 798..799;
    elementwise kernel [b+900, b+950) launched at b+850 (gap 799..900 touches the sync: host_sync)."""
    st = SyntheticTrace()
    for i in range(4):
        b = i * 1000.0
        st.add_step(i + 1, b, 1000, 950)
        st.add_dataloader_wait(b, 50)
        st.add_copy("HtoD", "Pageable", 1_000_000, b + 50, 100, launch_ts=b + 45)
        st.add_kernel(
            K_NVJET_BF16,
            b + 200,
            300,
            launch_ts=b + 190,
            grid=(2, 66, 1),
            block=(384, 1, 1),
            occupancy=0.0,
            op="aten::mm",
            op_input_types=["c10::BFloat16", "c10::BFloat16"],
            op_input_dims=[[1000, 1000], [1000, 1000]],
        )
        st.add_item_read(b + 510, 290, copy_ts=b + 798)
        st.add_kernel(K_ELEMENTWISE, b + 900, 50, launch_ts=b + 850, grid=(66, 1, 1), occupancy=40.0)
    return st


def test_window_metrics_hand_computed(tmp_path: Path) -> None:
    m = load_trace(_step_trace().write(tmp_path / "t.json.gz"))
    mt = compute_metrics(m, None)
    w = mt.window
    assert set(w) == set(WINDOW_KEYS)
    json.dumps(w, allow_nan=False)  # JSON-safe
    assert w["steps_total"] == 4 and w["steps_analyzed"] == 3  # the first step is the outlier
    assert w["step_time_ms"] == pytest.approx(1.0)
    # active = copy 100 + gemm 300 + elementwise 50 = 450 us of 1000 (the 1 us scalar-read copy is not GPU
    # work); busy is compute only: gemm + elementwise = 350; the copy runs alone: 100 of copies exposed
    assert w["gpu_active_fraction"] == pytest.approx(0.450)
    assert w["gpu_busy_fraction"] == pytest.approx(0.350)
    assert w["copy_exposed_fraction"] == pytest.approx(0.1)
    assert w["collective_exposed_fraction"] == 0.0
    assert w["compute_fraction"] == pytest.approx(0.35)
    assert w["copy_pageable_fraction"] == pytest.approx(0.1)
    assert w["copy_htod_fraction"] == pytest.approx(0.1)
    # idle 550 per step (the step model's attribution, gpuadvisor/stepmodel/build.py):
    # [0,50) data loading; [150,200) launch overhead (the GEMM was launched after the GPU went idle);
    # [500,900): the GPU went idle before the host started reading (.item() at 510), so the read costs
    # its wait, the cudaStreamSynchronize [512, 799.5) (287.5 us, host_sync); the rest of the gap
    # (12 + 100.5 us: the host working, then launching the elementwise kernel at 850) is launch
    # overhead (the scalar read's 1 us copy at [798,799) does not split the gap: it is not GPU work);
    # [950,1000): next step's copy was launched at 1045 > 950 -> launch overhead, except in the last
    # step where no GPU work follows -> other.
    assert w["idle_data_loading_fraction"] == pytest.approx(0.05)
    assert w["idle_host_sync_fraction"] == pytest.approx(287.5 / 1000)
    assert w["idle_launch_overhead_fraction"] == pytest.approx((2 * (50 + 112.5 + 50) + (50 + 112.5)) / 3000)
    assert w["idle_other_fraction"] == pytest.approx(50 / 3000)
    assert w["dataloader_wait_fraction"] == pytest.approx(0.05)
    # the host blocked in the read's cudaStreamSynchronize [512, 799.5) (the pageable copy's 5 us call
    # returned before its copy ran: the host did not wait for it)
    assert w["sync_blocked_ms"] == pytest.approx(0.2875)
    assert w["scalar_reads_per_step"] == 1.0
    assert w["kernels_per_step"] == 2.0
    # SM use: gemm 132 blocks -> 1.0 for 300 us, elementwise 66/132 = 0.5 for 50 us
    assert w["sm_use"] == pytest.approx((300 * 1.0 + 50 * 0.5) / 350)
    # occupancy excludes the persistent GEMM's 0 (docs/trace-inputs.md, "Facts from real traces")
    assert w["occupancy_weighted_pct"] == pytest.approx(40.0)
    assert w["tensor_core_fraction"] == 1.0 and w["fp32_matmul_fraction"] == 0.0
    # 2*1000^3 flops per step (from Input Dims; no flops arg) over 1 ms = 2 TFLOP/s; bf16 peak 989.4
    assert w["achieved_tflops"] == pytest.approx(2.0)
    assert w["peak_dtype"] == "bf16" and w["mfu"] == pytest.approx(2.0 / 989.4)
    assert w["memory_capacity_bytes"] == 85_520_809_984
    causes = mt.gaps.groupby("cause")["dur"].sum().to_dict()
    assert causes["host_sync"] == pytest.approx(4 * 287.5)
    ps = mt.per_step
    assert ps["gpu_busy_us"].tolist() == pytest.approx([350.0] * 4)
    assert ps["gpu_active_us"].tolist() == pytest.approx([450.0] * 4)
    assert ps["outlier"].tolist() == [True, False, False, False]
    k = mt.kernels
    assert k["name"].iloc[0] == K_NVJET_BF16 and k["count"].iloc[0] == 3 and k["grid"].iloc[0] == "2,66,1"
    assert k["tensor_core"].iloc[0] is True and k["share"].sum() == pytest.approx(1.0)
    ops = mt.ops.set_index("name")
    assert ops.loc["aten::mm", "count"] == 3


def test_cpu_scalar_reads_are_not_counted(tmp_path: Path) -> None:
    st = SyntheticTrace()
    st.add_step(1, 0, 1000, 1000)
    st.add_kernel(K_ELEMENTWISE, 100, 100)
    st.add_cpu_op("aten::_local_scalar_dense", 300, 3)  # CPU tensor .item(): no CUDA call inside
    w = compute_metrics(load_trace(st.write(tmp_path / "t.json")), None).window
    assert w["scalar_reads_per_step"] == 0.0 and w["sync_blocked_ms"] == 0.0


@pytest.mark.parametrize(
    ("name", "tc"),
    [
        (K_NVJET_BF16, True),
        ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT", True),
        (K_XMMA_BF16, True),
        ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute", True),
        (K_TENSOROP, True),
        ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nt_align4>(Params)", True),
        (K_FLASH, True),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64", True),
        (K_XMMA_FFMA, False),  # docs/trace-inputs.md's trap: xmma in the name, ffma math
        (K_SIMT_SGEMM, False),
        ("void sgemm_largek_lds64<true, false, 5, 5, 4, 4, 4, 34>(float*)", False),
        ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float>)", False),
        ("void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int)", False),
        ("void cublasLt::splitKreduce_kernel<32, 16, int, float>(x)", None),
    ],
)
def test_tensor_core_names(name: str, tc: bool | None) -> None:
    assert tensor_core_from_name(name) is tc


@pytest.mark.parametrize(
    ("name", "family"),
    [
        (K_NVJET_BF16, "gemm"),
        (K_ELEMENTWISE, "elementwise"),
        (K_REDUCE, "reduction"),
        (K_ADAM, "optimizer"),
        (K_NCCL, "collective"),
        (K_FLASH, "attention"),
        ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_ffma", "conv"),
        ("void cudnn::fusion::convert_dq_to_16bits<true>(void const*)", "other"),
        ("triton_red_fused_sum_0", "reduction"),
        ("Memcpy DtoD (Device -> Device)", "memcpy-like"),
        ("some_custom_kernel", "other"),
    ],
)
def test_kernel_families(name: str, family: str) -> None:
    assert kernel_family(name) == family


def _fp32_trace(kernel: str, flops: float | None = None) -> SyntheticTrace:
    st = SyntheticTrace()
    for i in range(3):
        st.add_step(i, i * 1000, 1000, 1000)
        st.add_kernel(
            kernel,
            i * 1000 + 100,
            500,
            op="aten::mm",
            op_input_types=["float", "float"],
            op_input_dims=[[512, 512], [512, 512]],
            op_flops=flops,
        )
    return st


def test_fp32_trap_counts_as_fp32_math(tmp_path: Path) -> None:
    w = compute_metrics(load_trace(_fp32_trace(K_XMMA_FFMA).write(tmp_path / "t.json")), None).window
    assert w["tensor_core_fraction"] == 0.0 and w["fp32_matmul_fraction"] == 1.0 and w["peak_dtype"] == "fp32"


def test_unknown_name_uses_dtype_and_settings(tmp_path: Path) -> None:
    path = _fp32_trace("my_gemm_kernel").write(tmp_path / "t.json")
    no_settings = compute_metrics(load_trace(path), None).window
    assert no_settings["tensor_core_fraction"] == 0.0 and no_settings["fp32_matmul_fraction"] == 0.0
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text("{}")
    (run / "environment.json").write_text(
        json.dumps({"settings": {"allow_tf32_matmul": False, "float32_matmul_precision": "highest"}})
    )
    w = compute_metrics(load_trace(path), load_run_info(run)).window
    assert w["fp32_matmul_fraction"] == 1.0


def test_flops_beyond_fp32_peak_means_tensor_cores(tmp_path: Path) -> None:
    # 1e14 flops in 500 us = 200 TFLOP/s > 1.1 * 67 (FP32 peak): must be tensor cores whatever the name says
    w = compute_metrics(
        load_trace(_fp32_trace(K_SIMT_SGEMM, flops=1e14).write(tmp_path / "t.json")), None
    ).window
    assert w["tensor_core_fraction"] == 1.0


def test_collectives_and_memsets_by_kind(tmp_path: Path) -> None:
    st = SyntheticTrace()
    st.add_step(1, 0, 1000, 1000)
    st.add_kernel(K_NCCL, 100, 200)
    st.add_kernel(K_ELEMENTWISE, 200, 200)  # overlaps the collective 200..300 on another stream
    st.add_memset(600, 100)
    w = compute_metrics(load_trace(st.write(tmp_path / "t.json")), None).window
    assert w["collective_fraction"] == pytest.approx(0.2)
    assert w["compute_fraction"] == pytest.approx(0.2)
    assert w["memset_fraction"] == pytest.approx(0.1)
    assert w["gpu_active_fraction"] == pytest.approx(0.4)  # union, not sum
    # busy is compute only (the elementwise kernel and the memset); the collective's 100 us before the
    # elementwise kernel started is its own time, not GPU busy (issue 30 item 4)
    assert w["gpu_busy_fraction"] == pytest.approx(0.3)
    assert w["collective_exposed_fraction"] == pytest.approx(0.1)
    assert w["copy_exposed_fraction"] == 0.0


def test_cpu_only_trace_gives_none(tmp_path: Path) -> None:
    st = SyntheticTrace(device_properties=None)
    st.add_step(1, 0, 100)
    st.add_cpu_op("aten::mm", 10, 50)
    mt = compute_metrics(load_trace(st.write(tmp_path / "t.json")), None)
    assert mt.window["gpu_busy_fraction"] is None and mt.window["tensor_core_fraction"] is None
    assert mt.window["step_time_ms"] == pytest.approx(0.1)
    assert mt.gpu_peak is None and len(mt.kernels) == 0


def test_gpu_peak_table() -> None:
    h100 = gpu_peak_for("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.peak("bf16") == pytest.approx(989.4) and h100.peak("fp32") == 67.0
    a100 = gpu_peak_for("NVIDIA A100-SXM4-80GB")
    assert a100 is not None and a100.peak("tf32") == 156.0
    h200 = gpu_peak_for("NVIDIA H200", 132)
    assert h200 is not None and h200.peak("tf32") == pytest.approx(494.7)
    assert gpu_peak_for("Some Future GPU") is None and gpu_peak_for(None) is None


def _write_nvml(path: Path) -> None:
    from gpuadvisor import rundir

    rows = [",".join(rundir.NVML_COLUMNS)]
    for t in range(10):
        util = "" if t == 0 else str(50 + t)
        rows.append(
            f"{100 + t},0,GPU-x,{util},10,1,2,350,700,60,1500,1980,2600,1000,2000,4,16,5,16,{4 if t == 5 else 0}"
        )
    path.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))


def test_run_info_memory_and_nvml(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "trace").mkdir(parents=True)
    _step_trace().write(run / "trace" / "rank0.json.gz")
    (run / "manifest.json").write_text(
        json.dumps(
            {
                "capture": {"window_start_unix_s": 105, "window_end_unix_s": 109},
                "traces": ["trace/rank0.json.gz"],
                "steps_seen": 40,
            }
        )
    )
    (run / "environment.json").write_text(
        json.dumps(
            {
                "gpus": [
                    {"cuda_index": 0, "uuid": "GPU-x", "name": "NVIDIA H100 80GB HBM3", "sm_count": 132}
                ],
                "memory": {
                    "peak_allocated_bytes": 10,
                    "peak_reserved_bytes": 40_000_000_000,
                    "total_bytes": 80_000_000_000,
                },
            }
        )
    )
    _write_nvml(run / "nvml.csv.gz")
    info = load_run_info(run)
    assert info.steps_counted == 40 and info.nvml is not None and len(info.nvml) == 10
    assert info.trace_paths == [run / "trace" / "rank0.json.gz"]
    assert any("callsites.json is missing" in n for n in info.notes)
    assert math.isnan(info.nvml["util_gpu_pct"].iloc[0])  # empty cell -> NaN, never 0
    w = compute_metrics(load_trace(info.trace_paths[0]), info).window
    assert w["peak_memory_fraction"] == pytest.approx(0.5)
    assert w["nvml_util_mean_pct"] == pytest.approx(np.mean([51 + t for t in range(9)]))
    assert w["nvml_util_window_mean_pct"] == pytest.approx(np.mean([55, 56, 57, 58, 59]))
    assert w["nvml_sm_clock_ratio"] == pytest.approx(1500 / 1980)
    assert w["nvml_power_fraction"] == pytest.approx(0.5)
    assert w["nvml_throttle_reasons"] == "sw_power_cap"
    assert w["nvml_pcie_gen"] == 4 and w["nvml_pcie_gen_max"] == 5
    assert w["nvml_pcie_rx_mbps"] == pytest.approx(2.0)


def test_host_step_durations_split_outside_and_inside_the_window() -> None:
    from gpuadvisor.manifest import host_step_durations

    # step k runs from boundary k to k+1; steps 0..9 skipped (5..9 are steady), 10-11 warm-up,
    # 12..14 recorded, 15 carries the export, 16.. after the window.
    times = {0: 0.0}
    durations = {k: (0.010 if k < 10 else 0.030 if k <= 15 else 0.011) for k in range(0, 20)}
    for k in range(0, 20):
        times[k + 1] = times[k] + durations[k]
    capture = {
        "skip_steps": 10,
        "first_recorded_step": 12,
        "last_recorded_step": 14,
        "step_ends": [[c, t] for c, t in sorted(times.items()) if c > 0],
    }
    unprofiled, profiled = host_step_durations(capture)
    # 4 steps after the window (16..19, 11 ms): they alone are the reference
    assert sorted(round(d, 3) for d in unprofiled) == [11.0] * 4
    # inside: steps 13..14 (the first recorded step is left out)
    assert [round(d, 3) for d in profiled] == [30.0, 30.0]
    # fewer than 3 steps after the window (a --full run that ended, an old recording): the skipped
    # steps' second half (5..9, 10 ms) and what follows the window (16..17, 11 ms)
    short = {**capture, "step_ends": capture["step_ends"][:18]}
    assert sorted(round(d, 3) for d in host_step_durations(short)[0]) == [10.0] * 5 + [11.0] * 2
    assert host_step_durations({"skip_steps": 10}) == ([], [])


def _ops_frame(rows: list[tuple[float, float, int]]) -> Any:
    """SYNTHETIC cpu ops: (ts, dur, tid)."""
    import pandas as pd

    df = pd.DataFrame(rows, columns=["ts", "dur", "tid"])
    df["end"] = df["ts"] + df["dur"]
    df["tid"] = df["tid"].astype("Int64")
    return df


@pytest.mark.parametrize(
    "rows",
    [
        # nested three deep, siblings, a second thread
        [(0, 100, 1), (10, 50, 1), (20, 10, 1), (40, 15, 1), (70, 20, 1), (5, 30, 2), (10, 5, 2)],
        # zero-length ops at a parent's start, at a child's end, and on their own
        [(0, 100, 1), (0, 0, 1), (0, 40, 1), (40, 0, 1), (40, 30, 1), (100, 0, 1), (100, 5, 1)],
        # a child that outlasts its parent (timestamps rounded): the stack walk decides
        [(0, 50, 1), (10, 45, 1), (20, 5, 1), (60, 10, 1)],
        # identical spans (a record_function and its op)
        [(0, 30, 1), (0, 30, 1), (5, 10, 1)],
    ],
)
def test_op_self_times_match_the_stack_walk(rows: list[tuple[float, float, int]]) -> None:
    import numpy as np

    from gpuadvisor import metrics as m

    ops = _ops_frame(rows)
    order = np.lexsort((-ops["dur"].to_numpy(), ops["ts"].to_numpy(), ops["tid"].fillna(-1).to_numpy()))
    walk = m._op_self_times_walk(ops, order, ops["dur"].to_numpy(dtype=np.float64).copy())
    assert np.allclose(m._op_self_times(ops), walk)


def test_op_self_times_of_a_nest() -> None:
    from gpuadvisor import metrics as m

    ops = _ops_frame([(0, 100, 1), (10, 50, 1), (20, 10, 1), (40, 15, 1), (70, 20, 1)])
    # 100 - (50 + 20); 50 - (10 + 15); leaves keep their time
    assert m._op_self_times(ops).tolist() == [30.0, 25.0, 10.0, 15.0, 20.0]
