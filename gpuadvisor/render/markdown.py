"""Markdown summary for a CI job summary (`$GITHUB_STEP_SUMMARY`) or a pull-request comment.

Short by design: a verdict line, a findings table (severity, rule, title, impact, location), the top
recommendation, one metrics line, verify --explore's measured configurations when the run directory has
them (RUN/verify.json: the best, the batch line, the levers measured alone), and how many rules could
not run. Every cell that comes from the
trace or the user's code (kernel names, file paths, source lines) is escaped: `|` cannot break the
table, HTML/Markdown in it renders as text, and `@name`, `https://...` and `www.` get a zero-width
space, so that a name from a received trace mentions nobody and links nowhere in a PR comment.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpuadvisor.model import Finding, Severity, group_note, impact_base
from gpuadvisor.render._ci import fails, fmt_impact, fmt_metric, gate, is_internal
from gpuadvisor.render._explore import ExploreView, explore_section
from gpuadvisor.render._format import (
    clip_code,
    combined_prediction_text,
    headline_step_text,
    mfu_unknown_reason,
    rule_sort_key,
)
from gpuadvisor.terminal import ZWSP, clean_data, strip_controls, terminal_safe, terminal_safe_diff

if TYPE_CHECKING:
    from gpuadvisor.diff import DiffResult
    from gpuadvisor.result import AnalysisResult

__all__ = ["escape", "render", "render_diff"]

MAX_ROWS = 20
MAX_CELL = 120

# The metrics line, in this order, when present (keys of Metrics.window, docs/metrics.md).
_METRICS_LINE = (
    ("step_time_ms", "step time (median)"),
    ("steps_analyzed", "steps analyzed"),
    ("gpu_busy_fraction", "GPU busy (compute)"),
    ("collective_fraction", "collectives"),
    ("copy_fraction", "copies"),
    ("sync_blocked_fraction", "host blocked in syncs"),
    ("dataloader_wait_fraction", "data wait"),
    ("mfu", "MFU"),
    ("gpu_name", "GPU"),
)

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~#])")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")


# what GitHub turns into a mention or a link in plain text: `@name`, `https://...`, `www.`
_AUTOLINK = re.compile(r"(@)(?=[A-Za-z0-9])|(?<=[A-Za-z])(:)(?=//)|(?<![A-Za-z0-9])(www)(\.)", re.IGNORECASE)


def _escape_text(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _AUTOLINK.sub(lambda m: "".join(g for g in m.groups() if g) + ZWSP, text)
    return _MD_SPECIAL.sub(r"\\\1", text)


def escape(text: str, limit: int = MAX_CELL) -> str:
    """One table-cell-safe line. Text outside code spans: HTML entities for & < >, backslash escapes
    for Markdown syntax and `|`. A balanced code span (`x.item()`) stays a code span: its content is
    shown literally by any renderer, so only `|` is escaped in it (a GFM table would split on it)."""
    flat = clip_code(" ".join(str(text).split()), limit)
    out: list[str] = []
    pos = 0
    for match in _CODE_SPAN.finditer(flat):
        out.append(_escape_text(flat[pos : match.start()]))
        fence, body = match.group(1), match.group(2)
        out.append(fence + body.replace("|", "\\|") + fence)
        pos = match.end()
    out.append(_escape_text(flat[pos:]))
    return "".join(out)


def _location(finding: Finding) -> str:
    if not finding.locations:
        return ""
    label = finding.locations[0].label()
    more = len(finding.locations) - 1
    return escape(label) + (f" (+{more} more)" if more > 0 else "")


def _verdict(result: AnalysisResult, threshold: Severity | None) -> str:
    perf = [f for f in result.findings if not is_internal(f)]
    counts = {s: sum(1 for f in perf if f.severity is s) for s in Severity}
    breakdown = ", ".join(f"{counts[s]} {s.value}" for s in Severity if counts[s])
    summary = f"{len(perf)} finding{'s' if len(perf) != 1 else ''}" + (f" ({breakdown})" if breakdown else "")
    if threshold is None:
        return f"**gpuadvisor:** {summary}."
    failing = sum(1 for f in perf if fails(f, threshold))
    if failing:
        return (
            f"❌ **gpuadvisor: FAIL**: {failing} finding{'s' if failing != 1 else ''} at or above "
            f"`{threshold.value}`; {summary}."
        )
    return f"✅ **gpuadvisor: PASS**: nothing at or above `{threshold.value}`; {summary}."


def render(result: AnalysisResult, *, fail_on: str | None = None) -> str:
    """The Markdown summary. `fail_on` (high/medium/low) adds a PASS/FAIL verdict; None: counts only."""
    result = terminal_safe(result)  # often printed to a terminal (and no renderer of Markdown wants escapes)
    threshold = gate(fail_on, None)
    lines: list[str] = ["## gpuadvisor", "", _verdict(result, threshold), ""]

    source = f"Source: {escape(result.source.path, 200)} ({result.source.kind}"
    if len(result.source.ranks) > 1:
        source += f", ranks {', '.join(str(r) for r in result.source.ranks)}"
    lines += [source + ")", ""]

    if result.findings:
        lines += ["| Severity | Rule | Title | Impact | Location |", "|---|---|---|---:|---|"]
        for f in result.findings[:MAX_ROWS]:
            severity = "internal error" if is_internal(f) else f.severity.value
            if fails(f, threshold):
                severity = f"**{severity}**"
            rule = f"{escape(f.rule)} {escape(f.name)}"
            lines.append(
                f"| {severity} | {rule} | {escape(f.title)} | {fmt_impact(f.impact, impact_base(f))} | {_location(f)} |"
            )
        if len(result.findings) > MAX_ROWS:
            lines.append(f"\n_…and {len(result.findings) - MAX_ROWS} more findings (see the full report)._")
        lines.append("")
        notes = [(f, group_note(f, result.findings)) for f in result.findings[:MAX_ROWS]]
        lines += [f"_{escape(f.rule)}: {escape(note, 300)}_" for f, note in notes if note]
        if any(note for _, note in notes):
            lines.append("")
        together = combined_prediction_text(result.prediction)
        if together:
            lines += [escape(together, 400), ""]
        top = next((f for f in result.findings if not is_internal(f)), None)
        if top is not None and top.recommendation:
            lines += [
                f"**Top recommendation** ({escape(top.rule)} {escape(top.name)}): "
                f"{escape(top.recommendation, 600)}",
                "",
            ]
    else:
        lines += ["No findings.", ""]

    mfu_unknown = mfu_unknown_reason(result.metrics, getattr(result.metrics_detail, "kernels", None))
    metrics = [
        f"{label} {'n/a' if key == 'mfu' and mfu_unknown else escape(fmt_metric(key, result.metrics.get(key)))}"
        for key, label in _METRICS_LINE
        if result.metrics.get(key) is not None
        and key != "step_time_ms"
        and not (key == "collective_fraction" and not result.metrics.get(key))
    ]
    step = headline_step_text(result.metrics)  # the unprofiled step leads; the profiled one said as such
    if step is not None:
        metrics.insert(0, f"step time {escape(step)}")
    if metrics:
        lines += ["**Metrics:** " + " · ".join(metrics), ""]

    shown_notes = list(result.notes)
    explore, problem = explore_section(result.verify)
    if explore is not None:
        explore = clean_data(explore)
        lines += _explore_lines(explore)
        shown_notes = [n for n in shown_notes if n != explore.analysis_note]  # the block above says it
    elif problem:
        shown_notes.append(strip_controls(problem))

    not_applicable = sorted((s.rule for s in result.rules if s.status == "not_applicable"), key=rule_sort_key)
    errors = sorted((s.rule for s in result.rules if s.status == "error"), key=rule_sort_key)
    tail: list[str] = []
    if not_applicable:
        tail.append(f"{len(not_applicable)} rule{'s' if len(not_applicable) != 1 else ''} not applicable")
    if errors:
        tail.append(
            f"{len(errors)} rule{'s' if len(errors) != 1 else ''} failed internally ({escape(', '.join(errors))})"
        )
    if tail:
        lines += ["_" + "; ".join(tail) + "._", ""]
    for note in shown_notes:
        lines.append(f"> {escape(note, 300)}")
    if shown_notes:
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _explore_lines(view: ExploreView) -> list[str]:
    """verify --explore in short: the best configuration, the batch line, the levers measured alone."""
    out = ["**Measured configurations (verify --explore)**", ""]
    if view.measured_on:
        out += [f"⚠️ Measured on another machine: {escape(view.measured_on, 200)}, not the recording's.", ""]
    if view.best:
        best = f"Best: {escape(view.best, 300)}"
        if view.best_verdict:
            best += f", {escape(view.best_verdict)}" + (
                f" in {escape(view.best_unit)}" if view.best_unit else ""
            )
        if view.best_changes:
            best += "; changes: " + escape("; ".join(view.best_changes), 600)
        out += [best, ""]
        if view.best_note:
            out += [f"_{escape(view.best_note, 300)}_", ""]
    else:
        out += [f"No best configuration: {escape(view.no_best or '', 300)}", ""]
    if view.batch:
        out += [f"Changes the optimization: {escape(view.batch, 400)}", ""]
    if view.measured:
        out += [
            "| Lever alone | Speed-up (band) | Trials | Verdict | Compared in |",
            "|---|---:|---:|---|---|",
        ]
        for r in view.measured[:MAX_ROWS]:
            label = f"**{escape(r.label)}**" if r.in_best else escape(r.label)
            trials = "" if r.trials is None else str(r.trials)
            out.append(
                f"| {label} | {escape(r.speed or '')} | {trials} | {escape(r.verdict or '')} | "
                f"{escape(r.unit or '')} |"
            )
        out.append("")
    tail = [f"Not measured alone: {view.not_measured_text()}."] if view.not_measured else []
    if view.search_text():
        tail.append(f"{view.search_text()}.")
    if tail:
        out += ["_" + escape(" ".join(tail), 600) + "_", ""]
    return out


def _ms(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.2f} ms" if signed else f"{value:.2f} ms"


def render_diff(result: DiffResult, *, fail_on_regression: float | None = None) -> str:
    """Markdown of a `gpuadvisor diff`: verdict, step time vs noise, per-category table, finding changes."""
    result = terminal_safe_diff(result)
    lines = ["## gpuadvisor diff", ""]
    lines += [f"{escape(result.base_source, 200)} → {escape(result.new_source, 200)}", ""]
    if not result.compatible:
        lines += [
            "> ⚠️ **Environments differ; timings are not comparable:** "
            + escape("; ".join(result.mismatches), 600),
            "",
        ]
    lines += [f"**Verdict:** {escape(result.verdict(fail_on_regression))}", ""]
    st = result.step_time
    if st is not None:
        pct = "n/a" if st.delta_pct is None else f"{st.delta_pct:+.1f}%"
        noise = "unknown" if st.noise_ms is None else f"±{st.noise_ms:.2f} ms"
        lines += [
            f"**Step time (median, {st.basis}):** {_ms(st.base_ms)} → {_ms(st.new_ms)} "
            f"({_ms(st.delta_ms, True)}, {pct}); noise {noise} ({st.base_steps} / {st.new_steps} steps)",
            "",
        ]
    pst = result.profiled_step_time
    if pst is not None:
        pct = "n/a" if pst.delta_pct is None else f"{pst.delta_pct:+.1f}%"
        lines += [
            f"Step time (median, profiled trace): {_ms(pst.base_ms)} → {_ms(pst.new_ms)} "
            f"({_ms(pst.delta_ms, True)}, {pct})",
            "",
        ]
    if result.categories:
        lines += ["| Per profiled step | Base | New | Δ |", "|---|---:|---:|---:|"]
        for c in result.categories:
            lines.append(
                f"| {escape(c.label)} | {_ms(c.base_ms)} | {_ms(c.new_ms)} | {_ms(c.delta_ms, True)} |"
            )
        lines.append("")
    changes = [f for f in result.findings if f.status != "persisting"]
    lines.append(
        f"**Findings:** {len(result.new_findings)} new, {len(result.resolved_findings)} resolved, "
        f"{len(result.persisting_findings)} persisting"
    )
    lines.append("")
    if changes:
        lines += [
            "| Change | Severity | Rule | Title | Location | Impact (base → new) |",
            "|---|---|---|---|---|---|",
        ]
        for f in changes:
            lines.append(
                f"| {f.status} | {f.severity} | {escape(f.rule)} {escape(f.name)} | {escape(f.title)} | "
                f"{escape(f.location)} | {fmt_impact(f.base_impact)} → {fmt_impact(f.new_impact)} |"
            )
        lines.append("")
    for note in result.notes:
        lines.append(f"> {escape(note, 300)}")
    return "\n".join(lines).rstrip("\n") + "\n"
