"""RUN/verify.json: its format, and how its measurements join the findings (`Finding.verified`).

Imported by the analysis (no torch, no pandas): `attach()` gives each finding whose remedy was
measured a `verified` object next to its `prediction`; `summary_line()` is the sentence the terminal
summary and the HTML report show ("predicted 2.7x, measured 2.9x (2.8-3.0, 3 trials)").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuadvisor import rundir
from gpuadvisor.model import Finding, predicted_speedup, summary_line
from gpuadvisor.received import read_json_file
from gpuadvisor.render._explore import explore_note  # the one-line note is how the reports say it too
from gpuadvisor.runcheck import check_verify
from gpuadvisor.verify.plan import RULE_REMEDIES

__all__ = [
    "VERIFY_FILE",
    "VERIFY_SCHEMA_VERSION",
    "attach",
    "attach_from_run",
    "attach_loaded",
    "explore_note",
    "load_verify",
    "noise_band_text",
    "predicted_speedup",
    "summary_line",
]

VERIFY_FILE = rundir.VERIFY
VERIFY_SCHEMA_VERSION = 1

# The keys of a verify.json trial copied into Finding.verified.
_VERIFIED_KEYS = (
    "status",
    "remedy",
    "speedup",
    "low",
    "high",
    "trials",
    "verdict",
    "compared_in",
    "step_time_ms",
    "samples_per_s",
    "change",
    "reason",
    "note",
    "changes_numerics",
    "changes_batch",
    "measured_on",  # only when not measured on the recording's machine (--allow-other-machine)
    "lever",  # the explore lever of the trial (verify --explore)
)


def noise_band_text() -> str:
    """How `low`..`high` are defined (written into verify.json)."""
    return (
        "speedup = median(baseline step time) / median(remedy step time) (samples/s: remedy / baseline); "
        "low..high = the range of all baseline/remedy ratios, min(baseline)/max(remedy) .. "
        "max(baseline)/min(remedy); verdict 'faster' only when low > 1 (every remedy trial beat every "
        "baseline trial: by chance 1 in C(2n, n) under no effect, 5% for 3 + 3 trials) and the speed-up "
        "is >= 1.02 ('negligible' below)"
    )


def load_verify(run_dir: str | Path) -> tuple[dict[str, Any] | None, str | None]:
    """(RUN/verify.json, None), (None, None) when absent, (None, why) when unreadable; read as every
    file of a run directory (`received.read_json_file`) and every value checked
    (`runcheck.check_verify`): a doc whose values were partly left out comes with the note saying
    which, as (doc, note)."""
    notes: list[str] = []
    doc = read_json_file(Path(run_dir), VERIFY_FILE, notes)
    if doc is None:
        why = notes[0] if notes else None
        return None, None if why is None else f"{VERIFY_FILE} is unreadable: {why}; measured speed-ups not shown"
    if not isinstance(doc, dict) or not isinstance(doc.get("trials"), list):
        return None, f"{VERIFY_FILE} has no trials list; measured speed-ups not shown"
    doc = check_verify(doc, notes)
    return doc, notes[0] if notes else None


def _rules_remedies() -> Mapping[str, Sequence[str]]:
    return {rule: [r.value for r in remedies] for rule, remedies in RULE_REMEDIES.items()}


def _verified(trial: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: trial.get(k) for k in _VERIFIED_KEYS if trial.get(k) is not None}
    out["baseline_step_time_ms"] = baseline.get("step_time_ms")
    if baseline.get("samples_per_s") is not None:
        out["baseline_samples_per_s"] = baseline.get("samples_per_s")
    return out


def attach(findings: Sequence[Finding], verify_doc: Mapping[str, Any]) -> list[Finding]:
    """Each finding with a measured remedy gains `verified`: the trial of its own remedy
    (`Finding.remedy`), else of the rule's remedies in the order of the rule -> remedy table, else
    any trial run for its rule. Other trials for the same finding are listed under `alternatives`."""
    trials = [t for t in verify_doc.get("trials", []) if isinstance(t, Mapping)]
    baseline = verify_doc.get("baseline") if isinstance(verify_doc.get("baseline"), Mapping) else {}
    assert isinstance(baseline, Mapping)
    table = _rules_remedies()
    out: list[Finding] = []
    for f in findings:
        mine = [
            t
            for t in trials
            if f.rule in (t.get("findings") or []) or (f.remedy and t.get("remedy") == f.remedy)
        ]
        if not mine:
            out.append(f)
            continue
        preferred = [f.remedy] if f.remedy else list(table.get(f.rule, ()))
        rank = {r: i for i, r in enumerate(preferred)}
        mine.sort(key=lambda t: (rank.get(str(t.get("remedy")), len(rank)), str(t.get("remedy"))))
        main, others = mine[0], mine[1:]
        verified = _verified(main, baseline)
        if others:
            verified["alternatives"] = [
                {
                    k: t.get(k)
                    for k in ("remedy", "status", "speedup", "low", "high", "trials", "reason")
                    if t.get(k) is not None
                }
                for t in others
            ]
        out.append(dataclasses.replace(f, verified=verified))
    return out


def attach_loaded(
    findings: Sequence[Finding], doc: Mapping[str, Any] | None, problem: str | None
) -> tuple[list[Finding], list[str]]:
    """attach() with a verify.json that `load_verify` read (doc, problem): (findings, notes), the notes
    carrying the problem or verify --explore's one-line result (`explore_note`)."""
    if doc is None:
        return list(findings), [problem] if problem else []
    notes = [n for n in (problem, explore_note(doc)) if n]
    return attach(findings, doc), notes


def attach_from_run(findings: Sequence[Finding], run_dir: str | Path) -> tuple[list[Finding], list[str]]:
    """attach() with RUN/verify.json when the run has one; (findings unchanged, [note]) when unreadable.
    The notes carry verify --explore's best measured configuration (`explore_note`)."""
    return attach_loaded(findings, *load_verify(run_dir))
