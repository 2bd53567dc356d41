"""Formatting shared by the terminal, Markdown, CI and HTML renderers and the commands: rule order,
human numbers, text shortened with an ellipsis, and terminal colour (NO_COLOR / FORCE_COLOR).

Pure functions of their arguments except `color_enabled`, which reads the environment and the stream.
"""

from __future__ import annotations

import math
import os
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any

import click

from gpuadvisor.model import prediction_step
from gpuadvisor.words import change, num, percent

__all__ = [
    "ELLIPSIS",
    "Style",
    "clip",
    "clip_code",
    "color_enabled",
    "combined_prediction_text",
    "fmt_bytes",
    "fmt_number",
    "fmt_pct",
    "is_version_key",
    "mfu_unknown_reason",
    "rule_sort_key",
    "wrap_clipped",
]

ELLIPSIS = "…"

_RULE_ID = re.compile(r"^([A-Za-z]*)(\d+)(.*)$")


def rule_sort_key(rule_id: str) -> tuple[str, int, str]:
    """Natural order of rule ids: GA001, GA101, ..., GA902, GA1001 (not GA1001 before GA101)."""
    match = _RULE_ID.match(rule_id)
    if match is None:
        return (rule_id, -1, "")
    return (match.group(1).upper(), int(match.group(2)), match.group(3))


def fmt_number(value: float | int) -> str:
    """A count or measurement for people: 3,100 (not 3.1e+03), 54, 12.5, 0.042; never an exponent
    between 1e-4 and 1e15 (`gpuadvisor.words.num`, the one number format of every sentence)."""
    return num(value)


def fmt_ms(value: float) -> str:
    """Milliseconds for people: 9.35 ms, 1,234 ms."""
    return f"{value:.2f} ms" if abs(value) < 100 else f"{fmt_number(value)} ms"


def headline_step(metrics: Mapping[str, Any]) -> tuple[float, str, str | None] | None:
    """(ms, what it is, what is said beside it or None) of the step time a report leads with: the mean
    step of the run as the user pays for it (`run_mean_step_ms`: the steps timed without the profiler
    after start-up, stalls and costs between steps included) with the median beside it and the
    profiled step said as such; else the unprofiled median (`unprofiled_step_time_ms`); without either
    (a raw trace) the profiled step, labelled as such. When the profiled and unprofiled steps disagree
    (`step_times_disagree`) the profiled step leads and the disagreement is said. None when no step time
    is known."""

    def num(key: str) -> float | None:
        v = metrics.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
            return None
        return float(v)

    mean, median = num("run_mean_step_ms"), num("run_median_step_ms")
    unprofiled, profiled = num("unprofiled_step_time_ms"), num("step_time_ms")
    if metrics.get("step_times_disagree") is True and profiled is not None:
        beside = f"{fmt_ms(unprofiled)} without the profiler: the two disagree" if unprofiled is not None else None
        return profiled, "profiled", beside
    if mean is not None:
        parts = []
        if median is not None and abs(mean - median) >= 0.005 * max(mean, 1e-9):
            parts.append(f"median {fmt_ms(median)}")
        stall = stall_text(metrics)
        if stall:
            parts.append(stall)
        if profiled is not None:
            parts.append(f"{fmt_ms(profiled)} profiled")
        return mean, "mean of the run", "; ".join(parts) or None
    if unprofiled is not None:
        return unprofiled, "unprofiled", None if profiled is None else f"{fmt_ms(profiled)} profiled"
    if profiled is not None:
        return profiled, "profiled", None
    return None


def stall_text(metrics: Mapping[str, Any]) -> str | None:
    """"every 4th step waits 200.0 ms more" (or "3 of 80 steps wait ..."): the run's stall pattern."""
    n, excess = metrics.get("run_stall_steps"), metrics.get("run_stall_excess_ms")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0 or not isinstance(excess, (int, float)):
        return None
    period, timed = metrics.get("run_stall_period"), metrics.get("run_stall_steps_timed")
    cause = " for data" if metrics.get("run_stall_cause") == "data" else ""
    if isinstance(period, int) and not isinstance(period, bool) and period > 1:
        return f"every {_ordinal(period)} step waits{cause} {fmt_ms(float(excess))} more"
    of = f" of {timed}" if isinstance(timed, int) and not isinstance(timed, bool) else ""
    return f"{n}{of} steps wait{cause} {fmt_ms(float(excess))} more"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def headline_step_text(metrics: Mapping[str, Any]) -> str | None:
    """"117.00 ms (mean of the run; median 70.00 ms; every 4th step waits ...; 71.90 ms profiled)",
    "9.35 ms (unprofiled; 28.37 ms profiled)" or "28.37 ms (profiled)"."""
    step = headline_step(metrics)
    if step is None:
        return None
    ms, what, other = step
    return f"{fmt_ms(ms)} ({what}{'; ' + other if other else ''})"


def fmt_pct(fraction: Any, digits: int = 1, unknown: str = "n/a") -> str:
    """A fraction (0..1) as a percentage; `unknown` for None, NaN, bools and non-numbers. A value that is
    not zero but would print as zero at `digits` places says so: "<0.1%" (an MFU of 0.0004 is not 0.0%)."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        return unknown
    f = float(fraction)
    if not math.isfinite(f):
        return unknown
    return percent(f, digits)


def fmt_bytes(value: float | int) -> str:
    """Bytes in binary units: 943.0 MiB, 139.8 GiB."""
    number = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(number) < 1024 or unit == "TiB":
            return f"{number:.0f} {unit}" if unit == "B" else f"{number:.1f} {unit}"
        number /= 1024
    return f"{number:.1f} TiB"  # pragma: no cover - the loop always returns


def is_version_key(key: str) -> bool:
    """Keys whose integer values are version codes (cuda_runtime_version 13000, cudnn 91900): shown as
    they are, never with thousands separators."""
    last = key.rsplit(".", 1)[-1].lower()
    return "version" in last or last in {"cudnn", "nccl", "cupti", "driver"}


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, ending in an ellipsis when cut."""
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + ELLIPSIS


def clip_code(text: str, limit: int) -> str:
    """`clip`, and a code span the cut falls inside is closed after the ellipsis (`x.item()…`), so a
    shortened span still reads as code and no renderer takes the rest of the page for code."""
    short = clip(text, limit)
    return short + "`" if short != text and short.count("`") % 2 else short


def combined_prediction_text(prediction: Mapping[str, Any] | None) -> str | None:
    """"With the fixes of GA102, GA101, GA103 together (predicted by replaying the steps): 19.23 -> 1.92
    ms per mean step (10.04x) (the step `gpuadvisor.model.prediction_step` names). The findings' impacts overlap: they do not add up." (`AnalysisResult.prediction`);
    None for a single fix (its finding says what it gives) or an incomplete prediction."""
    p = prediction
    if not p or len(p.get("rules") or ()) < 2:
        return None
    rules = ", ".join(str(r) for r in p["rules"])
    try:
        return (
            f"With the fixes of {rules} together (predicted by replaying the steps): "
            f"{change(float(p['baseline_step_ms']), float(p['predicted_step_ms']), 'ms')} "
            f"per {prediction_step(p).value} "
            f"({float(p['speedup']):.2f}x). The findings' impacts overlap: they do not add up."
        )
    except (KeyError, TypeError, ValueError):
        return None


def wrap_clipped(
    text: str,
    width: int,
    max_lines: int | None,
    *,
    initial_indent: str = "",
    subsequent_indent: str = "",
) -> tuple[list[str], bool]:
    """Word-wrap `text` to `width` columns and keep at most `max_lines` lines (None: all).

    Returns (lines, shortened). A shortened text ends with an ellipsis on its last kept line, so a
    reader never takes a cut sentence for a whole one."""
    lines = textwrap.wrap(
        " ".join(text.split()),
        width,
        initial_indent=initial_indent,
        subsequent_indent=subsequent_indent,
        break_long_words=False,  # never split a path, a kernel name or `non_blocking=True`
        break_on_hyphens=False,
    )
    if max_lines is None or len(lines) <= max_lines:
        return lines, False
    kept = lines[:max_lines]
    last = kept[-1]
    while len(last) + 2 > width and " " in last.strip():
        last = last[: last.rstrip().rfind(" ")]
    kept[-1] = last.rstrip() + " " + ELLIPSIS
    return kept, True


def color_enabled(stream: IO[str] | None = None, environ: dict[str, str] | None = None) -> bool:
    """Colour on a terminal: NO_COLOR (any non-empty value) turns it off, FORCE_COLOR (non-empty, not
    "0") turns it on even when the output is piped, else only when `stream` is a TTY and TERM is not
    "dumb"."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR", ""):
        return False
    force = env.get("FORCE_COLOR", "")
    if force and force.lower() not in ("0", "false", "no"):
        return True
    if env.get("TERM", "") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (ValueError, OSError):  # a closed stream
        return False


_SEVERITY_COLORS = {"high": "red", "medium": "yellow", "low": "blue", "info": "bright_black"}


@dataclass(frozen=True)
class Style:
    """ANSI styling that is a no-op when disabled, so the plain text stays byte-identical."""

    enabled: bool = False

    def _s(self, text: str, **kw: Any) -> str:
        if not self.enabled or not text:
            return text

        return click.style(text, **kw)

    def severity(self, text: str, severity: str) -> str:
        high = severity.lower() == "high"
        return self._s(text, fg=_SEVERITY_COLORS.get(severity.lower()), bold=True if high else None)

    def bold(self, text: str) -> str:
        return self._s(text, bold=True)

    def dim(self, text: str) -> str:
        return self._s(text, dim=True)

    def good(self, text: str) -> str:
        return self._s(text, fg="green")

    def bad(self, text: str) -> str:
        return self._s(text, fg="red", bold=True)


# Convolution kernels above this share of kernel time make the MFU meaningless when the trace carries
# no FLOP count for them (torch writes none for convolutions): the MFU would count only the matmuls.
_CONV_SHARE_UNCOUNTED = 0.05


def mfu_unknown_reason(metrics: Mapping[str, Any], kernels: Any = None) -> str | None:
    """Why the MFU cannot be shown as a number (None: it can).

    `metrics` are the window metrics; `kernels` the per-kernel table of the analysis (columns
    `family`, `share`), when there is one. The MFU counts the FLOPs of matmul ops only (docs/metrics.md):
    with convolutions a real part of the GPU time, it is not the utilization of the run."""
    if metrics.get("mfu") is None:
        if metrics.get("achieved_tflops") is None:
            return "FLOPs not recorded"
        return "no GPU ran (CPU-only run)" if not metrics.get("gpu_name") else "no peak for this GPU"
    try:
        if kernels is not None and len(kernels) and "family" in kernels and "share" in kernels:
            conv = float(kernels.loc[kernels["family"] == "conv", "share"].sum())
            if conv >= _CONV_SHARE_UNCOUNTED:
                return f"convolution FLOPs not recorded ({100 * conv:.0f}% of kernel time)"
    except (TypeError, ValueError, KeyError):
        return None
    return None
