"""The report's tables as display strings: Top kernels, Top operators, busy time by kernel class, the
environment, the run and the rules (`gpuadvisor.render.html` puts them in the page), and the value
formatting they share with the findings' evidence.

Pure functions of the analysis result; every string is escaped by the template.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuadvisor.model import jsonable
from gpuadvisor.render._format import clip, fmt_bytes, fmt_number, is_version_key, rule_sort_key

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
    version codes as they are (cuda_runtime_version 13000, not "13,000") and gives byte counts units."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
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
        if all(not isinstance(v, (dict, list, tuple)) for v in value):
            return ", ".join(fmt_value(v, key) for v in value) if value else "[]"
        return json.dumps(jsonable(value), sort_keys=True, ensure_ascii=False)
    if isinstance(value, Mapping):
        return json.dumps(jsonable(value), sort_keys=True, ensure_ascii=False)
    return str(value)


def _pct(value: Any) -> str:
    f = _num(value)
    return "—" if f is None else f"{f * 100:.1f}%"


def _ms(value: Any) -> str:
    f = _num(value)
    return "—" if f is None else (f"{f:.2f} ms" if f < 100 else f"{f:,.0f} ms")


def short_name(name: str, limit: int = 110) -> str:
    """A long C++ kernel name cut to `limit` characters (the full name stays in a tooltip)."""
    return clip(name, limit)


def _records(df: pd.DataFrame | None, limit: int) -> list[dict[str, Any]]:
    if df is None or len(df) == 0:
        return []
    rows: list[dict[str, Any]] = df.head(limit).to_dict(orient="records")
    return rows


def _kernel_rows(kernels: pd.DataFrame | None) -> list[dict[str, str]]:
    out = []
    for r in _records(kernels, TOP_KERNELS):
        tc = r.get("tensor_core")
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
                "occupancy": _occupancy_text(r),
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


def _occupancy_text(r: Mapping[str, Any]) -> str:
    """Kineto's `est. achieved occupancy %`, with why a 0 says nothing for library GEMM/conv kernels:
    on Hopper cuBLAS/cuDNN run persistent, warp-specialized kernels sized to about one block per SM,
    which Kineto's estimate puts at 0 although they fill the GPU by design (docs/FIELD_NOTES)."""
    occ = _num(r.get("occupancy_pct"))
    if occ is None:
        return "—"
    if occ == 0 and str(r.get("family")) in ("gemm", "conv", "attention"):
        return (
            "0% (Kineto's estimate reads 0 for library GEMM/conv/attention kernels that run few large "
            "blocks by design: see blocks/SM)"
        )
    return f"{fmt_value(occ)}%"


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


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, Mapping):
        rows: list[tuple[str, str]] = []
        for key in sorted(value, key=str):
            rows.extend(_flatten(value[key], f"{prefix}{key}" if not prefix else f"{prefix}.{key}"))
        return rows
    return [(prefix, fmt_value(jsonable(value), prefix))]


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

    run_rows: list[tuple[str, str]] = []
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
                run_rows.append((label, fmt_value(value)))
        cap = manifest.get("capture")
        if isinstance(cap, dict):
            run_rows.extend(_flatten({k: v for k, v in cap.items()}, "capture"))
        degraded = manifest.get("degraded")
        if isinstance(degraded, list) and degraded:
            run_rows.append(("degraded", ", ".join(str(d) for d in degraded)))
    return {
        "summary": _flatten(summary),
        "settings": _flatten(settings) if settings else [],
        "dataloaders": with_site(loaders),
        "optimizers": with_site(optims),
        "run": run_rows,
        "memory": _flatten(env_json.get("memory")) if isinstance(env_json.get("memory"), dict) else [],
        "has_run": run is not None,
    }


def _run_unavailable(run: Any) -> list[str]:
    if run is None:
        return []
    out: list[str] = []
    if not run.environment:
        out.append(
            "Settings: environment.json is missing, so TF32/AMP/cudnn.benchmark, DataLoader and optimizer settings are unknown."
        )
    if not run.callsites:
        out.append(
            "Call sites: none recorded (callsites.json missing or empty): findings cannot point at source lines."
        )
    messages = run.manifest.get("messages")
    if isinstance(messages, list):
        out.extend(str(m) for m in messages)
    out.extend(str(n) for n in getattr(run, "notes", []) or [])
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
