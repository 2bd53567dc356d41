"""The host calls of the step model: the runtime calls of the threads that launch GPU work, each
classified as a launch, a wait on the device (scalar read, data-dependent op, blocking copy, explicit
synchronize, allocator), an allocation, or other host work, with what a wait waited for
(`build_host`, columns HOST_COLUMNS).

Imports `intervals` and `spans`; `build` imports it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gpuadvisor.stepmodel.intervals import (
    covered,
    empty_frame,
    launch_order,
    sorted_by_start_end,
    union_intervals,
)
from gpuadvisor.stepmodel.spans import SCALAR_OPS, Spans
from gpuadvisor.stepmodel.window import StepWindow
from gpuadvisor.trace.model import name_mask

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.trace.model import TraceModel

# Host call kinds
LAUNCH = "launch"
SYNC = "sync"
ALLOC = "alloc"
WORK = "work"

# Why the host waited on the device (host call `sync_kind`)
SCALAR_READ = "scalar_read"  # .item(), .cpu(), .tolist(), printing a tensor
DATA_DEPENDENT = "data_dependent"  # nonzero, boolean-mask indexing, unique...
BLOCKING_COPY = "blocking_copy"  # a host<->device copy the host waited for (pageable or non_blocking=False)
EXPLICIT = "explicit"  # torch.cuda.synchronize(), stream/event synchronize
ALLOCATOR = "allocator"  # cudaFree (synchronizes the device)
SYNC_KINDS: tuple[str, ...] = (SCALAR_READ, DATA_DEPENDENT, BLOCKING_COPY, EXPLICIT, ALLOCATOR)

HOST_COLUMNS: tuple[str, ...] = (
    "ts",
    "dur",
    "end",
    "name",
    "tid",
    "correlation",
    "external_id",
    "kind",  # LAUNCH / SYNC / ALLOC / WORK
    "sync_kind",  # SYNC_KINDS for syncs and blocking copies, "" otherwise
    "blocking",  # a launch the host waited for (pageable copy, cudaMemcpy)
    "long_call",  # a non-blocking launch call far longer than the typical one (held up, or host work)
    "backpressure",  # a long launch call held up by a full launch queue
    "in_flight",  # GPU operations launched and still running when the call returned
    "drain_ts",  # end of the GPU work the call waited for (NaN when it did not wait)
    "step",  # analyzed step index, -1 outside
    "seg",  # segmented step index, -1 outside
    "in_data",  # inside a DataLoader __next__ span
    "in_optimizer",  # inside an Optimizer.step span
    "in_read",  # inside a scalar read (aten::item / _local_scalar_dense of a device value)
    "in_rnn",  # inside an RNN/LSTM/GRU op (RNN_OPS): torch.compile leaves those modules to eager
)

_LAUNCH_RE = re.compile(
    r"^(?:cuda|hip)(?:LaunchKernel|LaunchCooperativeKernel|GraphLaunch|MemcpyAsync|Memcpy2DAsync|"
    r"Memcpy3DAsync|MemsetAsync|Memset2DAsync|ExtModuleLaunchKernel|ModuleLaunchKernel|LaunchKernelExC|"
    r"MemcpyPeerAsync|MemcpyFromSymbolAsync|MemcpyToSymbolAsync|MemcpyWithStream)|"
    r"^cu(?:LaunchKernel|LaunchKernelEx|LaunchCooperativeKernel|GraphLaunch|MemcpyAsync|MemcpyHtoDAsync|"
    r"MemcpyDtoHAsync|MemcpyDtoDAsync|MemsetD\w*Async)"
)
_BLOCKING_COPY_RE = re.compile(
    r"^(?:cuda|hip)Memcpy(?:2D|3D|Peer|ToSymbol|FromSymbol)?$|^cuMemcpy(?:HtoD|DtoH|DtoD)?(?:_v2)?$"
)
_SYNC_RE = re.compile(
    r"^(?:cuda|hip)(?:StreamSynchronize|DeviceSynchronize|EventSynchronize|ThreadSynchronize)$|"
    r"^cu(?:StreamSynchronize|CtxSynchronize|EventSynchronize)$"
)
_FREE_RE = re.compile(r"^(?:cuda|hip)Free(?:Host|Async)?$|^cuMemFree(?:Host)?(?:_v2)?$")
_ALLOC_RE = re.compile(
    r"^(?:cuda|hip)(?:Malloc|MallocHost|HostAlloc|MallocAsync|HostRegister)$|^cuMem(?:Alloc|HostAlloc)"
)

# The ops of nn.RNN/nn.LSTM/nn.GRU, forward and backward. Dynamo breaks the graph at those modules
# (`torch._dynamo.config.allow_rnn` is False by default): torch.compile runs them eagerly, their
# per-time-step kernels launched one by one, neither fused nor captured in a CUDA graph.
RNN_OPS = (
    "aten::lstm",
    "aten::gru",
    "aten::rnn_tanh",
    "aten::rnn_relu",
    "aten::_cudnn_rnn",
    "aten::_cudnn_rnn_backward",
    "aten::miopen_rnn",
    "aten::miopen_rnn_backward",
    "aten::_thnn_fused_lstm_cell",
    "aten::_thnn_fused_lstm_cell_backward_impl",
    "aten::_thnn_fused_gru_cell",
    "aten::_thnn_fused_gru_cell_backward",
    "aten::lstm_cell",
    "aten::gru_cell",
)
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

def _launch_tids(ops: pd.DataFrame) -> list[int]:
    """The threads that launched GPU work, sorted (`int` of each distinct launch_tid)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    tids = ops["launch_tid"].to_numpy(dtype=np.float64)
    return sorted({int(t) for t in np.unique(tids[~np.isnan(tids)]).tolist()})


# GPU operations launched and not finished when a long launch call returns, at least, for the call to
# count as held up by a full launch queue. The queue holds about a thousand launches (the recorded
# GPU-bound runs show 1016-1020 in flight behind their held calls); long calls with 1-5 in flight were
# pageable copies staging their bytes, which is host work.
BACKPRESSURE_MIN_IN_FLIGHT = 64


def _sorted(values: Any) -> Any:
    """`np.sort(values)`, without sorting values already in order (the ops table's ends nearly are)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    return values if bool(np.all(values[1:] >= values[:-1])) else np.sort(values)


def _in_flight(ops: pd.DataFrame, at: Any) -> Any:
    """Number of GPU operations launched before and still running at each time of `at` (int64)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    lts = ops["launch_ts"].to_numpy(dtype=np.float64) if len(ops) else np.zeros(0)
    known = ~np.isnan(lts)
    if not known.any():
        return np.zeros(len(at), dtype=np.int64)
    lts = _sorted(lts[known])
    ends = _sorted(ops["end"].to_numpy(dtype=np.float64)[known])
    out: Any = np.searchsorted(lts, at, side="left") - np.searchsorted(ends, at, side="right")
    return np.maximum(out, 0).astype(np.int64)


def build_host(
    trace: TraceModel,
    segments: StepWindow,
    window: StepWindow,
    ops: pd.DataFrame,
    data: Spans,
    optimizer: Spans,
    reads: Spans,
) -> pd.DataFrame:
    """Host calls of the launching threads in the segmented steps (see HOST_COLUMNS), sorted by start."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    rt = trace.runtime
    tids = _launch_tids(ops)
    if len(rt) == 0 or segments.count == 0 or not tids:
        return empty_frame(HOST_COLUMNS)
    h = rt[rt["tid"].isin(tids) & segments.mask(rt["ts"])]
    if len(h) == 0:
        return empty_frame(HOST_COLUMNS)
    name_column = h["name"]
    names = name_column.astype(str)
    h["name"] = names.to_numpy(dtype=object)
    # the name tests run once per distinct name (name_mask), not once per call
    categorical = isinstance(name_column.dtype, pd.CategoricalDtype)
    distinct = set(name_column.cat.categories.astype(str)) if categorical else set(names.tolist())

    def named(chosen: set[str]) -> Any:
        return name_mask(name_column, lambda s: s.isin(sorted(chosen)))

    launch_names = {n for n in distinct if _LAUNCH_RE.search(n)}
    blocking_names = {n for n in distinct if _BLOCKING_COPY_RE.search(n)}
    sync_names = {n for n in distinct if _SYNC_RE.search(n)}
    free_names = {n for n in distinct if _FREE_RE.search(n)}
    alloc_names = {n for n in distinct if _ALLOC_RE.search(n)}
    corr = h["correlation"].astype("float64").to_numpy()
    has_op = np.isin(corr, ops["correlation"].dropna().to_numpy(dtype=np.float64))  # NaN: no id, no op
    nm = names.to_numpy(dtype=object)
    is_launch = named(launch_names | blocking_names) & has_op
    is_sync = named(sync_names | free_names)
    is_alloc = named(alloc_names)
    which = np.where(is_launch, 0, np.where(is_sync, 1, np.where(is_alloc, 2, 3)))
    h["kind"] = np.asarray([LAUNCH, SYNC, ALLOC, WORK], dtype=object)[which]

    # Copies behind each launch: direction and whether the host waited for them.
    copies = ops[ops["kind"] == "copy"]
    blocking = named(blocking_names) & is_launch
    direction_of: dict[int, str] = {}
    pageable_mid: dict[
        int, float
    ] = {}  # a pageable copy's middle: the host waited if its call lasted past it
    for c, d, s, dst, cts, cdur in zip(
        copies["correlation"].tolist(),
        copies["direction"].tolist(),
        copies["src_kind"].tolist(),
        copies["dst_kind"].tolist(),
        copies["ts"].tolist(),
        copies["dur"].tolist(),
        strict=True,
    ):
        if c == c:
            direction_of[int(c)] = str(d)
            if "Pageable" in (str(s), str(dst)):
                pageable_mid[int(c)] = float(cts) + float(cdur) / 2.0
    call_end = h["end"].to_numpy(dtype=np.float64)
    mid_of_call = _by_correlation(list(pageable_mid), list(pageable_mid.values()), corr)
    waited_for_copy = call_end >= mid_of_call  # NaN (no pageable copy): False
    blocking |= waited_for_copy & is_launch
    h["blocking"] = blocking

    # Launch calls held up by a full launch queue (a GPU-bound run whose host ran ahead): far longer
    # than usual, with the queue full behind them. A long call with little in flight took its time on
    # the host (a pageable cudaMemcpyAsync staging its bytes, a lock): that is host work, kept.
    launch_dur = h["dur"].to_numpy(dtype=np.float64)
    plain_launch = is_launch & ~blocking
    typical = float(np.median(launch_dur[plain_launch])) if plain_launch.any() else 5.0
    long_call = plain_launch & (launch_dur > max(50.0, 10.0 * typical))
    h["long_call"] = long_call
    h["in_flight"] = _in_flight(ops, h["end"].to_numpy(dtype=np.float64))
    h["backpressure"] = long_call & (h["in_flight"].to_numpy() >= BACKPRESSURE_MIN_IN_FLIGHT)

    # Sync kinds
    ops_cpu = trace.cpu_ops
    op_names = ops_cpu["name"].astype(str) if len(ops_cpu) else None
    mid = h["ts"].to_numpy(dtype=np.float64) + launch_dur / 2.0

    def inside(op_list: tuple[str, ...]) -> Any:
        if op_names is None:
            return np.zeros(len(h), dtype=bool)
        sel = op_names.isin(op_list).to_numpy(dtype=bool)
        s, e = union_intervals(ops_cpu["ts"].to_numpy()[sel], ops_cpu["end"].to_numpy()[sel])
        return covered(s, e, mid - 1e-3, mid) > 0

    in_dd = inside(DATA_DEPENDENT_OPS)
    h["in_rnn"] = inside(RNN_OPS)
    in_scalar = inside(SCALAR_OPS)
    ext = h["external_id"].astype("float64").to_numpy()
    # direction of copies launched under the same external id (the op that copied, then synced)
    dir_by_ext: dict[int, str] = {}
    for c, x in zip(copies["correlation"].tolist(), copies["external_id"].tolist(), strict=True):
        if x == x and c == c:
            dir_by_ext.setdefault(int(x), direction_of.get(int(c), ""))
    if direction_of:  # no copy, nothing to take: no list of every launch's two ids (1.67M: ~150 MB)
        rt_ext = h.loc[is_launch, ["correlation", "external_id"]].dropna()
        for c, x in zip(rt_ext["correlation"].tolist(), rt_ext["external_id"].tolist(), strict=True):
            if int(c) in direction_of:
                dir_by_ext.setdefault(int(x), direction_of[int(c)])
    sync_kind = np.full(len(h), "", dtype=object)
    for i in np.flatnonzero(is_sync | blocking).tolist():
        name = str(nm[i])
        if name in free_names:
            sync_kind[i] = ALLOCATOR
            continue
        x = ext[i]
        direction = dir_by_ext.get(int(x), "") if x == x else ""
        if blocking[i]:
            c = corr[i]
            direction = direction_of.get(int(c), direction) if c == c else direction
            # a device-to-host copy the host waited for is a read of device values (.cpu(), .tolist(),
            # .numpy()): the host needs them now, so the remedy is to read less often, not to pin
            sync_kind[i] = SCALAR_READ if direction == "DtoH" else BLOCKING_COPY
        elif in_dd[i]:
            sync_kind[i] = DATA_DEPENDENT
        elif in_scalar[i] or direction == "DtoH":
            sync_kind[i] = SCALAR_READ
        elif direction == "HtoD":
            sync_kind[i] = BLOCKING_COPY
        else:
            sync_kind[i] = EXPLICIT
    h["sync_kind"] = sync_kind

    # What a wait waited for: the end of the GPU work launched before it (device-wide).
    h["drain_ts"] = np.nan
    launched = launch_order(ops) if (is_sync | blocking).any() else np.zeros(0, dtype=np.int64)
    if len(launched):
        lts = ops["launch_ts"].to_numpy(dtype=np.float64)[launched]
        op_end = ops["end"].to_numpy(dtype=np.float64)[launched]
        cummax_end = np.maximum.accumulate(op_end)
        cs = h["ts"].to_numpy(dtype=np.float64)
        j = np.searchsorted(lts, cs, side="right") - 1
        drain = np.where(j >= 0, cummax_end[np.clip(j, 0, None)], np.nan)
        # a blocking launch waits for its own copy too
        op_corr = ops["correlation"].to_numpy(dtype=np.float64)[launched]
        known = ~np.isnan(op_corr)
        own = _by_correlation(op_corr[known], op_end[known], corr)
        drain = np.where(blocking, np.fmax(drain, own), drain)
        waited = (is_sync | blocking) & (drain > cs + 1.0)
        h["drain_ts"] = np.where(waited, drain, np.nan)

    ts = h["ts"].to_numpy(dtype=np.float64)
    h["step"] = window.step_index(ts)
    h["seg"] = segments.step_index(ts)
    h["in_data"] = data.covered(ts - 1e-3, ts) > 0 if data.count else False
    h["in_optimizer"] = optimizer.covered(ts - 1e-3, ts) > 0 if optimizer.count else False
    h["in_read"] = reads.covered(ts - 1e-3, ts) > 0 if reads.count else False
    if not sorted_by_start_end(ts, h["end"].to_numpy(dtype=np.float64)):
        h = h.sort_values(["ts", "end"], kind="stable")
    result: pd.DataFrame = h.reset_index(drop=True)[list(HOST_COLUMNS)]
    return result


def _by_correlation(ids: Any, values: Any, corr: Any) -> Any:
    """`values` (float) looked up at each correlation id of `corr` (float64, NaN: none), NaN where
    `ids` has no such id; an id given twice takes its last value (as a dict built in that order)."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    out = np.full(len(corr), np.nan)
    known = ~np.isnan(corr)
    if len(ids) == 0 or not known.any():
        return out
    keys = pd.Index(np.asarray(ids, dtype=np.float64).astype(np.int64))
    vals = np.asarray(values, dtype=np.float64)
    last = ~keys.duplicated(keep="last")
    pos = keys[last].get_indexer(corr[known].astype(np.int64))
    out[known] = np.where(pos >= 0, vals[last][np.clip(pos, 0, None)], np.nan)
    return out
