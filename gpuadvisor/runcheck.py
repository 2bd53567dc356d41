"""Every value read from a run directory, checked once, where the run directory is loaded.

A run directory is data (gpuadvisor/received.py): a hand-edited or hostile manifest.json must not
make a loop run for ever (`capture.step_ends` with step 1e9), a wrong type must not reach code that
formats or adds it (an environment.json whose `optimizers` is a number), and a reading out of range must
not reach the metrics. The loaders (`runinfo.load_run_info`, `verify.results.load_verify`, verify's
reading of the recorded command, `diff`'s environment check) pass each JSON document through one of
the `check_*` functions here: every key this version knows is checked against its type and range
(`_MANIFEST`, `_ENVIRONMENT`, `_CALLSITES`, `_VERIFY` below); a value that fails is left out (a
missing key is what every reader already handles) and counted in one note per file that names the
first few; a list longer than its bound is cut; keys this version does not know are kept, minus any
number that is not finite or not representable (a newer writer's fields survive). Ranges are wide
(what a real run can hold), never tuned to the sample runs.

No torch, pandas or numpy here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MAX_NVML_COLUMNS",
    "MAX_NVML_HEADER",
    "MAX_NVML_INFLATED",
    "MAX_STEP",
    "MAX_STEP_ENDS",
    "NVML_RANGES",
    "check_callsites",
    "check_environment",
    "check_manifest",
    "check_verify",
]

MAX_STEP = 10**12  # steps of a run: 1,000 steps a second for 30 years
MAX_STEP_ENDS = 100_000  # the capture writes at most 20,001 step boundaries
MAX_LINE = 10**7  # a line number of a source file
MAX_LIST = 100_000  # any other list of a run-directory document
MAX_BYTES = 2**60  # memory sizes, bytes moved
MAX_COUNT = 2**53  # call counts, parameter counts (exact in float64)
MAX_UNIX_S = 1e11  # wall-clock seconds since the epoch (year 5138)
MAX_SECONDS = 1e7  # a duration (115 days)
MAX_STR = 1 << 20  # characters of one string
MAX_DEPTH = 64  # nesting of unknown keys
EXAMPLES = 3  # dropped values named in a note

# nvml.csv.gz (read with pandas in gpuadvisor/runinfo.py): each reading's range (a value outside it is
# left out), the header's length and columns (the sampler writes 20 in ~250 characters) and the inflated
# text (10 samples a second of 8 GPUs for a day is ~1.3 GB of CSV).
NVML_RANGES: dict[str, tuple[float, float]] = {
    "t_unix_s": (1.0, MAX_UNIX_S),
    "gpu_index": (0, 65535),
    "util_gpu_pct": (0, 100),
    "util_mem_pct": (0, 100),
    "mem_used_bytes": (0, 2**50),
    "mem_total_bytes": (0, 2**50),
    "power_w": (0, 10_000),
    "power_limit_w": (0, 10_000),
    "temp_c": (-60, 200),
    "sm_clock_mhz": (0, 100_000),
    "sm_clock_max_mhz": (0, 100_000),
    "mem_clock_mhz": (0, 100_000),
    "pcie_tx_kbps": (0, 1e9),
    "pcie_rx_kbps": (0, 1e9),
    "pcie_gen": (1, 16),
    "pcie_width": (1, 64),
    "pcie_gen_max": (1, 16),
    "pcie_width_max": (1, 64),
    "throttle_reasons": (0, 2.0**64),
}
MAX_NVML_HEADER = 64 << 10
MAX_NVML_COLUMNS = 1000
MAX_NVML_INFLATED = 4 << 30


class _Drop(Exception):
    """A value that fails its check (the message says why)."""


Check = Callable[[Any, "_Ctx", str], Any]


@dataclass
class _Ctx:
    dropped: list[str] = field(default_factory=list)

    def drop(self, where: str, why: str) -> None:
        self.dropped.append(f"{where}: {why}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _int(lo: int, hi: int) -> Check:
    def check(v: Any, ctx: _Ctx, where: str) -> Any:
        if isinstance(v, float) and v.is_integer() and abs(v) <= MAX_COUNT:
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Drop(f"{_short(v)} is not an integer")
        if not lo <= v <= hi:
            raise _Drop(f"{_short(v)} is out of range [{lo}, {hi:.3g}]")
        return v

    return check


def _num(lo: float, hi: float) -> Check:
    def check(v: Any, ctx: _Ctx, where: str) -> Any:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _Drop(f"{_short(v)} is not a number")
        if isinstance(v, int) and abs(v) > MAX_COUNT:
            raise _Drop(f"{_short(v)} is out of range [{lo:.3g}, {hi:.3g}]")
        if not (math.isfinite(v) and lo <= v <= hi):
            raise _Drop(f"{_short(v)} is out of range [{lo:.3g}, {hi:.3g}]")
        return v

    return check


def _str(max_len: int = MAX_STR) -> Check:
    def check(v: Any, ctx: _Ctx, where: str) -> Any:
        if not isinstance(v, str):
            raise _Drop(f"{_short(v)} is not a string")
        if len(v) > max_len:
            raise _Drop(f"a string of {len(v):,} characters (at most {max_len:,})")
        return v

    return check


def _bool(v: Any, ctx: _Ctx, where: str) -> Any:
    if not isinstance(v, bool):
        raise _Drop(f"{_short(v)} is not true or false")
    return v


def _either(*checks: Check) -> Check:
    def check(v: Any, ctx: _Ctx, where: str) -> Any:
        why = ""
        for c in checks:
            try:
                return c(v, ctx, where)
            except _Drop as err:
                why = str(err)
        raise _Drop(why)

    return check


def _list(item: Check, max_len: int = MAX_LIST) -> Check:
    """A list whose items that fail are left out (each counted), cut at `max_len`."""

    def check(v: Any, ctx: _Ctx, where: str) -> Any:
        if not isinstance(v, list):
            raise _Drop(f"{_short(v)} is not a list")
        if len(v) > max_len:
            ctx.drop(where, f"{len(v):,} entries, only the first {max_len:,} read")
            v = v[:max_len]
        out = []
        for i, x in enumerate(v):
            if x is None:
                ctx.drop(f"{where}[{i}]", "null")
                continue
            kept = _apply(item, x, ctx, f"{where}[{i}]")
            if kept is not _MISSING:
                out.append(kept)
        return out

    return check


def _obj(fields: Mapping[str, Check], *, open_keys: Check | None = None) -> Check:
    """An object: known keys checked (a failing one is left out); other keys kept through
    `open_keys` (default: `_unknown`, which drops only unrepresentable numbers)."""

    def check(v: Any, ctx: _Ctx, where: str) -> Any:
        if not isinstance(v, dict):
            raise _Drop(f"{_short(v)} is not an object")
        out: dict[str, Any] = {}
        for k, x in v.items():
            sub = f"{where}.{k}" if where else str(k)
            spec = fields.get(k, open_keys or _unknown)
            kept = _apply(spec, x, ctx, sub)
            if kept is not _MISSING:
                out[k] = kept
        return out

    return check


def _map(value: Check) -> Check:
    """An object whose every value is checked by `value` (names are free)."""
    return _obj({}, open_keys=value)


_MISSING = object()


def _apply(spec: Check, v: Any, ctx: _Ctx, where: str) -> Any:
    if v is None:
        return None  # every key of these documents may be null (unknown, not recorded)
    try:
        return spec(v, ctx, where)
    except _Drop as err:
        ctx.drop(where, str(err))
        return _MISSING


def _unknown(v: Any, ctx: _Ctx, where: str, depth: int = 0) -> Any:
    """A key this version does not know: kept, except numbers that are not finite or not exact
    (they would reach a renderer's arithmetic), and nesting past MAX_DEPTH."""
    if depth > MAX_DEPTH:
        raise _Drop("nested too deep")
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        if abs(v) > MAX_COUNT:
            raise _Drop(f"{_short(v)} is out of range")
        return v
    if isinstance(v, float):
        if not math.isfinite(v) or abs(v) > 1e200:
            raise _Drop(f"{_short(v)} is out of range")
        return v
    if isinstance(v, list):
        out = []
        for i, x in enumerate(v[:MAX_LIST]):
            try:
                out.append(_unknown(x, ctx, f"{where}[{i}]", depth + 1))
            except _Drop as err:
                ctx.drop(f"{where}[{i}]", str(err))
        return out
    if isinstance(v, dict):
        d: dict[str, Any] = {}
        for k, x in v.items():
            try:
                d[k] = _unknown(x, ctx, f"{where}.{k}", depth + 1)
            except _Drop as err:
                ctx.drop(f"{where}.{k}", str(err))
        return d
    raise _Drop(f"{_short(v)} is not JSON")


# ---------------------------------------------------------------------------------------- shared parts
_STEP = _int(0, MAX_STEP)
_COUNT = _int(0, MAX_COUNT)
_BYTES = _int(0, MAX_BYTES)
_UNIX_S = _num(0.0, MAX_UNIX_S)
_SECONDS = _num(0.0, MAX_SECONDS)
_MS = _num(0.0, MAX_SECONDS * 1e3)
_LINE = _int(0, MAX_LINE)
_STRS = _list(_str())
_GPU = {"cuda_index": _int(0, 1 << 16), "uuid": _str(200), "name": _str(1000)}  # a GPU, as NVML and torch name it
_SNIPPET = _obj({"first_line": _int(1, MAX_LINE), "lines": _list(_str(100_000), 1000)})
_SITE = {
    "file": _str(),
    "line": _LINE,
    "code": _str(),
    "function": _str(),
    "snippet": _SNIPPET,
    "file_sha256": _str(128),
}


def _step_end(v: Any, ctx: _Ctx, where: str) -> Any:
    if not isinstance(v, list) or len(v) != 2:
        raise _Drop(f"{_short(v)} is not a [step, time] pair")
    return [_STEP(v[0], ctx, where), _UNIX_S(v[1], ctx, where)]


def _step_wait(v: Any, ctx: _Ctx, where: str) -> Any:
    if not isinstance(v, list) or len(v) != 2:
        raise _Drop(f"{_short(v)} is not a [step, seconds] pair")
    return [_STEP(v[0], ctx, where), _SECONDS(v[1], ctx, where)]


_CAPTURE = _obj(
    {
        "skip_steps": _STEP,
        "warmup_steps": _STEP,
        "active_steps": _STEP,
        "first_recorded_step": _STEP,
        "last_recorded_step": _STEP,
        "speculation_end_step": _STEP,
        "state": _str(100),
        "short_run": _bool,
        "full": _bool,
        "with_stack": _bool,
        "record_shapes": _bool,
        "with_flops": _bool,
        "cupti_teardown": _bool,
        "window_start_unix_s": _UNIX_S,
        "window_end_unix_s": _UNIX_S,
        "export_seconds": _SECONDS,
        "step_ends": _list(_step_end, MAX_STEP_ENDS),
        "step_events": _list(
            _obj(
                {
                    "kind": _str(100),
                    "step": _STEP,
                    "start_unix_s": _UNIX_S,
                    "seconds": _SECONDS,
                    "bytes": _BYTES,
                    "line": _LINE,
                    "file": _str(),
                    "code": _str(),
                    "num_workers": _int(0, 1 << 20),
                    "first_batch_s": _SECONDS,
                    "forward_calls": _COUNT,
                    "generation": _int(0, 100),
                    "persistent_workers": _bool,
                    "background": _bool,
                }
            ),
            10 * 2000,
        ),
        "step_events_dropped": _COUNT,
        "observe_steps": _STEP,
        "observe_seconds": _SECONDS,
        "settled_at_step": _STEP,
        "settle_capped": _bool,
        "step_data_wait": _list(_step_wait, MAX_STEP_ENDS),
        "provisional": _bool,
        "compile_seconds": _SECONDS,
    }
)

_RANK = _obj(
    {
        "rank": _int(0, 1 << 24),
        "local_rank": _int(0, 1 << 24),
        "node_rank": _int(0, 1 << 24),
        "host": _str(),
        "pid": _int(0, 1 << 32),
        "exit_status": _int(-(1 << 31), 1 << 31),
        "exit_reason": _str(100),
        "signal": _int(0, 1024),
        "failed_at_step": _STEP,
        "failed_at_unix_s": _UNIX_S,
        "ended_unix_s": _UNIX_S,
        "steps_seen": _STEP,
        "step_detection": _str(100),
        "capture_state": _str(100),
        "first_recorded_step": _STEP,
        "last_recorded_step": _STEP,
        "trace": _str(),
        "environment": _str(),
        "callsites": _str(),
        "degraded": _STRS,
        "unprofiled_step_ms": _MS,
        "profiled_step_ms": _MS,
    }
)

_MANIFEST = _obj(
    {
        "schema_version": _int(0, 1 << 20),
        "tool": _obj({"name": _str(), "version": _str()}),
        "command": _STRS,
        "target": _obj({"kind": _str(100), "path_or_name": _str(), "argv": _STRS}),
        "argv_redacted": _list(_int(0, MAX_LIST)),
        "cwd": _str(),
        "python": _str(),
        "started_at": _str(100),
        "ended_at": _str(100),
        "started_unix_s": _UNIX_S,
        "ended_unix_s": _UNIX_S,
        "exit_status": _int(-(1 << 31), 1 << 31),
        "exit_reason": _str(100),
        "signal": _int(0, 1024),
        "failed_at_step": _STEP,
        "step_detection": _str(100),
        "steps_seen": _STEP,
        "capture": _CAPTURE,
        "traces": _list(_str(4096), 1 << 16),
        "nvml": _obj(
            {
                "available": _bool,
                "reason": _str(),
                "file": _str(),
                "interval_s": _num(1e-4, 3600.0),
                "interval_after_window_s": _num(1e-4, 3600.0),
                "samples": _COUNT,
                "gpus": _list(
                    _obj(
                        {
                            **_GPU,
                            "nvml_index": _int(0, 1 << 16),
                            "mig": _bool,
                        }
                    ),
                    1 << 12,
                ),
            }
        ),
        "degraded": _STRS,
        "messages": _STRS,
        "distributed": _obj(
            {
                "launcher": _str(100),
                "nproc_per_node": _either(_str(100), _int(0, 1 << 24)),
                "nnodes": _either(_str(100), _int(0, 1 << 24)),
                "node_rank": _int(0, 1 << 24),
                "world_size": _int(0, 1 << 24),
                "backend": _str(100),
                "failed_rank": _int(0, 1 << 24),
                "launcher_exit_status": _int(-(1 << 31), 1 << 31),
            }
        ),
        "ranks": _list(_RANK, 1 << 16),
    }
)

_FLAG_COUNTS = {"used": _bool, "count": _COUNT}
_ENVIRONMENT = _obj(
    {
        "schema_version": _int(0, 1 << 20),
        "python": _str(1000),
        "platform": _str(1000),
        "cpu_count": _int(1, 1 << 24),
        "torch": _str(1000),
        "cuda_runtime": _str(1000),
        "cudnn": _either(_int(0, MAX_COUNT), _str(1000)),
        "driver": _str(1000),
        "cuda_available": _bool,
        "gpus": _list(
            _obj(
                {
                    **_GPU,
                    "sm_count": _int(1, 1 << 20),
                    "compute_capability": _str(100),
                    "total_memory_bytes": _BYTES,
                }
            ),
            1 << 12,
        ),
        "settings": _obj(
            {
                "allow_tf32_matmul": _bool,
                "allow_tf32_cudnn": _bool,
                "float32_matmul_precision": _str(100),
                "cudnn_benchmark": _bool,
                "cudnn_deterministic": _bool,
                "autocast": _obj({**_FLAG_COUNTS, "dtypes": _STRS, "device_types": _STRS}),
                "grad_scaler": _obj(_FLAG_COUNTS),
                "torch_compile": _obj({**_FLAG_COUNTS, "modes": _STRS, "backends": _STRS}),
                "cuda_graphs": _obj(_FLAG_COUNTS),
                "run_mode": _obj(
                    {
                        "kind": _str(100),
                        "optimizer_steps": _COUNT,
                        "backward_calls": _COUNT,
                        "forward_calls": _COUNT,
                        "forward_calls_no_grad": _COUNT,
                        "forward_calls_inference_mode": _COUNT,
                    }
                ),
                "snapshot": _str(100),
            }
        ),
        "dataloaders": _list(
            _obj(
                {
                    **_SITE,
                    "id": _COUNT,
                    "batch_size": _int(0, 1 << 40),
                    "num_workers": _int(0, 1 << 20),
                    "pin_memory": _bool,
                    "persistent_workers": _bool,
                    "prefetch_factor": _int(0, 1 << 20),
                    "drop_last": _bool,
                    "multiprocessing_context": _str(100),
                    "dataset_type": _str(1000),
                    "dataset_len": _COUNT,
                    "sampler_type": _str(1000),
                    "collate_fn": _str(1000),
                    "iterations": _COUNT,
                    "epochs": _COUNT,
                }
            ),
            10_000,
        ),
        "optimizers": _list(
            _obj(
                {
                    **_SITE,
                    "id": _COUNT,
                    "class": _str(1000),
                    "foreach": _bool,
                    "fused": _bool,
                    "capturable": _bool,
                    "param_tensors": _COUNT,
                    "param_count": _COUNT,
                    "lr": _num(0.0, 1e30),
                    "steps": _STEP,
                    "skipped_steps": _STEP,
                }
            ),
            10_000,
        ),
        "framework": _obj(
            {
                "name": _str(100),
                "version": _str(1000),
                "call_site": _obj(_SITE),
                "call_sites": _map(_obj(_SITE)),
            }
        ),
        "model_calls": _list(
            _obj(
                {
                    **_SITE,
                    "module_class": _str(1000),
                    "top": _bool,
                    "calls": _COUNT,
                    "calls_per_step": _num(0.0, 1e9),
                }
            ),
            10_000,
        ),
        "memory": _obj(
            {
                "peak_allocated_bytes": _BYTES,
                "peak_reserved_bytes": _BYTES,
                "total_bytes": _BYTES,
                "device": _int(0, 1 << 16),
            }
        ),
    }
)

_CALLSITES = _obj(
    {
        "schema_version": _int(0, 1 << 20),
        "steps_counted": _STEP,
        "window_steps": _STEP,
        "callsites": _list(
            _obj(
                {
                    **_SITE,
                    "kind": _str(100),
                    "call": _str(1000),
                    "count": _COUNT,
                    "count_in_window": _COUNT,
                    "per_step": _num(0.0, 1e12),
                    "pinned": _bool,
                    "non_blocking": _bool,
                    "bytes_per_call": _BYTES,
                    "dtype": _str(100),
                }
            )
        ),
    }
)

_SPEEDUP = _num(0.0, 1e9)
_MEASURED = {
    "speedup": _SPEEDUP,
    "low": _SPEEDUP,
    "high": _SPEEDUP,
    "trials": _int(0, 1 << 20),
    "verdict": _str(100),
    "compared_in": _str(100),
    "step_time_ms": _MS,
    "samples_per_s": _num(0.0, 1e15),
    "status": _str(100),
    "reason": _str(),
    "note": _str(),
    "text": _str(),
    "change": _str(),
    "changes": _list(_obj({"text": _str()})),
    "changes_numerics": _bool,
    "changes_batch": _bool,
    "measured_on": _str(),
    "step_times_ms": _list(_MS),
    "samples_per_s_trials": _list(_num(0.0, 1e15)),
    "predicted_speedup": _SPEEDUP,
}
_VERIFY = _obj(
    {
        "schema_version": _int(0, 1 << 20),
        "baseline": _obj(_MEASURED),
        "trials": _list(
            _obj(
                {
                    **_MEASURED,
                    "lever": _str(1000),
                    "label": _str(),
                    "lever_title": _str(),
                    "remedy": _str(1000),
                    "title": _str(),
                    "finding": _str(100),
                    "findings": _STRS,
                    "applies": _STRS,
                    "dropped": _str(),
                    "rung_of": _str(1000),
                }
            )
        ),
        "explore": _obj(
            {
                "levers": _STRS,
                "script_flags": _STRS,
                "best": _obj({**_MEASURED, "levers": _STRS, "labels": _STRS, "remedies": _STRS}),
                "batch": _obj({**_MEASURED, "lever": _str(1000), "label": _str()}),
                "steps": _list(
                    _obj(
                        {
                            "from": _STRS,
                            "chosen": _STRS,
                            "candidates": _list(
                                _obj(
                                    {
                                        **_MEASURED,
                                        "levers": _STRS,
                                        "over_best": _SPEEDUP,
                                        "over_best_low": _SPEEDUP,
                                        "over_best_high": _SPEEDUP,
                                        "over_best_verdict": _str(100),
                                    }
                                )
                            ),
                        }
                    )
                ),
                "rungs": _list(_unknown),
                "stopped": _str(),
                "trials_run": _int(0, 1 << 30),
                "estimate_s_per_trial": _SECONDS,
            }
        ),
        "settings": _obj(
            {
                "trials": _int(0, 1 << 20),
                "budget_s": _SECONDS,
                "warmup_steps": _STEP,
                "steps": _STEP,
                "only": _STRS,
                "num_workers": _int(0, 1 << 20),
            }
        ),
        "notes": _STRS,
        "measured_on": _str(),
        "noise_band": _str(),
        "run": _str(),
        "created_at": _str(100),
        "wall_s": _SECONDS,
        "cuda": _bool,
        "torch": _str(1000),
    }
)


# ---------------------------------------------------------------------------------------- entry points
def _check(spec: Check, name: str, doc: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    ctx = _Ctx()
    kept = _apply(spec, dict(doc), ctx, "")
    out = kept if isinstance(kept, dict) else {}
    _note(name, ctx, notes)
    return out


def _note(name: str, ctx: _Ctx, notes: list[str]) -> None:
    if not ctx.dropped:
        return
    n = len(ctx.dropped)
    shown = "; ".join(ctx.dropped[:EXAMPLES]) + ("; ..." if n > EXAMPLES else "")
    notes.append(
        f"{name}: {n} value{'s' if n != 1 else ''} of the wrong type or out of range left out ({shown})"
    )


def check_manifest(doc: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """manifest.json with every known value checked (see the module docstring), and the capture
    window made consistent: step boundaries in increasing step and time order (a boundary that goes
    back is left out; one recorded twice keeps its later time, as readers of the list always did),
    the recorded window's first step not after its last."""
    out = _check(_MANIFEST, "manifest.json", doc, notes)
    cap = out.get("capture")
    if isinstance(cap, dict):
        ctx = _Ctx()
        ends = cap.get("step_ends")
        if isinstance(ends, list):
            ordered: list[list[Any]] = []
            for i, (step, t) in enumerate(ends):
                if ordered and (step < ordered[-1][0] or t < ordered[-1][1]):
                    ctx.drop(f"capture.step_ends[{i}]", f"[{step}, {t}] goes back from {ordered[-1]}")
                    continue
                if ordered and step == ordered[-1][0]:
                    ordered.pop()  # a boundary taken again (the step detector switched): the later one
                ordered.append([step, t])
            cap["step_ends"] = ordered
        first, last = cap.get("first_recorded_step"), cap.get("last_recorded_step")
        if isinstance(first, int) and isinstance(last, int) and first > last:
            ctx.drop("capture.first_recorded_step", f"{first} is after last_recorded_step {last}")
            cap["first_recorded_step"] = cap["last_recorded_step"] = None
        _note("manifest.json", ctx, notes)
    return out


def check_environment(
    doc: Mapping[str, Any], notes: list[str], name: str = "environment.json"
) -> dict[str, Any]:
    """environment.json with every known value checked (see the module docstring), and a peak of memory
    larger than the GPU's memory (environment.json's total_bytes, else its first GPU's) left out: no
    device allocates more than it has, and the report would print a share of it in the billions of %."""
    out = _check(_ENVIRONMENT, name, doc, notes)
    mem = out.get("memory")
    if isinstance(mem, dict):
        total = mem.get("total_bytes")
        gpus = out.get("gpus")
        if total is None and isinstance(gpus, list) and gpus and isinstance(gpus[0], dict):
            total = gpus[0].get("total_memory_bytes")
        if isinstance(total, int) and total > 0:
            ctx = _Ctx()
            for key in ("peak_allocated_bytes", "peak_reserved_bytes"):
                peak = mem.get(key)
                if isinstance(peak, int) and peak > total:
                    ctx.drop(f"memory.{key}", f"{_short(peak)} is more than the GPU's {total} bytes")
                    del mem[key]
            _note(name, ctx, notes)
    return out


def check_callsites(doc: Mapping[str, Any], notes: list[str], name: str = "callsites.json") -> dict[str, Any]:
    """callsites.json with every known value checked (see the module docstring)."""
    return _check(_CALLSITES, name, doc, notes)


def check_verify(doc: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """verify.json with every known value checked (see the module docstring)."""
    return _check(_VERIFY, "verify.json", doc, notes)
