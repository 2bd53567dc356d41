"""Shared computations of the host-side rules GA1xx (transfers), GA2xx (host syncs), GA3xx (data loading).

The central idea: a host-side wait costs step time only through the GPU idle time it causes. So the
rules work on the GPU idle gaps of the analyzed steps (the complement of the union of kernels, copies
and memsets inside each step) and attribute each gap:

* the part of a gap during which the host was inside a DataLoader `__next__` -> data loading;
* the rest of a gap -> the blocking calls (cudaStreamSynchronize / cudaDeviceSynchronize /
  cudaEventSynchronize / synchronous cudaMemcpy) that overlap it. When the first of them started
  before the gap began (the host was already waiting when the GPU queue drained), the whole bubble
  until the host refills the queue is their cost. When the GPU went idle first, the span from the
  first call's start to the last call's end is (a read loop such as `for i: x[i].item()` keeps the
  GPU idle from its first read to its last); host work before and after is not.

A scalar read's few-byte device-to-host copy is not counted as GPU work (it would cut a read loop's
idle stretch into slivers).

Blocking calls are classified by what issued them: `scalar_read` (.item(), .cpu(), .tolist(),
.numpy(), printing: aten::_local_scalar_dense / aten::item, or a device-to-host copy),
`data_dependent` (inside nonzero, masked_select, unique, ... whose output shape depends on data),
`blocking_htod` (a host-to-device copy the host waited for: `x.cuda()` from pageable memory), and
`explicit` (torch.cuda.synchronize(), stream/event synchronize).

Heavy imports are inside the functions: rule files are imported by `gpuadvisor rules`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuadvisor import metrics as _metrics
from gpuadvisor.model import Location

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.rules_api import RuleContext

SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
SCALAR_OPS = ("aten::_local_scalar_dense", "aten::item")
DATA_DEPENDENT_OPS = (
    "aten::nonzero",
    "aten::nonzero_numpy",
    "aten::argwhere",
    "aten::masked_select",
    "aten::masked_scatter",
    "aten::unique",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
    "aten::repeat_interleave",
    "aten::bincount",
    "aten::histc",
)
COPY_OPS = ("aten::copy_", "aten::_to_copy", "aten::to", "aten::_copy_from", "aten::_copy_from_and_resize")
DATALOADER_MARK = "DataLoader"
KINDS = ("scalar_read", "data_dependent", "blocking_htod", "explicit")


@dataclass(frozen=True)
class Window:
    """The analyzed steps (non-outlier steps, or all when every step is an outlier)."""

    starts: Any  # numpy float64, sorted
    ends: Any
    count: int
    total_us: float
    median_step_us: float


def window(ctx: RuleContext) -> Window:
    import numpy as np

    steps = ctx.trace.steps
    if len(steps) and "outlier" in steps.columns:
        keep = steps[~steps["outlier"].astype(bool)]
        if len(keep):
            steps = keep
    steps = steps.sort_values("start")
    s = steps["start"].to_numpy(dtype="float64")
    e = steps["end"].to_numpy(dtype="float64")
    ok = ~(np.isnan(s) | np.isnan(e)) & (e > s)
    s, e = s[ok], e[ok]
    dur = e - s
    return Window(s, e, len(s), float(dur.sum()), float(np.median(dur)) if len(dur) else 0.0)


# The interval algebra lives in gpuadvisor.metrics (one implementation for metrics and rules).
union = _metrics.union_intervals
covered = _metrics.covered


def in_window(win: Window, ts: Any) -> Any:
    """Boolean mask: each ts lies inside an analyzed step."""
    import numpy as np

    t = np.asarray(ts, dtype="float64")
    if win.count == 0:
        return np.zeros(len(t), dtype=bool)
    i = np.searchsorted(win.starts, t, side="right") - 1
    ic = np.clip(i, 0, win.count - 1)
    return (i >= 0) & (t < win.ends[ic]) & ~np.isnan(t)


def gpu_busy(ctx: RuleContext) -> tuple[Any, Any]:
    import numpy as np

    from gpuadvisor.metrics import TINY_COPY_BYTES

    t = ctx.trace
    # A scalar read's few-byte device-to-host copy is not GPU work (same rule as gpuadvisor.metrics).
    c = t.copies
    if len(c):
        c = c[~(c["direction"].astype(str).eq("DtoH") & (c["bytes"] <= TINY_COPY_BYTES))]
    s = np.concatenate(
        [t.kernels["ts"].to_numpy("float64"), c["ts"].to_numpy("float64"), t.memsets["ts"].to_numpy("float64")]
    )
    e = np.concatenate(
        [t.kernels["end"].to_numpy("float64"), c["end"].to_numpy("float64"), t.memsets["end"].to_numpy("float64")]
    )
    return union(s, e)


def idle_gaps(ctx: RuleContext, win: Window) -> tuple[Any, Any]:
    """GPU idle gaps inside the analyzed steps: (starts, ends), sorted."""
    import numpy as np

    bs, be = gpu_busy(ctx)
    gs_all = np.r_[-np.inf, be]
    ge_all = np.r_[bs, np.inf]
    out_s: list[Any] = []
    out_e: list[Any] = []
    for s, e in zip(win.starts, win.ends, strict=True):
        lo = np.searchsorted(ge_all, s, side="right")
        hi = np.searchsorted(gs_all, e, side="left")
        gs = np.clip(gs_all[lo:hi], s, e)
        ge = np.clip(ge_all[lo:hi], s, e)
        keep = ge > gs
        out_s.append(gs[keep])
        out_e.append(ge[keep])
    if not out_s:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(out_s), np.concatenate(out_e)


def dataloader_waits(ctx: RuleContext) -> pd.DataFrame:
    ann = ctx.trace.annotations
    if len(ann) == 0:
        return ann
    names = ann["name"].astype(str)
    mask = names.str.contains(DATALOADER_MARK, regex=False) & names.str.contains("__next__", regex=False)
    waits: pd.DataFrame = ann[mask & ~ann["on_gpu"].astype(bool)]
    return waits


def blocking_calls(ctx: RuleContext) -> pd.DataFrame:
    """Host-blocking runtime calls with a `kind` column (see the module docstring), sorted by ts."""
    import numpy as np

    t = ctx.trace
    rt = t.runtime
    if len(rt) == 0:
        empty: pd.DataFrame = rt.assign(kind=[])
        return empty
    names = rt["name"].astype(str)
    calls = rt[names.isin(SYNC_CALLS)].copy()
    if len(calls) == 0:
        none: pd.DataFrame = calls.assign(kind=[])
        return none
    calls["name"] = calls["name"].astype(str)
    ops = t.cpu_ops
    op_names = ops["name"].astype(str)
    dd_s, dd_e = union(
        ops.loc[op_names.isin(DATA_DEPENDENT_OPS), "ts"], ops.loc[op_names.isin(DATA_DEPENDENT_OPS), "end"]
    )
    sc_s, sc_e = union(ops.loc[op_names.isin(SCALAR_OPS), "ts"], ops.loc[op_names.isin(SCALAR_OPS), "end"])
    ts = calls["ts"].to_numpy("float64")
    mid = ts + calls["dur"].to_numpy("float64") / 2
    in_dd = covered(dd_s, dd_e, mid - 1e-3, mid) > 0
    in_sc = covered(sc_s, sc_e, mid - 1e-3, mid) > 0

    # Direction of the copies launched under the same external id (the op that did the copy).
    direction_by_ext: dict[int, str] = {}
    if len(t.copies):
        linked = rt.dropna(subset=["correlation", "external_id"]).drop_duplicates("correlation")
        ext_of_corr = {
            int(c): int(x) for c, x in zip(linked["correlation"], linked["external_id"], strict=True)
        }
        for corr, ext, direction in zip(
            t.copies["correlation"], t.copies["external_id"], t.copies["direction"], strict=True
        ):
            key = _int(ext)
            if key is None and _int(corr) is not None:
                key = ext_of_corr.get(int(corr))
            if key is not None:
                direction_by_ext.setdefault(key, str(direction))
    kinds = []
    for i, (name, ext) in enumerate(zip(calls["name"], calls["external_id"], strict=True)):
        key = _int(ext)
        direction = direction_by_ext.get(key) if key is not None else None
        if in_dd[i]:
            kinds.append("data_dependent")
        elif in_sc[i] or (name in ("cudaStreamSynchronize", "cudaMemcpy") and direction == "DtoH"):
            kinds.append("scalar_read")
        elif name in ("cudaStreamSynchronize", "cudaMemcpy") and direction == "HtoD":
            kinds.append("blocking_htod")
        elif name == "cudaMemcpy":
            kinds.append("scalar_read" if direction == "DtoH" else "blocking_htod")
        else:
            kinds.append("explicit")
    calls["kind"] = np.array(kinds, dtype=object)
    ordered: pd.DataFrame = calls.sort_values("ts")
    return ordered


def _int(value: Any) -> int | None:
    """An id as int, or None for NA/NaN/None."""
    try:
        if value is None or value != value:
            return None
        return int(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class IdleAttribution:
    """GPU idle time in the analyzed window, in microseconds, by cause."""

    window: Window
    idle_us: float
    data_loading_us: float
    by_kind_us: dict[str, float]  # sync kind -> idle attributed to it
    calls_by_kind: dict[str, int]  # blocking calls of each kind inside the window
    blocked_by_kind_us: dict[str, float]  # host time blocked in those calls

    def share(self, us: float) -> float:
        return us / self.window.total_us if self.window.total_us > 0 else 0.0

    def per_step(self, value: float) -> float:
        return value / self.window.count if self.window.count else 0.0


# One-entry cache of `attribute_idle`: GA102, GA201, GA202, GA203 and GA301 all ask for the same
# attribution of one analysis. The key holds the objects themselves, compared by identity (an id()
# alone could be reused after garbage collection): the trace, its tables and the metrics.
_IDLE_CACHE: list[tuple[tuple[object, ...], IdleAttribution]] = []


def _idle_key(ctx: RuleContext) -> tuple[object, ...]:
    t = ctx.trace
    return (t, ctx.metrics, t.kernels, t.copies, t.memsets, t.runtime, t.cpu_ops, t.annotations, t.steps)


def attribute_idle(ctx: RuleContext) -> IdleAttribution:
    """Attribute the GPU idle gaps of the analyzed steps (see the module docstring).

    The result depends on the trace only; it is computed once per analysis and shared (treat it as
    read-only)."""
    key = _idle_key(ctx)
    if _IDLE_CACHE:
        old_key, hit = _IDLE_CACHE[0]
        if len(old_key) == len(key) and all(a is b for a, b in zip(old_key, key, strict=True)):
            return hit
    out = _attribute_idle(ctx)
    _IDLE_CACHE[:] = [(key, out)]
    return out


def _attribute_idle(ctx: RuleContext) -> IdleAttribution:
    import numpy as np

    win = window(ctx)
    gs, ge = idle_gaps(ctx, win)
    dl = dataloader_waits(ctx)
    ds, de = union(dl["ts"], dl["end"]) if len(dl) else (np.zeros(0), np.zeros(0))
    dl_in_gap = covered(ds, de, gs, ge) if len(gs) else np.zeros(0)
    calls = blocking_calls(ctx)
    by_kind = dict.fromkeys(KINDS, 0.0)
    calls_by_kind = dict.fromkeys(KINDS, 0)
    blocked = dict.fromkeys(KINDS, 0.0)
    if len(calls):
        cs = calls["ts"].to_numpy("float64")
        ce = calls["end"].to_numpy("float64")
        ck = calls["kind"].to_numpy(object)
        inside = in_window(win, cs)
        for k in KINDS:
            sel = inside & (ck == k)
            calls_by_kind[k] = int(sel.sum())
            blocked[k] = float((ce[sel] - cs[sel]).sum())
        order = np.argsort(cs, kind="stable")
        cs, ce, ck = cs[order], ce[order], ck[order]
        longest = float((ce - cs).max())
        # Calls overlapping a gap start before its end and end after its start (none starts earlier
        # than the gap start - the longest call, which bounds the search). Gaps with no call starting
        # in that range cannot overlap one: only the others are visited (in order, so the sums below
        # add up exactly as over every gap).
        los = np.searchsorted(cs, gs - longest, side="left")
        his = np.searchsorted(cs, ge, side="left")
        for j in np.flatnonzero(his > los):
            g0, g1, dl_us = gs[j], ge[j], dl_in_gap[j]
            lo, hi = los[j], his[j]
            cand = lo + np.flatnonzero(ce[lo:hi] > g0)
            if len(cand) == 0:
                continue
            rest = max(0.0, (g1 - g0) - dl_us)
            first = cand[0]
            if cs[first] <= g0:
                # The host was already blocked when the GPU ran dry: the queue drained because of this
                # call, and the GPU stays idle until the host issues new work after it (and after any
                # further blocking calls in the same gap).
                by_kind[str(ck[first])] += rest
                continue
            # The GPU went idle first (the host was busy elsewhere). From the first blocking call to the
            # end of the last one the host is running a read loop (`for i in ...: x[i].item()`): that
            # span is the calls' cost, the host work around them is not. Charged to the kind with the
            # most calls in the gap.
            span = min(rest, max(0.0, min(float(ce[cand].max()), g1) - cs[first]))
            kinds, counts = np.unique(ck[cand].astype(str), return_counts=True)
            by_kind[str(kinds[int(np.argmax(counts))])] += span
    return IdleAttribution(
        window=win,
        idle_us=float((ge - gs).sum()) if len(gs) else 0.0,
        data_loading_us=float(dl_in_gap.sum()) if len(gs) else 0.0,
        by_kind_us=by_kind,
        calls_by_kind=calls_by_kind,
        blocked_by_kind_us=blocked,
    )


MIN_CALLS_PER_STEP = 0.1
MIN_BYTES_SHARE = 0.01


def callsites(ctx: RuleContext, kind: str, calls: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Captured call sites of a kind (host_sync / host_to_device), optionally of some calls,
    most frequent first. Calls made less than once every `MIN_CALLS_PER_STEP`^-1 steps (set-up such as
    `model.to(device)`, a final `.item()`) are left out when more frequent ones exist: a per-step cost
    is not theirs."""
    if ctx.run is None:
        return []
    out = [
        c
        for c in ctx.run.callsites
        if c.get("kind") == kind and (calls is None or str(c.get("call")) in calls)
    ]
    frequent = [c for c in out if float(c.get("per_step") or 0) >= MIN_CALLS_PER_STEP]
    if frequent:
        out = frequent
    # Copies: what matters is the bytes they move per step. A site carrying under MIN_BYTES_SHARE of
    # them (`model.to(device)`: one small copy per parameter tensor, once) is not where the time goes.
    moved = {id(c): float(c.get("bytes_per_call") or 0) * float(c.get("per_step") or 0) for c in out}
    total = sum(moved.values())
    if kind == "host_to_device" and total > 0:
        out = [c for c in out if moved[id(c)] >= MIN_BYTES_SHARE * total]
        return sorted(out, key=lambda c: (-moved[id(c)], str(c.get("file")), int(c.get("line") or 0)))
    return sorted(
        out,
        key=lambda c: (
            -float(c.get("per_step") or c.get("count") or 0),
            str(c.get("file")),
            int(c.get("line") or 0),
        ),
    )


def fmt_ms(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us < 100_000 else f"{us / 1000:.0f} ms"


def fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}%" if x < 0.1 else f"{100 * x:.0f}%"


@dataclass(frozen=True)
class CopyStats:
    """Host<->device copies of the analyzed window (at least `min_bytes` each)."""

    window: Window
    copies: Any  # DataFrame: the selected copies, with an `exposed_us` column
    total_us: float
    exposed_us: float  # time of these copies not overlapped by any kernel
    bytes: float


def copy_stats(ctx: RuleContext, mask: Any, win: Window | None = None) -> CopyStats:
    """Copies selected by `mask` (a boolean Series over ctx.trace.copies) inside the analyzed steps;
    exposed time = copy time not covered by any kernel (the compute engine had nothing to overlap)."""
    import numpy as np

    win = win or window(ctx)
    t = ctx.trace
    c = t.copies[mask.to_numpy() & in_window(win, t.copies["ts"].to_numpy("float64"))].copy()
    ks, ke = union(t.kernels["ts"], t.kernels["end"])
    if len(c):
        cs, ce = c["ts"].to_numpy("float64"), c["end"].to_numpy("float64")
        c["exposed_us"] = (ce - cs) - covered(ks, ke, cs, ce)
        # Copies that overlap each other (two streams) count once: expose the union, not the sum.
        us, ue = union(cs, ce)
        total = float((ue - us).sum())
        exposed = float(((ue - us) - covered(ks, ke, us, ue)).sum())
    else:
        c["exposed_us"] = np.zeros(0)
        total = exposed = 0.0
    return CopyStats(
        win, c, total, exposed, float(np.nansum(c["bytes"].to_numpy("float64"))) if len(c) else 0.0
    )


def gbps(nbytes: float, us: float) -> float | None:
    return nbytes / us / 1e3 if us > 0 else None


def site_location(site: Mapping[str, Any], *detail_keys: str) -> Location:
    """A finding location for a captured call site (callsites.json entry): file:line, the source line,
    the function, and the named fields of the site as detail."""
    return Location(
        file=str(site["file"]) if site.get("file") else None,
        line=int(site["line"]) if site.get("line") else None,
        code=site.get("code"),
        function=site.get("function"),
        detail={key: site.get(key) for key in detail_keys},
    )
