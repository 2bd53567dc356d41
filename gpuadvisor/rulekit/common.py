"""Pieces every rule built on the step model shares: how a prediction is said, how impact is
explained, how the run's framework changes the words of a fix, and where in the user's code a fix goes.

Heavy imports are inside functions: rule files are imported by `gpuadvisor rules`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuadvisor.model import Location, prediction_base, prediction_step
from gpuadvisor.stepmodel import build as sb
from gpuadvisor.stepmodel.build import main_loader
from gpuadvisor.trace.model import name_mask
from gpuadvisor.words import Base, apart, change, num, of_base

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.rules_api import RuleContext
    from gpuadvisor.stepmodel import Prediction


# ---- numbers -----------------------------------------------------------------------------------------


def ms(us: float | None) -> str:
    """Microseconds as a short duration: "0.85 ms", "12.3 ms", "1.20 s"."""
    if us is None or not math.isfinite(us):
        return "n/a"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e4:
        return f"{us / 1e3:.1f} ms"
    return f"{us / 1e3:.2f} ms"


def ms_pair(a_us: float | None, b_us: float | None) -> tuple[str, str]:
    """Two durations a sentence compares, as `ms` says them, with more digits where they would read
    the same: "0.016 ms instead of 0.021 ms", not "0.02 ms instead of 0.02 ms"."""
    first, second = ms(a_us), ms(b_us)
    if first != second or a_us is None or b_us is None or not math.isfinite(a_us) or a_us == b_us:
        return first, second
    # the same text: both in the same unit and number of places
    scale, unit, places = (1e6, "s", 2) if a_us >= 1e6 else (1e3, "ms", 1) if a_us >= 1e4 else (1e3, "ms", 2)
    x, y = apart(a_us / scale, b_us / scale, places)
    return f"{x} {unit}", f"{y} {unit}"


def pct(fraction: float | None) -> str:
    if fraction is None or not math.isfinite(fraction):
        return "n/a"
    value = 100.0 * fraction
    return f"{value:.1f}%" if abs(value) < 10 else f"{value:.0f}%"


def of_profiled_step(fraction: float | None, step_us: float) -> str:
    """"68% of the 28.37 ms profiled step": a share measured in the trace, said as such. The trace's
    steps ran under the profiler (longer than the run's own steps when the host sets the pace); a
    finding's impact is a share of the replayed, unprofiled step: the two are different measures."""
    return f"{pct(fraction)} of the {ms(step_us)} profiled step"


def count(value: float) -> str:
    """A per-step count for a sentence: 549, 2.5, 0.3 (never 549.0; `gpuadvisor.words.num`)."""
    return num(round(value, 1) if abs(value) >= 0.1 else value)


def times(speedup: float) -> str:
    if not math.isfinite(speedup):
        return "many times"
    return f"{speedup:.2f}x" if speedup < 10 else f"{speedup:.0f}x"


# ---- predictions in words -------------------------------------------------------------------------


PROFILER_NOTE = (
    " Measured under the profiler, whose per-op host cost this raw trace cannot separate (no step times "
    "from outside the profiler): host-bound predictions are upper bounds."
)


def step_base(pred: Prediction) -> Base:
    """The step `pred`'s step times are of (`gpuadvisor.model.prediction_step`: the run's mean step, or
    the replayed step)."""
    return prediction_step(pred.to_dict())


def saves(pred: Prediction, fraction: float | None = None) -> str:
    """"88% of the mean step", "87.5% of the time per sample": a predicted gain (`fraction`, else the
    prediction's own) with its base, short enough for a title (docs/report.md "Step bases")."""
    share = pred.recovered_fraction if fraction is None else fraction
    return f"{pct(share)} {of_base(prediction_base(pred.to_dict()))}"


def gain(pred: Prediction, fraction: float | None = None) -> str:
    """"Predicted gain: 88% of the 5.44 ms mean step (8.39x).": the fix's closing sentence, the gain
    (`fraction`, else the prediction's own) with its base and the step's length."""
    share = pred.recovered_fraction if fraction is None else fraction
    base = prediction_base(pred.to_dict())
    step = None if base is Base.SAMPLE else ms(pred.baseline_step_ms * 1000.0)
    return f"Predicted gain: {pct(share)} {of_base(base, step)} ({times(pred.speedup)})."


def prediction_sentence(pred: Prediction, what: str) -> str:
    """ "Replaying the steps with <what>: 14.6 -> 4.5 ms per mean step (3.26x)." (per sample for a batch
    change); "per mean step" when the prediction is on the run's mean step (issue 38: the numbers are
    then the mean step's, stalls and costs between steps included), "per replayed step" when it could
    not be carried there (`step_base`)."""
    step = step_base(pred).value
    if pred.batch_multiplier != 1.0:
        m = pred.batch_multiplier
        now, then = apart(pred.baseline_step_ms, pred.predicted_step_ms, 2)
        if now == then:
            return f"Replaying the steps with {what}: still {now} ms per {step}, so {times(pred.speedup)} the samples/s."
        return (
            f"Replaying the steps with {what}: {now} ms per {step} now, "
            f"{then} ms per {step} at {m:g}x the batch: {times(pred.speedup)} the samples/s."
        )
    return (
        f"Replaying the steps with {what}: {change(pred.baseline_step_ms, pred.predicted_step_ms, 'ms')} "
        f"per {step} ({times(pred.speedup)})."
    )


def impact_explanation(pred: Prediction, what: str) -> str:
    """The finding's impact_explanation for a replay prediction."""
    basis = (
        "the step time measured outside the profiler"
        if pred.profiler_corrected
        else "the step as traced (no correction for the profiler's own cost)"
    )
    per = "per sample" if pred.batch_multiplier != 1.0 else "per step"
    on_run = (
        "; carried to the run's mean step (the typical step scaled by the replay, stalls and costs between "
        "steps kept unless the remedy removes them)"
        if pred.median_step_ms is not None
        else ""
    )
    return (
        f"1 - predicted/observed time {per}, from a replay of the analyzed steps (host calls, waits and "
        f"GPU work with their dependencies) with {what}, calibrated to {basis}{on_run}."
    )


def note_uncorrected(pred: Prediction) -> str:
    return "" if pred.profiler_corrected else PROFILER_NOTE


# ---- the framework that drives the loop -------------------------------------------------------------

PLAIN = "plain"
HF_TRAINER = "hf_trainer"
HF_ACCELERATE = "hf_accelerate"
LIGHTNING = "lightning"


@dataclass(frozen=True)
class Framework:
    """What drives the training loop (environment.json `framework`, recorded by the capture)."""

    name: str = PLAIN
    version: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    call_site: Location | None = None

    @property
    def is_hf(self) -> bool:
        return self.name == HF_TRAINER

    @property
    def is_lightning(self) -> bool:
        return self.name == LIGHTNING


def location_of(site: Mapping[str, Any] | None, **detail: Any) -> Location | None:
    """A Location for a recorded call site ({file, line, code, function}), or None."""
    if not isinstance(site, Mapping) or not site.get("file"):
        return None
    line = site.get("line")
    return Location(
        file=str(site["file"]),
        line=int(line) if isinstance(line, (int, float)) and not isinstance(line, bool) else None,
        code=str(site["code"]) if site.get("code") else None,
        function=str(site["function"]) if site.get("function") else None,
        detail={k: v for k, v in detail.items() if v is not None},
    )


def framework(ctx: RuleContext) -> Framework:
    env = ctx.run.environment if ctx.run is not None else {}
    fw = env.get("framework") if isinstance(env, Mapping) else None
    if not isinstance(fw, Mapping):
        return Framework()
    settings = fw.get("settings")
    return Framework(
        name=str(fw.get("name") or PLAIN),
        version=str(fw["version"]) if fw.get("version") else None,
        settings=dict(settings) if isinstance(settings, Mapping) else {},
        call_site=location_of(fw.get("call_site") if isinstance(fw.get("call_site"), Mapping) else None),
    )


def model_call_locations(ctx: RuleContext) -> list[Location]:
    """Where the user's code calls the top-level model (environment.json `model_calls`), most calls first."""
    env = ctx.run.environment if ctx.run is not None else {}
    calls = env.get("model_calls") if isinstance(env, Mapping) else None
    if not isinstance(calls, list):
        return []
    out: list[Location] = []
    for c in sorted(
        (c for c in calls if isinstance(c, Mapping)),
        key=lambda c: -float(c.get("calls_per_step") or c.get("count") or 0),
    ):
        loc = location_of(c, module=c.get("module"), calls_per_step=c.get("calls_per_step"))
        if loc is not None:
            out.append(loc)
    return out


def env_list(ctx: RuleContext, key: str) -> list[dict[str, Any]]:
    """environment.json list of dicts (dataloaders, optimizers); [] when absent."""
    if ctx.run is None:
        return []
    value = ctx.run.environment.get(key)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def main_dataloader(ctx: RuleContext) -> dict[str, Any] | None:
    loader = main_loader({"dataloaders": env_list(ctx, "dataloaders")})
    return dict(loader) if loader is not None else None


def machine_cpus(ctx: RuleContext) -> int | None:
    """The CPU count the capture recorded (environment.json), None for a raw trace."""
    value = ctx.run.environment.get("cpu_count") if ctx.run is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def run_data_wait_ms(ctx: RuleContext) -> float | None:
    """The mean wait in DataLoader __next__ per step over the steps the capture timed without the
    profiler (`manifest.capture.step_data_wait`, issue 38), the window's steps left out; None when the
    run did not time it."""
    run = ctx.model.run
    timing = ctx.model.run_timing
    if run is None or timing is None or timing.stalls is None:
        return None
    cap = run.record.capture
    waits = dict(cap.step_data_wait)
    if not waits:
        return None
    steps = [k for k in range(min(timing.stalls.pattern.steps), max(timing.stalls.pattern.steps) + 1)]
    if not steps:
        return None
    return 1e3 * sum(waits.get(k, 0.0) for k in steps) / len(steps)


def suggested_workers(cpu_count: int | None, cap: int) -> int:
    """DataLoader workers to suggest: one per CPU but the training process's, at most `cap`."""
    return min(cap, max(1, cpu_count - 1)) if cpu_count else cap


def main_optimizer(ctx: RuleContext, cls: str | None = None) -> dict[str, Any] | None:
    entries = env_list(ctx, "optimizers")
    same = [o for o in entries if cls is None or o.get("class") == cls]
    pool = same or entries
    return max(pool, key=lambda o: int(o.get("steps") or 0)) if pool else None


def is_inference(ctx: RuleContext) -> bool:
    """No optimizer step and no backward pass in the analyzed steps: an evaluation/inference run."""
    return not ctx.model.is_training


@dataclass(frozen=True)
class WaitStats:
    """Host waits on the device of one kind in the analyzed steps (the step model's host calls)."""

    count: int
    per_step: float
    blocked_us_per_step: float  # host time blocked in them
    idle_us_per_step: float  # GPU idle time the model attributes to them
    idle_fraction: float


def wait_stats(ctx: RuleContext, kind: str) -> WaitStats:
    model = ctx.model
    win = model.window
    waits = model.waits(kind)
    blocked = float((waits["end"] - waits["ts"]).sum()) if len(waits) else 0.0
    idle = model.idle_us(sb.IDLE_SYNC, kind)
    return WaitStats(
        count=len(waits),
        per_step=win.per_step(len(waits)),
        blocked_us_per_step=win.per_step(blocked),
        idle_us_per_step=win.per_step(idle),
        idle_fraction=win.share(idle),
    )


def profiler_evidence(ctx: RuleContext) -> dict[str, Any]:
    """How the prediction was corrected for the profiler's own cost (evidence of host-bound findings)."""
    model = ctx.model
    return {
        "profiler_corrected": model.profiler_ratio is not None,
        "unprofiled_step_time_ms": model.unprofiled_step_ms,
        "profiled_step_time_ms": model.profiled_step_ms,
        "profiler_host_scale": model.host_scale,
    }


def names_matching(names: pd.Series, pattern: re.Pattern[str]) -> Any:
    """Bool array: the rows whose name `pattern` matches at its start (`str.match`), told once per
    distinct name of a categorical name column (a trace's runtime table holds millions of calls)."""
    return name_mask(names, lambda s: s.str.match(pattern))
