"""The run directory: a versioned on-disk contract (docs/run-directory.md).

RUN/
  manifest.json       schema_version, tool version, argv, cwd, start/end, exit status, capture window,
                      step detection method, degraded flags
  environment.json    versions, GPUs, settings seen at run time, DataLoaders, optimizers, peak memory
  callsites.json      host-sync and host->device calls in user code (file:line, call, count per step)
  trace/rank0.json.gz the Kineto trace as torch.profiler exported it
  nvml.csv.gz         one row per GPU per sample
  findings.json, report.html, verify.json   derived
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

RUN_SCHEMA_VERSION = 1

MANIFEST = "manifest.json"
ENVIRONMENT = "environment.json"
CALLSITES = "callsites.json"
TRACE_DIR = "trace"
NVML = "nvml.csv.gz"
FINDINGS = "findings.json"
REPORT = "report.html"
VERIFY = "verify.json"  # derived: `gpuadvisor verify`
LOG = "gpuadvisor.log"

# NVML CSV columns, in order. Units in the names; empty cell = not available on this GPU (never 0 for N/A).
NVML_COLUMNS = (
    "t_unix_s",  # wall clock, seconds since the epoch (float)
    "gpu_index",  # NVML index
    "gpu_uuid",
    "util_gpu_pct",  # "a kernel was running" share over NVML's window; empty on MIG
    "util_mem_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "power_w",
    "power_limit_w",
    "temp_c",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "mem_clock_mhz",
    "pcie_tx_kbps",  # NVML reports KB/s
    "pcie_rx_kbps",
    "pcie_gen",
    "pcie_width",
    "pcie_gen_max",
    "pcie_width_max",
    "throttle_reasons",  # NVML clocks event reasons bitmask (integer)
)

# Degraded flags written into manifest["degraded"] (stable strings; the report explains each).
DEGRADED_NVML_UNAVAILABLE = "nvml_unavailable"
DEGRADED_CUDA_UNAVAILABLE = "cuda_unavailable"
DEGRADED_NO_GPU_KERNELS = "no_gpu_kernels_recorded"
DEGRADED_TOO_FEW_STEPS = "too_few_steps"
DEGRADED_SHORT_RUN = "short_run"  # the script ended before the window; the trace holds the first steps
DEGRADED_NO_STEPS_DETECTED = "no_steps_detected"  # no optimizer step, model forward, batch or time step
DEGRADED_SCRIPT_FAILED = "script_failed"  # also "script_failed_at_step_N"
DEGRADED_INTERRUPTED = "interrupted"
DEGRADED_KILLED = "child_killed"
DEGRADED_TRACE_NOT_EXPORTED = "trace_not_exported"
DEGRADED_USER_PROFILER = "user_profiler_conflict"
DEGRADED_OUTPUT_INCOMPLETE = "output_incomplete"


def trace_path(run_dir: Path, rank: int = 0) -> Path:
    return run_dir / TRACE_DIR / f"rank{rank}.json.gz"


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / MANIFEST).is_file()


def site_records(callsites: Sequence[Any], environment: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every record of a run that names a line of user code (docs/run-directory.md, "Recorded source
    lines"): callsites.json rows; environment.json dataloaders, optimizers, model_calls and the
    framework's call sites."""
    yield from (c for c in callsites if isinstance(c, dict))
    for key in ("dataloaders", "optimizers", "model_calls"):
        rows = environment.get(key)
        if isinstance(rows, list):
            yield from (r for r in rows if isinstance(r, dict))
    framework = environment.get("framework")
    if isinstance(framework, dict):
        if isinstance(framework.get("call_site"), dict):
            yield framework["call_site"]
        sites = framework.get("call_sites")
        if isinstance(sites, dict):
            yield from (s for s in sites.values() if isinstance(s, dict))
