"""Synthetic AnalysisResult objects for renderer tests (built directly from model.Finding lists,
not from a trace): every finding here is made up for the test and labelled so."""

from __future__ import annotations

from gpuadvisor.model import Category, Finding, Location, Severity, sort_findings
from gpuadvisor.result import AnalysisResult, RuleStatus, SourceInfo

HOSTILE = '<script>alert("x")</script> | a|b & `tick` *star* _u_ [l](u)'


def finding(
    rule: str,
    name: str,
    category: Category,
    impact: float | None,
    *,
    title: str = "synthetic finding",
    locations: tuple[Location, ...] = (),
    severity: Severity | None = None,
) -> Finding:
    return Finding(
        rule=rule,
        name=name,
        category=category,
        severity=severity if severity is not None else Severity.from_impact(impact),
        impact=impact,
        title=title,
        message=f"synthetic: {title} costs {impact}",
        evidence={"per_step_ms": 1.5, "count": 3, "nan": float("nan")},
        recommendation=f"synthetic fix for {rule}",
        locations=locations,
        references=("https://pytorch.org/docs/stable/notes/cuda.html",),
        impact_explanation="synthetic",
    )


def sample_result() -> AnalysisResult:
    """Five rules: two with findings (high, low), one not applicable, one deselected, one internal error."""
    findings = [
        finding(
            "GA201",
            "blocking-scalar-reads",
            Category.HOST_SYNC,
            0.31,
            title="loss.item() blocks every step",
            locations=(Location(file="train.py", line=36, code="hist.append(loss.item())"),),
        ),
        finding(
            "GA301",
            "pageable-copies",
            Category.HOST_DEVICE_TRANSFER,
            0.08,
            title=HOSTILE,
            locations=(Location(kernel="void at::native::_kernel_<float|int>(Memcpy <HtoD>)"),),
        ),
        finding(
            "GA301",
            "pageable-copies",
            Category.HOST_DEVICE_TRANSFER,
            0.02,
            title="small copy",
            locations=(Location(file="/abs/path/data.py", line=7),),
        ),
        Finding(
            rule="GA999",
            name="broken-rule",
            category=Category.INTERNAL,
            severity=Severity.INFO,
            impact=None,
            title="Internal error in rule GA999",
            message="rule GA999 (broken-rule) raised ZeroDivisionError at GA999.py:3: division by zero",
            evidence={"exception": "ZeroDivisionError"},
            recommendation="report it",
        ),
    ]
    rules = [
        RuleStatus("GA201", "blocking-scalar-reads", "ran", "1 finding(s)"),
        RuleStatus("GA301", "pageable-copies", "ran", "2 finding(s)"),
        RuleStatus("GA401", "dataloader-starvation", "ran", "0 finding(s)"),
        RuleStatus("GA701", "clock-throttling", "not_applicable", "needs NVML samples: this is a raw trace"),
        RuleStatus("GA801", "memory-headroom", "deselected", "not selected"),
        RuleStatus("GA999", "broken-rule", "error", findings[3].message),
    ]
    return AnalysisResult(
        source=SourceInfo(path="runs/a", kind="run", ranks=(0,)),
        environment={"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0"},
        metrics={
            "step_time_ms": 6.7,
            "gpu_busy_fraction": 0.41,
            "steps_analyzed": 8,
            "mfu": None,
            "gpu_name": "NVIDIA H100 80GB HBM3",
        },
        findings=sort_findings(findings),
        rules=rules,
        notes=["synthetic result built in tests/ci/results.py"],
    )


def clean_result() -> AnalysisResult:
    """Rules ran, only a low finding: passes a high gate."""
    return AnalysisResult(
        source=SourceInfo(path="trace.json.gz", kind="trace"),
        environment={},
        metrics={"step_time_ms": 3.2},
        findings=[
            finding("GA501", "launch-bound", Category.LAUNCH_OVERHEAD, 0.03, title="a few tiny kernels")
        ],
        rules=[RuleStatus("GA501", "launch-bound", "ran", "1 finding(s)")],
    )
