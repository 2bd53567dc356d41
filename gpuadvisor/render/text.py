"""Terminal summary: the top findings first (severity, impact, location, the recommendation's first
lines), then the key metrics, then the rules that could not run, in one line each.

At most ~100 columns and deterministic (snapshot-testable). Shortened text ends in an ellipsis and
the output says that `-v` (`verbose=True`) prints everything; `color=True` adds ANSI styles (severity
colours, bold rule ids) without changing the text otherwise.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuadvisor.errors import EXIT_RULE_ERRORS
from gpuadvisor.model import Finding, Severity, group_note, summary_line
from gpuadvisor.render._format import (
    Style,
    combined_prediction_text,
    fmt_number,
    fmt_pct,
    headline_step_text,
    mfu_unknown_reason,
    rule_sort_key,
    wrap_clipped,
)
from gpuadvisor.terminal import terminal_safe
from gpuadvisor.words import plural

if TYPE_CHECKING:
    from gpuadvisor.result import AnalysisResult

__all__ = ["render"]

MAX_FINDINGS = 10
MAX_LOCATIONS = 3
MESSAGE_LINES = 3
REC_LINES = 3
WIDTH = 100
_INDENT = "      "

# (window key, label, kind) shown in the metrics line, when present.
_KEY_METRICS: tuple[tuple[str, str, str], ...] = (
    ("step_time_ms", "step", "ms"),
    ("steps_analyzed", "steps analyzed", "int"),
    ("gpu_busy_fraction", "GPU busy (compute)", "pct"),
    ("collective_fraction", "collectives", "pct"),
    ("copy_fraction", "copies", "pct"),
    ("dataloader_wait_fraction", "data wait", "pct"),
    ("sync_blocked_fraction", "host blocked in syncs", "pct"),
    ("kernels_per_step", "kernels/step", "num"),
    ("tensor_core_fraction", "tensor-core matmul", "pct"),
    ("mfu", "MFU", "pct"),
)
_IDLE = (
    ("idle_data_loading_fraction", "data loading"),
    ("idle_host_sync_fraction", "host sync"),
    ("idle_launch_overhead_fraction", "launch overhead"),
    ("idle_other_fraction", "other"),
)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _fmt(value: Any, kind: str) -> str | None:
    number = _num(value)
    if number is None:
        return None
    if kind == "pct":
        return fmt_pct(number, 0 if number >= 0.01 or number == 0 else 1)
    if kind == "ms":
        return f"{number:.2f} ms" if number < 100 else f"{fmt_number(number)} ms"
    if kind == "int":
        return f"{int(number):,}"
    return fmt_number(number)


def _metrics_lines(result: AnalysisResult) -> list[str]:
    metrics: Mapping[str, Any] = result.metrics
    parts = []
    for key, label, kind in _KEY_METRICS:
        if key == "step_time_ms":
            continue  # leads the line, below
        if key == "steps_analyzed":
            continue
        if key == "mfu" and mfu_unknown_reason(metrics, _kernels(result)) is not None:
            if metrics.get("matmul_fraction") is not None:  # GPU math ran, but its FLOPs are unknown
                parts.append(f"{label} n/a")
            continue
        if key == "collective_fraction" and not _num(metrics.get(key)):
            continue  # no collective ran: not a multi-GPU job
        text = _fmt(metrics.get(key), kind)
        if text is not None:
            parts.append(f"{label} {text}")
    lines = []
    step = headline_step_text(metrics)  # the unprofiled step leads; the profiled one said as such
    analyzed = _num(metrics.get("steps_analyzed"))
    lead = f"step {step}" if step is not None else ""
    if parts:
        over = "over the profiled steps" if analyzed is None else (
            f"over the {plural(int(analyzed), 'profiled step')}" if analyzed != 1 else "over the profiled step"
        )
        lead = f"{lead}; {over}: " if lead else f"{over}: "
        lines.append("Metrics: " + lead + ", ".join(parts))
    elif lead:
        lines.append("Metrics: " + lead)
    idle = []
    for key, label in _IDLE:
        number = _num(metrics.get(key))
        if number is not None and number > 0.005:
            idle.append(f"{label} {_fmt(number, 'pct')}")
    if idle:
        lines.append("GPU idle by cause (share of the profiled step): " + ", ".join(idle))
    return lines


def _kernels(result: AnalysisResult) -> Any:
    return getattr(result.metrics_detail, "kernels", None)


def _impact(f: Finding) -> str:
    return "   -" if f.impact is None else f"{100 * f.impact:3.0f}%"


def _finding_lines(
    index: int, f: Finding, *, verbose: bool, style: Style, group: str | None = None
) -> tuple[list[str], bool]:
    """The lines of one finding and whether anything was shortened. `group`: the sentence saying the
    finding ranks by its group's combined gain (`gpuadvisor.model.group_note`)."""
    severity = style.severity(f"{f.severity.value.upper():<6}", f.severity.value)
    lines = [f"{index:2d}. {severity} {_impact(f)}  {style.bold(f.rule)} {f.name}: {f.title}"]
    if group:
        lines.extend(textwrap.wrap(group, WIDTH, initial_indent=_INDENT, subsequent_indent=_INDENT))
    shortened = False
    # two kernels of one name (template arguments apart) read as one place: said once, with the count
    places: dict[tuple[str, str], int] = {}
    for loc in f.locations:
        key = (loc.place(), loc.code or "")
        places[key] = places.get(key, 0) + 1
    items = list(places.items())
    shown = items if verbose else items[:MAX_LOCATIONS]
    for (place, code), n in shown:
        more = f" ({n} kernels of this name)" if n > 1 and place.startswith("kernel ") else ""
        lines.append(f"{_INDENT}{style.dim(place)}{more}{'  ' + code if code else ''}")
    if len(items) > len(shown):
        lines.append(f"{_INDENT}(+{plural(len(items) - len(shown), 'more location')})")
        shortened = True
    limit = None if verbose else MESSAGE_LINES
    message, cut = wrap_clipped(f.message, WIDTH, limit, initial_indent=_INDENT, subsequent_indent=_INDENT)
    lines.extend(message)
    shortened |= cut
    verified = summary_line(f)
    if verified:
        lines.extend(textwrap.wrap(verified, WIDTH, initial_indent=f"{_INDENT}Verify: ", subsequent_indent=_INDENT))
    rec, cut = wrap_clipped(
        f.recommendation,
        WIDTH,
        None if verbose else REC_LINES,
        initial_indent=f"{_INDENT}Fix: ",
        subsequent_indent=f"{_INDENT}     ",
    )
    if rec:
        rec[0] = rec[0].replace("Fix: ", style.bold("Fix:") + " ", 1)
    lines.extend(rec)
    shortened |= cut
    return lines, shortened


def _together_lines(result: AnalysisResult) -> list[str]:
    """The findings' impacts overlap; this line is what their fixes give at once (from the same replay)."""
    text = combined_prediction_text(result.prediction)
    return [*textwrap.wrap(text, WIDTH), ""] if text else []


def render(
    result: AnalysisResult,
    *,
    fail_on: str | None = None,
    max_findings: int = MAX_FINDINGS,
    verbose: bool = False,
    color: bool = False,
    allow_rule_errors: bool = False,
) -> str:
    """The terminal summary as one string (ends with a newline). `verbose`: every finding, location,
    message and recommendation in full. `color`: ANSI styles for a terminal."""
    result = terminal_safe(result)  # names from the trace are data: no escape of theirs reaches the terminal
    style = Style(color)
    env = result.environment
    gpu = env.get("gpu")
    torch = env.get("torch")
    header = f"gpuadvisor: {result.source.path} ({result.source.kind}"
    if len(result.source.ranks) > 1:
        header += f", {len(result.source.ranks)} ranks"
    header += ")"
    if gpu:
        header += f"  GPU: {gpu}"
    if torch:
        header += f"  torch {torch}"
    lines = [style.bold(header)]
    lines.extend(_metrics_lines(result))
    lines.append("")

    real = [f for f in result.findings if f.category.value != "internal"]
    internal = [f for f in result.findings if f.category.value == "internal"]
    shortened = False
    if real:
        counts = {s: sum(1 for f in real if f.severity is s) for s in Severity}
        summary = ", ".join(style.severity(f"{n} {s.value}", s.value) for s, n in counts.items() if n)
        notes = [group_note(f, real) for f in real]
        order = "highest impact first"
        if any(notes):
            order += " (the findings of one problem rank by their fixes' combined gain)"
        lines.append(f"{len(real)} finding{'s' if len(real) != 1 else ''} ({summary}), {order}:")
        lines.append("")
        shown = real if verbose else real[:max_findings]
        for i, (f, note) in enumerate(zip(shown, notes, strict=False), 1):
            finding_lines, cut = _finding_lines(i, f, verbose=verbose, style=style, group=note)
            lines.extend(finding_lines)
            lines.append("")
            shortened |= cut
        if len(real) > len(shown):
            lines.append(f"... and {len(real) - len(shown)} more findings")
            lines.append("")
            shortened = True
        lines.extend(_together_lines(result))
    else:
        lines.append("No findings.")
        lines.append("")
    for f in internal:
        lines.append(f"{style.bad('Internal error:')} {f.message}")

    not_applicable = [r for r in result.rules if r.status == "not_applicable"]
    by_reason: dict[str, list[str]] = {}
    for r in sorted(not_applicable, key=lambda r: rule_sort_key(r.rule)):
        by_reason.setdefault(r.detail, []).append(r.rule)
    for reason, ids in by_reason.items():
        lines.extend(
            textwrap.wrap(f"Not applicable ({reason}): {', '.join(ids)}", WIDTH, subsequent_indent="  ")
        )
    for note in result.notes:
        lines.extend(textwrap.wrap(f"Note: {note}", WIDTH, subsequent_indent="  "))
    if shortened:
        lines.append(
            style.dim("Shortened text ends in …: -v prints everything (also --format json, the HTML report).")
        )
    if fail_on:
        code = result.exit_code(fail_on, allow_rule_errors=allow_rule_errors)
        verdict = style.bad("FAIL") if code != 0 else style.good("pass")
        if code == EXIT_RULE_ERRORS:
            errors = result.rule_errors()
            verdict += (
                f" (exit {EXIT_RULE_ERRORS}: rule{'s' if len(errors) != 1 else ''} {', '.join(errors)} raised, "
                "so the gate did not evaluate every rule; --allow-rule-errors gates on the rules that ran)"
            )
        elif allow_rule_errors and result.rule_errors():
            verdict += f" (on the rules that ran: {', '.join(result.rule_errors())} raised, --allow-rule-errors)"
        lines.append(f"Gate --fail-on {fail_on}: {verdict}")
    return "\n".join(lines).rstrip("\n") + "\n"
