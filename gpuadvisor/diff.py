"""Compare two runs (or traces): step time against measured noise, per-category time, findings, environment.

`diff(base, new)` analyzes both inputs (run directories, trace files, `Run` objects or ready
`AnalysisResult`s) and returns a `DiffResult`.

Step time and noise
-------------------
Step time is the step as the run ran it: the median of the steps the capture timed outside the
profiler (`metrics.host_step_durations`, the run's `unprofiled_step_time_ms`), when both runs have
them (`StepTimeDelta.basis` "unprofiled"). The profiled trace's steps can be several times longer
(the profiler's per-op cost on a host-bound run), so they are compared only when an input has no
unprofiled steps (a raw trace; basis "profiled", said in `notes`), and are always given beside
(`DiffResult.profiled_step_time`): the median of the analyzed steps' durations
(`Metrics.per_step.step_time_us`, outlier steps excluded, as in the window metrics). Each run's spread is a robust standard deviation of those
per-step times: the larger of IQR / 1.349 and 1.4826 * MAD (both equal the standard deviation for
normal data; taking the larger stays conservative when one of them collapses to 0 on few steps).
The noise of the comparison is sqrt(spread_base**2 + spread_new**2): the typical step-to-step jitter of
a difference between one step of each run. It deliberately is *not* divided by the number of steps (a
standard error): two runs also differ by things within-run jitter never shows (clocks, thermals,
neighbours on the machine), so a change must exceed the jitter of single steps to count.
With fewer than 3 analyzed steps in either run the noise is unknown (None) and only the percentage
threshold applies; the result says so in `notes`.

Categories
----------
Per step (median over analyzed steps, milliseconds): GPU compute, collectives, memset, copies (and
HtoD/DtoH/DtoD), GPU idle by cause (data loading, host sync, launch overhead, other), and the host's
time blocked in sync calls and waiting for the DataLoader. Without per-step tables (a capture with no
segmented steps) they come from the window fractions times the median step time.

Findings
--------
Matched by rule id + primary location (the first location's `file:line`, op or kernel): present only
in `new` = new, only in `base` = resolved, in both = persisting (with both impacts). Internal errors of
rules are not compared.

Environment
-----------
The script (manifest target), the device (GPU name, or CPU only), driver version, CUDA runtime and
torch version are compared when both sides know them; any difference makes `compatible` False with
one reason per difference (`gpuadvisor diff` then refuses, exit 2, unless --allow-mismatch, which
compares with a loud warning). A value only one side knows is listed in `notes`.
"""

from __future__ import annotations

import math
import os
import sys
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from gpuadvisor import analysis, rundir
from gpuadvisor.config import resolve_options
from gpuadvisor.errors import ConfigError
from gpuadvisor.manifest import host_step_durations
from gpuadvisor.model import Finding, jsonable
from gpuadvisor.result import AnalysisResult
from gpuadvisor.runinfo import read_environment, read_manifest

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.api import Run

__all__ = [
    "CATEGORIES",
    "CategoryDelta",
    "DiffInput",
    "DiffResult",
    "FindingChange",
    "StepTimeDelta",
    "compare_environments",
    "diff",
    "diff_results",
    "robust_spread",
    "verdict",
]

DiffInput = Union[str, "os.PathLike[str]", "Run", AnalysisResult]

# (category key, label, per_step column in microseconds, window fraction key)
CATEGORIES: tuple[tuple[str, str, str, str], ...] = (
    ("compute", "GPU compute", "compute_us", "compute_fraction"),
    ("collective", "collectives", "collective_us", "collective_fraction"),
    ("memset", "memset", "memset_us", "memset_fraction"),
    ("copy", "copies (all)", "copy_us", "copy_fraction"),
    ("copy_htod", "copies host->device", "copy_htod_us", "copy_htod_fraction"),
    ("copy_dtoh", "copies device->host", "copy_dtoh_us", "copy_dtoh_fraction"),
    ("copy_dtod", "copies device->device", "copy_dtod_us", "copy_dtod_fraction"),
    ("gpu_idle", "GPU idle (all)", "gpu_idle_us", "gpu_idle_fraction"),
    ("idle_data_loading", "GPU idle: data wait", "idle_data_loading_us", "idle_data_loading_fraction"),
    ("idle_host_sync", "GPU idle: host sync", "idle_host_sync_us", "idle_host_sync_fraction"),
    (
        "idle_launch_overhead",
        "GPU idle: launch-bound",
        "idle_launch_overhead_us",
        "idle_launch_overhead_fraction",
    ),
    ("idle_other", "GPU idle: other", "idle_other_us", "idle_other_fraction"),
    ("sync_blocked", "host blocked in syncs", "sync_blocked_us", "sync_blocked_fraction"),
    ("dataloader_wait", "host waiting for data", "dataloader_wait_us", "dataloader_wait_fraction"),
)

MIN_STEPS_FOR_NOISE = 3


@dataclass(frozen=True)
class StepTimeDelta:
    """Median step time of both runs, their spreads, and the change against the combined noise."""

    base_ms: float
    new_ms: float
    base_spread_ms: float | None
    new_spread_ms: float | None
    base_steps: int
    new_steps: int
    basis: str = "profiled"  # "unprofiled": host-timed steps outside the profiler; "profiled": the trace's

    @property
    def delta_ms(self) -> float:
        return self.new_ms - self.base_ms

    @property
    def delta_pct(self) -> float | None:
        return None if self.base_ms <= 0 else 100.0 * self.delta_ms / self.base_ms

    @property
    def noise_ms(self) -> float | None:
        """sqrt(spread_base**2 + spread_new**2); None when either spread is unknown."""
        if self.base_spread_ms is None or self.new_spread_ms is None:
            return None
        return math.hypot(self.base_spread_ms, self.new_spread_ms)

    @property
    def beyond_noise(self) -> bool | None:
        """|delta| larger than the noise (None: noise unknown)."""
        noise = self.noise_ms
        return None if noise is None else abs(self.delta_ms) > noise

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_ms": self.base_ms,
            "new_ms": self.new_ms,
            "delta_ms": self.delta_ms,
            "delta_pct": self.delta_pct,
            "base_spread_ms": self.base_spread_ms,
            "new_spread_ms": self.new_spread_ms,
            "noise_ms": self.noise_ms,
            "beyond_noise": self.beyond_noise,
            "base_steps": self.base_steps,
            "new_steps": self.new_steps,
            "basis": self.basis,
        }


@dataclass(frozen=True)
class CategoryDelta:
    """Per-step time of one category (median over analyzed steps), milliseconds."""

    key: str
    label: str
    base_ms: float | None
    new_ms: float | None

    @property
    def delta_ms(self) -> float | None:
        if self.base_ms is None or self.new_ms is None:
            return None
        return self.new_ms - self.base_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "base_ms": self.base_ms,
            "new_ms": self.new_ms,
            "delta_ms": self.delta_ms,
        }


@dataclass(frozen=True)
class FindingChange:
    """A finding matched across the two runs by rule id + primary location."""

    status: str  # "new" | "resolved" | "persisting"
    rule: str
    name: str
    location: str
    title: str
    severity: str  # in `new` when present there, else in `base`
    base_impact: float | None
    new_impact: float | None
    # What `gpuadvisor verify` measured for the finding in each run (Finding.verified), when it ran.
    base_verified: Mapping[str, Any] | None = None
    new_verified: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "rule": self.rule,
            "name": self.name,
            "location": self.location,
            "title": self.title,
            "severity": self.severity,
            "base_impact": self.base_impact,
            "new_impact": self.new_impact,
            "base_verified": None if self.base_verified is None else dict(self.base_verified),
            "new_verified": None if self.new_verified is None else dict(self.new_verified),
        }


@dataclass
class DiffResult:
    """What `gpuadvisor diff` prints and gates on; `to_dict()` is its JSON form (schema_version 1)."""

    base_source: str
    new_source: str
    compatible: bool
    mismatches: list[str]
    step_time: StepTimeDelta | None
    categories: list[CategoryDelta]
    findings: list[FindingChange]
    notes: list[str] = field(default_factory=list)
    # the profiled traces' step times, beside `step_time` when that one is unprofiled (None otherwise)
    profiled_step_time: StepTimeDelta | None = None
    base: AnalysisResult | None = field(default=None, repr=False, compare=False)
    new: AnalysisResult | None = field(default=None, repr=False, compare=False)

    @property
    def new_findings(self) -> list[FindingChange]:
        return [f for f in self.findings if f.status == "new"]

    @property
    def resolved_findings(self) -> list[FindingChange]:
        return [f for f in self.findings if f.status == "resolved"]

    @property
    def persisting_findings(self) -> list[FindingChange]:
        return [f for f in self.findings if f.status == "persisting"]

    def regressed(self, pct: float) -> bool:
        """True when the median step time grew by more than `pct` percent AND by more than the measured
        noise (when the noise is unknown, the percentage alone decides)."""
        st = self.step_time
        if st is None or st.delta_pct is None:
            return False
        if st.delta_pct <= pct:
            return False
        return st.beyond_noise is not False

    def improved(self) -> bool:
        """Faster by more than the measured noise (False when the noise is unknown)."""
        st = self.step_time
        return st is not None and st.delta_ms < 0 and st.beyond_noise is True

    def verdict(self, fail_on_regression: float | None = None) -> str:
        """One line: regression / improvement / within noise, with the gate when one is set."""
        st = self.step_time
        if st is None:
            return "no step-time comparison (step time unknown)"
        pct = "n/a" if st.delta_pct is None else f"{st.delta_pct:+.1f}%"
        if fail_on_regression is not None and self.regressed(fail_on_regression):
            return (
                f"REGRESSION: step time {pct}, above the {fail_on_regression:g}% threshold and beyond the noise"
            )
        if st.beyond_noise is None:
            return f"step time {pct} (noise unknown)"
        if not st.beyond_noise:
            return f"no significant change: step time {pct} is within the noise"
        if st.delta_ms < 0:
            return f"improvement: step time {pct}, beyond the noise"
        gate = "" if fail_on_regression is None else f" (within the {fail_on_regression:g}% threshold)"
        return f"slower: step time {pct}, beyond the noise{gate}"

    def exit_code(self, fail_on_regression: float | None) -> int:
        """0, or 1 when `fail_on_regression` (percent) is given and the step time regressed beyond it."""
        return 1 if fail_on_regression is not None and self.regressed(fail_on_regression) else 0

    def to_dict(self) -> dict[str, Any]:
        out = {
            "schema_version": 1,
            "base": self.base_source,
            "new": self.new_source,
            "compatible": self.compatible,
            "mismatches": list(self.mismatches),
            "step_time": None if self.step_time is None else self.step_time.to_dict(),
            "profiled_step_time": None if self.profiled_step_time is None else self.profiled_step_time.to_dict(),
            "categories": [c.to_dict() for c in self.categories],
            "findings": [f.to_dict() for f in self.findings],
            "notes": list(self.notes),
        }
        result: dict[str, Any] = jsonable(out)
        return result


# ---------------------------------------------------------------------------------------------------------


def robust_spread(values: Sequence[float]) -> float | None:
    """max(IQR / 1.349, 1.4826 * MAD): a robust standard deviation; None with fewer than 3 values."""
    data = sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))
    if len(data) < MIN_STEPS_FOR_NOISE:
        return None
    q1, q3 = _quantile(data, 0.25), _quantile(data, 0.75)
    med = _quantile(data, 0.5)
    mad = _quantile(sorted(abs(v - med) for v in data), 0.5)
    return max((q3 - q1) / 1.349, 1.4826 * mad)


def _quantile(sorted_data: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on sorted data."""
    pos = (len(sorted_data) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_data) - 1)
    return sorted_data[lo] + (sorted_data[hi] - sorted_data[lo]) * (pos - lo)


def _analyzed_steps(result: AnalysisResult) -> pd.DataFrame | None:
    detail = result.metrics_detail
    per_step: pd.DataFrame | None = getattr(detail, "per_step", None) if detail is not None else None
    if per_step is None or len(per_step) == 0 or "step_time_us" not in per_step.columns:
        return None
    if "analyzed" in per_step.columns:  # the step model's analyzed steps (trace.model.analyzed_mask)
        kept: pd.DataFrame = per_step[per_step["analyzed"].fillna(False).astype(bool)]
        return kept
    return per_step


def _column_ms(steps: pd.DataFrame, column: str) -> list[float]:
    if column not in steps.columns:
        return []
    values = steps[column].dropna().astype(float).tolist()
    return [v / 1000.0 for v in values if math.isfinite(v)]


def _median(values: Sequence[float]) -> float | None:
    return _quantile(sorted(values), 0.5) if values else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def _step_summary(result: AnalysisResult) -> tuple[float | None, float | None, int]:
    """(median step ms, spread ms, steps) from per-step times, else from the window metrics."""
    steps = _analyzed_steps(result)
    if steps is not None:
        times = _column_ms(steps, "step_time_us")
        if times:
            return _median(times), robust_spread(times), len(times)
    median = _number(result.metrics.get("step_time_ms"))
    count = _number(result.metrics.get("steps_analyzed"))
    return median, None, int(count) if count is not None else 0


def _unprofiled_summary(result: AnalysisResult) -> tuple[float, float | None, int] | None:
    """(median ms, spread ms, steps) of the steps the capture timed outside the profiler; None for a
    raw trace or a run with fewer than 2 of them."""
    run = result.run
    if run is None or result.metrics.get("step_times_disagree") is True:
        return None  # the unprofiled and profiled steps disagree (a load change): not a base to compare
    unprofiled, _ = host_step_durations(run.record.capture)
    median = _median(unprofiled)
    if len(unprofiled) < 2 or median is None:
        return None
    return median, robust_spread(unprofiled), len(unprofiled)


def _category_ms(
    result: AnalysisResult, column: str, fraction_key: str, step_ms: float | None
) -> float | None:
    steps = _analyzed_steps(result)
    if steps is not None and column in steps.columns:
        return _median(_column_ms(steps, column))
    fraction = _number(result.metrics.get(fraction_key))
    if fraction is None or step_ms is None:
        return None
    return fraction * step_ms


def _primary_location(finding: Finding) -> str:
    return finding.locations[0].label() if finding.locations else ""


def _match_findings(base: Iterable[Finding], new: Iterable[Finding]) -> list[FindingChange]:
    def index(findings: Iterable[Finding]) -> dict[tuple[str, str], Finding]:
        out: dict[tuple[str, str], Finding] = {}
        for f in findings:
            if f.category.value == "internal":
                continue
            key = (f.rule, _primary_location(f))
            # several findings of one rule at one place: keep the most costly for the comparison
            if key not in out or (f.impact or 0.0) > (out[key].impact or 0.0):
                out[key] = f
        return out

    b, n = index(base), index(new)
    changes: list[FindingChange] = []
    for key in sorted(set(b) | set(n)):
        fb, fn = b.get(key), n.get(key)
        shown = fn if fn is not None else fb
        assert shown is not None
        status = (
            "persisting" if fb is not None and fn is not None else ("new" if fn is not None else "resolved")
        )
        changes.append(
            FindingChange(
                status=status,
                rule=key[0],
                name=shown.name,
                location=key[1],
                title=shown.title,
                severity=shown.severity.value,
                base_impact=None if fb is None else fb.impact,
                new_impact=None if fn is None else fn.impact,
                base_verified=None if fb is None else fb.verified,
                new_verified=None if fn is None else fn.verified,
            )
        )
    order = {"new": 0, "resolved": 1, "persisting": 2}
    return sorted(changes, key=lambda c: (order[c.status], c.rule, c.location))


def _cuda_version(value: Any) -> str | None:
    """ "13.0", 13000 or "13000" -> "13.0" (Kineto writes 1000*major + 10*minor)."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    if text.isdigit() and int(text) >= 1000:
        number = int(text)
        return f"{number // 1000}.{(number % 1000) // 10}"
    return text


def _torch_version(value: Any) -> str | None:
    return None if value in (None, "") else str(value).strip()


CPU_ONLY = "CPU only"


def _device(env: Mapping[str, Any]) -> str | None:
    """The GPU's name, CPU_ONLY for a run or trace without one ("different device" then, not "different
    GPU"), None when unknown."""
    if env.get("gpu"):
        return str(env.get("gpu"))
    kind = env.get("trace_kind")
    if env.get("cuda_available") is False or (isinstance(kind, Mapping) and kind.get("cpu_only")):
        return CPU_ONLY
    return None


def _script(env: Mapping[str, Any]) -> str | None:
    """The script (or module) a run ran, as recorded (`script`: manifest target): two runs of one script
    compare; with an absolute path on either side only the file names are compared (one script, two
    checkouts)."""
    value = env.get("script")
    if not value:
        return None
    text = os.path.normpath(str(value))
    return text


def _env_values(env: Mapping[str, Any]) -> dict[str, str | None]:
    driver = env.get("driver")
    return {
        "script": _script(env),
        "GPU": _device(env),
        "driver": None if not driver else str(driver),
        "CUDA driver API": _cuda_version(env.get("cuda_driver_version")),
        "CUDA runtime": _cuda_version(env.get("cuda_runtime") or env.get("cuda_runtime_version")),
        "torch": _torch_version(env.get("torch")),
    }


def compare_environments(base: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(mismatches, notes): one sentence per differing script, device (a GPU's name, or CPU only),
    driver, CUDA or torch value; notes for values only one side knows. A torch version with a local part (+cu130) is compared with its local part
    only when both sides have one."""
    vb, vn = _env_values(base), _env_values(new)
    mismatches: list[str] = []
    notes: list[str] = []
    for key in vb:
        a, b = vb[key], vn[key]
        if a is None and b is None:
            continue
        if a is None or b is None:
            notes.append(f"{key} known for only one run ({a or b}); not compared")
            continue
        if key == "torch" and ("+" in a) != ("+" in b):
            a, b = a.split("+")[0], b.split("+")[0]
        if key == "script" and (os.path.isabs(a) or os.path.isabs(b)):
            a, b = os.path.basename(a), os.path.basename(b)
        if a != b:
            what = "device" if key == "GPU" and CPU_ONLY in (a, b) else key
            mismatches.append(f"different {what}: {vb[key]} (base) vs {vn[key]} (new)")
    return mismatches, notes


def recorded_environment(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The GPU/driver/CUDA/torch a run directory's environment.json recorded, read without analyzing
    the run (None for a raw trace, or a run without a readable environment.json): `diff` compares
    these first and refuses before spending seconds analyzing two runs it will not compare."""
    folder = Path(os.fspath(path))
    if not (folder / rundir.ENVIRONMENT).exists():
        return None
    env = read_environment(folder, [])  # read and checked as the analysis reads it
    if not env:
        return None
    out = {k: v for k, v in env.items() if k in ("driver", "cuda_runtime", "torch", "cuda_available")}
    gpus = env.get("gpus")
    first = gpus[0] if isinstance(gpus, list) and gpus else None
    if isinstance(first, dict) and first.get("name"):
        out["gpu"] = first["name"]
    script = recorded_script(Path(os.fspath(path)))
    if script is not None:
        out["script"] = script
    return out


def recorded_script(run_dir: Path | None) -> str | None:
    """The script path or module name manifest.json's target recorded (None for a raw trace)."""
    if run_dir is None or not (run_dir / rundir.MANIFEST).exists():
        return None
    manifest = read_manifest(run_dir, [])  # read and checked as the analysis reads it
    target = manifest.get("target")
    name = target.get("path_or_name") if isinstance(target, dict) else None
    return str(name) if isinstance(name, str) and name else None


def _facts(result: AnalysisResult) -> dict[str, Any]:
    """What `compare_environments` compares of one analysis: its environment and its script."""
    run_dir = result.run.run_dir if result.run is not None else None
    return {**result.environment, "script": recorded_script(run_dir)}


def _as_result(item: DiffInput, options: Mapping[str, Any]) -> AnalysisResult:
    if isinstance(item, AnalysisResult):
        return item
    # a `gpuadvisor.api.Run` (read by its run_dir: the API imports this module, not the other way)
    target = item.run_dir if hasattr(item, "run_dir") else Path(os.fspath(item))
    config = resolve_options(None, options["select"], options["ignore"], options["thresholds"], options["rules"])
    return analysis.analyze(
        target,
        select=config.select,
        ignore=config.ignore,
        thresholds=config.thresholds or None,
        rules_dirs=config.rules_dirs,
    )


def diff_results(base: AnalysisResult, new: AnalysisResult) -> DiffResult:
    """Compare two analysis results (see the module docstring for every definition)."""
    mismatches, notes = compare_environments(_facts(base), _facts(new))
    b_ms, b_spread, b_n = _step_summary(base)
    n_ms, n_spread, n_n = _step_summary(new)
    step_time: StepTimeDelta | None = None
    profiled: StepTimeDelta | None = None
    if b_ms is not None and n_ms is not None:
        profiled = StepTimeDelta(b_ms, n_ms, b_spread, n_spread, b_n, n_n)
    ub, un = _unprofiled_summary(base), _unprofiled_summary(new)
    if ub is not None and un is not None:
        step_time = StepTimeDelta(ub[0], un[0], ub[1], un[1], ub[2], un[2], basis="unprofiled")
    else:
        step_time, profiled = profiled, None
        if step_time is not None:
            disagree = [
                n for n, r in (("base", base), ("new", new)) if r.metrics.get("step_times_disagree") is True
            ]
            notes.append(
                "step times are the profiled traces' ("
                + (
                    f"the {' and '.join(disagree)} run's steps outside the profiler disagree with its profiled "
                    "steps: the machine's load changed"
                    if disagree
                    else "the steps outside the profiler are not known for both runs"
                )
                + "): on a host-bound run the profiler's own cost is part of them"
            )
    if step_time is not None:
        if step_time.noise_ms is None:
            notes.append(
                f"step-time noise unknown (fewer than {MIN_STEPS_FOR_NOISE} analyzed steps in a run: "
                f"base {step_time.base_steps}, new {step_time.new_steps}); only the percentage threshold applies"
            )
    else:
        notes.append("step time unknown for at least one run (no segmented steps): no step-time comparison")
    categories = [
        CategoryDelta(
            key, label, _category_ms(base, column, frac, b_ms), _category_ms(new, column, frac, n_ms)
        )
        for key, label, column, frac in CATEGORIES
    ]
    categories = [c for c in categories if c.base_ms is not None or c.new_ms is not None]
    return DiffResult(
        base_source=base.source.path,
        new_source=new.source.path,
        compatible=not mismatches,
        mismatches=mismatches,
        step_time=step_time,
        categories=categories,
        findings=_match_findings(base.findings, new.findings),
        notes=notes,
        profiled_step_time=profiled,
        base=base,
        new=new,
    )


def diff(
    base: DiffInput,
    new: DiffInput,
    *,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    rules: Iterable[str | os.PathLike[str]] = (),
) -> DiffResult:
    """Analyze `base` and `new` (run directories, trace files, folders of rank traces, `Run`s, or
    `AnalysisResult`s used as they are) with the same rule options, and compare them."""
    options: dict[str, Any] = {
        "select": tuple(select),
        "ignore": tuple(ignore),
        "thresholds": thresholds,
        "rules": tuple(rules),
    }
    return diff_results(_as_result(base, options), _as_result(new, options))


def parse_regression_pct(value: float | None) -> float | None:
    """Validate --fail-on-regression: a finite, non-negative percentage."""
    if value is None:
        return None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"--fail-on-regression must be a percentage >= 0, got {value}")
    return float(value)


def verdict(result: DiffResult, fail_on_regression: float | None = None) -> str:
    """One line: regression / improvement / within noise, with the gate when one is set."""
    return result.verdict(fail_on_regression)


class _CallableModule(types.ModuleType):
    """`gpuadvisor.diff` is both this module and the API function `gpuadvisor.diff(base, new)`: once
    the module is imported, Python binds the package attribute `gpuadvisor.diff` to the module, which
    would shadow the lazily exported function. Calling the module calls `diff`, so both spellings work."""

    def __call__(
        self,
        base: DiffInput,
        new: DiffInput,
        *,
        select: Iterable[str] = (),
        ignore: Iterable[str] = (),
        thresholds: Mapping[str, Mapping[str, float]] | None = None,
        rules: Iterable[str | os.PathLike[str]] = (),
    ) -> DiffResult:
        return diff(base, new, select=select, ignore=ignore, thresholds=thresholds, rules=rules)


sys.modules[__name__].__class__ = _CallableModule
