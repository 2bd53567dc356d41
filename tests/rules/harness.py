"""Rule test harness (sqlfluff-style): build a trace (and optionally a run directory) from a
synthetic description, run ONE rule through the real loader, metrics and engine, and check the outcome.

Everything built here is SYNTHETIC (tests/synth.py marks the traces `gpuadvisor_synthetic: true`).

Two ways to use it:

1. Data-driven cases. A file `tests/rules/cases/<name>.py` defines `CASES: list[RuleCase]`::

       from tests.rules.harness import Expect, RuleCase
       from tests.synth import SyntheticTrace

       def item_every_step() -> SyntheticTrace: ...

       CASES = [
           RuleCase("GA201-fires-on-item-per-step", "GA201", item_every_step,
                    expect=Expect(fires=True, min_severity="medium", message_contains=("item",))),
           RuleCase("GA201-quiet-on-one-item-per-100-steps", "GA201", rare_item, expect=Expect(fires=False)),
       ]

   A test module sets `CASE_FILES = "ga2*"` (a glob over tests/rules/cases/*.py, without `.py`) and
   defines `def test_rule_case(rule_case, rule_harness): rule_harness.check(rule_case)`; the
   conftest parametrizes `rule_case` with every case of the matching files, test id = case name.

2. Directly, with the `rule_harness` fixture::

       outcome = rule_harness.run("GA201", trace, callsites=[...], environment={...})
       assert outcome.findings and outcome.status == "ran"

Run-directory inputs: pass any of `environment`, `callsites`, `manifest`, `nvml_rows` and the harness
writes a real run directory (manifest.json, environment.json, callsites.json, trace/rank0.json.gz,
nvml.csv.gz) and reads it back with `load_run_info`; pass none of them and the rule sees a raw trace
(`ctx.run is None`).
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import io
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuadvisor import engine, rundir
from gpuadvisor.model import Finding, Severity
from gpuadvisor.rules_api import Rule

CASES_DIR = Path(__file__).resolve().parent / "cases"

TraceSource = Any  # a tests.synth.SyntheticTrace, or a Kineto-shaped dict


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
    """One named, data-driven rule test. `trace` builds the synthetic trace (called at test time)."""

    name: str  # test id, e.g. "GA201-fires-on-item-per-step"
    rule: str  # rule id or name
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
    status: str  # "ran" | "not_applicable"
    detail: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def first(self) -> Finding:
        assert self.findings, "the rule produced no finding"
        return self.findings[0]


_RULES: dict[str, type[Rule]] | None = None


def builtin_rules() -> dict[str, type[Rule]]:
    """All built-in rules by id (loaded once per test session through the real engine loader)."""
    global _RULES
    if _RULES is None:
        _RULES = {r.id: r.cls for r in engine.load_rules(entry_points=False)}
    return _RULES


def get_rule(key: str | type[Rule]) -> type[Rule]:
    if isinstance(key, type):
        return key
    return engine.find_rule(list(builtin_rules().values()), key)


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
    """Write a synthetic trace as gzip JSON (the run-directory format)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(_trace_dict(trace)).encode("utf-8")
    with gzip.open(path, "wb") as fh:
        fh.write(data)
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
    """Write a complete synthetic run directory (docs/run-directory.md) and return it."""
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
    """Builds inputs under `tmp_path` and runs one rule through loader -> metrics -> engine."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self._n = 0

    def load(
        self,
        trace: TraceSource,
        *,
        environment: Mapping[str, Any] | None = None,
        callsites: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        manifest: Mapping[str, Any] | None = None,
        nvml_rows: Sequence[Mapping[str, Any]] | None = None,
        steps_counted: int | None = None,
    ) -> tuple[Any, Any]:
        """(TraceModel, RunInfo | None) loaded by the real readers from files written here."""
        from gpuadvisor.runinfo import load_run_info
        from gpuadvisor.trace.load import load_trace

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
        """Run one rule. A rule's exception propagates (the test shows the real traceback)."""
        rule_cls = get_rule(rule)
        model, run = self.load(trace, **run_inputs)
        overrides = {rule_cls.id: dict(thresholds)} if thresholds else None
        resolved = engine.resolve_thresholds([rule_cls], overrides)[rule_cls.id]
        _, available, factory = engine.make_context(model, run)
        missing = frozenset(rule_cls.requires) - available
        if missing:
            return RuleOutcome("not_applicable", engine.describe_missing(missing, run))
        findings = list(rule_cls().check(factory(resolved)))
        for f in findings:
            assert isinstance(f, Finding), f"{rule_cls.id} yielded {type(f).__name__}"
            assert f.rule == rule_cls.id and f.category == rule_cls.category
            assert f.title and f.message and f.recommendation, (
                f"{rule_cls.id}: empty title/message/recommendation"
            )
            assert f.impact is None or 0.0 <= f.impact <= 1.0
            json.dumps(f.to_dict(), sort_keys=True, allow_nan=False)  # JSON-safe
        from gpuadvisor.model import sort_findings

        return RuleOutcome("ran", f"{len(findings)} finding(s)", sort_findings(findings))

    def check(self, case: RuleCase) -> RuleOutcome:
        """Run a RuleCase and assert its expectations (failure messages show what was produced)."""
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
    exp = case.expect
    seen = _describe(outcome)
    assert outcome.status == exp.status, f"{case.name}: expected status {exp.status}\n{seen}"
    for text in exp.detail_contains:
        assert text.lower() in outcome.detail.lower(), f"{case.name}: detail lacks {text!r}\n{seen}"
    if not exp.fires:
        assert not outcome.findings, f"{case.name}: expected no finding\n{seen}"
        return
    assert outcome.findings, f"{case.name}: expected a finding\n{seen}"
    first = outcome.first
    if exp.count is not None:
        assert len(outcome.findings) == exp.count, f"{case.name}: expected {exp.count} findings\n{seen}"
    if exp.severity is not None:
        assert first.severity == Severity(exp.severity), f"{case.name}: severity\n{seen}"
    if exp.min_severity is not None:
        assert first.severity.rank >= Severity(exp.min_severity).rank, (
            f"{case.name}: severity too low\n{seen}"
        )
    if exp.impact_min is not None:
        assert first.impact is not None and first.impact >= exp.impact_min, f"{case.name}: impact\n{seen}"
    if exp.impact_max is not None:
        assert first.impact is not None and first.impact <= exp.impact_max, f"{case.name}: impact\n{seen}"
    for attr, wanted in (
        ("title", exp.title_contains),
        ("message", exp.message_contains),
        ("recommendation", exp.recommendation_contains),
    ):
        for text in wanted:
            assert text.lower() in str(getattr(first, attr)).lower(), (
                f"{case.name}: {attr} lacks {text!r}\n{seen}"
            )
    labels = [
        " ".join(str(x) for x in (loc.label(), loc.code, loc.op, loc.kernel) if x)
        for f in outcome.findings
        for loc in f.locations
    ]
    for text in exp.location_contains:
        assert any(text in lab for lab in labels), f"{case.name}: no location with {text!r}: {labels}\n{seen}"
    for key in exp.evidence_keys:
        assert key in first.evidence, f"{case.name}: evidence lacks {key!r}: {sorted(first.evidence)}"


# ---- case files -------------------------------------------------------------------------------------


def load_case_file(path: Path) -> list[RuleCase]:
    name = f"_gpuadvisor_rule_cases_{path.stem}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    cases = getattr(module, "CASES", None)
    assert isinstance(cases, list) and all(isinstance(c, RuleCase) for c in cases), (
        f"{path}: CASES must be a list of RuleCase"
    )
    return cases


def collect_cases(pattern: str = "*") -> list[RuleCase]:
    """Every RuleCase of tests/rules/cases/<pattern>.py, in file then list order; names must be unique."""
    cases: list[RuleCase] = []
    for path in sorted(CASES_DIR.glob(f"{pattern}.py")):
        if not path.name.startswith("_"):
            cases.extend(load_case_file(path))
    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    assert not dupes, f"duplicate rule case names: {dupes}"
    return cases
