"""The finding vocabulary shared by the rules, the renderers and the API.

Everything here is a frozen dataclass or an enum so that a finding, once made, cannot drift
between the terminal summary, the JSON contract, the HTML report and the CI formats.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuadvisor.words import Base, of_base

SCHEMA_VERSION = 1


class Category(str, enum.Enum):
    """Stable finding categories (JSON, docs and CI filters use the values)."""

    HOST_DEVICE_TRANSFER = "host_device_transfer"
    HOST_SYNC = "host_sync"
    DATA_LOADING = "data_loading"
    SMALL_BATCH = "small_batch"
    LAUNCH_OVERHEAD = "launch_overhead"
    LOW_OCCUPANCY = "low_occupancy"
    FP32_MATH = "fp32_math"
    KERNEL_EFFICIENCY = "kernel_efficiency"  # busy GPU time far from its roofline (issue 31)
    PERIODIC_COST = "periodic_cost"  # a cost every N steps outside the window: eval, checkpoints (issue 27)
    MEMORY = "memory"
    COMMUNICATION = "communication"
    GPU_HEALTH = "gpu_health"
    CAPTURE = "capture"
    INTERNAL = "internal"  # a rule raised; never a performance statement

    def __str__(self) -> str:
        return self.value


class Severity(str, enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"

    def __str__(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        """Higher is worse: high=3, medium=2, low=1, info=0."""
        return {"high": 3, "medium": 2, "low": 1, "info": 0}[self.value]

    @classmethod
    def from_impact(cls, impact: float | None) -> Severity:
        """The README ("Rules"): high >= 20% of step time, medium 5-20%, low < 5%, info when unmeasured."""
        if impact is None or not math.isfinite(impact):
            return cls.INFO
        if impact >= 0.20:
            return cls.HIGH
        if impact >= 0.05:
            return cls.MEDIUM
        return cls.LOW


@dataclass(frozen=True)
class Location:
    """Where a finding points: a user source line, or an op/kernel, or a call site of a setting."""

    file: str | None = None
    line: int | None = None
    code: str | None = None  # the source line, stripped
    function: str | None = None
    op: str | None = None  # aten op name
    kernel: str | None = None  # kernel name
    detail: Mapping[str, Any] = field(default_factory=dict)  # grid, occupancy, dtype, count per step...

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("file", "line", "code", "function", "op", "kernel"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.detail:
            out["detail"] = dict(self.detail)
        return out

    def label(self) -> str:
        if self.file:
            return f"{self.file}:{self.line}" if self.line else self.file
        return self.op or self.kernel or self.function or "?"

    def place(self) -> str:
        """The location in words, for a line that starts "at ..." only when it is a source line:
        "at train.py:12", "kernel reduce_kernel in Optimizer.step#AdamW.step", "op aten::copy_",
        "in rank 1". A C++ kernel name is shown without its template arguments and parameters
        (`kernel_base_name`); the full name stays in `kernel` (JSON, the HTML report)."""
        if self.file:
            return f"at {self.label()}"
        kernel = kernel_base_name(self.kernel) if self.kernel else None
        if kernel and self.op:
            return f"kernel {kernel} in {self.op}"
        if kernel:
            return f"kernel {kernel}"
        if self.op:
            return f"op {self.op}"
        return f"in {self.function}" if self.function else "?"


def kernel_base_name(name: str) -> str:
    """A kernel's name without template arguments, parameters and return type:
    "void at::native::reduce_kernel<512, 1, ...>(...)" -> "at::native::reduce_kernel"; names without
    them (nvjet_sm90_..., triton_poi_fused_...) are returned as they are."""
    out: list[str] = []
    depth = 0
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    text = "".join(out).strip().rstrip(".").strip()
    while "::::" in text:  # what "(anonymous namespace)" leaves
        text = text.replace("::::", "::")
    for prefix in ("void ", "static "):
        if text.startswith(prefix):
            text = text[len(prefix) :].strip()
    if _WRAPPER_KERNEL.search(text):
        # a generic launcher (cutlass::Kernel2<cutlass_80_simt_sgemm_...>): its name says nothing, its
        # first template argument is the kernel
        first = _first_template_argument(name, text)
        if first:
            text = f"{text}<{first}>"
    return text or name


# Launchers whose name is the same for every kernel they run: CUTLASS's `Kernel`, `Kernel2`,
# `device_kernel`; the first template argument names the kernel.
_WRAPPER_KERNEL = re.compile(r"(?:^|::)(?:Kernel\d*|device_kernel)$")
_WRAPPED_MAX = 80


def _first_template_argument(name: str, base: str) -> str | None:
    """The first top-level template argument after `base` in `name`, cut to _WRAPPED_MAX with "…"."""
    at = name.find(base.rsplit("::", 1)[-1] + "<")
    if at < 0:
        return None
    depth = 0
    start = name.index("<", at) + 1
    for i in range(start, len(name)):
        ch = name[i]
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            if depth == 0:
                arg = name[start:i].strip()
                break
            depth -= 1
        elif ch == "," and depth == 0:
            arg = name[start:i].strip()
            break
    else:
        arg = name[start:].strip()
    if not arg:
        return None
    return arg if len(arg) <= _WRAPPED_MAX else arg[: _WRAPPED_MAX - 1].rstrip() + "…"


@dataclass(frozen=True)
class Finding:
    rule: str  # rule id, e.g. "GA201"
    name: str  # rule name, e.g. "blocking-scalar-reads"
    category: Category
    severity: Severity
    impact: float | None  # recoverable fraction of step time (0..1), Amdahl upper bound; None = unmeasured
    title: str
    message: str  # what was seen, with the numbers
    evidence: Mapping[str, Any]
    recommendation: str
    locations: tuple[Location, ...] = ()
    references: tuple[str, ...] = ()
    impact_explanation: str = ""  # how the impact was computed, in words
    # The remedy that fixes it (a gpuadvisor.remedies.RemedyId value, or a user rule's own id).
    remedy: str | None = None
    # What the step model's what-if replay predicts for the remedy: {"step_time_ms", "speedup",
    # "recovered_fraction", "basis", ...}; None when the impact is not from a replay.
    prediction: Mapping[str, Any] | None = None
    # What `gpuadvisor verify` measured for the remedy: {"status", "speedup", "low", "high", "trials", ...}.
    verified: Mapping[str, Any] | None = None
    # Findings whose remedies act on the same time share a group id (and one combined prediction).
    group: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "name": self.name,
            "category": self.category.value,
            "severity": self.severity.value,
            "impact": None if self.impact is None else round(float(self.impact), 4),
            "impact_explanation": self.impact_explanation,
            "title": self.title,
            "message": self.message,
            "evidence": _jsonable(self.evidence),
            "locations": [loc.to_dict() for loc in self.locations],
            "recommendation": self.recommendation,
            "references": list(self.references),
            "remedy": self.remedy,
            "prediction": None if self.prediction is None else _jsonable(self.prediction),
            "verified": None if self.verified is None else _jsonable(self.verified),
            "group": self.group,
        }


def prediction_step(prediction: Mapping[str, Any]) -> Base:
    """The step a prediction's step times are of: the run's mean step when the prediction was carried to
    it (`per_step` "mean", issue 38) or made on the steps as the capture timed them (`basis`
    "timed_steps"), else the replayed step (a raw trace; profiled and unprofiled steps that disagree)."""
    if prediction.get("per_step") == "mean" or prediction.get("basis") == "timed_steps":
        return Base.MEAN_STEP
    return Base.REPLAYED_STEP


def prediction_base(prediction: Mapping[str, Any]) -> Base:
    """What a prediction's recovered fraction is a share of: the time per sample when its remedy changes
    the batch (the step itself grows then), else its step (`prediction_step`)."""
    return Base.SAMPLE if prediction.get("per") == "sample" else prediction_step(prediction)


def impact_base(f: Finding) -> Base:
    """What the finding's impact is a share of: its prediction's base ("87.5% of the time per sample",
    "88% of the mean step") when the impact is the predicted gain, else the step its impact_explanation
    names (a measured share: the finding rated by what it costs now)."""
    gain = f.prediction.get("recovered_fraction") if f.prediction is not None else None
    if f.prediction is None or f.impact is None or not isinstance(gain, (int, float)):
        return Base.STEP
    return prediction_base(f.prediction) if abs(float(gain) - f.impact) < 1e-3 else Base.STEP


def rank_impact(f: Finding) -> float:
    """What a finding ranks by: its impact, or its group's combined impact when larger (the findings
    of one problem, e.g. GA501 and GA502 on launch overhead, are fixed together: the problem ranks by
    what fixing all of it gains, not by its largest part)."""
    own = f.impact if f.impact is not None else -1.0
    group = f.prediction.get("group_recovered_fraction") if f.prediction else None
    if isinstance(group, (int, float)) and not isinstance(group, bool) and group > own:
        return float(group)
    return own


def group_note(f: Finding, findings: Sequence[Finding]) -> str | None:
    """The sentence that says why a finding ranks above findings of higher impact: it ranks by its
    group's combined prediction (`rank_impact`). Said once per group, on its first finding in
    `findings` (ranked order); None for the others and for a finding that ranks by its own impact."""
    own = f.impact if f.impact is not None else -1.0
    combined = rank_impact(f)
    # a combined gain the printed percentages cannot tell from the finding's own says nothing new
    if round(100 * combined) <= round(100 * own) or f.prediction is None:
        return None
    if f.group is not None and next((g for g in findings if g.group == f.group), f) is not f:
        return None
    others = [g.rule for g in findings if g is not f and g.group is not None and g.group == f.group]
    with_ = f" with {', '.join(others)}" if others else ""
    remedies = [str(r) for r in f.prediction.get("group_remedies") or ()]
    what = f" ({' + '.join(remedies)})" if remedies else ""
    speedup = f.prediction.get("group_speedup")
    times = (
        f" ({float(speedup):.2f}x)"
        if isinstance(speedup, (int, float)) and not isinstance(speedup, bool) and speedup > 0
        else ""
    )
    problem = (f.group or f.category.value).replace("_", " ")
    return (
        f"Ranked as one problem ({problem}){with_}: the fixes together{what} are predicted to save "
        f"{100 * combined:.0f}% {of_base(prediction_base(f.prediction))}{times}."
    )


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Highest impact first (a group's combined impact for the findings of a group: `rank_impact`);
    within a group by their own impact; ties by severity, then rule id (deterministic output)."""
    return sorted(
        findings,
        key=lambda f: (
            -rank_impact(f),
            -(f.impact if f.impact is not None else -1.0),
            -f.severity.rank,
            f.rule,
            f.title,
        ),
    )


def _jsonable(value: Any) -> Any:
    """Make evidence JSON-safe and deterministic (NaN/inf -> None, numpy scalars -> Python, floats rounded)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, int):
        return int(value)
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(f):
        return None
    if f.is_integer() and not isinstance(value, float) and abs(f) < 2**53:
        return int(f)
    return round(f, 6)


jsonable = _jsonable


@dataclass(frozen=True)
class RuleStatus:
    """Per rule: ran / not_applicable (with the missing inputs) / error (internal error text)."""

    rule: str
    name: str
    status: str  # "ran" | "not_applicable" | "error" | "deselected"
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "name": self.name, "status": self.status, "detail": self.detail}


def _x(value: Any) -> str:
    return f"{float(value):.2f}x" if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"


def predicted_speedup(f: Finding) -> float | None:
    """The replay's prediction, else 1 / (1 - impact) (the Amdahl bound the impact states)."""
    if f.prediction and isinstance(f.prediction.get("speedup"), (int, float)):
        return float(f.prediction["speedup"])
    if f.impact is not None and 0 < f.impact < 1:
        return 1.0 / (1.0 - f.impact)
    return None


def summary_line(f: Finding) -> str | None:
    """A verified finding's measurement (`Finding.verified`, from RUN/verify.json), as the terminal
    summary and the HTML report show it: "predicted 2.70x, measured 2.90x (2.80-3.00, 3 trials)" or "verify: failed (reason)"; None
    when the finding was not verified."""
    v = f.verified
    if not v:
        return None
    remedy = v.get("remedy", "?")
    status = v.get("status")
    if status != "ok":
        return f"verify {remedy}: {status} ({v.get('reason') or 'no reason given'})"
    predicted = predicted_speedup(f)
    head = f"predicted {_x(predicted)}, " if predicted is not None else ""
    unit = " in samples/s" if v.get("compared_in") == "samples_per_s" else ""
    trials = v.get("trials")
    band = f"{float(v.get('low', 0)):.2f}-{float(v.get('high', 0)):.2f}"
    text = f"{head}measured {_x(v.get('speedup'))}{unit} ({band}, {trials} trial{'s' if trials != 1 else ''})"
    verdict = v.get("verdict")
    if verdict and verdict != "faster":
        text += f", {str(verdict).replace('_', ' ')}"
    if v.get("measured_on"):
        text += f", measured on {v['measured_on']} (not the recording's machine)"
    return f"{text} [{remedy}]"


@dataclass(frozen=True)
class RuleMeta:
    """A rule's documentation as the renderers show it (SARIF/JUnit rule entries, the report's doc links):
    from the rule class the analysis loaded (`AnalysisResult.rule_docs`), else from its findings."""

    id: str
    name: str
    category: str
    summary: str
    doc: str
    references: tuple[str, ...] = ()
