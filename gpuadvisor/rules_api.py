"""The public API for writing rules (built-in ones in `rules/`, user folders via `--rules DIR`,
third-party packages via the `gpuadvisor.rules` entry point group).

A rule is a class deriving from `Rule`. Its docstring is its documentation (`gpuadvisor rules ID`
prints it), written in sections::

    One-line summary.

    Why it matters
    --------------
    ...
    How it is detected
    ------------------
    ...
    How to fix
    ----------
    ... (before/after code example in indented blocks)

`check(ctx)` yields `Finding`s built with `self.finding(...)`, which derives the severity from the
impact estimate (the README, "Rules": high >= 20% of step time, medium 5-20%, low < 5%, info unmeasured).
A rule declares the inputs it `requires`; when an input is missing the engine reports the rule as
"not applicable" instead of running it, so a CPU-only trace never produces false findings.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from gpuadvisor.model import Category, Finding, Location, Severity
from gpuadvisor.stepmodel import build_step_model
from gpuadvisor.stepmodel.predict import predict

if TYPE_CHECKING:
    from gpuadvisor.metrics import Metrics
    from gpuadvisor.remedies import RemedyId
    from gpuadvisor.runinfo import RunInfo
    from gpuadvisor.stepmodel import Prediction, StepModel
    from gpuadvisor.trace.model import TraceModel

__all__ = [
    "Category",
    "Finding",
    "Location",
    "Requirement",
    "Rule",
    "RuleContext",
    "Severity",
    "Threshold",
]


class Requirement(str, enum.Enum):
    """Inputs a rule may need. The engine computes which are available for a given analysis."""

    GPU_KERNELS = "gpu_kernels"  # the trace holds `kernel` events
    STEPS = "steps"  # at least one training step was segmented
    NVML = "nvml"  # NVML samples (run directory with nvml.csv.gz and rows in it)
    SETTINGS = "settings"  # settings captured at run time (environment.json of a run directory)
    CALLSITES = "callsites"  # host-sync / host->device call sites (callsites.json)
    RECORD_SHAPES = "record_shapes"  # cpu ops carry Input Dims / Input type
    FLOPS = "flops"  # cpu ops carry `flops` (with_flops)
    DEVICE_PROPERTIES = "device_properties"  # trace deviceProperties (SM count...)
    MULTI_RANK = "multi_rank"  # more than one rank's trace
    TRAINING = "training"  # a training run: backward pass or optimizer step in the trace (TraceKind)
    NVIDIA_GPU = "nvidia_gpu"  # the GPU work ran on an NVIDIA GPU: CUDA-specific advice applies
    STEADY_STATE = "steady_state"  # no CUDA/HIP graph capture in the analyzed steps (their launches ran)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Threshold:
    """A tunable threshold: default value, what it means, its unit (for docs and config)."""

    default: float
    description: str
    unit: str = ""


@dataclass
class RuleContext:
    """What a rule sees. `trace` and `metrics` always exist (possibly empty tables);
    `run` is None for a raw trace (no NVML, settings or call sites)."""

    trace: TraceModel
    metrics: Metrics
    run: RunInfo | None
    available: frozenset[Requirement]
    thresholds: Mapping[str, float] = field(default_factory=dict)
    traces: tuple[TraceModel, ...] = ()  # every rank's trace (multi-rank analysis); trace is rank 0's

    def threshold(self, key: str) -> float:
        return float(self.thresholds[key])

    @property
    def model(self) -> StepModel:
        """The step model of this analysis (docs/model.md): the analyzed window, GPU work, host calls,
        idle time by cause, and the what-if replay. Built once, shared by every rule."""
        model = getattr(self.metrics, "model", None)
        if model is None:
            model = build_step_model(self.trace, self.run)
            self.metrics.model = model
        return model

    def predict(self, remedy: RemedyId | str, **params: Any) -> Prediction:
        """What `remedy` would gain on this run, from the replay (gpuadvisor.stepmodel.predict)."""
        return predict(self.model, remedy, **params)


class Rule:
    """Base class of every rule. Subclasses set the class attributes and implement `check`."""

    id: ClassVar[str] = ""
    name: ClassVar[str] = ""
    category: ClassVar[Category] = Category.INTERNAL
    requires: ClassVar[frozenset[Requirement]] = frozenset()
    thresholds: ClassVar[Mapping[str, Threshold]] = {}
    references: ClassVar[tuple[str, ...]] = ()
    aliases: ClassVar[tuple[str, ...]] = ()  # old ids/names that still select this rule

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        raise NotImplementedError

    # ---- helpers for subclasses -------------------------------------------------------------

    @classmethod
    def summary(cls) -> str:
        """The docstring's first paragraph on one line (a summary that wraps onto a second line is
        not cut mid-sentence)."""
        doc = inspect.cleandoc(cls.__doc__ or "")
        first = doc.split("\n\n", 1)[0] if doc else ""
        return " ".join(line.strip() for line in first.splitlines() if line.strip())

    def finding(
        self,
        *,
        impact: float | None,
        title: str,
        message: str,
        evidence: Mapping[str, Any],
        recommendation: str,
        locations: Iterable[Location] = (),
        references: Iterable[str] = (),
        impact_explanation: str = "",
        severity: Severity | None = None,
        remedy: str | None = None,
        prediction: Mapping[str, Any] | Prediction | None = None,
        group: str | None = None,
    ) -> Finding:
        if impact is not None:
            impact = max(0.0, min(1.0, float(impact)))
        return Finding(
            rule=self.id,
            name=self.name,
            category=self.category,
            severity=severity if severity is not None else Severity.from_impact(impact),
            impact=impact,
            title=title,
            message=message,
            evidence=dict(evidence),
            recommendation=recommendation,
            locations=tuple(locations),
            references=tuple(references) or tuple(self.references),
            impact_explanation=impact_explanation,
            remedy=str(remedy) if remedy is not None else None,
            prediction=(
                None
                if prediction is None
                else dict(prediction) if isinstance(prediction, Mapping) else prediction.to_dict()
            ),
            group=group,
        )
