"""The self-contained HTML report (`gpuadvisor report`, `AnalysisResult.write_html`).

One file that works offline: plotly.js inlined once (or linked with `cdn=True`), figures built by the
pure functions of `gpuadvisor.render.figures`, text rendered by Jinja2 with autoescaping, and the
machine-readable result (`result.to_dict()`, the `analyze --format json` content) embedded as
`<script type="application/json" id="gpuadvisor-data">`. The raw trace is never embedded; the page
is bounded in size (timeline: a few steps with tiny events merged; NVML: bucket means) and the same
result gives the same bytes except for the generation timestamp.

Hostile strings (kernel names, paths, argv) are escaped by Jinja; JSON inside `<script>` elements
has `<`, `>`, `&`, U+2028 and U+2029 written as `\\uXXXX` escapes so no data can close the element.
No environment variable is read into the page.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import inspect
import json
import os
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gpuadvisor import __version__
from gpuadvisor._atomic import why_not_written, write_text_atomic
from gpuadvisor.errors import OutputLostError
from gpuadvisor.model import Finding, Location, Severity, group_note, impact_base, jsonable, summary_line
from gpuadvisor.render import figures
from gpuadvisor.render._explore import explore_section
from gpuadvisor.render._format import (
    clip_code,
    fmt_bytes,
    headline_step,
    mfu_unknown_reason,
)
from gpuadvisor.render._source import recorded_sites, source_view
from gpuadvisor.render._tables import (
    OCCUPANCY_NOTE,
    _busy_class_rows,
    _environment_view,
    _get,
    _kernel_rows,
    _key_metrics,
    _ms,
    _num,
    _op_rows,
    _pct,
    _rules_view,
    _run_unavailable,
    fmt_value,
    kv_row,
)
from gpuadvisor.words import share_of

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.result import AnalysisResult

MAX_REPORT_BYTES = 6 * 1024 * 1024
# (timeline bars, NVML points per series) tried in order until the page fits MAX_REPORT_BYTES.
_BUDGETS: tuple[tuple[int, int], ...] = ((2500, 600), (1000, 300), (300, 120))
TIMELINE_STEPS = 3

# Step-time breakdown: label -> derived per-step column (see `breakdown_frame`).
BREAKDOWN_COMPONENTS: dict[str, str] = {
    "compute": "bd_compute_us",
    "collectives": "bd_collectives_us",
    "copies": "bd_copies_us",
    "sync wait": "bd_sync_us",
    "data wait": "bd_data_us",
    "launch-bound idle": "bd_launch_us",
    "other": "bd_other_us",
}

_SEVERITY_ORDER = ("high", "medium", "low", "info")


# ---- public API -------------------------------------------------------------------------------------


def write_report(
    result: AnalysisResult,
    path: Path,
    *,
    cdn: bool = False,
    rule_docs: Mapping[str, str] | None = None,
    generated_at: str | None = None,
    shared_plotly: bool = False,
) -> Path:
    """Render the report of `result` and write it to `path` atomically (temporary file + rename).
    `shared_plotly`: link plotly.js from `plotly-<version>.min.js` beside the report (written there
    once, kept for the other reports of the folder) instead of inlining ~4.8 MB into every report.

    Returns the path written. Raises OutputLostError (exit 74) when the file cannot be written."""
    path = Path(path)
    html = render_html(
        result,
        cdn=cdn,
        rule_docs=rule_docs,
        generated_at=generated_at,
        report_dir=path.parent,
        plotly_file=shared_plotly_name() if shared_plotly and not cdn else None,
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if shared_plotly and not cdn:
            write_shared_plotly(path.parent)
        write_text_atomic(path, html)
    except OSError as exc:
        raise OutputLostError(f"could not write the report to {path}: {why_not_written(path, exc)}") from exc
    return path


def render_html(
    result: AnalysisResult,
    *,
    cdn: bool = False,
    generated_at: str | None = None,
    rule_docs: Mapping[str, str] | None = None,
    report_dir: Path | None = None,
    plotly_file: str | None = None,
) -> str:
    """The report of `result` as one HTML string. `report_dir` (the folder the page will be written to)
    makes the links to the trace files relative; without it they are absolute file URIs. `plotly_file`:
    load plotly.js from this file name, relative to the page (`write_shared_plotly`), instead of
    inlining it.

    `generated_at` (shown in the header; default: now, UTC) is the only part that varies between two
    renders of the same result. `rule_docs` maps rule id -> docstring; default: the docstrings of the
    rules the analysis loaded (`result.rule_docs`)."""
    if generated_at is None:
        generated_at = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    docs = dict(rule_docs) if rule_docs is not None else {k: m.doc for k, m in result.rule_docs.items() if m.doc}
    html = ""
    for max_events, max_points in _BUDGETS:
        context = build_context(
            result,
            generated_at=generated_at,
            rule_docs=docs,
            max_events=max_events,
            max_points=max_points,
            report_dir=report_dir,
        )
        html = _render(context, cdn=cdn, plotly_file=plotly_file)
        if len(html.encode("utf-8")) <= MAX_REPORT_BYTES:
            break
    return html


def shared_plotly_name() -> str:
    """The file name of the shared copy of plotly.js (versioned: reports of two plotly versions can share
    a folder)."""
    # lazy: plotly loads when a page is rendered, not for `gpuadvisor report --help`
    from plotly.offline import get_plotlyjs_version

    return f"plotly-{get_plotlyjs_version()}.min.js"


def write_shared_plotly(folder: Path) -> Path:
    """Write the installed plotly.js into `folder` as `shared_plotly_name()` unless it is already there
    (same name, same size): one copy for a folder of reports."""
    # lazy: plotly loads when a page is rendered, not for `gpuadvisor report --help`
    from plotly.offline import get_plotlyjs

    target = folder / shared_plotly_name()
    js = get_plotlyjs()
    if not (target.is_file() and target.stat().st_size == len(js.encode("utf-8"))):
        write_text_atomic(target, js)
    return target


def script_json(value: Any) -> str:
    """JSON for a `<script type="application/json">` element: sorted keys, and `<`, `>`, `&`, U+2028,
    U+2029 as \\u escapes, so `</script>` or `<!--` inside a string cannot end the element."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


# ---- context ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    figure_json: str
    caption: str


def build_context(
    result: AnalysisResult,
    *,
    generated_at: str,
    rule_docs: Mapping[str, str],
    max_events: int = 2500,
    max_points: int = 600,
    report_dir: Path | None = None,
) -> dict[str, Any]:
    """Everything the template shows, as plain values (strings are escaped by the template)."""
    data = result.to_dict()
    metrics = result.metrics
    run = result.run
    trace = result.trace
    detail = result.metrics_detail
    unavailable: list[str] = []
    charts: list[Chart] = []

    # Step breakdown
    per_step = getattr(detail, "per_step", None)
    if per_step is not None and len(per_step):
        frame = breakdown_frame(per_step)
        charts.append(
            Chart(
                "ga-fig-breakdown",
                "Step-time breakdown",
                script_json(figures.step_breakdown_figure(frame, BREAKDOWN_COMPONENTS)),
                "Each recorded (profiled) step split into GPU compute, collectives (NCCL running with "
                "no compute beside it), copies (with no kernel beside them), and GPU idle time by cause "
                "(the host waiting on a sync, on the DataLoader, busy launching kernels, or other); parts "
                "that never occur are left out. Faded steps are left out of the analysis and its medians "
                "(the warm-up outlier).",
            )
        )
    else:
        unavailable.append("Step-time breakdown: no training steps were segmented in the trace.")

    # Timeline
    timeline_steps: list[int] = []
    if trace is not None:
        # the per-step table says which steps are analyzed (the step model's definition)
        window = figures.select_timeline_window(per_step if per_step is not None else trace.steps, TIMELINE_STEPS)
        if window is None:
            unavailable.append("Timeline: the trace has no step with a usable time span.")
        else:
            events = figures.timeline_events(
                window=window,
                kernels=trace.kernels,
                copies=trace.copies,
                memsets=trace.memsets,
                annotations=trace.annotations,
                runtime=trace.runtime,
                cpu_ops=trace.cpu_ops,
                # no GPU took part: its "idle" time is no idle time of a GPU (the lane would be one red band)
                idle=None if _cpu_only(result) else getattr(detail, "gaps", None),
            )
            fig = figures.timeline_figure(events, window, max_events=max_events)
            timeline_steps = [int(s[0]) for s in window.steps]
            shown = ", ".join(str(s[0]) for s in window.steps)
            lanes = (
                "the CPU lanes of a run without a GPU"
                if _cpu_only(result)
                else "CPU lanes on top, GPU lanes below; red bars are GPU idle time"
            )
            charts.append(
                Chart(
                    "ga-fig-timeline",
                    "Timeline",
                    script_json(fig),
                    f"Steps {shown}: {lanes}. "
                    "Drag to zoom, double-click to reset. Where events are too small to draw, runs of "
                    "them become one bar whose length is their summed time, placed in the middle of the "
                    "span they cover (hover says how many and over what span), so idle and busy time "
                    "stay to scale.",
                )
            )
    else:
        unavailable.append("Timeline: no trace was loaded.")

    # NVML
    nvml = getattr(run, "nvml", None) if run is not None else None
    if run is None:
        unavailable.append(
            "NVML, settings and call sites: this is a raw trace, so none were captured "
            "(run the script under `gpuadvisor profile` to get them)."
        )
    elif nvml is None or len(nvml) == 0:
        reason = run.nvml_reason or _get(run.manifest, "nvml", "reason") or "no samples were recorded"
        if not any(str(reason) in note for note in result.notes):  # the capture's own message says it
            unavailable.append(f"NVML unavailable: {reason}.")
    else:
        _shown_panels, missing_panels = figures.nvml_available_panels(nvml)
        t0 = _num(run.manifest.get("started_unix_s"))
        cap = run.manifest.get("capture") if isinstance(run.manifest.get("capture"), dict) else {}
        w0, w1 = _num(_get(cap, "window_start_unix_s")), _num(_get(cap, "window_end_unix_s"))
        window_s = (w0, w1) if w0 is not None and w1 is not None else None
        fig = figures.nvml_figure(nvml, t0=t0, window=window_s, max_points=max_points)
        charts.append(
            Chart(
                "ga-fig-nvml",
                "GPU samples (NVML) over the whole run",
                script_json(fig),
                "Sampled by the parent process; the shaded band is the capture window. NVML utilization "
                "means 'a kernel was running', not how much of the GPU it used.",
            )
        )
        if missing_panels:
            unavailable.append(
                "NVML did not report: " + ", ".join(missing_panels) + " (empty cells in nvml.csv.gz)."
            )
        if window_s is None:
            unavailable.append(
                "Capture window times are missing from manifest.json: the NVML chart is not shaded."
            )

    if trace is not None and not trace.has_gpu_kernels:
        unavailable.append(
            "GPU kernels: none were recorded in the trace (CPU-only trace or CUPTI unavailable)."
        )

    unavailable.extend(_run_unavailable(run))
    ranks_view = ranks_section(result)
    notes = list(result.notes)
    # verify --explore's result (RUN/verify.json as the analysis read it; an unreadable file is noted)
    explore, explore_problem = explore_section(result.verify)
    if explore_problem:
        notes.append(explore_problem)

    return {
        "tool_version": __version__,
        "generated_at": generated_at,
        "source": data["source"],
        "verdict": _verdict(result),
        "key_metrics": _key_metrics(metrics, getattr(detail, "kernels", None)),
        "findings": [_finding_view(f, i, result, rule_docs) for i, f in enumerate(result.findings)],
        "severity_counts": _severity_counts(result.findings),
        "charts": charts,
        "kernels": _kernel_rows(getattr(detail, "kernels", None)),
        "occupancy_note": OCCUPANCY_NOTE,
        "no_kernels": "No GPU kernels: no GPU took part in this run (CPU only)."
        if _cpu_only(result)
        else "No GPU kernels in the analyzed steps.",
        "busy_classes": _busy_class_rows(getattr(detail, "busy_classes", None)),
        "ops": _op_rows(getattr(detail, "ops", None)),
        "environment": _environment_view(result),
        "notes": notes,
        "explore": explore,
        "unavailable": unavailable,
        "rules": _rules_view(result),
        "data_json": script_json(data),
        "synthetic": bool(trace is not None and trace.is_synthetic),
        "ranks": ranks_view,
        "trace_files": trace_files(result, report_dir),
        "timeline_steps": timeline_steps,
    }


def trace_files(result: AnalysisResult, report_dir: Path | None = None) -> list[dict[str, str]]:
    """The Kineto trace file(s) of the analysis, for "open it in Perfetto": rank, absolute path, a link
    (relative to `report_dir` when given, so the link survives moving the run directory), size."""
    out: list[dict[str, str]] = []
    for model in result.traces or ((result.trace,) if result.trace is not None else ()):
        path = Path(model.path)
        absolute = path.resolve()
        href = absolute.as_uri()
        if report_dir is not None:
            with contextlib.suppress(ValueError):  # another drive (Windows): keep the absolute URI
                href = quote(Path(os.path.relpath(absolute, Path(report_dir).resolve())).as_posix())
        try:
            size = fmt_bytes(absolute.stat().st_size)
        except OSError:
            size = "file not found"
        out.append({"rank": str(model.rank), "path": str(absolute), "href": href, "size": size})
    return out


def ranks_section(result: AnalysisResult) -> dict[str, Any] | None:
    """The per-rank section of a multi-rank input (None for one rank): per rank the median step
    time and communication (exposed vs overlapped when NCCL kernels were recorded), and the step time
    of each rank in every step, aligned by ProfilerStep number."""
    cr = result.cross_rank
    if cr is None or len(cr.ranks) < 2:
        return None
    rows: list[dict[str, str]] = []
    for r in cr.ranks:
        n = len(r.analyzed)
        calls = sum(s.collectives for s in r.analyzed) / n if n else None
        exposed = r.median("exposed_comm_us")
        comm = r.median("comm_us")
        overlapped = None if exposed is None or comm is None else max(0.0, comm - exposed)
        rows.append(
            {
                "rank": str(r.rank),
                "step": _ms(_us_to_ms(r.median("step_time_us"))),
                "comm": _ms(_us_to_ms(comm)) if r.comm_source != "none" else "n/a",
                "exposed": _ms(_us_to_ms(exposed)) if r.comm_source == "nccl_kernels" else "n/a",
                "overlapped": _ms(_us_to_ms(overlapped)) if r.comm_source == "nccl_kernels" else "n/a",
                "comm_source": {
                    "nccl_kernels": "NCCL kernels",
                    "host_spans": "host spans (no GPU kernels)",
                }.get(r.comm_source, "none recorded"),
                "data_wait": _ms(_us_to_ms(r.median("dataloader_wait_us"))),
                "compute": _ms(_us_to_ms(r.median("compute_us"))) if r.has_kernels else "n/a",
                "calls": "—" if calls is None else f"{calls:.1f}",
                "straggler": "yes" if cr.straggler is not None and cr.straggler.rank == r.rank else "",
            }
        )
    steps = sorted({s.step for r in cr.ranks for s in r.steps})
    by_rank = [r.by_step() for r in cr.ranks]
    step_rows = []
    for n in steps:
        cells = []
        for b in by_rank:
            s = b.get(n)
            cells.append("—" if s is None else _ms(s.step_time_us / 1000) + (" *" if s.outlier else ""))
        step_rows.append({"step": str(n), "cells": cells})
    return {
        "ranks": [str(r.rank) for r in cr.ranks],
        "rows": rows,
        "steps": step_rows,
        "spread": _pct(cr.step_time_spread),
        "compute_imbalance": "n/a" if cr.compute_imbalance is None else f"{cr.compute_imbalance:.2f}x",
    }


def _us_to_ms(value: float | None) -> float | None:
    return None if value is None else value / 1000


def breakdown_frame(per_step: pd.DataFrame) -> pd.DataFrame:
    """Per-step breakdown columns (us) that add up to the step time.

    compute = the time a compute kernel or memset runs (`gpu_busy_us`); collectives = the time a
    collective (NCCL) kernel runs with no compute beside it (a rank waiting for the others, or
    communication not hidden); copies = the time a copy runs with neither beside it (the step model's
    work classes, gpuadvisor.stepmodel.build.work_time_by_class); idle split by cause as the metrics
    attributed it, and whatever the causes do not cover goes to `other`. (Per-step tables without those
    columns: copies = copy time, compute = the rest of `gpu_busy_us`.)"""

    def col(name: str):  # type: ignore[no-untyped-def]
        return (
            per_step[name].astype(float).fillna(0.0) if name in per_step else 0.0 * per_step.index.to_series()
        )

    out: pd.DataFrame = per_step[[c for c in ("step", "outlier", "analyzed") if c in per_step]].copy()
    if "gpu_active_us" in per_step:
        busy = col("gpu_active_us")
        out["bd_compute_us"] = col("gpu_busy_us").to_numpy()
        out["bd_collectives_us"] = col("collective_exposed_us").to_numpy()
        out["bd_copies_us"] = col("copy_exposed_us").to_numpy()
    else:
        busy = col("gpu_busy_us")
        copies = col("copy_us").clip(upper=busy)
        out["bd_collectives_us"] = 0.0
        out["bd_copies_us"] = copies.to_numpy()
        out["bd_compute_us"] = (busy - copies).clip(lower=0.0).to_numpy()
    out["bd_sync_us"] = col("idle_host_sync_us").to_numpy()
    out["bd_data_us"] = col("idle_data_loading_us").to_numpy()
    out["bd_launch_us"] = col("idle_launch_overhead_us").to_numpy()
    attributed = col("idle_host_sync_us") + col("idle_data_loading_us") + col("idle_launch_overhead_us")
    rest = (col("step_time_us") - busy - attributed).clip(lower=0.0)
    out["bd_other_us"] = rest.to_numpy()
    return out


# ---- pieces of the context ------------------------------------------------------------------------------


def _verdict(result: AnalysisResult) -> dict[str, Any]:
    m = result.metrics
    env = result.environment
    gpu = env.get("gpu") or m.get("gpu_name")
    if not gpu and isinstance(env.get("gpus"), list) and env["gpus"]:
        gpu = _get(env["gpus"][0], "name")
    mfu = _num(m.get("mfu"))
    mfu_unknown = mfu_unknown_reason(m, getattr(result.metrics_detail, "kernels", None))
    actionable = [f for f in result.findings if f.category.value not in ("internal", "capture")]
    serious = [f for f in actionable if f.severity in (Severity.HIGH, Severity.MEDIUM)]
    top = [f for f in serious if f.impact is not None and f.impact > 0][:2] or serious[:1]
    busy = _num(m.get("gpu_busy_fraction"))
    step = headline_step(m)
    if not result.findings:
        headline = "No problem found by the rules that could run on this input."
    elif top and top[0].impact is not None:
        headline = f"Biggest opportunity: {top[0].title}{_gain_suffix(top[0], ' (up to {})')}."
    elif top:
        headline = f"First thing to look at: {top[0].title}."
    elif actionable:
        largest = actionable[0]
        gain = _gain_suffix(largest, " (up to {})", digits=1)
        headline = (
            "Well tuned: no finding of medium or high impact. "
            f"The largest is low: {largest.title}{gain}."
        )
    else:
        headline = "Only capture notes or internal errors were reported; see below."
    return {
        "gpu": str(gpu) if gpu else ("none (CPU-only run)" if _cpu_only(result) else "unknown GPU"),
        "step_time": _ms(step[0]) if step else "—",
        "step_time_note": (step[1] + (f"; {step[2]}" if step[2] else "")) if step else "",
        "gpu_busy": _pct(busy),
        "gpu_busy_value": busy,
        "gpu_busy_note": ", ".join(
            f"{label} {_pct(v)}"
            for label, v in (
                ("collectives", _num(m.get("collective_fraction"))),
                ("copies", _num(m.get("copy_fraction"))),
            )
            if v
        ),
        "mfu": _pct(mfu) if mfu is not None and mfu_unknown is None else "n/a",
        "mfu_note": mfu_unknown,
        "mfu_dtype": m.get("peak_dtype") if mfu_unknown is None else None,
        "headline": headline,
        "well_tuned": bool(actionable) and not serious,
        "actions": [
            {
                "anchor": f"finding-{result.findings.index(f)}",
                "rule": f.rule,
                "title": f.title,
                "severity": f.severity.value,
                "gain": (
                    _gain_suffix(f, "up to {}") if f.impact is not None else "gain not measured"
                ),
                "first_line": inline_code(_first_sentence(f.recommendation)),
            }
            for f in top
        ],
    }


def _cpu_only(result: AnalysisResult) -> bool:
    """No GPU took part: the trace has no device activity and no CUDA device was seen (trace kind)."""
    kind = result.environment.get("trace_kind")
    if isinstance(kind, Mapping) and kind.get("cpu_only"):
        return True
    return result.environment.get("cuda_available") is False and not result.metrics.get("gpu_active_fraction")


def _gain_suffix(f: Finding, template: str, digits: int = 0) -> str:
    """`template` with the finding's impact and its base ("50% of the mean step", "87.5% of the time per
    sample": `gpuadvisor.model.impact_base`), or "" when its title already says that number ("... saves
    81% of the mean step (up to 81% of the mean step)" says it twice)."""
    if f.impact is None:
        return ""
    said = {f"{100 * f.impact:.0f}%", f"{100 * f.impact:.1f}%"}
    if any(s in f.title for s in said):
        return ""
    return template.format(share_of(f.impact, impact_base(f), digits))


def _first_sentence(text: str) -> str:
    line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
    return clip_code(line, 220)


def _severity_counts(findings: Sequence[Finding]) -> list[tuple[str, int]]:
    counts = {s: 0 for s in _SEVERITY_ORDER}
    for f in findings:
        counts[f.severity.value] = counts.get(f.severity.value, 0) + 1
    return [(s, counts[s]) for s in _SEVERITY_ORDER if counts[s]]


def _finding_view(
    f: Finding, index: int, result: AnalysisResult, rule_docs: Mapping[str, str]
) -> dict[str, Any]:
    doc = rule_docs.get(f.rule, "")
    sections = parse_doc(doc) if doc else []
    fix_code = [
        block["text"]
        for sec in sections
        if sec["heading"].lower().startswith("how to fix")
        for block in sec["blocks"]
        if block["kind"] == "code"
    ]
    evidence = jsonable(f.evidence)
    return {
        "anchor": f"finding-{index}",
        "rule": f.rule,
        "name": f.name,
        "category": f.category.value,
        "severity": f.severity.value,
        "impact": f.impact,
        "impact_text": share_of(f.impact, impact_base(f), 1) if f.impact is not None else "not measured",
        "impact_width": 0.0 if f.impact is None else round(max(0.0, min(1.0, f.impact)) * 100, 1),
        "impact_explanation": f.impact_explanation,
        "group_note": group_note(f, result.findings) or "",
        "verified_text": _verified_text(f),
        "title": f.title,
        "message": f.message,
        "evidence": [kv_row(str(k), v) for k, v in evidence.items()]
        if isinstance(evidence, dict)
        else [],
        "locations": [_location_view(loc, result) for loc in f.locations],
        "recommendation": text_blocks(f.recommendation),
        "fix_code": fix_code,
        "doc_sections": sections,
        "doc_summary": doc.splitlines()[0] if doc else "",
        "references": [
            {"text": ref, "href": ref if ref.startswith(("https://", "http://")) else None}
            for ref in f.references
        ],
    }


def _verified_text(f: Finding) -> str | None:
    return summary_line(f)


def _location_view(loc: Location, result: AnalysisResult) -> dict[str, Any]:
    view = source_view(loc, recorded_sites(result.run))
    what = []
    if loc.function:
        what.append(("function", loc.function))
    if loc.op:
        what.append(("op", loc.op))
    if loc.kernel:
        what.append(("kernel", loc.kernel))
    detail = jsonable(dict(loc.detail)) if loc.detail else {}
    return {
        "label": loc.label(),
        "is_source": bool(loc.file),
        "lines": [{"no": ln.no, "text": ln.text, "target": ln.target} for ln in view.lines],
        "source_note": view.note or "",
        "what": what,
        "detail": [(str(k), fmt_value(v, str(k))) for k, v in detail.items()],
    }


_HEADING_RULE = re.compile(r"^\s*([-=~^])\1{2,}\s*$")
_FENCE = re.compile(r"^\s*```")


def text_blocks(text: str) -> list[dict[str, Any]]:
    """Split prose into paragraphs and code blocks: fenced (```) blocks and blocks indented by 4+
    spaces relative to the text are code. The template escapes both."""
    # dedent, not cleandoc: a code block indented under an unindented first paragraph must stay code
    lines = _dedent(text.expandtabs(4)).splitlines() if text else []
    blocks: list[dict[str, Any]] = []
    para: list[str] = []
    i = 0

    def flush_para() -> None:
        if para:
            joined = " ".join(s.strip() for s in para)
            blocks.append({"kind": "p", "text": joined, "segments": inline_code(joined)})
            para.clear()

    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            flush_para()
            j = i + 1
            body = []
            while j < len(lines) and not _FENCE.match(lines[j]):
                body.append(lines[j])
                j += 1
            blocks.append({"kind": "code", "text": _dedent("\n".join(body))})
            i = j + 1
            continue
        if line.startswith(("    ", "\t")) and line.strip():
            flush_para()
            j = i
            body = []
            while j < len(lines) and (lines[j].startswith(("    ", "\t")) or not lines[j].strip()):
                body.append(lines[j])
                j += 1
            while body and not body[-1].strip():
                body.pop()
            blocks.append({"kind": "code", "text": _dedent("\n".join(body))})
            i = j
            continue
        if not line.strip():
            flush_para()
        elif line.lstrip().startswith(("- ", "* ")) and para:
            flush_para()
            para.append(line)
        else:
            para.append(line)
        i += 1
    flush_para()
    return blocks


def inline_code(text: str) -> list[tuple[bool, str]]:
    """Split `text` on single backticks: [(is_code, piece)]. An unmatched last backtick stays text."""
    parts = text.split("`")
    tail = ""
    if len(parts) % 2 == 0:  # an unmatched last backtick (e.g. text cut short): keep it as text
        tail = "`" + parts.pop()
    out = [(i % 2 == 1, part) for i, part in enumerate(parts) if part]
    if tail:
        out.append((False, tail))
    return out


def _dedent(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def parse_doc(doc: str) -> list[dict[str, Any]]:
    """A rule docstring -> [{heading, blocks}] (first section: the summary, heading "").
    Sections are underlined headings (`Why it matters` over `-----`)."""
    lines = inspect.cleandoc(doc).splitlines()
    sections: list[tuple[str, list[str]]] = [("", [])]
    i = 0
    while i < len(lines):
        if i + 1 < len(lines) and lines[i].strip() and _HEADING_RULE.match(lines[i + 1]):
            sections.append((lines[i].strip(), []))
            i += 2
            continue
        sections[-1][1].append(lines[i])
        i += 1
    out = []
    for heading, body in sections:
        blocks = text_blocks("\n".join(body))
        if heading or blocks:
            out.append({"heading": heading, "blocks": blocks})
    return out


# ---- rendering -------------------------------------------------------------------------------------------


def _environment() -> Any:
    # lazy: jinja2 loads when a page is rendered, not for `gpuadvisor report --help`
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpuadvisor", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env


def _render(context: Mapping[str, Any], *, cdn: bool, plotly_file: str | None = None) -> str:
    # lazy: markupsafe and plotly load when a page is rendered, not for `gpuadvisor report --help`
    import markupsafe
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    env = _environment()
    template = env.get_template("report.html.j2")
    static = Path(__file__).resolve().parent.parent / "templates"
    css = (static / "report.css").read_text(encoding="utf-8")
    js = (static / "report.js").read_text(encoding="utf-8")
    if cdn:
        plotly_tag = markupsafe.Markup(
            '<script src="https://cdn.plot.ly/plotly-{}.min.js" charset="utf-8"></script>'
        ).format(get_plotlyjs_version())
    elif plotly_file:
        plotly_tag = markupsafe.Markup('<script src="{}" charset="utf-8"></script>').format(plotly_file)
    else:
        plotly_tag = (
            markupsafe.Markup("<script>") + markupsafe.Markup(get_plotlyjs()) + markupsafe.Markup("</script>")
        )
    charts = [
        {"id": c.id, "title": c.title, "caption": c.caption, "figure_json": markupsafe.Markup(c.figure_json)}
        for c in context["charts"]
    ]
    rendered: str = template.render(
        **{**context, "charts": charts, "data_json": markupsafe.Markup(context["data_json"])},
        css=markupsafe.Markup(css),
        report_js=markupsafe.Markup(js),
        plotly_tag=plotly_tag,
    )
    return rendered
