"""verify --explore's result as the reports show it: the HTML report's "Measured configurations"
section and the Markdown summary's compact form, read from RUN/verify.json (docs/verify.md).

Every number shown is a value of verify.json, formatted, never computed here. A key that is absent
or null is left out; a key whose value has another type than the schema's makes the whole section
unshown, with a note that says which key (`explore_section`): a report never breaks on verify.json.
"""

from __future__ import annotations

import dataclasses
import decimal
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuadvisor.words import plural

__all__ = [
    "ExploreShapeError",
    "ExploreView",
    "GrowthRound",
    "LeverRow",
    "RoundCandidate",
    "explore_note",
    "explore_section",
    "explore_view",
]


class ExploreShapeError(ValueError):
    """A verify.json value whose type is not the schema's; the message names the key."""


@dataclass(frozen=True)
class LeverRow:
    """One lever of `trials[]`, measured alone (`status` ok) or not (skipped, failed)."""

    lever: str
    label: str
    title: str | None  # lever_title
    status: str
    speedup: float | None
    speed: str | None  # "1.86x (1.85-1.86)"
    trials: int | None
    verdict: str | None  # "within noise"
    unit: str | None  # "step time", "samples/s"
    reason: str | None
    note: str | None
    dropped: str | None  # worked alone, failed in a combination
    in_best: bool


@dataclass(frozen=True)
class RoundCandidate:
    """One combination tried in a growth round (`explore.steps[].candidates[]`)."""

    added: str  # the labels of its levers not in the round's starting configuration
    status: str
    trials: int | None
    vs_baseline: str | None  # "2.38x"
    over_best: str | None  # "1.00x (1.00-1.00)"
    over_best_verdict: str | None
    reason: str | None
    chosen: bool


@dataclass(frozen=True)
class GrowthRound:
    number: int
    start: str  # labels of `from`, "the baseline" when empty
    candidates: tuple[RoundCandidate, ...]
    chosen: str | None  # labels of `chosen`; None: nothing added beyond noise


@dataclass(frozen=True)
class ExploreView:
    """What the section shows; strings are plain text (the renderers escape them)."""

    best: str | None  # "bf16_autocast + channels_last: 1.74x (1.70-1.78, 3 trials)"
    best_verdict: str | None
    best_unit: str | None
    best_changes: tuple[str, ...]
    best_note: str | None
    no_best: str | None  # why there is no best configuration (explore.stopped)
    batch: str | None  # explore.batch.text: a different batch, reported beside the best
    measured: tuple[LeverRow, ...]  # status ok, fastest first
    not_measured: tuple[LeverRow, ...]  # failed first, then skipped, in verify.json's order
    rounds: tuple[GrowthRound, ...]
    stopped: str | None
    trials_run: int | None
    budget_s: float | None
    estimate_s_per_trial: float | None
    measured_on: str | None  # set when measured on another machine than the recording's
    baseline: str | None  # "55.63 ms per step, 2,301 samples/s (median of 3 trials)"
    noise_band: str | None
    analysis_note: str | None  # the one-line note the analysis made of it (`explore_note`)

    @property
    def failed(self) -> tuple[LeverRow, ...]:
        return tuple(r for r in self.not_measured if r.status == "failed")

    @property
    def skipped(self) -> tuple[LeverRow, ...]:
        return tuple(r for r in self.not_measured if r.status != "failed")

    def not_measured_text(self) -> str:
        """ "1 failed, 14 skipped": how many levers were not measured alone, by status."""
        counts: dict[str, int] = {}
        for r in self.not_measured:
            counts[r.status] = counts.get(r.status, 0) + 1
        return ", ".join(f"{n} {status}" for status, n in counts.items())

    def search_text(self) -> str:
        """ "Search stopped: ...; 16 trials run; budget 240 s; about 27 s per trial (...)"; "" when none."""
        parts = []
        if self.stopped:
            parts.append(f"search stopped: {self.stopped}")
        if self.trials_run is not None:
            parts.append(f"{plural(self.trials_run, 'trial')} run")
        if self.budget_s is not None:
            parts.append(f"budget {_seconds(self.budget_s)}")
        if self.estimate_s_per_trial is not None:
            parts.append(f"about {_seconds(self.estimate_s_per_trial)} per trial (verify's estimate)")
        text = "; ".join(parts)
        return text[:1].upper() + text[1:]


def explore_note(doc: Mapping[str, Any]) -> str | None:
    """verify --explore's result in one sentence: "verify --explore: best measured configuration:
    bf16_autocast + channels_last: 1.74x (1.70-1.78, 3 trials); changes: ..."; None without explore."""
    explore = doc.get("explore")
    if not isinstance(explore, Mapping):
        return None
    best = explore.get("best")
    where = f" [measured on {doc['measured_on']}, not the recording's machine]" if doc.get("measured_on") else ""
    if not isinstance(best, Mapping) or not best.get("text"):
        text = f"verify --explore: no best configuration ({explore.get('stopped') or 'nothing measured'}){where}"
    else:
        text = f"verify --explore: {best['text']}{where}"
        if best.get("change"):
            text += f"; changes: {best['change']}"
        if best.get("note"):
            text += f"; {best['note']}"
    batch = explore.get("batch")
    if isinstance(batch, Mapping) and batch.get("text"):
        text += f"; also {batch['text']}"
    return text


def explore_section(doc: Mapping[str, Any] | None) -> tuple[ExploreView | None, str | None]:
    """(view, None) when the verify.json document the analysis read (`AnalysisResult.verify`) holds an
    explore result; (None, None) without one (no verify.json, unreadable: the analysis notes why, or no
    `explore` object); (None, why) when its explore result has an unexpected shape."""
    if doc is None or doc.get("explore") is None:
        return None, None
    try:
        return explore_view(doc), None
    except ExploreShapeError as err:
        return None, (
            f"verify.json has an explore result of an unexpected shape ({err}); the measured "
            "configurations are not shown"
        )


def explore_view(doc: Mapping[str, Any]) -> ExploreView:
    """The section of a verify.json document with an `explore` object. Raises ExploreShapeError."""
    explore = _map(doc, "explore", "")
    if explore is None:
        raise ExploreShapeError("explore is missing")
    trials = _maps(doc, "trials", "") or []
    rows = [_lever_row(t, f"trials[{i}]") for i, t in enumerate(trials) if t.get("lever") is not None]
    labels = {r.lever: r.label for r in rows}

    best = _map(explore, "best", "explore")
    best_levers = _strs(best, "levers", "explore.best") if best is not None else None
    in_best = set(best_levers or ())
    rows = [_with_in_best(r, r.lever in in_best) for r in rows]
    # levers compared in step time first, fastest first; then those that change the batch (samples/s)
    measured = sorted(
        (r for r in rows if r.status == "ok"),
        key=lambda r: (r.unit == "samples/s", -r.speedup if r.speedup is not None else math.inf),
    )
    not_measured = [r for r in rows if r.status == "failed"] + [
        r for r in rows if r.status not in ("ok", "failed")
    ]

    stopped = _str(explore, "stopped", "explore")
    best_text = best_verdict = best_unit = best_note = no_best = None
    best_changes: tuple[str, ...] = ()
    if best is not None:
        best_text = _best_text(best, labels)
        best_verdict = _verdict(_str(best, "verdict", "explore.best"))
        best_unit = _unit(_str(best, "compared_in", "explore.best"))
        best_note = _str(best, "note", "explore.best")
        changes = _maps(best, "changes", "explore.best")
        texts = [_str(c, "text", f"explore.best.changes[{i}]") for i, c in enumerate(changes or [])]
        best_changes = tuple(t for t in texts if t)
        if not best_changes:
            change = _str(best, "change", "explore.best")
            best_changes = (change,) if change else ()
    else:
        no_best = stopped or "nothing measured"

    batch = _map(explore, "batch", "explore")
    steps = _maps(explore, "steps", "explore") or []
    settings = _map(doc, "settings", "")
    return ExploreView(
        best=best_text,
        best_verdict=best_verdict,
        best_unit=best_unit,
        best_changes=best_changes,
        best_note=best_note,
        no_best=no_best,
        batch=_str(batch, "text", "explore.batch") if batch is not None else None,
        measured=tuple(measured),
        not_measured=tuple(not_measured),
        rounds=tuple(_round(s, i, labels) for i, s in enumerate(steps)),
        stopped=stopped,
        trials_run=_int(explore, "trials_run", "explore"),
        budget_s=_num(settings, "budget_s", "settings") if settings is not None else None,
        estimate_s_per_trial=_num(explore, "estimate_s_per_trial", "explore"),
        measured_on=_str(doc, "measured_on", ""),
        baseline=_baseline_text(_map(doc, "baseline", "")),
        noise_band=_str(doc, "noise_band", ""),
        analysis_note=explore_note(doc),
    )


# ---- pieces ------------------------------------------------------------------------------------------


def _lever_row(t: Mapping[str, Any], path: str) -> LeverRow:
    lever = _str(t, "lever", path)
    assert lever is not None  # the caller keeps entries with a lever
    speedup = _num(t, "speedup", path)
    return LeverRow(
        lever=lever,
        label=_str(t, "label", path) or lever,
        title=_str(t, "lever_title", path),
        status=_str(t, "status", path) or "unknown",
        speedup=speedup,
        speed=_band(speedup, _num(t, "low", path), _num(t, "high", path)),
        trials=_int(t, "trials", path),
        verdict=_verdict(_str(t, "verdict", path)),
        unit=_unit(_str(t, "compared_in", path)),
        reason=_str(t, "reason", path),
        note=_str(t, "note", path),
        dropped=_str(t, "dropped", path),
        in_best=False,
    )


def _with_in_best(row: LeverRow, in_best: bool) -> LeverRow:
    return row if row.in_best == in_best else dataclasses.replace(row, in_best=in_best)


_BEST_PREFIX = "best measured configuration: "


def _best_text(best: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    path = "explore.best"
    names = _strs(best, "labels", path)
    if not names:
        names = [labels.get(n, n) for n in _strs(best, "levers", path) or []]
    speedup = _num(best, "speedup", path)
    band = _band(speedup, _num(best, "low", path), _num(best, "high", path), _int(best, "trials", path))
    text = _str(best, "text", path)
    if text is not None and text.startswith(_BEST_PREFIX) and len(text) > len(_BEST_PREFIX):
        # the sentence verify printed (and the analysis note repeats), from the unrounded measurement
        return text[len(_BEST_PREFIX) :]
    if band is None:
        if text is None:
            raise ExploreShapeError(f"{path} has neither speedup nor text")
        return text
    return f"{' + '.join(names) or '(no lever named)'}: {band}"


def _round(step: Mapping[str, Any], index: int, labels: Mapping[str, str]) -> GrowthRound:
    path = f"explore.steps[{index}]"
    start = _strs(step, "from", path) or []
    chosen = _strs(step, "chosen", path)
    candidates = []
    for j, c in enumerate(_maps(step, "candidates", path) or []):
        cpath = f"{path}.candidates[{j}]"
        levers = _strs(c, "levers", cpath) or []
        added = [labels.get(n, n) for n in levers if n not in start]
        candidates.append(
            RoundCandidate(
                added=" + ".join(added) or "(nothing added)",
                status=_str(c, "status", cpath) or "unknown",
                trials=_int(c, "trials", cpath),
                vs_baseline=_band(_num(c, "speedup", cpath), None, None),
                over_best=_band(
                    _num(c, "over_best", cpath),
                    _num(c, "over_best_low", cpath),
                    _num(c, "over_best_high", cpath),
                ),
                over_best_verdict=_verdict(_str(c, "over_best_verdict", cpath)),
                reason=_str(c, "reason", cpath),
                chosen=chosen is not None and list(levers) == list(chosen),
            )
        )
    return GrowthRound(
        number=index + 1,
        start=" + ".join(labels.get(n, n) for n in start) or "the baseline",
        candidates=tuple(candidates),
        chosen=" + ".join(labels.get(n, n) for n in chosen) if chosen is not None else None,
    )


def _baseline_text(base: Mapping[str, Any] | None) -> str | None:
    if base is None:
        return None
    status = _str(base, "status", "baseline")
    if status is not None and status != "ok":
        reason = _str(base, "reason", "baseline")
        return f"the baseline {status}" + (f": {reason}" if reason else "")
    parts = []
    step = _num(base, "step_time_ms", "baseline")
    if step is not None:
        parts.append(f"{step:.2f} ms per step")
    rate = _num(base, "samples_per_s", "baseline")
    if rate is not None:
        parts.append(f"{rate:,.1f} samples/s")
    if not parts:
        return None
    trials = _int(base, "trials", "baseline")
    return ", ".join(parts) + (f" (median of {plural(trials, 'trial')})" if trials else "")


def _band(
    speedup: float | None, low: float | None, high: float | None, trials: int | None = None
) -> str | None:
    if speedup is None:
        return None
    inside = [f"{_2f(low)}-{_2f(high)}"] if low is not None and high is not None else []
    if trials is not None:
        inside.append(plural(trials, "trial"))
    return f"{_2f(speedup)}x" + (f" ({', '.join(inside)})" if inside else "")


def _2f(value: float) -> str:
    """Two places of the number as verify.json writes it (3 places), halves rounded up as a reader of
    the file would: "2.385" is 2.39, where `f"{2.385:.2f}"` gives 2.38 (the float is 2.38499...)."""
    if abs(value) >= 1e15:  # beyond the default context's 28 digits once quantized; no speed-up is this large
        return f"{value:.2f}"
    return str(decimal.Decimal(repr(value)).quantize(decimal.Decimal("0.01"), rounding=decimal.ROUND_HALF_UP))


def _verdict(verdict: str | None) -> str | None:
    return verdict.replace("_", " ") if verdict else None


def _unit(compared_in: str | None) -> str | None:
    return {"step_time_ms": "step time", "samples_per_s": "samples/s"}.get(compared_in or "", compared_in)


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


# ---- typed access: absent or null is None, another type is ExploreShapeError -------------------------


def _value(m: Mapping[str, Any], key: str, path: str, ok: bool, want: str) -> None:
    if not ok:
        where = f"{path}.{key}" if path else key
        raise ExploreShapeError(f"{where} is {_type(m.get(key))}, not {want}")


def _type(value: Any) -> str:
    return (
        "a list"
        if isinstance(value, list)
        else "an object"
        if isinstance(value, Mapping)
        else type(value).__name__
    )


def _num(m: Mapping[str, Any], key: str, path: str) -> float | None:
    v = m.get(key)
    if v is None:
        return None
    _value(
        m, key, path, isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v), "a number"
    )
    return float(v)


def _int(m: Mapping[str, Any], key: str, path: str) -> int | None:
    v = m.get(key)
    if v is None:
        return None
    _value(m, key, path, isinstance(v, int) and not isinstance(v, bool), "an integer")
    return int(v)


def _str(m: Mapping[str, Any], key: str, path: str) -> str | None:
    v = m.get(key)
    if v is None:
        return None
    _value(m, key, path, isinstance(v, str), "a string")
    return str(v)


def _map(m: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
    v = m.get(key)
    if v is None:
        return None
    _value(m, key, path, isinstance(v, Mapping), "an object")
    return v  # type: ignore[no-any-return]


def _maps(m: Mapping[str, Any], key: str, path: str) -> Sequence[Mapping[str, Any]] | None:
    v = m.get(key)
    if v is None:
        return None
    _value(m, key, path, isinstance(v, list), "a list")
    for i, item in enumerate(v):
        if not isinstance(item, Mapping):
            raise ExploreShapeError(f"{path + '.' if path else ''}{key}[{i}] is {_type(item)}, not an object")
    return v  # type: ignore[no-any-return]


def _strs(m: Mapping[str, Any], key: str, path: str) -> list[str] | None:
    v = m.get(key)
    if v is None:
        return None
    _value(m, key, path, isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings")
    return list(v)
