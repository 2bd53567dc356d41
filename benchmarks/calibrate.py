"""Predicted against measured: the step model's replay on the corpus recordings against the remedies
measured on the GPU (issue 10, docs/calibration.md).

    python3 benchmarks/calibrate.py --runs RUNS --measurements M.jsonl [M2.jsonl ...] \
        [--markdown docs/calibration.md] [--json out.json] [--fit]

RUNS holds the run directories `gpuadvisor profile` recorded for the corpus (benchmarks/record_corpus.py:
`<workload>-planted`, `<workload>-fixed`); the JSONL files are benchmarks/measure.py's (one `variant`
record per measured variant: median samples/s of 3 interleaved repeats and the speed-up band).

For every planted workload and every measured fix (each fix alone, and all of them together):
- measured: the recovered share of the time per sample, 1 - 1/speed-up (median of the repeats; the
  band is the min-max over repeats);
- predicted: the replay of the planted recording with the fix's remedy applied (the remedy's
  parameters derived from the recording as the rules derive them; a larger batch at the multiplier
  the fix used), 1 - predicted/replayed time per sample (negative where the replay is slower, as a
  measured fix can be: a finding's impact stops at 0);
- finding: the impact of the finding that names the remedy (what a user reads), 0 when no rule fired.
Per workload: is the top finding's remedy the fix with the largest measured gain? Controls: no high or
medium finding. Errors are in points of the step (|predicted - measured| x 100), summarized per split
(`calibration`: the half the constants of gpuadvisor/stepmodel/transforms.py may be tuned on;
`holdout`: only reported).

`--fit` searches the constants of `Constants` one at a time over a grid, on the calibration half only,
minimizing the median error, and prints the values it would choose (it does not edit the code).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuadvisor.result import AnalysisResult

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from catalog import CATALOG, Workload  # noqa: E402

# a measured fix below this recovered share did not pay (within the noise of 3 repeats): no fix to rank first
MIN_PAYING_FIX = 0.05


@dataclass
class Row:
    split: str
    workload: str
    fix: str
    remedies: tuple[str, ...]
    measured: float | None  # recovered share, median
    low: float | None
    high: float | None
    predicted: float | None
    finding: float | None  # the impact a user reads (0 when no finding names the remedy)
    finding_rules: tuple[str, ...] = ()
    multiplier: float | None = None
    note: str = ""

    @property
    def error_pts(self) -> float | None:
        if self.measured is None or self.predicted is None:
            return None
        return abs(self.predicted - self.measured) * 100.0


@dataclass
class WorkloadCheck:
    workload: str
    split: str
    control: bool
    top_rule: str | None
    top_remedy: str | None
    top_impact: float | None
    best_fix: str | None
    best_remedy: str | None
    best_measured: float | None
    loud: list[str] = field(default_factory=list)  # high/medium findings (controls)
    top_category: str | None = None
    best_category: str | None = None
    best_low: float | None = None  # the largest fix's noise band (lowest repeat), recovered share
    # the top finding's remedy measured alone: (median, highest repeat) recovered share, when it was
    top_measured: tuple[float, float] | None = None
    # the top finding ranks by its group's combined impact (`gpuadvisor.model.rank_impact`: the findings
    # of one problem, fixed together): the group's remedies and their measured median together, when
    # a variant applied exactly those remedies
    top_group: tuple[str, ...] = ()
    top_group_measured: float | None = None

    @property
    def top_matches(self) -> bool | None:
        """The top finding names the remedy of the largest measured fix, or a finding of the same
        problem category (bf16 where the measured fix was TF32: both are fp32_math), or a finding that
        ranks by its group whose remedies measured together at least the largest fix (`group_wins`),
        or a remedy measured as large within the noise (its best repeat reaches the largest fix's
        worst: `tied`)."""
        if self.control:
            return not self.loud
        if self.best_remedy is None or self.best_measured is None or self.best_measured < MIN_PAYING_FIX:
            return None  # no planted fix paid on the GPU: nothing to rank first
        return (
            self.top_remedy == self.best_remedy
            or (self.top_category is not None and self.top_category == self.best_category)
            or self.group_wins
            or self.tied
        )

    @property
    def group_wins(self) -> bool:
        """The top finding ranks by its group (one problem, its remedies applied together), and the
        group's remedies measured together gained at least as much as the largest single fix."""
        return (
            self.top_group_measured is not None
            and self.best_measured is not None
            and self.top_group_measured >= self.best_measured
        )

    @property
    def tied(self) -> bool:
        """The top finding's remedy, measured alone, is not distinguishable from the largest fix: the
        two measured bands (lowest to highest interleaved repeat) overlap."""
        if self.top_measured is None or self.best_low is None or self.top_remedy == self.best_remedy:
            return False
        return self.top_measured[1] >= self.best_low


def load_measurements(paths: Iterable[Path]) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for p in paths:
        for line in p.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec.get("record") == "variant" and rec.get("n_ok"):
                out[(rec["workload"], rec["variant"])] = rec
    return out


def recovered(speedup: float | None) -> float | None:
    if speedup is None or not speedup or not math.isfinite(speedup):
        return None
    return 1.0 - 1.0 / speedup


def finding_params(result: Any, remedy: str) -> dict[str, Any] | None:
    """The parameters the finding that names `remedy` priced it with, None without such a finding."""
    for f in result.findings:
        if f.remedy == remedy and isinstance(f.prediction, dict):
            for entry in f.prediction.get("remedies") or []:
                if entry.get("remedy") == remedy:
                    return dict(entry.get("params") or {})
    return None


def remedy_params(remedy: str, model: Any, result: Any, multiplier: float | None) -> dict[str, Any]:
    """Parameters of a remedy derived from the recording, as the rules derive them."""
    from gpuadvisor.remedies import RemedyId
    from gpuadvisor.rulekit import transfers as tr
    from gpuadvisor.stepmodel import build as sb

    r = RemedyId(remedy)
    env = result.run.environment if result.run is not None else {}
    if r is RemedyId.REMOVE_HOST_SYNCS:
        return {"kinds": (sb.SCALAR_READ, sb.EXPLICIT)}
    if r is RemedyId.DATALOADER_WORKERS:
        from gpuadvisor.rulekit.common import suggested_workers
        from gpuadvisor.stepmodel import transforms as tf

        loader = sb.main_loader(env)
        cpu_count = env.get("cpu_count")
        workers = suggested_workers(cpu_count if isinstance(cpu_count, int) else None, 8)

        if model.data_spans.count == 0 and tf.loop_preparation_mask(model, model.program).any():
            return {"workers": workers, "loop_preparation": True}  # GA302: the loop builds its batches
        return {"workers": workers, "current_workers": int((loader or {}).get("num_workers") or 0)}
    if r is RemedyId.UINT8_INPUTS:
        rows, factor = tr.narrowable_copies(model, tr.BATCH_COPY_BYTES)
        return {"rows": tuple(sorted(rows)), "factor": factor}
    if r is RemedyId.LARGER_BATCH:
        return {"multiplier": float(multiplier or 2.0)}
    if r is RemedyId.TORCH_COMPILE:
        # the finding that names it says which compile it priced (GA501: fusion + CUDA graphs; GA1106:
        # the default mode's fusion of hand-written chains in a GPU-bound step)
        return finding_params(result, r.value) or {"fusion": True}
    if r is RemedyId.DROP_ACTIVATION_CHECKPOINTING:
        # GA803 prices the share of the recomputation whose activations fit in memory
        return finding_params(result, r.value) or {}
    if r is RemedyId.FUSED_OPTIMIZER:
        from gpuadvisor.rulekit import gpuwork as gw

        o = model.window_ops
        k = o[(o["kind"] == "kernel") & o["in_optimizer"].astype(bool)]
        multi = float(k["name"].astype(str).map(gw.is_multi_tensor_kernel).mean()) if len(k) else 0.0
        opts = [d for d in env.get("optimizers") or [] if isinstance(d, dict)]
        tensors = opts[0].get("param_tensors") if opts else None
        return {"per_tensor": multi < 0.5, "param_tensors": tensors if isinstance(tensors, int) else None}
    if r is RemedyId.FIX_KERNEL_GRID:
        k = model.window_kernels
        sms = float(model.facts.num_sms or 132)
        custom = k[(k["origin"] == sb.ORIGIN_CUSTOM) & (k["blocks"].fillna(1e9) < sms)]
        return {"kernels": tuple(sorted(set(custom["name"].astype(str))))}
    return {}


def finding_impact(result: Any, remedies: Sequence[str], model: Any) -> tuple[float, tuple[str, ...]]:
    """What a user reads for these remedies: the one finding's impact, or the replay of the findings'
    own remedies together when several findings name them (their impacts overlap)."""
    from gpuadvisor.stepmodel.predict import predict_combined

    hits = [f for f in result.findings if f.remedy in remedies and f.prediction]
    if not hits:
        return 0.0, ()
    rules = tuple(f.rule for f in hits)
    if len(hits) == 1:
        return float(hits[0].impact or 0.0), rules
    items = []
    for f in hits:
        for entry in f.prediction.get("remedies") or []:
            items.append((entry["remedy"], dict(entry.get("params") or {})))
    if not items:
        return max(float(f.impact or 0.0) for f in hits), rules
    return predict_combined(model, items).recovered_fraction, rules




def analyze_workload(
    w: Workload,
    runs: Path,
    meas: dict[tuple[str, str], dict[str, Any]],
    reference: str = "measured",
    analyzed: Callable[[str], AnalysisResult] | None = None,
) -> tuple[list[Row], WorkloadCheck | None]:
    """The rows of one workload and the check of its top finding. `reference`: `measured` gives the
    analysis the plain-python step time measure.py measured; `capture` uses the capture's own
    reference steps, as a user's analysis does. `analyzed(run name)`: the caller's analysis of a run of
    `runs` with the capture's reference steps, when it keeps one (the tests do), for `capture`."""
    from gpuadvisor.analysis import analyze
    from gpuadvisor.model import rank_impact
    from gpuadvisor.stepmodel.predict import predict_combined

    run = runs / f"{w.name}-planted"
    if not run.exists():
        return [], None
    planted = meas.get((w.name, "planted"))
    step_ms = planted.get("step_ms_median") if planted and reference == "measured" else None
    if step_ms is None and analyzed is not None:
        result = analyzed(run.name)
    else:
        result = analyze(run, step_time_ms=float(step_ms) if step_ms else None)
    model = result.metrics_detail.model if result.metrics_detail is not None else None
    real = [f for f in result.findings if f.category.value not in ("capture", "internal") and f.severity.value != "info"]
    top = real[0] if real else None
    loud = [f"{f.rule} {f.severity.value} {100 * (f.impact or 0):.0f}%" for f in real if f.severity.value in ("high", "medium")]
    rows: list[Row] = []
    best: tuple[float, str, str, str, float | None] | None = None
    alone: dict[str, tuple[float, float]] = {}  # remedy measured alone -> (median, highest repeat)
    together: dict[frozenset[str], float] = {}  # the remedies a variant applied -> measured median
    for v in w.variants():
        if v.name == "planted":
            continue
        m = meas.get((w.name, v.name))
        if m is None or model is None:
            continue
        remedies = tuple(m.get("remedies") or [])
        if not remedies:
            continue  # probes: a batch change not planted (reported in the text, not calibrated)
        mult = None
        if planted and m.get("batch_size") and planted.get("batch_size"):
            mult = float(m["batch_size"]) / float(planted["batch_size"])
        items = [(r, remedy_params(r, model, result, mult)) for r in remedies]
        pred = predict_combined(model, items)
        got, rules = finding_impact(result, remedies, model)
        meas_rec = recovered(m.get("speedup_median"))
        rows.append(
            Row(
                split=w.split.value,
                workload=w.name,
                fix=v.name,
                remedies=remedies,
                measured=meas_rec,
                low=recovered(m.get("speedup_min")),
                high=recovered(m.get("speedup_max")),
                predicted=recovered(pred.speedup),
                finding=got,
                finding_rules=rules,
                multiplier=mult if mult and mult != 1.0 else None,
            )
        )
        if meas_rec is not None:
            together[frozenset(remedies)] = meas_rec
        if len(remedies) == 1 and meas_rec is not None:
            high = recovered(m.get("speedup_max"))
            alone[remedies[0]] = (meas_rec, high if high is not None else meas_rec)
            if best is None or meas_rec > best[0]:
                category = next((p.category for p in w.problems if p.fix == v.name), "")
                best = (meas_rec, v.name, remedies[0], category, recovered(m.get("speedup_min")))
    group: tuple[str, ...] = ()
    if top is not None and top.prediction and rank_impact(top) > (top.impact or 0.0):
        group = tuple(sorted(str(x) for x in top.prediction.get("group_remedies") or ()))
    check = WorkloadCheck(
        workload=w.name,
        split=w.split.value,
        control=w.control,
        top_rule=top.rule if top else None,
        top_remedy=top.remedy if top else None,
        top_impact=top.impact if top else None,
        best_fix=best[1] if best else None,
        best_remedy=best[2] if best else None,
        best_measured=best[0] if best else None,
        loud=loud,
        top_category=top.category.value if top else None,
        best_category=best[3] if best else None,
        best_low=best[4] if best else None,
        top_measured=alone.get(top.remedy) if top is not None and top.remedy else None,
        top_group=group,
        top_group_measured=together.get(frozenset(group)) if group else None,
    )
    return rows, check


def summarize(rows: Sequence[Row], split: str | None) -> dict[str, Any]:
    errs = [r.error_pts for r in rows if (split is None or r.split == split) and r.error_pts is not None]
    if not errs:
        return {"n": 0}
    return {
        "n": len(errs),
        "median_error_pts": round(statistics.median(errs), 1),
        "max_error_pts": round(max(errs), 1),
        "over_25": sum(e > 25 for e in errs),
    }


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def markdown(rows: Sequence[Row], checks: Sequence[WorkloadCheck], meta: dict[str, Any]) -> str:
    lines = [
        "# Predicted against measured",
        "",
        "Generated by `benchmarks/calibrate.py` from the corpus recordings and measurements made on "
        f"{meta.get('gpu', '?')}, each planted workload recorded on the GPU that measured it{(' except ' + '; '.join(meta['mixed']) + ': each speed-up is against the planted run measured beside it') if meta.get('mixed') else ''} (torch {meta.get('torch', '?')}), host work calibrated to the "
        f"{meta.get('reference', '?')} reference step time; see the script's "
        "docstring for the definitions. Recovered share = 1 - 1/speed-up of the time per sample; "
        "`predicted` is the replay of the planted recording with the fix's remedy; `finding` is the impact "
        "printed by the finding that names the remedy (0: no finding).",
        "",
    ]
    for split in ("calibration", "holdout"):
        s = summarize(rows, split)
        lines.append(
            f"- **{split}**: {s.get('n', 0)} remedies, median error {s.get('median_error_pts', 'n/a')} points, "
            f"max {s.get('max_error_pts', 'n/a')}, over 25 points: {s.get('over_25', 'n/a')}"
        )
    lines += [
        "",
        "| split | workload | fix | remedy | measured (band) | predicted | error | finding |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r.split, r.workload, r.fix)):
        band = f"{pct(r.measured)} ({pct(r.low)}..{pct(r.high)})"
        mult = f" x{r.multiplier:g}" if r.multiplier else ""
        err = "n/a" if r.error_pts is None else f"{r.error_pts:.0f}"
        finding = f"{pct(r.finding)} {','.join(r.finding_rules)}".strip()
        lines.append(
            f"| {r.split} | {r.workload} | {r.fix} | {'+'.join(r.remedies)}{mult} | {band} | {pct(r.predicted)} | {err} | {finding} |"
        )
    lines += ["", "## Top finding and controls", "", "| split | workload | top finding | largest measured fix | verdict |", "|---|---|---|---|---|"]
    for c in sorted(checks, key=lambda c: (c.control, c.split, c.workload)):
        top = f"{c.top_rule} {c.top_remedy} {pct(c.top_impact)}" if c.top_rule else "none"
        if c.control:
            verdict = "quiet" if not c.loud else "LOUD: " + "; ".join(c.loud)
            lines.append(f"| {c.split} | {c.workload} (control) | {top} | - | {verdict} |")
        else:
            best = f"{c.best_fix} ({c.best_remedy}) {pct(c.best_measured)}" if c.best_fix else "n/a"
            verdict = {True: "yes", False: "NO", None: "n/a (no measured fix paid)" if c.best_fix else "not measured"}[
                c.top_matches
            ]
            if c.top_matches and c.group_wins and c.top_remedy != c.best_remedy:
                verdict = (
                    f"yes, as one problem: {c.top_rule} ranks by its group ({'+'.join(c.top_group)}), "
                    f"measured {pct(c.top_group_measured)} together"
                )
            elif c.top_matches and c.tied and c.top_measured is not None:
                verdict = (
                    f"yes, tied: {c.top_remedy} measured {pct(c.top_measured[0])} alone, its best repeat "
                    f"{pct(c.top_measured[1])} reaches the largest fix's worst ({pct(c.best_low)})"
                )
            lines.append(f"| {c.split} | {c.workload} | {top} | {best} | {verdict} |")
    return "\n".join(lines) + "\n"


def fit(runs: Path, meas: dict[tuple[str, str], dict[str, Any]]) -> None:
    """One constant at a time over a grid, calibration half only (median error of the predictions)."""
    from gpuadvisor.stepmodel import transforms as t

    base = t.CONSTANTS
    grid: dict[str, list[float]] = {
        "dataloader_handoff_us": [50, 100, 150, 300, 600],
        "fusion_factor": [0.3, 0.4, 0.5, 0.6, 0.8],
        "graph_host_fraction": [0.0, 0.03, 0.1, 0.2],
        "fused_optimizer_host_base_us": [30, 60, 120, 240],
        "per_tensor_to_fused_gpu": [0.2, 0.35, 0.5, 0.7],
        "tensor_core_efficiency": [0.3, 0.4, 0.5, 0.6, 0.7],
        "bf16_elementwise_speedup": [1.0, 1.25, 1.5, 1.75, 2.0],
        "blocks_per_sm_full": [0.5, 1.0, 2.0, 4.0],
        "gemm_efficiency_at_scale": [0.4, 0.6, 0.8],
        "max_grid_speedup": [8, 16, 32, 64],
    }
    cal = [w for w in CATALOG if w.split.value == "calibration" and not w.control]

    def score(c: t.Constants) -> float:
        t.CONSTANTS = c
        rows: list[Row] = []
        for w in cal:
            r, _ = analyze_workload(w, runs, meas)
            rows += r
        errs = [r.error_pts for r in rows if r.error_pts is not None]
        return statistics.median(errs) if errs else math.inf

    best = base
    best_score = score(best)
    print(f"start: median error {best_score:.1f} points", file=sys.stderr)
    for name, values in grid.items():
        for v in values:
            cand = replace(best, **{name: v})  # type: ignore[arg-type]
            s = score(cand)
            if s < best_score - 1e-9:
                best, best_score = cand, s
                print(f"  {name} = {v}: {s:.1f}", file=sys.stderr)
    t.CONSTANTS = base
    print(json.dumps({k: getattr(best, k) for k in grid}, indent=1))
    print(f"fitted median error on the calibration half: {best_score:.1f} points", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, required=True)
    ap.add_argument("--measurements", type=Path, nargs="+", required=True)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--workloads", default="")
    ap.add_argument(
        "--reference",
        choices=("measured", "capture"),
        default="measured",
        help="the step time the replay calibrates host work to: the plain-python step measured by "
        "measure.py (default), or the reference steps the capture timed before its window",
    )
    args = ap.parse_args(argv)
    meas = load_measurements(args.measurements)
    if args.fit:
        fit(args.runs, meas)
        return 0
    chosen = {x for x in args.workloads.split(",") if x}
    rows: list[Row] = []
    checks: list[WorkloadCheck] = []
    for w in CATALOG:
        if chosen and w.name not in chosen:
            continue
        r, c = analyze_workload(w, args.runs, meas, args.reference)
        rows += r
        if c is not None:
            checks.append(c)
    env: dict[str, Any] = next((json.loads(line) for p in args.measurements for line in p.read_text().splitlines() if '"environment"' in line), {})
    # which GPU measured which workloads (a later file's variants replace an earlier one's)
    gpus: dict[str, set[str]] = {}
    for (workload, _variant), rec in meas.items():
        gpus.setdefault(str(rec.get("device") or "?"), set()).add(workload)
    gpu = "; ".join(
        f"{name} ({len(ws)} workload{'s' if len(ws) != 1 else ''}{': ' + ', '.join(sorted(ws)) if len(ws) <= 4 else ''})"
        for name, ws in sorted(gpus.items(), key=lambda kv: -len(kv[1]))
    ) or env.get("gpu")
    # workloads whose recording was made on another GPU than some of their measurements
    mixed = []
    for workload in sorted({w for ws in gpus.values() for w in ws}):
        try:
            envj = json.loads((args.runs / f"{workload}-planted" / "environment.json").read_text())
            recorded = str((envj.get("gpus") or [{}])[0].get("name"))
        except (OSError, ValueError, IndexError, AttributeError):
            continue
        measured = {str(rec.get("device")) for (w_, _v), rec in meas.items() if w_ == workload and rec.get("device")}
        if measured - {recorded}:
            mixed.append(f"{workload} (recorded on {recorded}, measured on {', '.join(sorted(measured))})")
    meta = {"gpu": gpu, "torch": env.get("torch"), "reference": args.reference, "mixed": mixed}
    text = markdown(rows, checks, meta)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"rows": [r.__dict__ | {"error_pts": r.error_pts} for r in rows],
                                         "checks": [c.__dict__ | {"top_matches": c.top_matches} for c in checks],
                                         "summary": {s: summarize(rows, s) for s in ("calibration", "holdout")}},
                                        indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
