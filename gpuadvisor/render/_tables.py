"""The report's tables as display strings: Top kernels, Top operators, busy time by kernel class, the
environment, the run and the rules (`gpuadvisor.render.html` puts them in the page), and the value
formatting they share with the findings' evidence.

Pure functions of the analysis result; every string is escaped by the template.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuadvisor import rundir
from gpuadvisor.model import jsonable
from gpuadvisor.render._format import (
    clip,
    fmt_bytes,
    fmt_number,
    fmt_pct,
    is_version_key,
    mfu_unknown_reason,
    rule_sort_key,
)
from gpuadvisor.words import plural

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.result import AnalysisResult

TOP_KERNELS = 25
TOP_OPS = 25


def _get(mapping: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(key)
    return mapping


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def fmt_value(value: Any, key: str = "") -> str:
    """Compact human formatting of a JSON-able value. `key` (the dotted name it is shown under) keeps
    version codes as they are (cuda_runtime_version 13000, not "13,000"), gives byte counts units and
    shows a `*_unix_s` time as a UTC clock time. Never JSON: a mapping reads "HtoD: 16.9", a list of
    them "name: A, sm_count: 132; name: B, ...", nested ones in parentheses; an empty one "none"."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)) and _is_unix_time(key, value):
        return _clock(float(value))
    if isinstance(value, int):
        if is_version_key(key):
            return str(value)
        if key.endswith("_bytes") and value >= 1024:
            return f"{fmt_bytes(value)} ({value:,} bytes)"
        return f"{value:,}" if abs(value) >= 10000 else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "—"
        if value == 0:
            return "0"
        return fmt_number(value)
    if isinstance(value, (list, tuple)):
        if not value:
            return "none"
        if all(isinstance(v, Mapping) for v in value):
            return "; ".join(fmt_value(v, key) for v in value)
        return ", ".join(_nested(v, key) for v in value)
    if isinstance(value, Mapping):
        if not value:
            return "none"
        return ", ".join(f"{k}: {_nested(v, f'{key}.{k}' if key else str(k))}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
    return str(value)


def _nested(value: Any, key: str) -> str:
    text = fmt_value(value, key)
    return f"({text})" if isinstance(value, (Mapping, list, tuple)) and value else text


def fmt_lines(value: Any, key: str = "") -> str:
    """The whole of a long value, one line per key or item (a folded evidence row's full text)."""
    if isinstance(value, Mapping) and value:
        return "\n".join(f"{k}: {fmt_value(v, f'{key}.{k}' if key else str(k))}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
    if isinstance(value, (list, tuple)) and value:
        return "\n".join(fmt_value(v, key) for v in value)
    return fmt_value(value, key)


# a `*_unix_s` value after 2001-09-09 (1e9 s) is a time of day, not a duration
_UNIX_EPOCH_FLOOR = 1e9


def _is_unix_time(key: str, value: float) -> bool:
    return key.rsplit(".", 1)[-1].endswith("unix_s") and math.isfinite(value) and value > _UNIX_EPOCH_FLOOR


def _clock(seconds: float) -> str:
    """A unix time as a UTC time of day to the millisecond: 2026-11-23 23:54:29.294 UTC."""
    moment = _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"


def _pct(value: Any) -> str:
    return fmt_pct(_num(value), 1, "—")


def _ms(value: Any) -> str:
    f = _num(value)
    return "—" if f is None else (f"{f:.2f} ms" if f < 100 else f"{f:,.0f} ms")


def short_name(name: str, limit: int = 110) -> str:
    """A long C++ kernel name cut to `limit` characters (the full name stays in a tooltip)."""
    return clip(name, limit)


_KEY_METRICS: tuple[tuple[str, str, str], ...] = (
    ("unprofiled_step_time_ms", "Step time without the profiler (median, host-timed)", "ms"),
    ("step_time_ms", "Step time, profiled (median of the trace's steps)", "ms"),
    ("step_time_p90_ms", "Step time, profiled, p90", "ms"),
    ("gpu_busy_fraction", "GPU busy: compute (kernels and memsets, not collectives or copies)", "pct"),
    ("collective_fraction", "Collectives (NCCL) running", "pct"),
    ("collective_exposed_fraction", "Collectives with no compute beside them", "pct"),
    ("copy_exposed_fraction", "Copies with no kernel beside them", "pct"),
    ("gpu_active_fraction", "GPU running anything", "pct"),
    ("idle_host_sync_fraction", "GPU idle: host syncs", "pct"),
    ("idle_data_loading_fraction", "GPU idle: data loading", "pct"),
    ("idle_launch_overhead_fraction", "GPU idle: launch-bound", "pct"),
    ("copy_fraction", "Copies", "pct"),
    ("kernels_per_step", "Kernels per step", "num"),
    ("kernel_median_us", "Median kernel", "us"),
    ("tensor_core_fraction", "Tensor-core share of matmul time", "pct"),
    ("mfu", "MFU", "pct"),
    ("peak_memory_fraction", "Peak memory / capacity", "pct"),
    ("steps_analyzed", "Steps analyzed", "num"),
)


def _key_metrics(metrics: Mapping[str, Any], kernels: Any = None) -> list[dict[str, str]]:
    rows = []
    mfu_unknown = mfu_unknown_reason(metrics, kernels)
    for key, label, unit in _KEY_METRICS:
        value = metrics.get(key)
        if value is None or (key.startswith("collective_") and not value):
            continue  # no collective ran: not a multi-GPU job
        if key == "mfu" and mfu_unknown:
            text = f"n/a ({mfu_unknown})"
        elif unit == "pct":
            text = _pct(value)
        elif unit == "ms":
            text = _ms(value)
        elif unit == "us":
            text = f"{fmt_value(_num(value))} µs"
        else:
            text = fmt_value(value)
        rows.append({"key": key, "label": label, "value": text})
    return rows


def _records(df: pd.DataFrame | None, limit: int) -> list[dict[str, Any]]:
    if df is None or len(df) == 0:
        return []
    rows: list[dict[str, Any]] = df.head(limit).to_dict(orient="records")
    return rows


def _kernel_rows(kernels: pd.DataFrame | None) -> list[dict[str, Any]]:
    out = []
    for r in _records(kernels, TOP_KERNELS):
        tc = r.get("tensor_core")
        occupancy, occupancy_note = _occupancy_text(r)
        out.append(
            {
                "name": str(r.get("name", "")),
                "short": short_name(str(r.get("name", ""))),
                "family": fmt_value(r.get("family")),
                "total": _ms((_num(r.get("total_us")) or 0.0) / 1000.0),
                "share": _pct(r.get("share")),
                "count": fmt_value(_int(r.get("count"))),
                "mean": f"{fmt_value(_num(r.get('mean_us')))} µs",
                "grid": fmt_value(r.get("grid")),
                "block": fmt_value(r.get("block")),
                "blocks_per_sm": fmt_value(_num(r.get("blocks_per_sm"))),
                "occupancy": occupancy,
                "occupancy_note": occupancy_note,
                "tensor_core": "yes" if tc is True else ("no" if tc is False else "—"),
            }
        )
    return out


def _busy_class_rows(frame: pd.DataFrame | None) -> list[dict[str, str]]:
    """Busy time by kernel class (Metrics.busy_classes), as display strings."""
    if frame is None or len(frame) == 0:
        return []
    rows: list[dict[str, str]] = []
    for r in _records(frame, 20):
        roof = _num(r.get("roofline_fraction"))
        known = _num(r.get("known_fraction"))
        rows.append(
            {
                "cls": str(r.get("class", "")),
                "time": _ms((_num(r.get("time_us")) or 0.0) / 1000.0),
                "share": _pct(r.get("share")),
                "kernels": f"{_num(r.get('kernels')) or 0:.0f}",
                "roofline": _pct(roof) if roof is not None else "n/a",
                "known": _pct(known) if known is not None else "n/a",
                "bound": str(r.get("bound") or ""),
            }
        )
    return rows


OCCUPANCY_NOTE = (
    "Kineto's occupancy estimate reads 0% for library GEMM, convolution and attention kernels that run "
    "few large blocks by design (on Hopper, cuBLAS and cuDNN launch persistent, warp-specialized kernels "
    "of about one block per SM, which fill the GPU): for those, blocks/SM says more."
)


def _occupancy_text(r: Mapping[str, Any]) -> tuple[str, bool]:
    """Kineto's `est. achieved occupancy %`, and whether its 0 needs `OCCUPANCY_NOTE` (a library
    GEMM/conv/attention kernel, whose 0 says nothing): the note goes under the table, not in the cell."""
    occ = _num(r.get("occupancy_pct"))
    if occ is None:
        return "—", False
    return f"{fmt_value(occ)}%", occ == 0 and str(r.get("family")) in ("gemm", "conv", "attention")


def _int(value: Any) -> int | None:
    f = _num(value)
    return None if f is None else int(f)


def _op_rows(ops: pd.DataFrame | None) -> list[dict[str, str]]:
    out = []
    for r in _records(ops, TOP_OPS):
        flops = _num(r.get("flops"))
        out.append(
            {
                "name": str(r.get("name", "")),
                "short": short_name(str(r.get("name", ""))),
                "self": _ms((_num(r.get("self_us")) or 0.0) / 1000.0),
                "total": _ms((_num(r.get("total_us")) or 0.0) / 1000.0),
                "count": fmt_value(_int(r.get("count"))),
                "dims": fmt_value(r.get("input_dims")) if r.get("input_dims") is not None else "—",
                "types": fmt_value(r.get("input_types")) if r.get("input_types") is not None else "—",
                "gflop": f"{flops / 1e9:,.2f}" if flops else "—",
            }
        )
    return out


# A table value longer than this is shown cut (it would take more than three lines of a half-width
# table's value column); its whole text unfolds below it (`kv_row`).
LONG_VALUE = 100

KvRow = tuple[str, str, "str | None"]


def kv_row(key: str, value: Any) -> KvRow:
    """(key, shown text, the whole text one item a line when the shown one is cut) of a key/value table."""
    value = jsonable(value)
    text = fmt_value(value, key)
    if len(text) <= LONG_VALUE:
        return key, text, None
    return key, clip(text, LONG_VALUE), fmt_lines(value, key)


def _flatten(value: Any, prefix: str = "") -> list[KvRow]:
    if isinstance(value, Mapping):
        rows: list[KvRow] = []
        for key in sorted(value, key=str):
            rows.extend(_flatten(value[key], f"{prefix}{key}" if not prefix else f"{prefix}.{key}"))
        return rows
    return [kv_row(prefix, value)]


_SNIPPET_KEYS = ("snippet", "file_sha256")


def _without_snippets(value: Any) -> Any:
    """`value` without the recorded source snippets and file hashes (docs/run-directory.md)."""
    if isinstance(value, Mapping):
        return {k: _without_snippets(v) for k, v in value.items() if k not in _SNIPPET_KEYS}
    if isinstance(value, list):
        return [_without_snippets(v) for v in value]
    return value


def _environment_view(result: AnalysisResult) -> dict[str, Any]:
    run = result.run
    env_json = run.environment if run is not None else {}
    manifest = run.manifest if run is not None else {}
    settings = env_json.get("settings") if isinstance(env_json.get("settings"), dict) else None
    # trace_kind is said once, in words, in the notes ("trace kind: training, NVIDIA GPU ..."): its ~30
    # internal fields are not environment rows; recorded snippets are shown with the findings
    summary = _without_snippets(
        {
            k: v
            for k, v in result.environment.items()
            if k not in ("settings", "dataloaders", "optimizers", "trace_kind")
        }
    )
    loaders = [d for d in env_json.get("dataloaders", []) or [] if isinstance(d, dict)]
    optims = [d for d in env_json.get("optimizers", []) or [] if isinstance(d, dict)]

    def with_site(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        views = []
        for item in items:
            site = f"{item.get('file')}:{item.get('line')}" if item.get("file") else "call site unknown"
            fields = [
                (k, fmt_value(jsonable(v), k))
                for k, v in sorted(item.items())
                if k not in ("file", "line", "code", "id", *_SNIPPET_KEYS)
            ]
            views.append({"site": site, "code": item.get("code"), "fields": fields})
        return views

    run_rows: list[KvRow] = []
    if manifest:
        target = manifest.get("target") if isinstance(manifest.get("target"), dict) else {}
        argv = target.get("argv") if isinstance(target, dict) else None
        for label, value in (
            ("command", " ".join(str(a) for a in manifest.get("command", []) or [])),
            ("script", _get(target, "path_or_name")),
            ("script argv", " ".join(str(a) for a in argv) if isinstance(argv, list) else None),
            ("started", manifest.get("started_at")),
            ("ended", manifest.get("ended_at")),
            ("exit status", manifest.get("exit_status")),
            ("exit reason", manifest.get("exit_reason")),
            ("steps seen", manifest.get("steps_seen")),
            ("step detection", manifest.get("step_detection")),
        ):
            if value not in (None, ""):
                run_rows.append(kv_row(label, value))
        cap = manifest.get("capture")
        if isinstance(cap, dict):
            run_rows.extend(_flatten({k: v for k, v in cap.items() if k not in _CAPTURE_LOGS}, "capture"))
            run_rows.extend((f"capture.{k}", text, None) for k, text in _capture_logs(cap))
        degraded = manifest.get("degraded")
        if isinstance(degraded, list) and degraded:
            run_rows.append(("degraded", ", ".join(str(d) for d in degraded), None))
    return {
        "summary": _flatten(summary),
        "settings": _flatten(settings) if settings else [],
        "dataloaders": with_site(loaders),
        "optimizers": with_site(optims),
        "run": run_rows,
        "memory": _flatten(env_json.get("memory")) if isinstance(env_json.get("memory"), dict) else [],
        "has_run": run is not None,
    }


# per-step logs of the capture (docs/run-directory.md): shown as what they hold, not as their rows of
# unix times
_CAPTURE_LOGS = ("step_ends", "step_events")


def _capture_logs(cap: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The capture's step logs in words: "21 steps timed by the host (steps 1-21)", "gc 5, evaluation 2"."""
    out: list[tuple[str, str]] = []
    ends = cap.get("step_ends")
    if isinstance(ends, list) and ends:
        steps = [int(e[0]) for e in ends if isinstance(e, (list, tuple)) and e and isinstance(e[0], int)]
        span = f" (steps {min(steps)}-{max(steps)})" if steps else ""
        out.append(("step_ends", f"{plural(len(ends), 'step end')} timed by the host{span}"))
    events = cap.get("step_events")
    if isinstance(events, list) and events:
        kinds: dict[str, int] = {}
        for e in events:
            kind = str(e.get("kind")) if isinstance(e, Mapping) else "?"
            kinds[kind] = kinds.get(kind, 0) + 1
        out.append(("step_events", ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))))
    return out


def _run_unavailable(run: Any) -> list[str]:
    """What the run directory lacks, and what that costs. The manifest's messages and the loader's notes
    are not repeated here: the page says them once, in its notes."""
    if run is None:
        return []
    out: list[str] = []
    if not run.environment:
        out.append(
            "Settings: environment.json is missing, so TF32/AMP/cudnn.benchmark, DataLoader and optimizer settings are unknown."
        )
    # an empty list in callsites.json is an answer (the script's own code made no host sync or copy
    # the capture wraps, e.g. on the CPU), not a missing input
    if not run.callsites and not (run.run_dir / rundir.CALLSITES).is_file():
        out.append("Call sites: callsites.json is missing: findings cannot point at source lines.")
    return out


def _rules_view(result: AnalysisResult) -> dict[str, Any]:
    groups: dict[str, list[dict[str, str]]] = {}
    for status in sorted(result.rules, key=lambda r: rule_sort_key(r.rule)):
        groups.setdefault(status.status, []).append(
            {"rule": status.rule, "name": status.name, "detail": status.detail}
        )
    return {
        "groups": [(k, groups[k]) for k in ("ran", "not_applicable", "error", "deselected") if k in groups]
    }
