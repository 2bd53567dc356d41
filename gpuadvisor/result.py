"""AnalysisResult: what `gpuadvisor.analyze()` returns and every renderer consumes.

`to_dict()` is exactly the JSON contract (gpuadvisor/schemas/findings.schema.json) (`gpuadvisor analyze --format json`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuadvisor import __version__
from gpuadvisor.errors import EXIT_FINDINGS, EXIT_OK, EXIT_RULE_ERRORS
from gpuadvisor.model import SCHEMA_VERSION, Finding, RuleMeta, RuleStatus, Severity, jsonable

__all__ = ["AnalysisResult", "RuleMeta", "RuleStatus", "SourceInfo"]

if TYPE_CHECKING:
    from gpuadvisor.metrics import Metrics
    from gpuadvisor.multirank import CrossRank
    from gpuadvisor.runinfo import RunInfo
    from gpuadvisor.trace.model import TraceModel


@dataclass(frozen=True)
class SourceInfo:
    path: str
    kind: str  # "run" | "trace"
    ranks: tuple[int, ...] = (0,)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "ranks": list(self.ranks)}


@dataclass
class AnalysisResult:
    source: SourceInfo
    environment: dict[str, Any]
    metrics: dict[str, Any]  # window metrics (JSON-safe scalars), keys documented in docs/metrics.md
    findings: list[Finding]  # sorted by impact, highest first
    rules: list[RuleStatus] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # degraded inputs, labels ("CPU-only trace", ...)
    # The top findings' remedies replayed together (medium severity and above): the step time the
    # run is predicted at with those fixes applied at once. None when no replayed finding qualifies.
    prediction: dict[str, Any] | None = None
    # In-memory objects for renderers (not serialized):
    trace: TraceModel | None = field(default=None, repr=False, compare=False)
    metrics_detail: Metrics | None = field(default=None, repr=False, compare=False)
    run: RunInfo | None = field(default=None, repr=False, compare=False)
    # Every rank's trace of a multi-rank input (rank order; `trace` is the first); () for one rank.
    traces: tuple[TraceModel, ...] = field(default=(), repr=False, compare=False)
    # The ranks compared (stragglers, per-rank step times) of a multi-rank input, computed once by the
    # analysis; None for one rank.
    cross_rank: CrossRank | None = field(default=None, repr=False, compare=False)
    # The documentation of every rule the analysis loaded (built-in, entry-point and --rules folders),
    # by rule id: what the renderers show, so that none of them loads the rules again.
    rule_docs: Mapping[str, RuleMeta] = field(default_factory=dict, repr=False, compare=False)
    # RUN/verify.json as the analysis read it (gpuadvisor verify; the reports' explore section), None
    # when the run has none or it is unreadable (then a note says why).
    verify: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "gpuadvisor", "version": __version__},
            "source": self.source.to_dict(),
            "environment": jsonable(self.environment),
            "metrics": jsonable(self.metrics),
            "findings": [f.to_dict() for f in self.findings],
            "rules": [r.to_dict() for r in sorted(self.rules, key=lambda r: r.rule)],
            "notes": list(self.notes),
            "prediction": None if self.prediction is None else jsonable(self.prediction),
        }

    def exit_code(self, fail_on: str | Severity | None = "high", *, allow_rule_errors: bool = False) -> int:
        """0 when no finding reaches `fail_on` (high/medium/low), 1 otherwise; 3
        (`errors.EXIT_RULE_ERRORS`) when a gate is asked for and a rule raised (an internal-error
        finding): a gate that did not evaluate all its rules has not passed. `allow_rule_errors`
        gates on the rules that ran (the errors stay reported)."""
        if fail_on is None:
            return EXIT_OK
        threshold = Severity(fail_on) if not isinstance(fail_on, Severity) else fail_on
        for f in self.findings:
            if f.category.value == "internal":
                continue
            if f.severity != Severity.INFO and f.severity.rank >= threshold.rank:
                return EXIT_FINDINGS
        if not allow_rule_errors and self.rule_errors():
            return EXIT_RULE_ERRORS
        return EXIT_OK

    def rule_errors(self) -> list[str]:
        """Ids of the rules that raised (their internal-error findings), sorted."""
        return sorted({f.rule for f in self.findings if f.category.value == "internal"})

    def write_html(self, path: str | Path, *, cdn: bool = False) -> Path:
        # lazy: the HTML renderer (templates, figures: ~1700 lines) loads only when a page is written
        from gpuadvisor.render.html import write_report

        return write_report(self, Path(path), cdn=cdn)

    def by_rule(self) -> Mapping[str, list[Finding]]:
        out: dict[str, list[Finding]] = {}
        for f in self.findings:
            out.setdefault(f.rule, []).append(f)
        return out
