"""SYNTHETIC training runs for the HTML report tests (built by code here, labelled synthetic).

`build_trace` makes a Kineto-shaped trace of a small training loop with planted problems (a
DataLoader wait, a pageable host->device copy, a per-step `.item()`, many small kernels);
`build_run` wraps it in a run directory (manifest, environment, call sites, NVML samples) following
docs/run-directory.md. `hostile=True` puts `<script>` and quote characters into kernel names, file
paths, argv and settings so the escaping tests have something to catch.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path
from typing import Any

from gpuadvisor import rundir
from tests.synth import (
    K_ADAM,
    K_ELEMENTWISE,
    K_NVJET_BF16,
    K_REDUCE,
    SyntheticTrace,
)

HOSTILE = '</script><script>alert("pwn")</script><!-- & \' "'
HOSTILE_KERNEL = f"void evil_kernel<{HOSTILE}>(float*)"
HOSTILE_FILE = f"train{HOSTILE}.py"
STEP_US = 10_000.0
T0_UNIX = 1_750_000_000.0


def build_trace(*, steps: int = 6, small_kernels: int = 40, hostile: bool = False) -> SyntheticTrace:
    """A synthetic trace: `steps` ProfilerSteps of STEP_US each. Per step: a DataLoader wait (GPU idle),
    a pageable HtoD copy, GEMMs and `small_kernels` tiny elementwise kernels, a `.item()` read, an
    AdamW optimizer step."""
    st = SyntheticTrace()
    for n in range(steps):
        s = n * STEP_US
        st.add_step(n + 1, cpu_start=s, cpu_dur=STEP_US - 5, gpu_dur=STEP_US - 100, gpu_start=s + 50)
        st.add_dataloader_wait(s + 10, 1500)
        st.add_copy("HtoD", "Pageable", 12 << 20, ts=s + 1600, dur=900)
        t = s + 2600
        for _ in range(4):
            st.add_kernel(
                K_NVJET_BF16,
                ts=t,
                dur=300,
                grid=(2, 66, 1),
                block=(384, 1, 1),
                occupancy=0.0,
                op="aten::mm",
                op_input_types=["c10::BFloat16", "c10::BFloat16"],
                op_input_dims=[[256, 1024], [1024, 1024]],
                op_flops=2 * 256 * 1024 * 1024,
            )
            t += 305
        for i in range(small_kernels):
            st.add_kernel(
                K_ELEMENTWISE if i % 3 else K_REDUCE,
                ts=t,
                dur=6,
                grid=(4, 1, 1),
                occupancy=12.0,
                op="aten::add",
                op_input_types=["float", "float"],
                op_input_dims=[[256, 1024], [256, 1024]],
            )
            t += 30  # launch-bound: 24 us gaps between tiny kernels
        if hostile:
            st.add_kernel(HOSTILE_KERNEL, ts=t, dur=50, grid=(1, 1, 1), occupancy=3.0)
            t += 60
        st.add_item_read(ts=t + 100, dur=800)
        st.add_optimizer_step(s + 8200, 1500)
        st.add_kernel(K_ADAM, ts=s + 8300, dur=400, grid=(320, 1, 1), occupancy=40.0)
        st.add_memset(s + 8750, 5)
    return st


def _nvml_csv(samples: int, *, mig_util: bool = False) -> bytes:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(rundir.NVML_COLUMNS)
    for i in range(samples):
        t = T0_UNIX + i * 0.1
        busy = 2.0 < i * 0.1 < 6.0
        row: dict[str, Any] = {
            "t_unix_s": f"{t:.3f}",
            "gpu_index": 0,
            "gpu_uuid": "GPU-00000000-synthetic",
            "util_gpu_pct": "" if mig_util else (60 if busy else 0),
            "util_mem_pct": "" if mig_util else (20 if busy else 0),
            "mem_used_bytes": (20 if busy else 1) * 2**30,
            "mem_total_bytes": 80 * 2**30,
            "power_w": 400 if busy else 90,
            "power_limit_w": 700,
            "temp_c": 50,
            "sm_clock_mhz": 1980,
            "sm_clock_max_mhz": 1980,
            "mem_clock_mhz": 2619,
            "pcie_tx_kbps": 1000,
            "pcie_rx_kbps": 900_000 if busy else 0,
            "pcie_gen": 5,
            "pcie_width": 16,
            "pcie_gen_max": 5,
            "pcie_width_max": 16,
            "throttle_reasons": 0,
        }
        w.writerow([row[c] for c in rundir.NVML_COLUMNS])
    return out.getvalue().encode("utf-8")


def build_run(
    root: Path,
    *,
    steps: int = 6,
    small_kernels: int = 40,
    hostile: bool = False,
    nvml: bool = True,
    nvml_samples: int = 100,
) -> Path:
    """A complete synthetic run directory under `root` (returned)."""
    run = root
    (run / rundir.TRACE_DIR).mkdir(parents=True, exist_ok=True)
    build_trace(steps=steps, small_kernels=small_kernels, hostile=hostile).write(rundir.trace_path(run))
    script = HOSTILE_FILE if hostile else "train.py"
    argv = [script, "--name", HOSTILE] if hostile else [script, "--lr", "3e-4"]
    manifest: dict[str, Any] = {
        "schema_version": 1,
        "tool": {"name": "gpuadvisor", "version": "0.1.0"},
        "command": ["gpuadvisor", "profile", *argv],
        "target": {"kind": "script", "path_or_name": script, "argv": argv},
        "cwd": str(run.parent),
        "python": "/usr/bin/python3",
        "started_at": "2025-06-15T15:06:40+00:00",
        "ended_at": "2025-06-15T15:06:50+00:00",
        "started_unix_s": T0_UNIX,
        "ended_unix_s": T0_UNIX + 10,
        "exit_status": 0,
        "exit_reason": "stopped_after_window",
        "signal": None,
        "failed_at_step": None,
        "step_detection": "optimizer_step_hook",
        "steps_seen": 20,
        "capture": {
            "skip_steps": 5,
            "warmup_steps": 2,
            "active_steps": steps,
            "first_recorded_step": 8,
            "last_recorded_step": 8 + steps - 1,
            "state": "complete",
            "full": False,
            "with_stack": False,
            "record_shapes": True,
            "with_flops": True,
            "window_start_unix_s": T0_UNIX + 3.0,
            "window_end_unix_s": T0_UNIX + 4.0,
            "export_seconds": 0.4,
        },
        "traces": ["trace/rank0.json.gz"],
        "nvml": {
            "available": nvml,
            "reason": None if nvml else "NVML library not found (synthetic)",
            "file": "nvml.csv.gz",
            "interval_s": 0.1,
            "samples": nvml_samples if nvml else 0,
            "gpus": [
                {
                    "nvml_index": 0,
                    "uuid": "GPU-00000000-synthetic",
                    "name": "NVIDIA H100 80GB HBM3",
                    "cuda_index": 0,
                    "mig": False,
                }
            ],
        },
        "degraded": [] if nvml else [rundir.DEGRADED_NVML_UNAVAILABLE],
        "messages": [] if nvml else ["NVML unavailable: NVML library not found (synthetic)."],
    }
    environment: dict[str, Any] = {
        "schema_version": 1,
        "python": "3.12.3",
        "platform": "Linux-synthetic-x86_64",
        "cpu_count": 16,
        "torch": "2.11.0+cu130",
        "cuda_runtime": "13.0",
        "cudnn": 91002,
        "driver": "580.159.04",
        "cuda_available": True,
        "gpus": [
            {
                "cuda_index": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": "GPU-00000000-synthetic",
                "sm_count": 132,
                "compute_capability": "9.0",
                "total_memory_bytes": 85520809984,
            }
        ],
        "settings": {
            "allow_tf32_matmul": False,
            "allow_tf32_cudnn": True,
            "float32_matmul_precision": "highest",
            "cudnn_benchmark": False,
            "cudnn_deterministic": False,
            "autocast": {"used": True, "count": 240, "dtypes": ["torch.bfloat16"], "device_types": ["cuda"]},
            "grad_scaler": {"used": False},
            "torch_compile": {"used": False, "count": 0, "modes": [], "backends": []},
            "cuda_graphs": {"used": False, "count": 0},
            "snapshot": "window_end",
        },
        "dataloaders": [
            {
                "id": 0,
                "file": script,
                "line": 25,
                "code": f"loader = DataLoader(ds, batch_size=64)  # {HOSTILE if hostile else 'synthetic'}",
                "batch_size": 64,
                "num_workers": 0,
                "pin_memory": False,
                "persistent_workers": False,
                "prefetch_factor": None,
                "drop_last": False,
                "multiprocessing_context": None,
                "dataset_type": "RandomImages",
                "dataset_len": 50000,
                "sampler_type": "RandomSampler",
                "collate_fn": "default_collate",
                "iterations": 120,
            }
        ],
        "optimizers": [
            {
                "id": 0,
                "class": "AdamW",
                "file": script,
                "line": 31,
                "code": "opt = AdamW(model.parameters())",
                "foreach": None,
                "fused": None,
                "capturable": False,
                "param_tensors": 148,
                "param_count": 85000000,
                "lr": 0.0003,
                "steps": 120,
            }
        ],
        "memory": {
            "peak_allocated_bytes": 20 * 2**30,
            "peak_reserved_bytes": 22 * 2**30,
            "total_bytes": 85520809984,
            "device": 0,
        },
    }
    callsites = {
        "schema_version": 1,
        "steps_counted": 20,
        "callsites": [
            {
                "kind": "host_sync",
                "call": "Tensor.item",
                "file": script,
                "line": 36,
                "function": "main",
                "code": f"hist.append(loss.item())  # {HOSTILE if hostile else 'synthetic'}",
                "count": 20,
                "per_step": 1.0,
            },
            {
                "kind": "host_to_device",
                "call": "Tensor.to",
                "file": script,
                "line": 30,
                "function": "main",
                "code": "x = x.to(device)",
                "count": 20,
                "per_step": 1.0,
                "pinned": False,
                "non_blocking": False,
                "bytes_per_call": 12582912,
                "dtype": "torch.float32",
            },
        ],
    }
    (run / rundir.MANIFEST).write_text(json.dumps(manifest, sort_keys=True), encoding="utf-8")
    (run / rundir.ENVIRONMENT).write_text(json.dumps(environment, sort_keys=True), encoding="utf-8")
    (run / rundir.CALLSITES).write_text(json.dumps(callsites, sort_keys=True), encoding="utf-8")
    if nvml:
        (run / rundir.NVML).write_bytes(gzip.compress(_nvml_csv(nvml_samples), mtime=0))
    return run
