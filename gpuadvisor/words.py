"""Counts and numbers in the sentences gpuadvisor prints: the one helper every rule and renderer uses,
so that a count never reads "549.0 blocking reads", "1 loader workers" or "1 trials", and two numbers a
sentence compares never read the same ("0.02 ms instead of 0.02 ms").

Pure functions, no imports beyond the standard library (rules, renderers and the capture all use it).
"""

from __future__ import annotations

import enum
import math

__all__ = [
    "Base",
    "after_steps",
    "apart",
    "change",
    "duration_of",
    "num",
    "of_base",
    "percent",
    "plural",
    "plural_noun",
    "share_of",
]

_ES = ("s", "x", "z", "ch", "sh")


def plural_noun(noun: str) -> str:
    """The plural of an English noun phrase (its last word): read -> reads, remedy -> remedies,
    process -> processes, batch -> batches."""
    head, _, last = noun.rpartition(" ")
    lower = last.lower()
    if lower.endswith("y") and len(last) > 1 and lower[-2] not in "aeiou":
        last = last[:-1] + "ies"
    elif lower.endswith(_ES):
        last += "es"
    else:
        last += "s"
    return f"{head} {last}" if head else last


def num(value: float | int) -> str:
    """A number for people: integral values without a decimal point (549, not 549.0), thousands
    separated (3,100), others to 3 significant digits (12.5, 0.042), never an exponent between 1e-4
    and 1e15; "n/a" for NaN and infinities."""
    number = float(value)
    if not math.isfinite(number):
        return "n/a"
    magnitude = abs(number)
    if number.is_integer() or magnitude >= 1000:
        return f"{number:,.0f}"
    if magnitude >= 100:
        return f"{number:.0f}"
    if magnitude >= 1e-4:
        return f"{number:.3g}"
    return f"{number:.2g}"


def plural(n: float | int, noun: str, plural_form: str | None = None) -> str:
    """"549 blocking reads", "1 loader worker", "2.5 reads", "0 trials": the number (`num`) and the
    noun, singular only for exactly 1. `plural_form` for irregular nouns."""
    many = plural_form if plural_form is not None else plural_noun(noun)
    return f"{num(n)} {noun if float(n) == 1 else many}"


def apart(a: float, b: float, decimals: int = 2, *, extra: int = 2) -> tuple[str, str]:
    """Two numbers a sentence compares ("0.016 ms instead of 0.021 ms", "9.74 -> 9.69 ms per step"):
    both to `decimals` places, or to the fewest more places (at most `extra` more) at which they read
    differently, since "0.02 ms instead of 0.02 ms" says nothing. Numbers that still read the same are
    given at `decimals` places, equal: the caller says so in other words (`change`: "still 4.05 ms")."""
    places = max(0, decimals)
    for digits in range(places, places + max(0, extra) + 1):
        first, second = f"{a:.{digits}f}", f"{b:.{digits}f}"
        if first != second:
            return first, second
    return f"{a:.{places}f}", f"{b:.{places}f}"


def change(before: float, after: float, unit: str, decimals: int = 2) -> str:
    """"14.60 -> 4.50 ms": a number and what it becomes (`apart`); "still 4.05 ms" when it stays the
    same to `decimals` + 2 places, never "4.05 -> 4.05 ms"."""
    first, second = apart(before, after, decimals)
    return f"still {first} {unit}" if first == second else f"{first} -> {second} {unit}"


def after_steps(completed: int) -> str:
    """When a script stopped, counted in steps as its loop counts them (from 0): "after 51 completed
    steps (0-50)", "after 1 completed step (0)", "before its first step completed". A bare "at step 51"
    read as loop index 51 where the loop's index was 50 (its step 50 had completed)."""
    if completed <= 0:
        return "before its first step completed"
    span = "0" if completed == 1 else f"0-{completed - 1}"
    return f"after {plural(completed, 'completed step')} ({span})"


class Base(str, enum.Enum):
    """What a duration or a share is relative to: the one vocabulary of every finding's sentences (issue 42;
    docs/report.md "Step bases"). A sentence that compares numbers says each one's base (or uses one base
    throughout): "44% of the 11.7 ms profiled step; the fix is predicted to save 88% of the mean step",
    "busy 25% of the replayed step", "87.5% of the time per sample"."""

    # a finding's impact without a prediction (its impact_explanation says what it is a share of)
    STEP = "step"
    # the run's mean step, timed without the profiler, stalls and costs between steps included: what a
    # prediction is priced on when the capture timed the run's steps (issue 38)
    MEAN_STEP = "mean step"
    # the median of the steps timed without the profiler (the run's typical step)
    MEDIAN_STEP = "median step"
    # the trace's steps, under the profiler: what a measured share (data wait, sync wait) is of
    PROFILED_STEP = "profiled step"
    # the typical step as the step model replays it (its host work scaled to the steps timed without the
    # profiler when they were): the base of kernel-time shares, and of predictions that could not be
    # carried to the run's mean step (a raw trace; profiled and unprofiled steps that disagree)
    REPLAYED_STEP = "replayed step"
    # time per sample: a change of the batch size changes the step itself
    SAMPLE = "sample"


def of_base(base: Base, duration: str | None = None) -> str:
    """"of the mean step", "of the 5.44 ms mean step", "of the time per sample": what a share is of.
    `duration`, already formatted ("5.44 ms"), says the step's length."""
    if base is Base.SAMPLE:
        return "of the time per sample"
    return f"of the {duration} {base.value}" if duration else f"of the {base.value}"


def percent(fraction: float, digits: int = 0) -> str:
    """A fraction (0..1) as a percentage; a value that is not zero but rounds to zero says "<0.1%"."""
    f = float(fraction)
    if not math.isfinite(f):
        return "n/a"
    smallest = 10.0**-digits
    if 0 < abs(100 * f) < smallest / 2:
        return f"{'>-' if f < 0 else '<'}{smallest:.{digits}f}%"
    return f"{100 * f:.{digits}f}%"


def share_of(fraction: float, base: Base, digits: int = 0) -> str:
    """"44% of the profiled step", "87.5% of the time per sample": a share with its base."""
    return f"{percent(fraction, digits)} {of_base(base)}"


def duration_of(ms: float, base: Base) -> str:
    """"the 11.70 ms profiled step", "0.35 ms per sample": a duration with its base."""
    value = f"{ms:.2f}" if abs(ms) < 100 else num(round(ms))
    if base is Base.SAMPLE:
        return f"{value} ms per sample"
    return f"the {value} ms {base.value}"
