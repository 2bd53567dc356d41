"""Test helpers for rule authors: the harness gpuadvisor's own rule tests use (sqlfluff ships its rule
case loader the same way). Nothing here needs pytest; it plugs into any test runner.

A rule is tested the way gpuadvisor tests its built-in rules: from a trace (and optionally a run
directory) written to disk, read back by the real loaders, through the real metrics and engine, with
the rule's documentation and contract validated first. See docs/writing-rules.md for a complete
plugin with its tests.

Two ways to use it:

1. Data-driven cases::

       from gpuadvisor.testing import Expect, RuleCase, RuleHarness

       CASES = [
           RuleCase("ACME001-fires-on-3000-kernels", "ACME001", lambda: my_trace(kernels=3000),
                    expect=Expect(fires=True, severity="info", title_contains=("3,000 kernels",))),
           RuleCase("ACME001-quiet-on-100-kernels", "ACME001", lambda: my_trace(kernels=100),
                    expect=Expect(fires=False)),
       ]

       @pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
       def test_rule_case(case, tmp_path):
           RuleHarness(tmp_path, rules_dirs=["acme_rules"]).check(case)

   `collect_cases(folder, pattern)` gathers the `CASES` lists of `folder/<pattern>.py` files.

2. Directly::

       outcome = RuleHarness(tmp_path).run("GA201", trace, callsites=[...], environment={...})
       assert outcome.status == "ran" and outcome.findings

A trace is a Kineto-shaped dict, a path to a `.json` / `.json.gz` trace file (for instance one
recorded with `gpuadvisor profile`, kept as a test fixture), or any object with a `to_dict()` (or
`build()` / `as_dict()`) method that returns such a dict. Run-directory inputs: pass any of
`environment`, `callsites`, `manifest`, `nvml_rows` and the harness writes a real run directory
(docs/run-directory.md) and reads it back; pass none of them and the rule sees a raw trace
(`ctx.run is None`).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import importlib.util
import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuadvisor import engine, rundir
from gpuadvisor.model import Finding, Severity, sort_findings
from gpuadvisor.rules_api import Rule
from gpuadvisor.runinfo import load_run_info
from gpuadvisor.trace.load import load_trace

if TYPE_CHECKING:
    from gpuadvisor.runinfo import RunInfo
    from gpuadvisor.trace.model import TraceModel

__all__ = [
    "Expect",
    "RuleCase",
    "RuleHarness",
    "RuleOutcome",
    "TraceSource",
    "assert_expected",
    "builtin_rules",
    "collect_cases",
    "get_rule",
    "load_case_file",
    "share_fields_over_one",
    "shares_over_the_whole",
    "step_numbers_without_base",
    "write_run_dir",
    "write_trace",
]

# A Kineto-shaped dict, a trace file, or an object with to_dict()/build()/as_dict() (see the module doc).
TraceSource = Any


def _check(condition: bool, message: str) -> None:
    """An assertion that also holds under `python -O` (plain asserts are stripped there)."""
    if not condition:
        raise AssertionError(message)


# "86% of the step", "saves 35%", "35% of the run": a share of a whole, which cannot pass 100%
_SHARE_TEXT = re.compile(r"(\d+(?:\.\d+)?)% of\b|\bsaves (?:up to )?(\d+(?:\.\d+)?)%")
# JSON fields that hold a share of a whole: *_fraction, *_share, share_*, impact, recovered_*
_SHARE_KEY = re.compile(r"(^|_)(fraction|share|impact|recovered)(_|$)")


def shares_over_the_whole(finding: Finding) -> list[str]:
    """Every share of a whole above 100% in a finding: a "N% of ..." or "saves N%" figure in its title,
    message, recommendation or impact explanation, and a share field (`*_fraction`, `*_share`,
    `impact`, `recovered_*`) above 1 anywhere in its JSON (evidence, prediction). A step, a run or a
    kernel time cannot hold more than all of itself (issue 41: "FP32 loss ... (169% of the step)").
    Empty when there is none; the rule harness checks it for every finding."""
    out: list[str] = []
    for name in ("title", "message", "recommendation", "impact_explanation"):
        text = getattr(finding, name) or ""
        for m in _SHARE_TEXT.finditer(text):
            value = float(m.group(1) or m.group(2))
            if value > 100.0:
                out.append(f"{name}: ...{text[max(0, m.start() - 60) : m.end() + 20]}...")

    out += share_fields_over_one(finding.to_dict(), "finding")
    return out


# A number relative to a step that does not say which step (docs/report.md "Step bases"): "44% of the
# step", "of each step", "of step time", "the 2.77 ms step", "saves 88%" with nothing after it, "9.35 ->
# 1.77 ms per step". "of the 5.44 ms mean step", "88% of the time per sample", "of the run" say theirs.
_BASELESS = re.compile(
    r"\d%\)? of (?:the |each |a )?step\b"
    r"|\d%\)? of step time\b"
    r"|\bthe \d[\d.,]* m?s step\b"
    r"|\b(?:save|saves|recover|recovers) (?:up to )?\d[\d.]*%(?! of)"
    r"|(?:->|still) \d[\d.,]* m?s per step\b"
)


def step_numbers_without_base(finding: Finding) -> list[str]:
    """Every step-relative number in a finding's title, message or recommendation that does not say its
    base (issue 42: "waits for data 44% of the 11.7 ms profiled step; the fix is predicted to save 88%",
    the 88% of the run's mean step): "N% of the step", "the N ms step", "saves N%", "A -> B ms per step".
    Each must name its step (mean, profiled, replayed: `gpuadvisor.words.Base`) or say "per sample" or
    "of the run". Empty when every one does; the rule harness checks it for every finding."""
    out: list[str] = []
    for name in ("title", "message", "recommendation"):
        text = getattr(finding, name) or ""
        for m in _BASELESS.finditer(text):
            out.append(f"{name}: ...{text[max(0, m.start() - 50) : m.end() + 20]}...")
    return out


def share_fields_over_one(value: Any, path: str = "") -> list[str]:
    """Share fields (`*_fraction`, `*_share`, `impact`, `recovered_*`) above 1 anywhere in a JSON-like
    value (a finding's dict, a result's metrics), as "path.key = value"."""
    out: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            key = str(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and _SHARE_KEY.search(key) and v > 1.0 + 1e-9:
                out.append(f"{path}.{key} = {v}")
            out += share_fields_over_one(v, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            out += share_fields_over_one(v, f"{path}[{i}]")
    return out


@dataclass(frozen=True)
class Expect:
    """What a case expects. Every field that is set is checked; unset fields are not."""

    fires: bool  # at least one finding of the rule (False: none at all)
    status: str = "ran"  # "ran" | "not_applicable" (then `fires` must be False)
    count: int | None = None  # exact number of findings
    severity: str | None = None  # exact severity of the first (highest impact) finding
    min_severity: str | None = None  # the first finding is at least this severe
    impact_min: float | None = None  # first finding's impact >= this
    impact_max: float | None = None  # first finding's impact <= this
    title_contains: tuple[str, ...] = ()
    message_contains: tuple[str, ...] = ()  # substrings of the first finding's message (case-insensitive)
    recommendation_contains: tuple[str, ...] = ()
    location_contains: tuple[str, ...] = ()  # substrings of any location's label/code/op/kernel
    evidence_keys: tuple[str, ...] = ()  # keys the first finding's evidence must hold
    detail_contains: tuple[str, ...] = ()  # substrings of the not-applicable/status detail


@dataclass(frozen=True)
class RuleCase:
    """One named, data-driven rule test. `trace` builds the trace (called at test time); `rule` is a
    rule id, name or alias (looked up among the built-in rules and the harness's `rules_dirs`), or the
    rule class itself."""

    name: str  # test id, e.g. "GA201-fires-on-item-per-step"
    rule: str | type[Rule]
    trace: Callable[[], TraceSource]
    expect: Expect
    environment: Mapping[str, Any] | None = None
    callsites: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None
    manifest: Mapping[str, Any] | None = None
    nvml_rows: Sequence[Mapping[str, Any]] | None = None
    thresholds: Mapping[str, float] | None = None
    steps_counted: int | None = None  # callsites.json steps_counted (default: the trace's step count)


@dataclass
class RuleOutcome:
    """What one rule did: "ran" (with its findings, highest impact first) or "not_applicable"."""

    status: str
    detail: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def first(self) -> Finding:
        _check(bool(self.findings), "the rule produced no finding")
        return self.findings[0]


_BUILTIN: dict[str, type[Rule]] | None = None


def builtin_rules() -> dict[str, type[Rule]]:
    """All built-in rules by id (loaded once per process through the engine's loader)."""
    global _BUILTIN
    if _BUILTIN is None:
        _BUILTIN = {r.id: r.cls for r in engine.load_rules(entry_points=False)}
    return _BUILTIN


def get_rule(key: str | type[Rule], extra: Iterable[type[Rule]] = ()) -> type[Rule]:
    """The rule class for an id, name or alias among the built-in rules and `extra` (a class is
    returned as it is)."""
    if isinstance(key, type):
        return key
    return engine.find_rule([*builtin_rules().values(), *extra], key)


def _trace_dict(trace: TraceSource) -> dict[str, Any]:
    if isinstance(trace, dict):
        return trace
    for method in ("to_dict", "build", "as_dict"):
        fn = getattr(trace, method, None)
        if callable(fn):
            out = fn()
            if isinstance(out, dict):
                return out
    raise TypeError(f"cannot turn {type(trace).__name__} into a Kineto trace dict")


def write_trace(trace: TraceSource, path: Path) -> Path:
    """Write a trace as gzip JSON (the run-directory format); a trace file is copied as it is (gzipped
    when `path` ends in .gz and the file does not)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(trace, (str, os.PathLike)):
        data = Path(trace).read_bytes()
        if path.name.endswith(".gz") and data[:2] != b"\x1f\x8b":
            data = gzip.compress(data)
        path.write_bytes(data)
        return path
    with gzip.open(path, "wb") as fh:
        fh.write(json.dumps(_trace_dict(trace)).encode("utf-8"))
    return path


def write_run_dir(
    run_dir: Path,
    trace: TraceSource,
    *,
    environment: Mapping[str, Any] | None = None,
    callsites: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
    manifest: Mapping[str, Any] | None = None,
    nvml_rows: Sequence[Mapping[str, Any]] | None = None,
    steps_counted: int | None = None,
) -> Path:
    """Write a complete run directory (docs/run-directory.md) around `trace` and return it.
    `manifest` entries override the defaults (a capture stopped cleanly after its window)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_trace(trace, rundir.trace_path(run_dir))
    man: dict[str, Any] = {
        "schema_version": rundir.RUN_SCHEMA_VERSION,
        "tool": {"name": "gpuadvisor", "version": "synthetic"},
        "traces": [f"{rundir.TRACE_DIR}/rank0.json.gz"],
        "degraded": [],
        "messages": [],
        "exit_status": 0,
        "exit_reason": "stopped_after_window",
        "step_detection": "optimizer_step_hook",
        "nvml": {
            "available": nvml_rows is not None,
            "reason": None if nvml_rows is not None else "synthetic: no NVML",
        },
    }
    man.update(manifest or {})
    (run_dir / rundir.MANIFEST).write_text(json.dumps(man, sort_keys=True))
    if environment is not None:
        env = {"schema_version": 1, **environment}
        (run_dir / rundir.ENVIRONMENT).write_text(json.dumps(env, sort_keys=True))
    if callsites is not None:
        if isinstance(callsites, Mapping):
            cs = dict(callsites)
        else:
            cs = {"schema_version": 1, "steps_counted": steps_counted, "callsites": list(callsites)}
        (run_dir / rundir.CALLSITES).write_text(json.dumps(cs, sort_keys=True))
    if nvml_rows is not None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rundir.NVML_COLUMNS))
        writer.writeheader()
        for row in nvml_rows:
            writer.writerow({k: row.get(k, "") for k in rundir.NVML_COLUMNS})
        with gzip.open(run_dir / rundir.NVML, "wt", encoding="utf-8") as fh:
            fh.write(buf.getvalue())
    return run_dir


class RuleHarness:
    """Builds inputs under `tmp_path` and runs one rule through loader -> metrics -> engine.

    `rules_dirs`: folders of your own rules (as `gpuadvisor analyze --rules DIR` loads them, validation
    included), so cases can name those rules by id; `rules`: rule classes to find by id as well."""

    def __init__(
        self,
        tmp_path: str | os.PathLike[str],
        *,
        rules_dirs: Iterable[str | os.PathLike[str]] = (),
        rules: Iterable[type[Rule]] = (),
    ) -> None:
        self.tmp_path = Path(tmp_path)
        self._n = 0
        loaded = engine.load_rules([Path(d) for d in rules_dirs], builtin=False, entry_points=False)
        self.extra_rules: list[type[Rule]] = [r.cls for r in loaded] + list(rules)

    def load(
        self,
        trace: TraceSource,
        *,
        environment: Mapping[str, Any] | None = None,
        callsites: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        manifest: Mapping[str, Any] | None = None,
        nvml_rows: Sequence[Mapping[str, Any]] | None = None,
        steps_counted: int | None = None,
    ) -> tuple[TraceModel, RunInfo | None]:
        """(TraceModel, RunInfo | None) loaded by the real readers from files written here."""
        self._n += 1
        if environment is None and callsites is None and manifest is None and nvml_rows is None:
            path = write_trace(trace, self.tmp_path / f"raw{self._n}" / "trace.json.gz")
            return load_trace(path), None
        run_dir = write_run_dir(
            self.tmp_path / f"run{self._n}",
            trace,
            environment=environment,
            callsites=callsites,
            manifest=manifest,
            nvml_rows=nvml_rows,
            steps_counted=steps_counted,
        )
        return load_trace(rundir.trace_path(run_dir)), load_run_info(run_dir)

    def run(
        self,
        rule: str | type[Rule],
        trace: TraceSource,
        *,
        thresholds: Mapping[str, float] | None = None,
        **run_inputs: Any,
    ) -> RuleOutcome:
        """Run one rule on `trace` (and the run inputs). The rule's exception propagates, so a test
        shows the real traceback; its findings are checked against the Finding contract."""
        rule_cls = get_rule(rule, self.extra_rules)
        engine.validate_rule(rule_cls, rule_cls.__module__)
        model, run = self.load(trace, **run_inputs)
        overrides = {rule_cls.id: dict(thresholds)} if thresholds else None
        resolved = engine.resolve_thresholds([rule_cls], overrides)[rule_cls.id]
        _, available, factory = engine.make_context(model, run)
        missing = frozenset(rule_cls.requires) - available
        if missing:
            return RuleOutcome("not_applicable", engine.describe_missing(missing, run))
        findings = list(rule_cls().check(factory(resolved)))
        for f in findings:
            _check(isinstance(f, Finding), f"{rule_cls.id} yielded {type(f).__name__}, not a Finding")
            _check(
                f.rule == rule_cls.id and f.category == rule_cls.category,
                f"{rule_cls.id}: a finding says rule {f.rule} / category {f.category}",
            )
            _check(
                bool(f.title and f.message and f.recommendation),
                f"{rule_cls.id}: empty title/message/recommendation",
            )
            _check(f.impact is None or 0.0 <= f.impact <= 1.0, f"{rule_cls.id}: impact {f.impact} not in [0, 1]")
            over = shares_over_the_whole(f)
            _check(not over, f"{rule_cls.id}: a share of a whole above 100%: {over}")
            baseless = step_numbers_without_base(f)
            _check(not baseless, f"{rule_cls.id}: a step-relative number without its base: {baseless}")
            json.dumps(f.to_dict(), sort_keys=True, allow_nan=False)  # JSON-safe
        return RuleOutcome("ran", f"{len(findings)} finding(s)", sort_findings(findings))

    def check(self, case: RuleCase) -> RuleOutcome:
        """Run a RuleCase and check its expectations (AssertionError saying what was produced)."""
        outcome = self.run(
            case.rule,
            case.trace(),
            thresholds=case.thresholds,
            environment=case.environment,
            callsites=case.callsites,
            manifest=case.manifest,
            nvml_rows=case.nvml_rows,
            steps_counted=case.steps_counted,
        )
        assert_expected(case, outcome)
        return outcome


def _describe(outcome: RuleOutcome) -> str:
    lines = [f"status={outcome.status} detail={outcome.detail!r}"]
    for f in outcome.findings:
        lines.append(f"  {f.severity.value} impact={f.impact} {f.title!r}: {f.message}")
    return "\n".join(lines)


def assert_expected(case: RuleCase, outcome: RuleOutcome) -> None:
    """Raise AssertionError (with what the rule produced) when `outcome` does not meet `case.expect`."""
    exp = case.expect
    seen = _describe(outcome)
    _check(outcome.status == exp.status, f"{case.name}: expected status {exp.status}\n{seen}")
    for text in exp.detail_contains:
        _check(text.lower() in outcome.detail.lower(), f"{case.name}: detail lacks {text!r}\n{seen}")
    if not exp.fires:
        _check(not outcome.findings, f"{case.name}: expected no finding\n{seen}")
        return
    _check(bool(outcome.findings), f"{case.name}: expected a finding\n{seen}")
    first = outcome.first
    if exp.count is not None:
        _check(len(outcome.findings) == exp.count, f"{case.name}: expected {exp.count} findings\n{seen}")
    if exp.severity is not None:
        _check(first.severity == Severity(exp.severity), f"{case.name}: severity\n{seen}")
    if exp.min_severity is not None:
        _check(first.severity.rank >= Severity(exp.min_severity).rank, f"{case.name}: severity too low\n{seen}")
    if exp.impact_min is not None:
        _check(first.impact is not None and first.impact >= exp.impact_min, f"{case.name}: impact\n{seen}")
    if exp.impact_max is not None:
        _check(first.impact is not None and first.impact <= exp.impact_max, f"{case.name}: impact\n{seen}")
    for attr, wanted in (
        ("title", exp.title_contains),
        ("message", exp.message_contains),
        ("recommendation", exp.recommendation_contains),
    ):
        for text in wanted:
            _check(
                text.lower() in str(getattr(first, attr)).lower(), f"{case.name}: {attr} lacks {text!r}\n{seen}"
            )
    labels = [
        " ".join(str(x) for x in (loc.label(), loc.code, loc.op, loc.kernel) if x)
        for f in outcome.findings
        for loc in f.locations
    ]
    for text in exp.location_contains:
        _check(any(text in lab for lab in labels), f"{case.name}: no location with {text!r}: {labels}\n{seen}")
    for key in exp.evidence_keys:
        _check(key in first.evidence, f"{case.name}: evidence lacks {key!r}: {sorted(first.evidence)}")


# ---- case files -------------------------------------------------------------------------------------


def load_case_file(path: str | os.PathLike[str]) -> list[RuleCase]:
    """The `CASES` list of a Python file (imported once per process, by its path)."""
    path = Path(path).resolve()
    digest = hashlib.sha1(str(path).encode("utf-8")).hexdigest()[:12]
    name = f"_gpuadvisor_rule_cases_{digest}_{path.stem}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        _check(spec is not None and spec.loader is not None, f"{path}: cannot import")
        assert spec is not None and spec.loader is not None  # for the type checker
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    cases = getattr(module, "CASES", None)
    _check(
        isinstance(cases, list) and all(isinstance(c, RuleCase) for c in cases),
        f"{path}: CASES must be a list of RuleCase",
    )
    return list(cases or [])


def collect_cases(folder: str | os.PathLike[str], pattern: str = "*") -> list[RuleCase]:
    """Every RuleCase of `folder/<pattern>.py` (files starting with `_` left out), in file then list
    order; case names must be unique (they are the test ids)."""
    cases: list[RuleCase] = []
    for path in sorted(Path(folder).glob(f"{pattern}.py")):
        if not path.name.startswith("_"):
            cases.extend(load_case_file(path))
    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    _check(not dupes, f"duplicate rule case names: {dupes}")
    return cases
