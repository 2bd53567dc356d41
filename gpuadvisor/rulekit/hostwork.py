"""Host work one rank does that the others do not (GA1002's "where", issue 42 item 3).

A straggler whose lateness is host time (not data wait, not GPU compute) is late because its host runs
something the other ranks do not: a per-sample transform, logging, a checkpoint. The trace shows it as
CPU operators: on the ddp_straggler sample run, rank 1 runs about 2,000 `aten::mean` and `aten::div_`
per step on CPU tensors (a per-sample normalization) that rank 0 never runs. This module compares the
ranks' top-level CPU operators (not nested in another operator on the same thread) per step, over the
steps every rank recorded, and says which the straggler runs more of and for how long; and which share
of that time ran before the step's batch went to the GPU (the first host-to-device copy of at least
`BATCH_COPY_MIN_BYTES` launched in the step), that is, in the batch's preparation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuadvisor.multirank import CrossRank
    from gpuadvisor.trace.model import TraceModel

# A host-to-device copy at least this large carries a batch (a scalar or a parameter is smaller).
BATCH_COPY_MIN_BYTES = 16 * 1024
# Operators named: the largest extra ones until they cover this share of the extra time, at most
# MAX_OPS, each at least MIN_OP_SHARE of it.
COVERED_SHARE = 0.9
MAX_OPS = 4
MIN_OP_SHARE = 0.02


@dataclass(frozen=True)
class ExtraHostOp:
    """One CPU operator the straggler runs more of than the other ranks (per step, over their median)."""

    name: str
    calls_per_step: float
    us_per_step: float


@dataclass(frozen=True)
class ExtraHostWork:
    """The straggler's extra top-level CPU operators (largest first) and their time per step."""

    rank: int
    ops: tuple[ExtraHostOp, ...]
    us_per_step: float  # all of the rank's extra top-level operator time per step (not only `ops`)
    before_batch_copy: float | None  # share of `ops`' time that ran before the step's batch copy
    # how much longer than the other ranks' median the rank takes from a step's start to the launch of
    # its batch copy (None when a rank launched none in some step)
    preparation_extra_us: float | None = None

    def to_evidence(self) -> dict[str, Any]:
        return {
            "extra_cpu_op_ms_per_step": self.us_per_step / 1000,
            "extra_cpu_ops": {
                o.name: {"calls_per_step": o.calls_per_step, "ms_per_step": o.us_per_step / 1000}
                for o in self.ops
            },
            "share_before_batch_copy": self.before_batch_copy,
            "extra_ms_to_batch_copy": None
            if self.preparation_extra_us is None
            else self.preparation_extra_us / 1000,
        }


def _top_level(trace: TraceModel) -> Any:
    """The cpu_ops frame of the operators not nested in another one on their thread."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    ops = trace.cpu_ops
    if len(ops) == 0:
        return ops
    ops = ops.sort_values(["tid", "ts", "dur"], ascending=[True, True, False], kind="stable")
    tid = ops["tid"].to_numpy()
    ts = ops["ts"].to_numpy(dtype=np.float64)
    end = ops["end"].to_numpy(dtype=np.float64)
    keep = np.zeros(len(ops), dtype=bool)
    open_end = -np.inf
    current = None
    for i in range(len(ops)):
        if tid[i] != current:
            current, open_end = tid[i], -np.inf
        if ts[i] >= open_end:
            keep[i] = True
            open_end = end[i]
    return ops[keep]


def _per_step(ops: Any, spans: Sequence[tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """name -> (calls, us) per step of the operators starting inside `spans`."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if len(ops) == 0 or not spans:
        return {}
    ts = ops["ts"].to_numpy(dtype=np.float64)
    inside = np.zeros(len(ops), dtype=bool)
    for a, b in spans:
        inside |= (ts >= a) & (ts < b)
    picked = ops[inside]
    grouped = picked.groupby(picked["name"].astype(str), observed=True)["dur"].agg(["count", "sum"])
    n = len(spans)
    return {str(k): (float(r["count"]) / n, float(r["sum"]) / n) for k, r in grouped.iterrows()}


def _batch_copy_launches(trace: TraceModel) -> Any:
    """Host times at which host-to-device copies of a batch were launched, sorted."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    c = trace.copies
    if len(c) == 0 or len(trace.runtime) == 0:
        return np.zeros(0)
    big = c[(c["direction"].astype(str) == "HtoD") & (c["bytes"].fillna(0) >= BATCH_COPY_MIN_BYTES)]
    ids = set(big["correlation"].dropna().tolist())
    rt = trace.runtime
    return np.sort(rt["ts"].to_numpy(dtype=np.float64)[rt["correlation"].isin(ids).to_numpy(dtype=bool)])


def extra_host_work(traces: Mapping[int, TraceModel], cross: CrossRank, rank: int) -> ExtraHostWork | None:
    """The CPU operators rank `rank` runs more of than the other ranks' median, per common step; None
    when it runs none more (or the ranks share no step)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if rank not in traces or len(traces) < 2 or not cross.common_steps:
        return None
    spans: dict[int, list[tuple[float, float]]] = {}
    for r in cross.ranks:
        by_step = r.by_step()
        spans[r.rank] = [(by_step[n].start, by_step[n].end) for n in cross.common_steps if n in by_step]
    tops = {r: _top_level(t) for r, t in traces.items() if r in spans}
    per = {r: _per_step(tops[r], spans[r]) for r in tops}
    others = [p for r, p in per.items() if r != rank]
    if rank not in per or not others:
        return None
    extra: list[ExtraHostOp] = []
    for name, (calls, us) in per[rank].items():
        base_us = float(np.median([o.get(name, (0.0, 0.0))[1] for o in others]))
        base_calls = float(np.median([o.get(name, (0.0, 0.0))[0] for o in others]))
        if us > base_us:
            extra.append(ExtraHostOp(name, max(0.0, calls - base_calls), us - base_us))
    total = sum(o.us_per_step for o in extra)
    if total <= 0:
        return None
    extra.sort(key=lambda o: (-o.us_per_step, o.name))
    named: list[ExtraHostOp] = []
    for op in extra:
        if len(named) >= MAX_OPS or sum(o.us_per_step for o in named) >= COVERED_SHARE * total:
            break
        if op.us_per_step >= MIN_OP_SHARE * total:
            named.append(op)
    prep = {r: _to_batch_copy_us(traces[r], spans[r]) for r in tops}
    known = [v for r, v in prep.items() if r != rank and v is not None]
    mine = prep[rank]
    return ExtraHostWork(
        rank=rank,
        ops=tuple(named),
        us_per_step=total,
        before_batch_copy=_share_before_copy(tops[rank], spans[rank], traces[rank], {o.name for o in named}),
        preparation_extra_us=None
        if mine is None or len(known) != len(prep) - 1
        else mine - float(np.median(known)),
    )


def _to_batch_copy_us(trace: TraceModel, spans: Sequence[tuple[float, float]]) -> float | None:
    """Mean time from a step's start to the launch of its first batch copy; None when a step has none."""
    launches = _batch_copy_launches(trace)
    waits: list[float] = []
    for a, b in spans:
        first = launches[(launches >= a) & (launches < b)]
        if len(first) == 0:
            return None
        waits.append(float(first[0]) - a)
    return sum(waits) / len(waits) if waits else None


def _share_before_copy(
    ops: Any, spans: Sequence[tuple[float, float]], trace: TraceModel, names: set[str]
) -> float | None:
    """Share of the time of the operators `names` that ran in each step before its first batch copy
    was launched; None when no step launched one."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    launches = _batch_copy_launches(trace)
    if len(launches) == 0 or not names:
        return None
    mine = ops[ops["name"].astype(str).isin(names).to_numpy(dtype=bool)]
    ts = mine["ts"].to_numpy(dtype=np.float64)
    dur = mine["dur"].to_numpy(dtype=np.float64)
    before = total = 0.0
    seen_copy = False
    for a, b in spans:
        inside = (ts >= a) & (ts < b)
        total += float(dur[inside].sum())
        first = launches[(launches >= a) & (launches < b)]
        if len(first):
            seen_copy = True
            before += float(dur[inside & (ts < first[0])].sum())
    return before / total if seen_copy and total > 0 else None
