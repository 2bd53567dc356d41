"""Cross-rank metrics of a multi-GPU (multi-process) run: one `TraceModel` per rank.

`rank_summary(trace, metrics)` reduces one rank to per-step numbers; `cross_rank(traces)` compares
the ranks. Both work from what each rank recorded itself: ranks are aligned by their `ProfilerStep#N`
number, never by absolute time (processes of one host share a clock, processes of different hosts do
not, and the profilers of different ranks start at different moments).

Per rank and step (`RankStep`):
  * `step_time_us`: the step interval of gpuadvisor/trace/steps.py;
  * `compute_us`: union of non-collective GPU kernels (None without kernels);
  * `comm_us`: union of collective time: NCCL kernels when the trace has kernels, else the host-side
    collective spans (`gloo:all_reduce` / `nccl:all_reduce` annotations or cpu ops run by the
    process group's worker thread);
  * `exposed_comm_us`: collective kernel time during which no compute kernel of the same rank ran
    (None without kernels): that part of communication adds to the step time;
  * `dataloader_wait_us`, `collectives` (collective calls issued by the host in the step),
    `forwards` (`DistributedDataParallel.forward` spans), `optimizer_steps`.

Across ranks (`CrossRank`): per-rank median step time and the spread, the straggler (the rank that
waits least inside collectives: every other rank waits there for it), how late it is per step and why
(data wait, compute, or communication), and the imbalance of compute (max / min of per-rank medians).

Heavy imports are inside the functions: rule files importing this module are loaded by
`gpuadvisor rules`, which must stay fast.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuadvisor.metrics import compute_metrics, covered, union_intervals
from gpuadvisor.trace.job import (
    RankClaim,
    check_one_job,
    claim_of,
    job_problems,
    rank_problems,
)
from gpuadvisor.trace.model import name_mask

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from gpuadvisor.metrics import Metrics
    from gpuadvisor.rules_api import RuleContext
    from gpuadvisor.trace.model import TraceModel

__all__ = [
    "GRADIENT_SYNC_KINDS",
    "STRAGGLER_MIN_CONSISTENCY",
    "STRAGGLER_MIN_LATE_FRACTION",
    "CrossRank",
    "HostCollective",
    "RankClaim",
    "RankStep",
    "RankSummary",
    "Straggler",
    "StragglerVerdict",
    "check_one_job",
    "claim_of",
    "collective_kind",
    "cross_rank",
    "cross_rank_of",
    "host_collectives",
    "job_cross_rank",
    "job_problems",
    "micro_batches",
    "rank_problems",
    "rank_summary",
    "straggler_verdict",
    "summary_of",
]

# Host-side collective calls issued by the training thread (one per collective, any backend):
# c10d::allreduce_ (torch >= 2.0 dispatcher op) and record_param_comms (NCCL; args carry sizes).
_HOST_CALL = re.compile(r"^(c10d::[a-z_]+|record_param_comms)$")
# The backend's own span of a collective: `gloo:all_reduce` (a user_annotation on the gloo worker
# thread, lasting until every peer contributed), `nccl:all_reduce` (a cpu op on the calling thread).
_BACKEND_SPAN = re.compile(r"^(gloo|nccl|mpi|ucc):[a-z_]+$")
DDP_FORWARD = "DistributedDataParallel.forward"
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"

_ELEMENT_BYTES: dict[str, int] = {
    "float": 4,
    "double": 8,
    "c10::BFloat16": 2,
    "c10::Half": 2,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "long int": 8,
    "int": 4,
    "unsigned char": 1,
    "signed char": 1,
    "bool": 1,
}
_NUMBER = re.compile(r"\d+")


def collective_kind(name: str) -> str:
    """The collective of a kernel or host-call name: all_reduce, all_gather, reduce_scatter,
    broadcast, all_to_all, send_recv, barrier, or `other`."""
    low = name.lower().replace("_", "")
    for kind, keys in (
        ("reduce_scatter", ("reducescatter",)),
        ("all_reduce", ("allreduce",)),
        ("all_gather", ("allgather",)),
        ("all_to_all", ("alltoall",)),
        ("broadcast", ("broadcast", "bcast")),
        ("send_recv", ("sendrecv", "send", "recv")),
        ("barrier", ("barrier",)),
    ):
        if any(k in low for k in keys):
            return kind
    return "other"


@dataclass(frozen=True)
class HostCollective:
    """One collective call issued by the host (from the cpu_ops / annotations of one rank)."""

    ts: float
    end: float
    name: str
    kind: str  # collective_kind(name)
    nbytes: float | None  # message size when Input Dims/Input type tell it


def _dims_elements(dims: Any) -> int | None:
    """Number of elements of the first tensor in a stringified `Input Dims` value.

    c10d::allreduce_ records `[[[2372]], [], ...]` (a tensor list); record_param_comms `[[2372]]`."""
    if dims is None:
        return None
    text = str(dims)
    first = text.lstrip("[").split("]", 1)[0]
    nums = [int(n) for n in _NUMBER.findall(first)]
    if not nums:
        return None
    out = 1
    for n in nums:
        out *= n
    return out


def _element_bytes(types: Any) -> int:
    text = str(types) if types is not None else ""
    for name, size in _ELEMENT_BYTES.items():
        if f"'{name}'" in text or f'"{name}"' in text:
            return size
    return 4  # gradients are float32 unless told otherwise


def host_collectives(trace: TraceModel) -> list[HostCollective]:
    """Collective calls issued by the host, one per call, sorted by start time.

    Uses `c10d::*` / `record_param_comms` cpu ops when the trace has them (the calling thread; one per
    collective), else the backend spans (`gloo:*` / `nccl:*`)."""
    ops = trace.cpu_ops
    calls: list[HostCollective] = []
    if len(ops):
        mask = name_mask(ops["name"], lambda s: s.str.match(_HOST_CALL.pattern))
        # record_param_comms and c10d::allreduce_ nest for one call on NCCL: count c10d ops when present.
        c10d = mask & name_mask(ops["name"], lambda s: s.str.startswith("c10d::"))
        if c10d.any():
            mask = c10d
        sub = ops[mask]
        for ts, end, name, dims, types in zip(
            sub["ts"], sub["end"], sub["name"].astype(str), sub["input_dims"], sub["input_types"], strict=True
        ):
            n = _dims_elements(dims)
            calls.append(
                HostCollective(
                    float(ts),
                    float(end),
                    name,
                    collective_kind(name),
                    None if n is None else float(n * _element_bytes(types)),
                )
            )
    if not calls:
        for span in backend_spans(trace):
            calls.append(span)
    calls.sort(key=lambda c: (c.ts, c.name))
    return calls


def backend_spans(trace: TraceModel) -> list[HostCollective]:
    """The backend's spans of collectives (`gloo:all_reduce`, `nccl:all_reduce`...), from annotations
    and cpu ops: on gloo they last until every rank contributed (they include the wait for peers)."""
    out: list[HostCollective] = []
    for table in (trace.annotations, trace.cpu_ops):
        if not len(table):
            continue
        mask = name_mask(table["name"], lambda s: s.str.match(_BACKEND_SPAN.pattern))
        sub = table[mask]
        dims = sub["input_dims"] if "input_dims" in sub.columns else [None] * len(sub)
        for ts, end, name, d in zip(sub["ts"], sub["end"], sub["name"].astype(str), dims, strict=True):
            n = _dims_elements(d)
            out.append(
                HostCollective(
                    float(ts), float(end), name, collective_kind(name), None if n is None else float(n * 4)
                )
            )
    out.sort(key=lambda c: (c.ts, c.name))
    return out


# Collectives that synchronize gradients (DDP all-reduce, FSDP reduce-scatter); `other` when the
# host call does not say (record_param_comms without a c10d op).
GRADIENT_SYNC_KINDS = frozenset({"all_reduce", "reduce_scatter", "other"})


def micro_batches(trace: TraceModel) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(start, end) of each DDP micro-batch's forward: the outermost `DistributedDataParallel.forward`
    CPU spans, sorted by start. A DDP module inside another one's forward (nested wrappers, as in
    DLRM's sharded embeddings) records a span inside its parent's: it is not another micro-batch."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    ann = trace.annotations
    if not len(ann):
        z = np.zeros(0, dtype=np.float64)
        return z, z.copy()
    mask = (~ann["on_gpu"].to_numpy(dtype=bool)) & (ann["name"].astype(str) == DDP_FORWARD).to_numpy(dtype=bool)
    sub = ann[mask].sort_values(["ts", "end"], ascending=[True, False], kind="stable")
    starts: list[float] = []
    ends: list[float] = []
    open_until: dict[int, float] = {}  # per thread: end of the outermost forward still open
    for ts, end, tid in zip(
        sub["ts"].to_numpy(dtype=np.float64), sub["end"].to_numpy(dtype=np.float64), sub["tid"], strict=True
    ):
        key = -1 if pd.isna(tid) else int(tid)
        if key in open_until and ts < open_until[key]:
            continue  # nested inside a forward of the same thread
        open_until[key] = float(end)
        starts.append(float(ts))
        ends.append(float(end))
    order = np.argsort(np.array(starts, dtype=np.float64), kind="stable")
    return (
        np.array(starts, dtype=np.float64)[order],
        np.array(ends, dtype=np.float64)[order],
    )


@dataclass(frozen=True)
class RankStep:
    """One rank's numbers for one step (microseconds; None where the trace cannot tell)."""

    step: int
    outlier: bool
    start: float
    end: float
    step_time_us: float
    compute_us: float | None
    comm_us: float
    exposed_comm_us: float | None
    dataloader_wait_us: float
    collectives: int
    forwards: int
    optimizer_steps: int
    comm_rounds: int  # micro-batches whose backward issued a gradient collective (synced micro-batches)
    analyzed: bool = True  # one of the rank's analyzed steps (its metrics' per_step.analyzed)


@dataclass(frozen=True)
class RankSummary:
    """One rank, reduced to per-step numbers (`steps`) and medians over its analyzed steps."""

    rank: int
    has_kernels: bool
    comm_source: str  # "nccl_kernels" | "host_spans" | "none"
    steps: tuple[RankStep, ...]
    collective_bytes: tuple[float, ...]  # sizes of the host collective calls in analyzed steps
    collective_kinds: dict[str, int] = field(default_factory=dict)

    @property
    def analyzed(self) -> tuple[RankStep, ...]:
        """The rank's analyzed steps (its metrics' `per_step.analyzed`: trace.model.analyzed_mask)."""
        return tuple(s for s in self.steps if s.analyzed)

    def median(self, attr: str) -> float | None:
        # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
        import numpy as np

        values = [getattr(s, attr) for s in self.analyzed]
        vals = [float(v) for v in values if v is not None]
        return float(np.median(vals)) if vals else None

    def total(self, attr: str) -> float | None:
        values = [getattr(s, attr) for s in self.analyzed]
        vals = [float(v) for v in values if v is not None]
        return float(sum(vals)) if vals else None

    def share(self, attr: str) -> float | None:
        """Sum of `attr` over the analyzed steps / their total step time."""
        num = self.total(attr)
        den = self.total("step_time_us")
        return num / den if num is not None and den else None

    def overlap_fraction(self) -> float | None:
        """Share of collective kernel time hidden behind compute (None without NCCL kernels)."""
        comm = self.total("comm_us")
        exposed = self.total("exposed_comm_us")
        if not comm or exposed is None or self.comm_source != "nccl_kernels":
            return None
        return max(0.0, 1.0 - exposed / comm)

    def by_step(self) -> dict[int, RankStep]:
        return {s.step: s for s in self.steps}


def rank_summary(trace: TraceModel, metrics: Metrics | None = None) -> RankSummary:
    """Reduce one rank's trace (and its metrics, computed when not given) to per-step numbers."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if metrics is None:
        metrics = compute_metrics(trace, None)
    ps = metrics.per_step
    S = ps["start"].to_numpy(dtype=np.float64)
    E = ps["end"].to_numpy(dtype=np.float64)
    k = trace.kernels
    has_kernels = len(k) > 0
    coll_mask = k["is_collective"].to_numpy(dtype=bool) if has_kernels else np.zeros(0, dtype=bool)
    compute: Any = None
    exposed: Any = None
    if has_kernels and coll_mask.any():
        comm_source = "nccl_kernels"
        cs, ce = union_intervals(k["ts"].to_numpy()[coll_mask], k["end"].to_numpy()[coll_mask])
        comm = covered(cs, ce, S, E)
        ks, ke = union_intervals(k["ts"].to_numpy()[~coll_mask], k["end"].to_numpy()[~coll_mask])
        compute = covered(ks, ke, S, E)
        alls, alle = union_intervals(k["ts"].to_numpy(), k["end"].to_numpy())
        exposed = np.clip(covered(alls, alle, S, E) - compute, 0.0, None)
    else:
        if has_kernels:
            ks, ke = union_intervals(k["ts"].to_numpy(), k["end"].to_numpy())
            compute = covered(ks, ke, S, E)
            exposed = np.zeros(len(S))
        spans = backend_spans(trace)
        if spans and not has_kernels:
            comm_source = "host_spans"
            hs, he = union_intervals([c.ts for c in spans], [c.end for c in spans])
            comm = covered(hs, he, S, E)
        else:
            comm_source = "none"
            comm = np.zeros(len(S))
    calls = host_collectives(trace)
    call_ts = np.sort(np.array([c.ts for c in calls], dtype=np.float64))
    sync_ts = np.sort(np.array([c.ts for c in calls if c.kind in GRADIENT_SYNC_KINDS], dtype=np.float64))
    ann = trace.annotations
    names = ann["name"].astype(str) if len(ann) else None
    cpu = ~ann["on_gpu"].to_numpy(dtype=bool) if len(ann) else np.zeros(0, dtype=bool)
    fwd_start, fwd_end = micro_batches(trace)
    opt_ts = (
        np.sort(
            ann["ts"].to_numpy(dtype=np.float64)[
                cpu & names.str.startswith(OPTIMIZER_STEP_PREFIX).to_numpy(dtype=bool)
            ]
        )
        if names is not None
        else np.zeros(0)
    )

    def count(ts: Any, a: float, b: float) -> int:
        return int(np.searchsorted(ts, b, side="left") - np.searchsorted(ts, a, side="left"))

    steps: list[RankStep] = []
    for i in range(len(ps)):
        a, b = float(S[i]), float(E[i])
        inside = (fwd_start >= a) & (fwd_start < b)
        fw, fw_end = fwd_start[inside], fwd_end[inside]
        rounds = 0
        for j in range(len(fw)):
            # The backward of micro-batch j runs after its forward and before the next forward: a
            # gradient all-reduce / reduce-scatter issued there synchronized this micro-batch.
            # (Collectives inside the forward, e.g. all-to-all of sharded embeddings, are not.)
            nxt = float(fw[j + 1]) if j + 1 < len(fw) else b
            rounds += int(count(sync_ts, float(fw_end[j]), nxt) > 0)
        steps.append(
            RankStep(
                step=int(ps["step"].iloc[i]),
                outlier=bool(ps["outlier"].iloc[i]),
                analyzed=bool(ps["analyzed"].iloc[i]),
                start=a,
                end=b,
                step_time_us=float(ps["step_time_us"].iloc[i]),
                compute_us=None if compute is None else float(compute[i]),
                comm_us=float(comm[i]),
                exposed_comm_us=None if exposed is None else float(exposed[i]),
                dataloader_wait_us=float(ps["dataloader_wait_us"].iloc[i]),
                collectives=count(call_ts, a, b),
                forwards=len(fw),
                optimizer_steps=count(opt_ts, a, b),
                comm_rounds=rounds,
            )
        )
    analyzed = [s for s in steps if s.analyzed]
    sizes: list[float] = []
    kinds: dict[str, int] = {}
    for c in calls:
        if any(s.start <= c.ts < s.end for s in analyzed):
            kinds[c.kind] = kinds.get(c.kind, 0) + 1
            if c.nbytes is not None:
                sizes.append(c.nbytes)
    return RankSummary(
        rank=trace.rank,
        has_kernels=has_kernels,
        comm_source=comm_source,
        steps=tuple(steps),
        collective_bytes=tuple(sizes),
        collective_kinds=dict(sorted(kinds.items())),
    )


@dataclass(frozen=True)
class Straggler:
    """The rank the others wait for in collectives."""

    rank: int
    late_us_per_step: float  # mean over the common steps of (others' median comm time - its comm time)
    steps_last: int  # in how many common steps it waited least
    steps_compared: int
    cause: str  # "data_wait" | "compute" | "communication"
    cause_detail: dict[str, float]  # extra data wait / compute / host time of the straggler per step (us)


@dataclass(frozen=True)
class CrossRank:
    """Every rank compared on the steps they all recorded."""

    ranks: tuple[RankSummary, ...]
    common_steps: tuple[int, ...]  # analyzed step numbers present on every rank
    step_time_median_us: dict[int, float | None]
    step_time_spread: float | None  # (max - min) / min of per-rank median step times
    straggler: Straggler | None
    compute_imbalance: float | None  # max / min of per-rank median compute (GPU) time
    busy_imbalance: float | None  # max / min of per-rank median (step - comm - data wait) time

    def rank(self, rank: int) -> RankSummary | None:
        for r in self.ranks:
            if r.rank == rank:
                return r
        return None


def _host_busy(s: RankStep) -> float:
    return max(0.0, s.step_time_us - s.comm_us - s.dataloader_wait_us)


def _median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else None


def cross_rank(traces: Sequence[TraceModel], metrics: Sequence[Metrics | None] | None = None) -> CrossRank:
    """Compare the ranks. `metrics[i]` (optional) are `traces[i]`'s metrics; computed when None."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    ms = list(metrics) if metrics is not None else [None] * len(traces)
    ranks = tuple(rank_summary(t, m) for t, m in zip(traces, ms, strict=True))
    step_sets = [{s.step for s in r.analyzed} for r in ranks]
    common = tuple(sorted(set.intersection(*step_sets))) if step_sets else ()
    med = {r.rank: r.median("step_time_us") for r in ranks}
    vals = [v for v in med.values() if v]
    spread = (max(vals) - min(vals)) / min(vals) if len(vals) > 1 else None

    def ratio(values: list[float | None]) -> float | None:
        v = [x for x in values if x is not None]
        return max(v) / min(v) if len(v) > 1 and min(v) > 0 else None

    compute_imb = (
        ratio([r.median("compute_us") for r in ranks]) if all(r.has_kernels for r in ranks) else None
    )
    busy_imb = ratio(
        [float(np.median([_host_busy(s) for s in r.analyzed])) if r.analyzed else None for r in ranks]
    )
    straggler = _straggler(ranks, common) if len(ranks) > 1 else None
    return CrossRank(
        ranks=ranks,
        common_steps=common,
        step_time_median_us=med,
        step_time_spread=spread,
        straggler=straggler,
        compute_imbalance=compute_imb,
        busy_imbalance=busy_imb,
    )


def _straggler(ranks: tuple[RankSummary, ...], common: tuple[int, ...]) -> Straggler | None:
    """Per common step, the rank with the least collective time arrived last (the others waited for
    it, inside the collective). The straggler is the rank that is last most often."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if not common or any(r.comm_source == "none" for r in ranks):
        return None
    per = [r.by_step() for r in ranks]
    last_count: dict[int, int] = {}
    for n in common:
        comm = [p[n].comm_us for p in per]
        last_count[int(np.argmin(comm))] = last_count.get(int(np.argmin(comm)), 0) + 1
    idx = max(sorted(last_count), key=lambda i: last_count[i])
    late: list[float] = []
    extra = {"data_wait": 0.0, "compute": 0.0, "host": 0.0}
    for n in common:
        mine = per[idx][n]
        others = [p[n] for j, p in enumerate(per) if j != idx]
        late.append(max(0.0, float(np.median([o.comm_us for o in others])) - mine.comm_us))
        extra["data_wait"] += mine.dataloader_wait_us - float(
            np.median([o.dataloader_wait_us for o in others])
        )
        if mine.compute_us is not None and all(o.compute_us is not None for o in others):
            extra["compute"] += mine.compute_us - float(
                np.median([float(o.compute_us or 0.0) for o in others])
            )
        extra["host"] += _host_busy(mine) - float(np.median([_host_busy(o) for o in others]))
    steps = len(common)
    detail = {k: v / steps for k, v in extra.items()}
    late_us = float(np.mean(late))
    if late_us <= 0:
        return None
    # The cause that explains at least half of the lateness; else the communication itself (its
    # collective started late for a reason the trace does not show as data wait or compute).
    has_kernels = all(r.has_kernels for r in ranks)
    candidates = [
        ("data_wait", detail["data_wait"]),
        ("compute", detail["compute"] if has_kernels else detail["host"]),
    ]
    cause = "communication"
    best = max(candidates, key=lambda kv: kv[1])
    if best[1] >= 0.5 * late_us:
        cause = best[0]
    return Straggler(
        rank=ranks[idx].rank,
        late_us_per_step=late_us,
        steps_last=last_count[idx],
        steps_compared=steps,
        cause=cause,
        cause_detail=detail,
    )


# ---- the straggler verdict (shared by GA1001 and GA1002) ---------------------------------------------

# GA1002's threshold defaults; GA1001 judges with these too, so both rules name the same straggler.
STRAGGLER_MIN_CONSISTENCY = 0.75  # last in at least this share of the compared steps
STRAGGLER_MIN_LATE_FRACTION = 0.05  # late by at least this share of the median step time
# Outside the window a real straggler leaves most of the job's step unexplained by the other ranks' own
# work (their compute and the collective itself; they wait): below this share, what the bound leaves is
# host overhead and timing noise of a healthy job. On 2x H200, with the analyzed steps ending at their
# step boundary (the profiler's stop and the GPU backlog it drains are in no step): planted straggler
# 0.91 of the step, the fixed run 0.52, which plain runs without a straggler (7.8 ms a step, GPU-bound;
# docs/multi-gpu.md); on the CPU, gloo ranks with a real 30 ms straggler in a ~46 ms step, 0.65
# (tests/capture/test_distributed.py). Before, the last step carried the stop and the bound read
# 0.88-0.90 and 0.06-0.34.
STRAGGLER_MIN_UNEXPLAINED = 0.6
# ... unless the window's lateness fits in the unprofiled step in full (at least this share of it is left
# by the bound: nothing says the profiler inflated it) and leaves at least this share of the step: gloo
# ranks with a real 30 ms straggler read 0.51-0.65 of a 46-66 ms step on a loaded 2-core machine, with
# 0.9-1.0 of the window's lateness left by the bound; the GPU fixed run 0.47 of it
STRAGGLER_FITS_OUTSIDE = 0.9
STRAGGLER_MIN_UNEXPLAINED_FITTING = 0.3


@dataclass(frozen=True)
class StragglerVerdict:
    """A straggler the evidence supports: `straggler` is late consistently and by enough to matter."""

    straggler: Straggler
    step_us: float  # median over ranks of the per-rank median step time
    late_fraction: float  # straggler.late_us_per_step / step_us (GA1002's impact)
    consistency: float  # straggler.steps_last / straggler.steps_compared
    unprofiled_step_us: float | None = None  # extra evidence used, when given
    # the lateness is no more than what the profiler added to the step (profiled - unprofiled step):
    # the trace cannot tell a straggler from the profiler's own cost on that rank
    profiler_induced: bool = False
    # the most the straggler can be late outside the window (unprofiled step - the others' compute)
    late_outside_us: float | None = None

    @property
    def rank(self) -> int:
        return self.straggler.rank

    @property
    def profiler_overhead_us(self) -> float | None:
        if self.unprofiled_step_us is None:
            return None
        return max(0.0, self.step_us - self.unprofiled_step_us)


def straggler_verdict(
    cr: CrossRank,
    *,
    min_consistency: float = STRAGGLER_MIN_CONSISTENCY,
    min_late_fraction: float = STRAGGLER_MIN_LATE_FRACTION,
    unprofiled_step_us: float | None = None,
) -> StragglerVerdict | None:
    """Is there a straggler? The one judgement both GA1001 (whose other ranks' wait is then not counted
    as exposed communication) and GA1002 (which reports it) use.

    A candidate (`cr.straggler`: the rank last at the collectives most often) is a straggler when it is
    last in at least `min_consistency` of the compared steps and late by at least `min_late_fraction`
    of the median step time. Extra evidence: `unprofiled_step_us`, the job's median step time measured
    outside the profiler (the ranks step in lockstep); when the profiled step exceeds it by at least the
    lateness, the profiler's own overhead can explain the lateness: the verdict says `profiler_induced`
    (seen on 2x H200: a rank late 7-16 ms per step only inside the window, following one physical GPU)."""
    s = cr.straggler
    if s is None or s.steps_compared == 0:
        return None
    steps = sorted(v for v in cr.step_time_median_us.values() if v)
    step_us = steps[len(steps) // 2] if steps else 0.0
    if step_us <= 0:
        return None
    consistency = s.steps_last / s.steps_compared
    late_fraction = s.late_us_per_step / step_us
    if consistency < min_consistency or late_fraction < min_late_fraction:
        return None
    induced = False
    late_outside: float | None = None
    if unprofiled_step_us is not None:
        # Outside the window a rank late by L every step makes every step at least L + the other ranks'
        # own GPU compute: the unprofiled step bounds the lateness there. The profiler's cost ruled a
        # straggler out when it added at least the lateness to the step, or when that bound leaves less
        # than STRAGGLER_MIN_UNEXPLAINED of the step.
        # The others' own work: their GPU compute; in a job without kernels (gloo on the CPU) their
        # host work outside collectives and data waits, which is that job's compute. (Without it the
        # bound was the whole unprofiled step and the verdict hung on a sub-millisecond difference.)
        has_kernels = all(r.has_kernels for r in cr.ranks)
        others = sorted(
            v
            for r in cr.ranks
            if r.rank != s.rank
            and (v := r.median("compute_us") if has_kernels else _median([_host_busy(x) for x in r.analyzed]))
        )
        compute_others = others[len(others) // 2] if others else 0.0
        # the collective itself: the straggler arrives last and waits for no one, so its own collective
        # time is the bare collective, which every rank's step holds too
        bare = cr.rank(s.rank)
        bare_comm = (bare.median("comm_us") or 0.0) if bare is not None else 0.0
        late_outside = max(0.0, min(s.late_us_per_step, unprofiled_step_us - compute_others - bare_comm))
        # The share cut applies to host-side lateness only, which the profiler inflates (its per-op
        # cost); more GPU compute or a longer wait for DataLoader workers (unprofiled processes) on the
        # late rank is not the profiler's doing. Without kernels, "compute" is host work.
        host_side = s.cause != "data_wait" and (s.cause != "compute" or not has_kernels)
        # the lateness measured in the window fits outside it in full (the unprofiled step leaves room for
        # all of it): no sign of the profiler's inflation, only a smaller share of a longer step
        fits = late_outside >= STRAGGLER_FITS_OUTSIDE * s.late_us_per_step
        unexplained = late_outside / unprofiled_step_us
        induced = step_us - unprofiled_step_us >= s.late_us_per_step or (
            host_side
            and unexplained < STRAGGLER_MIN_UNEXPLAINED
            and not (fits and unexplained >= STRAGGLER_MIN_UNEXPLAINED_FITTING)
        )
    return StragglerVerdict(
        straggler=s,
        step_us=step_us,
        late_fraction=late_fraction,
        consistency=consistency,
        unprofiled_step_us=unprofiled_step_us,
        profiler_induced=induced,
        late_outside_us=late_outside,
    )


# One-entry caches: every communication rule of one analysis asks for the same numbers. The cached
# objects themselves are kept and compared by identity (an id() alone could be reused after GC).
_CACHE: dict[str, tuple[tuple[object, ...], Any]] = {}


def _cached(slot: str, key: tuple[object, ...]) -> Any:
    hit = _CACHE.get(slot)
    if hit is not None and len(hit[0]) == len(key) and all(a is b for a, b in zip(hit[0], key, strict=True)):
        return hit[1]
    return None


def summary_of(ctx: RuleContext) -> RankSummary:
    """`rank_summary` of the context's primary trace (rank 0), using its already computed metrics."""
    key = (ctx.trace, ctx.metrics)
    hit = _cached("summary", key)
    if isinstance(hit, RankSummary):
        return hit
    out = rank_summary(ctx.trace, ctx.metrics)
    _CACHE["summary"] = (key, out)
    return out


def cross_rank_of(ctx: RuleContext) -> CrossRank:
    """`cross_rank` of every rank in the context (rank 0's metrics reused)."""
    return job_cross_rank(tuple(ctx.traces) or (ctx.trace,), ctx.trace, ctx.metrics)


def job_cross_rank(traces: Sequence[TraceModel], primary: TraceModel, metrics: Metrics) -> CrossRank:
    """`cross_rank` of one analysis's ranks, `primary`'s metrics reused: computed once per analysis,
    whether a rule asks first (`cross_rank_of`) or the analysis does (`AnalysisResult.cross_rank`)."""
    key = (*traces, metrics)
    hit = _cached("cross", key)
    if isinstance(hit, CrossRank):
        return hit
    out = cross_rank(traces, [metrics if t is primary else None for t in traces])
    _CACHE["cross"] = (key, out)
    return out


def unprofiled_step_us(ctx: Any) -> float | None:
    """The job's median step time outside the profiler (rank 0's host-timed steps; the ranks step in
    lockstep), in us, when the run recorded it: the extra evidence of `straggler_verdict`."""
    try:
        value = ctx.model.unprofiled_step_ms
    except Exception:  # no step model (no steps on rank 0's trace): nothing to check against
        return None
    return float(value) * 1000 if value else None

