"""gpuadvisor vs HolisticTraceAnalysis (HTA) on the peer-trace corpus: the quantities both compute.

    pip install HolisticTraceAnalysis psutil   # in your own venv: HTA is never a gpuadvisor dependency
    python3 benchmarks/hta_compare.py [--corpus ../shared/peer-traces] [-o hta-compare.md] [--json out.json]

Not run in CI (HTA is not installed there, and loading the large traces takes minutes). Its output
is the table in docs/hta-comparison.md. For every Kineto trace of the corpus with GPU activity, and
for the multi-rank folders:

- GPU busy / idle. HTA `get_temporal_breakdown`: window = first GPU event start to last GPU event end
  (events on a stream: kernels, copies, memsets; the last ProfilerStep dropped, timestamps rounded
  down to whole microseconds), busy = union of those events. gpuadvisor: the same union computed from
  its own tables over HTA's window (`busy in HTA's window`), and its own metric `gpu_active_fraction`
  (union over the analyzed steps: ProfilerStep intervals, the first step left out as an outlier).
- GPU event counts: HTA rows with a stream (by category) vs gpuadvisor's kernels + copies + memsets.
- Communication/compute overlap: HTA `get_comm_comp_overlap` (share of NCCL kernel time during which a
  computation kernel runs, whole trace) vs gpuadvisor `RankSummary.overlap_fraction` (1 - exposed /
  collective time over the analyzed steps).
- Stragglers: HTA `get_potential_stragglers(num_candidates=1)` (the rank whose chosen collective kernel
  starts latest, always one rank) vs gpuadvisor's candidate (`CrossRank.straggler`: the rank least
  time inside collectives most often) and its verdict (`straggler_verdict`: consistent and >= 5% late).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_CORPUS = HERE.parent.parent / "shared" / "peer-traces"
FOLDERS = ("param/dlrm_kineto_8rank", "hta/trace_filter")


@dataclass
class Row:
    trace: str
    rank: int | None = None
    gpu: str = ""
    hta_error: str = ""
    hta_window_us: float | None = None
    hta_busy_us: float | None = None
    hta_events: dict[str, int] = field(default_factory=dict)
    ga_busy_in_hta_window_us: float | None = None
    ga_events: dict[str, int] = field(default_factory=dict)
    ga_busy_fraction_steps: float | None = None
    ga_steps: int | None = None
    hta_overlap: float | None = None
    ga_overlap: float | None = None
    seconds_hta: float = 0.0
    seconds_ga: float = 0.0

    @property
    def hta_busy_pct(self) -> float | None:
        if self.hta_busy_us is None or not self.hta_window_us:
            return None
        return 100.0 * self.hta_busy_us / self.hta_window_us

    @property
    def ga_busy_pct(self) -> float | None:
        if self.ga_busy_in_hta_window_us is None or not self.hta_window_us:
            return None
        return 100.0 * self.ga_busy_in_hta_window_us / self.hta_window_us


@dataclass
class FolderRow:
    folder: str
    hta_straggler: list[int] = field(default_factory=list)
    ga_candidate: int | None = None
    ga_verdict: int | None = None
    ga_late_fraction: float | None = None
    hta_overlap: dict[int, float] = field(default_factory=dict)
    ga_overlap: dict[int, float | None] = field(default_factory=dict)
    hta_error: str = ""


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """HTA logs and prints a line per parsed file: keep the report readable."""
    logging.disable(logging.CRITICAL)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def _union(starts: Any, ends: Any, lo: float, hi: float) -> float:
    """Length of the union of [starts, ends) clipped to [lo, hi]."""
    import numpy as np

    s = np.clip(np.asarray(starts, dtype=np.float64), lo, hi)
    e = np.clip(np.asarray(ends, dtype=np.float64), lo, hi)
    order = np.argsort(s, kind="stable")
    total, cur_s, cur_e = 0.0, None, None
    for a, b in zip(s[order], e[order], strict=True):
        if cur_e is None or a > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return float(total)


def _hta(files: dict[int, Path]) -> Any:
    from hta.trace_analysis import TraceAnalysis

    folder = next(iter(files.values())).parent
    with _quiet():
        return TraceAnalysis(trace_files={r: str(p) for r, p in files.items()}, trace_dir=str(folder))


def _hta_gpu_events(analysis: Any, rank: int) -> tuple[Any, dict[str, int]]:
    df = analysis.t.get_trace(rank)
    sym = analysis.t.symbol_table.get_sym_table()
    gpu = df[df["stream"].ne(-1)]
    cats = gpu["cat"].map(lambda i: sym[int(i)]).value_counts()
    return gpu, {str(k): int(v) for k, v in cats.items()}


def compare_file(corpus: Path, rel: str) -> Row | None:
    import pandas as pd

    from gpuadvisor.errors import InputError
    from gpuadvisor.metrics import compute_metrics
    from gpuadvisor.multirank import rank_summary
    from gpuadvisor.trace.load import load_trace

    path = corpus / rel
    t0 = time.perf_counter()
    try:
        m = load_trace(path)
    except InputError:
        return None  # not a Kineto trace: nothing to compare
    kind = m.kind
    if kind is None or not kind.accelerator_activity:
        return None
    metrics = compute_metrics(m, None)
    summary = rank_summary(m, metrics)
    row = Row(trace=rel, rank=m.rank, gpu=f"{kind.vendor.value} {kind.device_name or ''}".strip())
    row.ga_events = {"kernel": len(m.kernels), "gpu_memcpy": len(m.copies), "gpu_memset": len(m.memsets)}
    if kind.device_events_not_analyzed:
        row.ga_events["device events not analyzed"] = kind.device_events_not_analyzed
    # HTA's busy counts every event with a stream (kernels, copies, memsets, collectives): our
    # gpu_active_fraction (gpu_busy_fraction is compute only since issue 30)
    row.ga_busy_fraction_steps = metrics.window.get("gpu_active_fraction")
    row.ga_steps = metrics.window.get("steps_analyzed")
    row.ga_overlap = summary.overlap_fraction()
    row.seconds_ga = time.perf_counter() - t0
    t1 = time.perf_counter()
    try:
        analysis = _hta({m.rank: path})
        gpu, row.hta_events = _hta_gpu_events(analysis, m.rank)
        with _quiet():
            tb = analysis.get_temporal_breakdown(visualize=False)
        rec = tb.iloc[0]
        row.hta_window_us = float(rec["kernel_time(us)"])
        row.hta_busy_us = float(rec["kernel_time(us)"] - rec["idle_time(us)"])
        # HTA shifts every rank's timestamps by the earliest one (`Trace.min_ts`): shift back.
        lo = float(gpu["ts"].min()) + float(analysis.t.min_ts)
        hi = lo + row.hta_window_us
        parts = [t for t in (m.kernels, m.copies, m.memsets) if len(t)]
        if parts:
            allg = pd.concat([t[["ts", "end"]] for t in parts])
            row.ga_busy_in_hta_window_us = _union(allg["ts"], allg["end"], lo, hi)
        with _quiet():
            ov = analysis.get_comm_comp_overlap(visualize=False)
        value = float(ov.iloc[0]["comp_comm_overlap_pctg"]) / 100.0
        row.hta_overlap = value if value == value else None
    except Exception as exc:  # HTA's own limits (old schema, no rank...) are part of the comparison
        row.hta_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
    row.seconds_hta = time.perf_counter() - t1
    return row


def compare_folder(corpus: Path, rel: str) -> FolderRow:
    from gpuadvisor.multirank import cross_rank, straggler_verdict
    from gpuadvisor.trace.load import load_traces

    traces = load_traces(corpus / rel)
    cr = cross_rank(traces)
    verdict = straggler_verdict(cr)
    row = FolderRow(
        folder=rel,
        ga_candidate=cr.straggler.rank if cr.straggler else None,
        ga_verdict=verdict.rank if verdict else None,
        ga_late_fraction=verdict.late_fraction if verdict else None,
        ga_overlap={r.rank: r.overlap_fraction() for r in cr.ranks},
    )
    try:
        analysis = _hta({t.rank: t.path for t in traces})
        with _quiet():
            row.hta_straggler = [int(r) for r in analysis.get_potential_stragglers(num_candidates=1)]
            ov = analysis.get_comm_comp_overlap(visualize=False)
        row.hta_overlap = {
            int(r): float(v) / 100.0 for r, v in zip(ov["rank"], ov["comp_comm_overlap_pctg"], strict=True)
        }
    except Exception as exc:
        row.hta_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
    return row


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}%"


def _frac(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def _events(d: dict[str, int]) -> str:
    return " + ".join(f"{n} {k}" for k, n in sorted(d.items()) if n) or "0"


def markdown(rows: list[Row], folders: list[FolderRow]) -> str:
    out = [
        "| trace | GPU | HTA busy (window) | gpuadvisor busy, HTA's window | gpuadvisor busy, analyzed steps | "
        "GPU events HTA | GPU events gpuadvisor | overlap HTA | overlap gpuadvisor |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        hta_busy = (
            f"HTA failed: {r.hta_error}"
            if r.hta_error
            else (f"{_pct(r.hta_busy_pct)} of {r.hta_window_us / 1000:.2f} ms" if r.hta_window_us else "n/a")
        )
        steps = (
            f"{_frac(r.ga_busy_fraction_steps)} ({r.ga_steps} steps)"
            if r.ga_steps
            else _frac(r.ga_busy_fraction_steps)
        )
        out.append(
            f"| {r.trace} | {r.gpu} | {hta_busy} | {_pct(r.ga_busy_pct)} | {steps} | {_events(r.hta_events)} | "
            f"{_events(r.ga_events)} | {_frac(r.hta_overlap)} | {_frac(r.ga_overlap)} |"
        )
    out += [
        "",
        "| folder | HTA straggler (top 1) | gpuadvisor candidate | gpuadvisor verdict (GA1001/GA1002) | "
        "overlap HTA by rank | overlap gpuadvisor by rank |",
        "|---|---|---|---|---|---|",
    ]
    for f in folders:
        verdict = (
            f"rank {f.ga_verdict}, {_frac(f.ga_late_fraction)} late" if f.ga_verdict is not None else "none"
        )
        hta_s = (
            f"HTA failed: {f.hta_error}" if f.hta_error else ", ".join(f"rank {r}" for r in f.hta_straggler)
        )
        hta_o = ", ".join(f"{r}: {_frac(v)}" for r, v in sorted(f.hta_overlap.items()))
        ga_o = ", ".join(f"{r}: {_frac(v)}" for r, v in sorted(f.ga_overlap.items()))
        out.append(
            f"| {f.folder} | {hta_s} | rank {f.ga_candidate} | {verdict} | {hta_o or 'n/a'} | {ga_o or 'n/a'} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("-o", "--out", type=Path, help="write the Markdown tables here (default: stdout)")
    ap.add_argument("--json", type=Path, help="also write every number as JSON")
    ap.add_argument("--only", action="append", default=[], help="only traces whose path contains this")
    ap.add_argument("--max-bytes", type=int, default=0, help="skip files larger than this on disk (0: none)")
    args = ap.parse_args(argv)
    try:
        import hta  # noqa: F401
    except ImportError:
        print(
            "hta_compare: HolisticTraceAnalysis is not installed (pip install HolisticTraceAnalysis psutil)",
            file=sys.stderr,
        )
        return 2
    corpus: Path = args.corpus
    if not corpus.is_dir():
        print(f"hta_compare: no corpus at {corpus}", file=sys.stderr)
        return 2
    rows: list[Row] = []
    for path in sorted(
        p for p in corpus.rglob("*") if p.is_file() and p.name not in ("README.md", "LICENSE")
    ):
        rel = str(path.relative_to(corpus))
        if args.only and not any(o in rel for o in args.only):
            continue
        if args.max_bytes and path.stat().st_size > args.max_bytes:
            continue
        print(f"hta_compare: {rel}", file=sys.stderr)
        row = compare_file(corpus, rel)
        if row is not None:
            rows.append(row)
    folders = [compare_folder(corpus, f) for f in FOLDERS if not args.only or any(o in f for o in args.only)]
    text = markdown(rows, folders)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if args.json:
        payload = {
            "files": [
                {**asdict(r), "hta_busy_pct": r.hta_busy_pct, "ga_busy_pct": r.ga_busy_pct} for r in rows
            ],
            "folders": [asdict(f) for f in folders],
        }
        args.json.write_text(json.dumps(payload, indent=2, sort_keys=True), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
