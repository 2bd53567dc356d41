"""Building the step model from a trace (and a run's captured information).

What is built here, once per analysis (docs/model.md explains each piece):

* `ops`: every GPU activity (kernel, copy, memset) that runs in or is launched in the analyzed window,
  joined with the host call that launched it, the cpu op behind it, and its classification (family,
  origin, matmul math, optimizer kernel, scalar-read copy);
* `host`: the host calls of the threads that launch GPU work, in time order, each classified as a
  launch, a wait on the device (sync: scalar read, data-dependent op, blocking copy, explicit
  synchronize, allocator), an allocation, or other host work, with what a wait waited for;
* the host spans that label host time: DataLoader `__next__` (waiting for data), `Optimizer.step`;
* `busy`: the union of GPU work intervals (a scalar read's few-byte copy is not work);
* `idle`: every GPU idle interval inside the analyzed steps, each assigned to exactly one cause.

Everything is vectorized; only gaps that overlap a wait on the device are visited one by one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuadvisor.namepattern import NamePattern, by_signature
from gpuadvisor.stepmodel.window import StepWindow
from gpuadvisor.trace.model import _join_launch, name_mask

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.runinfo import RunInfo
    from gpuadvisor.trace.model import TraceModel

# ---- vocabularies -----------------------------------------------------------------------------------

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

# Causes of GPU idle time (idle `cause`), in the order they are assigned
IDLE_DATA = "data_loading"  # the host was waiting for the DataLoader
IDLE_SYNC = "host_sync"  # the host was blocked on the device when the queue drained, or in a read loop
IDLE_LAUNCH = (
    "launch_overhead"  # the next work was not yet issued: the host was busy (Python, dispatch, launches)
)
IDLE_DEPENDENCY = "dependency"  # the next work was queued but waited (another stream, an event)
IDLE_OTHER = "other"  # nothing follows in the window, or the launch is unknown
IDLE_CAUSES: tuple[str, ...] = (IDLE_DATA, IDLE_SYNC, IDLE_LAUNCH, IDLE_DEPENDENCY, IDLE_OTHER)

# Kernel origin: who decides the kernel's launch configuration (and so which lever the user has)
ORIGIN_LIBRARY = "library"  # cuBLAS/cuDNN/CUTLASS/flash attention: batch, shapes, dtype, layout
ORIGIN_ATEN = "aten"  # PyTorch's own kernels: grid follows the tensor size (batch)
ORIGIN_INDUCTOR = "inductor"  # torch.compile generated Triton kernels
ORIGIN_CUSTOM = "custom"  # user Triton kernels, custom CUDA extensions: the user sets the grid
ORIGIN_OPTIMIZER = "optimizer"  # multi-tensor / fused optimizer kernels
ORIGIN_COLLECTIVE = "collective"  # NCCL/RCCL

OP_COLUMNS: tuple[str, ...] = (
    "kind",  # kernel / copy / memset
    "name",
    "ts",
    "dur",
    "end",
    "stream",
    "correlation",
    "external_id",
    "launch_ts",  # host call that launched it (NaN when unknown)
    "launch_end",
    "launch_tid",
    "step",  # analyzed step index of its launch (else of its start), -1 outside the window
    "seg",  # index of that step among all segmented steps (the first, outlier step included), -1 outside
    "busy",  # counts as GPU work (a scalar read's <= 64-byte copy does not)
    "work",  # WORK_COMPUTE / WORK_COLLECTIVE / WORK_COPY: what kind of GPU time it is (work_time_by_class)
    "family",  # gpuadvisor.trace.kernels family for kernels; "copy"/"memset" otherwise
    "origin",  # ORIGIN_* for kernels, "" for copies/memsets
    "is_collective",
    "in_optimizer",  # launched inside an Optimizer.step span
    "bytes",  # copies and memsets
    "direction",  # HtoD / DtoH / DtoD / ... for copies
    "src_kind",  # Pageable / Pinned / Device ... for copies
    "dst_kind",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "blocks",
    "blocks_per_sm",
    "occupancy_pct",
    "registers_per_thread",
    "shared_memory",
    "threads_per_block",
    "op_name",  # the cpu op that launched it
    "op_input_types",
    "op_input_dims",
    "op_flops",  # FLOPs of the launching op, shared among its kernels by duration
)

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

IDLE_COLUMNS: tuple[str, ...] = ("step", "seg", "start", "end", "dur", "cause", "sync_kind")

TINY_COPY_BYTES = 64  # a device-to-host copy this small is a scalar read, not GPU work
READ_LOOP_GAP_US = 100.0  # short scalar reads closer than this form one read loop
READ_LOOP_MAX_READ_US = 50.0  # a read longer than this waited for GPU work: not part of a loop

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

SCALAR_OPS = ("aten::_local_scalar_dense", "aten::item")
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
_DATALOADER_RE = re.compile(r"DataLoader.*__next__")
_OPTIMIZER_SPAN_RE = re.compile(r"^Optimizer\.step#[^.]+\.step$")

_LIBRARY_RE = NamePattern(
    r"nvjet|cutlass|cublas|cudnn|xmma|sm\d+_|gemm|gemv|fmha|flash|implicit_convolve|winograd|"
    r"cutensor|cufft|fft|miopen|rocblas|hipblas|ck::|kernel_func")
_INDUCTOR_RE = NamePattern(
    r"^triton_(?:poi|red|per|tem|for|mm|bmm|addmm|fused|helper)_|^triton_\w*fused")
_ATEN_RE = NamePattern(
    r"at::native|at::cuda|\bc10::|^void at::|elementwise_kernel|reduce_kernel|index_elementwise")
_OPTIMIZER_KERNEL_RE = NamePattern(r"multi_tensor_apply|fused_?adam|FusedOptimizer|_fused_sgd|fused_sgd")


@by_signature(names=1)
def kernel_origin(name: str, family: str) -> str:
    """Who sets this kernel's launch configuration: see the ORIGIN_* constants. The name is read through
    NamePatterns only: the answer is kept per signature (gpuadvisor/namepattern.py)."""
    if family == "collective":
        return ORIGIN_COLLECTIVE
    if _OPTIMIZER_KERNEL_RE.matches(name):
        return ORIGIN_OPTIMIZER
    if _INDUCTOR_RE.matches(name):
        return ORIGIN_INDUCTOR
    if _ATEN_RE.matches(name):
        return ORIGIN_ATEN
    if _LIBRARY_RE.matches(name) or family in ("gemm", "conv", "attention"):
        return ORIGIN_LIBRARY
    return ORIGIN_CUSTOM


def _kernel_origins(names: pd.Series, families: pd.Series) -> Any:
    """`kernel_origin` of each kernel row (categorical name and family columns), told once per distinct
    (name, family) pair."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    if isinstance(names.dtype, pd.CategoricalDtype) and isinstance(families.dtype, pd.CategoricalDtype):
        ncode = names.cat.codes.to_numpy(dtype=np.int64)
        fcode = families.cat.codes.to_numpy(dtype=np.int64)
        if len(ncode) and ncode.min() >= 0 and fcode.min() >= 0:
            pairs, row_pair = np.unique(ncode * len(families.cat.categories) + fcode, return_inverse=True)
            ncats = names.cat.categories.astype(str).tolist()  # lists: a pandas Index costs ~1 us a look-up
            fcats = families.cat.categories.astype(str).tolist()
            width = len(families.cat.categories)
            told = np.array(
                [kernel_origin(ncats[p // width], fcats[p % width]) for p in pairs.tolist()], dtype=object
            )
            return told[row_pair]
    n, f = names.astype(str).tolist(), families.astype(str).tolist()
    origin_of = {pair: kernel_origin(*pair) for pair in set(zip(n, f, strict=True))}
    return [origin_of[pair] for pair in zip(n, f, strict=True)]


# ---- interval algebra (one implementation for the whole analysis) ----------------------------------


def union_intervals(starts: Any, ends: Any) -> tuple[Any, Any]:
    """Merge intervals: sort by start, running max of ends, cut where a start exceeds it.
    Returns (merged_starts, merged_ends) as float64 numpy arrays, sorted and disjoint (NaN dropped)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    keep = ~(np.isnan(s) | np.isnan(e))
    s, e = s[keep], e[keep]
    if len(s) == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum(e[order], s[order])
    run_max = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_max[:-1]
    idx = np.flatnonzero(new)
    last = np.r_[idx[1:] - 1, len(s) - 1]
    return s[idx], run_max[last]


def covered(ms: Any, me: Any, a: Any, b: Any) -> Any:
    """Length of [a, b) covered by the disjoint sorted intervals (ms, me); vectorized over a, b."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if len(ms) == 0:
        return np.zeros(np.broadcast(a, b).shape)
    cum = np.r_[0.0, np.cumsum(me - ms)]

    def f(t: Any) -> Any:
        i = np.searchsorted(ms, t, side="right") - 1
        ic = np.clip(i, 0, len(ms) - 1)
        part = np.clip(np.minimum(t, me[ic]) - ms[ic], 0.0, None)
        return np.where(i < 0, 0.0, cum[ic] + part)

    return np.clip(f(b) - f(a), 0.0, None)


def within(starts: Any, ends: Any, t: Any) -> Any:
    """Per time in `t`: it falls inside one of the intervals [starts, ends) (any order, overlapping or
    nested: their union)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    ms, me = union_intervals(starts, ends)
    t = np.asarray(t, dtype=np.float64)
    return covered(ms, me, t, t + 1e-3) > 0


def complement_in(ms: Any, me: Any, starts: Any, ends: Any) -> tuple[Any, Any, Any]:
    """The parts of each [starts[i], ends[i]) NOT covered by the disjoint sorted intervals (ms, me).
    Returns (gap_starts, gap_ends, interval_index), sorted."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    gs_all = np.r_[-np.inf, me]
    ge_all = np.r_[ms, np.inf]
    out_s: list[Any] = []
    out_e: list[Any] = []
    out_i: list[Any] = []
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        lo = np.searchsorted(ge_all, s, side="right")
        hi = np.searchsorted(gs_all, e, side="left")
        gs = np.clip(gs_all[lo:hi], s, e)
        ge = np.clip(ge_all[lo:hi], s, e)
        keep = ge > gs
        out_s.append(gs[keep])
        out_e.append(ge[keep])
        out_i.append(np.full(int(keep.sum()), i, dtype=np.int64))
    if not out_s:
        z = np.zeros(0)
        return z, z.copy(), np.zeros(0, dtype=np.int64)
    return np.concatenate(out_s), np.concatenate(out_e), np.concatenate(out_i)


# ---- the model's pieces ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Spans:
    """Host spans of one kind (disjoint after union), e.g. DataLoader waits."""

    starts: Any
    ends: Any
    names: tuple[str, ...] = ()  # the distinct annotation names seen

    @property
    def count(self) -> int:
        return len(self.starts)

    def covered(self, a: Any, b: Any) -> Any:
        return covered(self.starts, self.ends, a, b)


@dataclass(frozen=True)
class Facts:
    """Numbers about the machine and the run that the replay needs, read off the trace."""

    launch_lag_us: float  # host launch call start -> GPU start on an idle stream (5th percentile)
    launch_call_us: float  # median duration of a kernel launch call
    queue_depth: int  # launches the host may be ahead of the GPU before a launch call blocks
    queue_depth_observed: bool  # inferred from launch calls held up by a full queue
    pageable_htod_gbps: float | None
    pinned_htod_gbps: float | None
    num_sms: int | None
    main_tid: int | None


def _empty_frame(columns: tuple[str, ...]) -> pd.DataFrame:
    # lazy: pandas stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import pandas as pd

    frame: pd.DataFrame = pd.DataFrame({c: pd.Series([], dtype=object) for c in columns})
    return frame


def build_ops(trace: TraceModel, segments: StepWindow, window: StepWindow, optimizer: Spans) -> pd.DataFrame:
    """The GPU activities of the segmented steps (see OP_COLUMNS), sorted by start time."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    lo, hi = segments.lo, segments.hi
    parts: list[pd.DataFrame] = []
    nan = float("nan")
    if len(trace.kernels):
        k = trace.kernel_ops()
        kl = trace.kernel_launches()
        families = k["family"].astype(str)
        names = k["name"].astype(str)
        parts.append(
            pd.DataFrame(
                {
                    "kind": "kernel",
                    "name": names.to_numpy(dtype=object),
                    "ts": k["ts"].to_numpy(dtype=np.float64),
                    "dur": k["dur"].to_numpy(dtype=np.float64),
                    "end": k["end"].to_numpy(dtype=np.float64),
                    "stream": k["stream"].astype("float64").to_numpy(),
                    "correlation": k["correlation"].astype("float64").to_numpy(),
                    "external_id": k["external_id"].astype("float64").to_numpy(),
                    "launch_ts": kl["launch_ts"].to_numpy(dtype=np.float64),
                    "launch_dur": kl["launch_dur"].to_numpy(dtype=np.float64),
                    "launch_tid": kl["launch_tid"].astype("float64").to_numpy(),
                    "family": families.to_numpy(dtype=object),
                    "origin": _kernel_origins(k["name"], k["family"]),
                    "is_collective": k["is_collective"].to_numpy(dtype=bool),
                    "bytes": nan,
                    "direction": "",
                    "src_kind": "",
                    "dst_kind": "",
                    **{
                        c: k[c].to_numpy(dtype=np.float64)
                        for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
                    },
                    "blocks": k["blocks"].to_numpy(dtype=np.float64),
                    "blocks_per_sm": k["blocks_per_sm"].to_numpy(dtype=np.float64),
                    "occupancy_pct": k["occupancy_pct"].to_numpy(dtype=np.float64),
                    "registers_per_thread": k["registers_per_thread"].to_numpy(dtype=np.float64),
                    "shared_memory": k["shared_memory"].to_numpy(dtype=np.float64),
                    "threads_per_block": k["threads_per_block"].to_numpy(dtype=np.float64),
                    "op_name": k["op_name"].to_numpy(dtype=object),
                    "op_input_types": k["op_input_types"].to_numpy(dtype=object),
                    "op_input_dims": k["op_input_dims"].to_numpy(dtype=object),
                    "op_flops": k["op_flops"].to_numpy(dtype=np.float64),
                }
            )
        )
    for kind, table, launched in (
        ("copy", trace.copies, trace.copy_launches() if len(trace.copies) else None),
        ("memset", trace.memsets, None),
    ):
        if len(table) == 0:
            continue
        if launched is None:
            launched = _join_launch(table, trace.runtime)
        is_copy = kind == "copy"
        parts.append(
            pd.DataFrame(
                {
                    "kind": kind,
                    "name": table["name"].astype(str).to_numpy(dtype=object),
                    "ts": table["ts"].to_numpy(dtype=np.float64),
                    "dur": table["dur"].to_numpy(dtype=np.float64),
                    "end": table["end"].to_numpy(dtype=np.float64),
                    "stream": table["stream"].astype("float64").to_numpy(),
                    "correlation": table["correlation"].astype("float64").to_numpy(),
                    "external_id": (
                        table["external_id"].astype("float64").to_numpy()
                        if is_copy
                        else np.full(len(table), nan)
                    ),
                    "launch_ts": launched["launch_ts"].to_numpy(dtype=np.float64),
                    "launch_dur": launched["launch_dur"].to_numpy(dtype=np.float64),
                    "launch_tid": launched["launch_tid"].astype("float64").to_numpy(),
                    "family": kind,
                    "origin": "",
                    "is_collective": False,
                    "bytes": table["bytes"].to_numpy(dtype=np.float64),
                    "direction": table["direction"].astype(str).to_numpy(dtype=object) if is_copy else "",
                    "src_kind": table["src_kind"].astype(str).to_numpy(dtype=object) if is_copy else "",
                    "dst_kind": table["dst_kind"].astype(str).to_numpy(dtype=object) if is_copy else "",
                    **{c: nan for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")},
                    "blocks": nan,
                    "blocks_per_sm": nan,
                    "occupancy_pct": nan,
                    "registers_per_thread": nan,
                    "shared_memory": nan,
                    "threads_per_block": nan,
                    "op_name": None,
                    "op_input_types": None,
                    "op_input_dims": None,
                    "op_flops": nan,
                }
            )
        )
    if not parts or segments.count == 0:
        out = _empty_frame((*OP_COLUMNS, "launch_dur"))
        return out
    ops = pd.concat(parts, ignore_index=True)
    # In a step: launched inside it, or (launch unknown) started inside it. Work launched in a step
    # that drains after its end is kept: it is that step's work.
    anchor = np.where(
        np.isnan(ops["launch_ts"].to_numpy()), ops["ts"].to_numpy(), ops["launch_ts"].to_numpy()
    )
    seg = segments.step_index(anchor)
    running = (ops["ts"].to_numpy() < hi) & (ops["end"].to_numpy() > lo)
    keep = (seg >= 0) | running
    if not keep.all():  # (copy-on-write: the columns added below leave the parts as they are)
        ops = ops[keep]
    ops["seg"] = seg[keep]
    ops["step"] = window.step_index(anchor[keep])
    d = ops["direction"].astype(str)
    ops["busy"] = ~((ops["kind"] == "copy") & d.eq("DtoH") & (ops["bytes"].fillna(np.inf) <= TINY_COPY_BYTES))
    ops["work"] = work_classes(ops)
    lts = ops["launch_ts"].to_numpy(dtype=np.float64)
    ops["in_optimizer"] = optimizer.covered(lts - 1e-3, lts) > 0 if optimizer.count else False
    ops["launch_end"] = lts + ops["launch_dur"].to_numpy(dtype=np.float64)
    if not _sorted_by_start_end(ops["ts"].to_numpy(dtype=np.float64), ops["end"].to_numpy(dtype=np.float64)):
        ops = ops.sort_values(["ts", "end"], kind="stable")
    result: pd.DataFrame = ops.reset_index(drop=True)[list(OP_COLUMNS)]
    return result


def _sorted_by_start_end(ts: Any, end: Any) -> bool:
    """Rows already in (ts, end) order (no NaN): a stable sort by the two would keep them as they are."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if np.isnan(ts).any() or np.isnan(end).any():
        return False
    same = ts[1:] == ts[:-1]
    return bool(np.all(ts[1:] >= ts[:-1]) and np.all(end[1:][same] >= end[:-1][same]))


def host_spans(trace: TraceModel, pattern: re.Pattern[str]) -> Spans:
    """CPU-side annotation spans whose name matches `pattern` (union of them)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    ann = trace.annotations
    if len(ann) == 0:
        z = np.zeros(0)
        return Spans(z, z.copy())
    names = ann["name"].astype(str)
    mask = names.str.contains(pattern.pattern, regex=True).to_numpy(dtype=bool) & ~ann["on_gpu"].to_numpy(
        dtype=bool
    )
    s, e = union_intervals(ann["ts"].to_numpy()[mask], ann["end"].to_numpy()[mask])
    return Spans(s, e, tuple(sorted(set(names[mask].tolist()))))


def scalar_read_spans(trace: TraceModel) -> Spans:
    """Spans of the cpu ops that read a device value to the host (`aten::item`,
    `aten::_local_scalar_dense`) and hold a CUDA copy or synchronize: a `.item()` of a CPU tensor
    (AdamW's step counter) is not a read of the device."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    ops = trace.cpu_ops
    rt = trace.runtime
    if len(ops) == 0 or len(rt) == 0:
        z = np.zeros(0)
        return Spans(z, z.copy())
    names = ops["name"].astype(str)
    sel = names.isin(SCALAR_OPS).to_numpy(dtype=bool)
    if not sel.any():
        z = np.zeros(0)
        return Spans(z, z.copy())
    rn = rt["name"].astype(str)
    io = (rn.str.contains("Memcpy", regex=False) | rn.str.contains("Synchronize", regex=False)).to_numpy(
        dtype=bool
    )
    cs, ce = union_intervals(rt["ts"].to_numpy()[io], rt["end"].to_numpy()[io])
    s_, e_ = ops["ts"].to_numpy(dtype=np.float64)[sel], ops["end"].to_numpy(dtype=np.float64)[sel]
    holds = covered(cs, ce, s_, e_) > 0
    s2, e2 = union_intervals(s_[holds], e_[holds])
    # A read loop (`for i in range(n): x[i].item()`): short reads (the GPU had nothing left to do)
    # closer together than READ_LOOP_GAP_US are one span, Python between them included: vectorizing
    # the loop removes all of it. A read that waited for GPU work is not part of a loop.
    if len(s2) > 1:
        short = (e2 - s2) < READ_LOOP_MAX_READ_US
        close = ((s2[1:] - e2[:-1]) < READ_LOOP_GAP_US) & short[1:] & short[:-1]
        keep_start = np.r_[True, ~close]
        keep_end = np.r_[~close, True]
        s2, e2 = s2[keep_start], e2[keep_end]
    return Spans(s2, e2, tuple(SCALAR_OPS))


def optimizer_spans(trace: TraceModel) -> Spans:
    return host_spans(trace, _OPTIMIZER_SPAN_RE)


def optimizer_own_spans(optimizer: Spans, model: Spans | None) -> Spans:
    """The optimizer spans without the closure an optimizer ran before its update.

    `optimizer.step(closure)` runs the closure (forward and backward) inside the step's span before it
    updates the parameters: PyTorch Lightning always steps this way (its `training_step`, hooks and
    backward run in the closure), as do LBFGS-style loops. That work is the model's, not the
    optimizer's: a fused optimizer does not remove it. An optimizer span that holds model spans
    (`model_spans`) starts after the last of them; the others are kept whole."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if not optimizer.count or model is None or not model.count:
        return optimizer
    last = np.searchsorted(model.ends, optimizer.ends, side="right") - 1
    ok = last >= 0
    idx = np.clip(last, 0, None)
    inside = ok & (model.starts[idx] >= optimizer.starts) & (model.ends[idx] <= optimizer.ends)
    if not inside.any():
        return optimizer
    starts = np.where(inside, model.ends[idx], optimizer.starts)
    return Spans(starts, optimizer.ends.copy(), optimizer.names)


def dataloader_spans(trace: TraceModel) -> Spans:
    return host_spans(trace, _DATALOADER_RE)


# the longest hand-off of one batch from a worker process taken from a raw trace (profiled: the main
# process receives each tensor's shared memory from the worker, ~0.3 ms a tensor); a shorter wait in
# the window is taken as the hand-off, and what every batch waits beyond it as waiting for the workers
HANDOFF_CAP_US = 2000.0
# timed worker-loader batches the capture must have seen to use its own measurement
MIN_TIMED_BATCHES = 3


def main_loader(environment: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The DataLoader that produced most batches (environment.json `dataloaders`), or None."""
    loaders = [d for d in environment.get("dataloaders") or [] if isinstance(d, Mapping)]
    return max(loaders, key=lambda d: int(d.get("iterations") or 0)) if loaders else None


def data_handoff_fraction(data: Spans, window: StepWindow, environment: Mapping[str, Any]) -> float | None:
    """The share of the DataLoader wait that is the hand-off of ready batches (StepModel.data_handoff_fraction).

    With the capture's measurement (environment `dataloaders`: `__next__` calls that found the batch
    already delivered by a worker, and their time; those made outside the profiler when there are at
    least MIN_TIMED_BATCHES of them, else all): the ready batches' mean `__next__` time is the
    hand-off of every batch; its share of all the `__next__` time. From a raw trace whose iterator
    runs workers (`_MultiProcessingDataLoaderIter`): the shortest wait in the window (at most
    HANDOFF_CAP_US) is the hand-off, the rest of every wait is waiting for the workers. A
    single-process loader: 0."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    main = main_loader(environment)
    if main is not None:
        if not main.get("num_workers"):
            return 0.0
        # Prefer the calls made outside the profiler (the real run's pace): inside the window the main
        # loop is slower and the workers are ahead more often.
        for sfx in ("_unprofiled", ""):
            ready, waited = int(main.get(f"batches_ready{sfx}") or 0), int(main.get(f"batches_waited{sfx}") or 0)
            if ready + waited >= MIN_TIMED_BATCHES:
                break
        t_ready = float(main.get(f"next_ready{sfx}_s") or 0.0)
        t_waited = float(main.get(f"next_waited{sfx}_s") or 0.0)
        if ready + waited >= MIN_TIMED_BATCHES and t_ready + t_waited > 0:
            per_batch = t_ready / ready if ready else 0.0
            return float(min(1.0, per_batch * (ready + waited) / (t_ready + t_waited)))
    if data.count == 0 or not any("_MultiProcessingDataLoaderIter" in n for n in data.names):
        return 0.0
    inside = window.step_index(data.starts) >= 0 if window.count else np.zeros(data.count, dtype=bool)
    dur = (data.ends - data.starts)[inside]
    if len(dur) == 0 or float(dur.sum()) <= 0:
        return 0.0
    handoff = min(float(dur.min()), HANDOFF_CAP_US)
    return float(min(1.0, handoff * len(dur) / float(dur.sum())))


_BACKWARD_ENGINE_PREFIX = "autograd::engine::evaluate_function"


def model_spans(trace: TraceModel, segments: StepWindow) -> Spans:
    """Where the host runs the model's forward and backward: what torch.compile would compile.

    Backward: in each step, from the first to the last of the autograd engine's `evaluate_function`
    spans. Forward: in each step, from the first to the last host op that created an autograd node (its "Sequence number" is that of a backward
    function recorded in the trace), with the Python between those ops (module calls, hooks). Host
    work outside them (building the batch, logging, reading values, the optimizer) is not the model's:
    compiling the model does not remove it. Empty when the trace has no backward (inference, or a
    trace without autograd sequence numbers): callers then cannot tell the model's host work apart."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    ops = trace.cpu_ops
    z = np.zeros(0)
    if len(ops) == 0 or "seq_num" not in ops.columns:
        return Spans(z, z.copy())
    engine = name_mask(ops["name"], lambda s: s.str.startswith(_BACKWARD_ENGINE_PREFIX))
    if not engine.any():
        return Spans(z, z.copy())
    seq = ops["seq_num"]
    has_seq = seq.notna().to_numpy(dtype=bool)
    # backward functions: named like the node ("AddmmBackward0"), with the forward op's sequence number
    backward_fn = has_seq & ~engine & name_mask(ops["name"], lambda s: s.str.contains("Backward", regex=False))
    bwd_seqs = set(seq[backward_fn].astype("int64").tolist())
    if not bwd_seqs:
        return Spans(z, z.copy())
    engine_tids = set(ops["tid"][engine].dropna().astype("int64").tolist())
    tid = ops["tid"].astype("float64").to_numpy()
    fwd = has_seq & ~backward_fn & ~engine & ~np.isin(tid, list(engine_tids))
    fwd &= seq.fillna(-1).astype("int64").isin(bwd_seqs).to_numpy(dtype=bool)
    starts: list[Any] = []
    ends: list[Any] = []

    def per_step(ts: Any, en: Any) -> None:
        """From the first start to the last end in each step (the Python between ops included)."""
        step = segments.step_index(ts)
        ok = step >= 0
        if ok.any():
            frame = pd.DataFrame({"step": step[ok], "ts": ts[ok], "end": en[ok]}).groupby("step")
            starts.append(frame["ts"].min().to_numpy(dtype=np.float64))
            ends.append(frame["end"].max().to_numpy(dtype=np.float64))

    if segments.count:
        # the backward: the engine's functions and its bookkeeping between them
        per_step(ops["ts"].to_numpy(dtype=np.float64)[engine], ops["end"].to_numpy(dtype=np.float64)[engine])
    if fwd.any() and segments.count:
        # An op records the sequence number autograd will give the next node, so every op since the
        # previous node carries it (a `.item()` or a batch copy before the model too): the op that
        # created the node is the last one with that number.
        cand = pd.DataFrame(
            {
                "seq": seq[fwd].astype("int64").to_numpy(),
                "ts": ops["ts"].to_numpy(dtype=np.float64)[fwd],
                "end": ops["end"].to_numpy(dtype=np.float64)[fwd],
            }
        )
        last = cand.loc[cand.groupby("seq")["ts"].idxmax()]
        per_step(last["ts"].to_numpy(dtype=np.float64), last["end"].to_numpy(dtype=np.float64))
    if not starts:
        return Spans(z, z.copy())
    s, e = union_intervals(np.concatenate(starts), np.concatenate(ends))
    return Spans(s, e, ("forward", "backward"))


def _launch_tids(ops: pd.DataFrame) -> list[int]:
    tids = ops["launch_tid"].dropna()
    return sorted({int(t) for t in tids.tolist()})


# GPU operations launched and not finished when a long launch call returns, at least, for the call to
# count as held up by a full launch queue. The queue holds about a thousand launches (the recorded
# GPU-bound runs show 1016-1020 in flight behind their held calls); long calls with 1-5 in flight were
# pageable copies staging their bytes, which is host work.
BACKPRESSURE_MIN_IN_FLIGHT = 64


def _in_flight(ops: pd.DataFrame, at: Any) -> Any:
    """Number of GPU operations launched before and still running at each time of `at` (int64)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    k = ops[ops["launch_ts"].notna()] if len(ops) else ops
    if len(k) == 0:
        return np.zeros(len(at), dtype=np.int64)
    lts = np.sort(k["launch_ts"].to_numpy(dtype=np.float64))
    ends = np.sort(k["end"].to_numpy(dtype=np.float64))
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
        return _empty_frame(HOST_COLUMNS)
    h = rt[rt["tid"].isin(tids) & segments.mask(rt["ts"])]
    if len(h) == 0:
        return _empty_frame(HOST_COLUMNS)
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
    kind = np.where(is_launch, LAUNCH, np.where(is_sync, SYNC, np.where(is_alloc, ALLOC, WORK)))
    h["kind"] = kind.astype(object)

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
    rt_ext = h[is_launch][["correlation", "external_id"]].dropna()
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
    busy_ops = ops[ops["launch_ts"].notna()].sort_values("launch_ts")
    if len(busy_ops) and (is_sync | blocking).any():
        lts = busy_ops["launch_ts"].to_numpy(dtype=np.float64)
        cummax_end = np.maximum.accumulate(busy_ops["end"].to_numpy(dtype=np.float64))
        cs = h["ts"].to_numpy(dtype=np.float64)
        j = np.searchsorted(lts, cs, side="right") - 1
        drain = np.where(j >= 0, cummax_end[np.clip(j, 0, None)], np.nan)
        # a blocking launch waits for its own copy too
        known = busy_ops["correlation"].notna().to_numpy(dtype=bool)
        own = _by_correlation(
            busy_ops["correlation"].to_numpy(dtype=np.float64)[known],
            busy_ops["end"].to_numpy(dtype=np.float64)[known],
            corr,
        )
        drain = np.where(blocking, np.fmax(drain, own), drain)
        waited = (is_sync | blocking) & (drain > cs + 1.0)
        h["drain_ts"] = np.where(waited, drain, np.nan)

    ts = h["ts"].to_numpy(dtype=np.float64)
    h["step"] = window.step_index(ts)
    h["seg"] = segments.step_index(ts)
    h["in_data"] = data.covered(ts - 1e-3, ts) > 0 if data.count else False
    h["in_optimizer"] = optimizer.covered(ts - 1e-3, ts) > 0 if optimizer.count else False
    h["in_read"] = reads.covered(ts - 1e-3, ts) > 0 if reads.count else False
    if not _sorted_by_start_end(ts, h["end"].to_numpy(dtype=np.float64)):
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


# What GPU time is: compute (kernels that are not collectives, and memsets), collectives (NCCL/RCCL
# kernels: on a rank that waits for another, mostly waiting) and copies. "GPU busy" is compute only: a
# rank whose NCCL kernel spins for 98% of the step waiting for a straggler, or a step that is 83% copies,
# is not a busy GPU.
WORK_COMPUTE = "compute"
WORK_COLLECTIVE = "collective"
WORK_COPY = "copy"
WORK_CLASSES: tuple[str, ...] = (WORK_COMPUTE, WORK_COLLECTIVE, WORK_COPY)  # precedence, highest first


def work_classes(ops: pd.DataFrame) -> Any:
    """The `work` column of the ops table: WORK_COPY for copies, WORK_COLLECTIVE for collective
    kernels, WORK_COMPUTE for every other kernel and memset."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    kind = ops["kind"].astype(str).to_numpy()
    coll = ops["is_collective"].fillna(False).astype(bool).to_numpy() if "is_collective" in ops else False
    return np.where(kind == "copy", WORK_COPY, np.where((kind == "kernel") & coll, WORK_COLLECTIVE, WORK_COMPUTE))


def work_time_by_class(ops: pd.DataFrame, starts: Any, ends: Any) -> dict[str, Any]:
    """GPU work time of each interval [starts[i], ends[i]) by class, exclusive (they add up to the
    busy_intervals union): WORK_COMPUTE is the time any compute kernel or memset runs; WORK_COLLECTIVE
    the time a collective runs with no compute beside it (communication not hidden, a rank's wait for
    the others); WORK_COPY the time a copy runs with neither beside it (copies on the critical path).
    Only GPU work (`busy`) counts."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    sel = ops[ops["busy"].astype(bool)] if len(ops) else ops
    work = sel["work"].astype(str).to_numpy() if len(sel) else np.zeros(0, dtype=object)
    ts = sel["ts"].to_numpy(dtype="float64") if len(sel) else np.zeros(0)
    te = sel["end"].to_numpy(dtype="float64") if len(sel) else np.zeros(0)
    out: dict[str, Any] = {}
    below = np.zeros(len(starts))
    mask = np.zeros(len(sel), dtype=bool)
    for cls in WORK_CLASSES:
        mask = mask | (work == cls)
        us, ue = union_intervals(ts[mask], te[mask])
        upto = covered(us, ue, starts, ends)
        out[cls] = np.clip(upto - below, 0.0, None)
        below = upto
    return out


def busy_intervals(ops: pd.DataFrame) -> tuple[Any, Any]:
    """Union of the GPU work intervals (kernels, copies, memsets on every stream)."""
    sel = ops[ops["busy"].astype(bool)] if len(ops) else ops
    return union_intervals(sel["ts"].to_numpy(dtype="float64"), sel["end"].to_numpy(dtype="float64"))


def attribute_idle(
    segments: StepWindow,
    window: StepWindow,
    ops: pd.DataFrame,
    host: pd.DataFrame,
    busy: tuple[Any, Any],
    data: Spans,
) -> pd.DataFrame:
    """Every GPU idle interval inside the segmented steps, each with exactly one cause (IDLE_COLUMNS;
    `step` is the analyzed step index, -1 for the outlier first step).

    Within an idle gap [g0, g1):
      1. the part during which the host was inside DataLoader `__next__` -> data_loading;
      2. the rest, when the host was blocked on the device at g0 (the queue drained because the host
         waited, and the GPU stays idle until the host refills it) -> host_sync, with the wait's kind;
      3. otherwise, waits on the device inside the gap: from the first wait's start to the last wait's
         end (a read loop `for i: x[i].item()` keeps the GPU idle from its first read to its last)
         -> host_sync, with the kind of most of them;
      4. the remainder: if the work that ends the gap was launched after g0, the host was busy
         issuing it -> launch_overhead; if it was already queued -> dependency; if no work follows
         in the window, or its launch is unknown -> other.
    Pieces of one gap are laid out in that order from g0 (their lengths are exact; their placement
    inside the gap is a presentation choice).
    """
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    if segments.count == 0:
        return _empty_frame(IDLE_COLUMNS)
    bs, be = busy
    gs, ge, gi = complement_in(bs, be, segments.starts, segments.ends)
    if len(gs) == 0:
        return _empty_frame(IDLE_COLUMNS)
    n = len(gs)
    data_us = data.covered(gs, ge) if data.count else np.zeros(n)
    sync_us = np.zeros(n)
    sync_kind = np.full(n, "", dtype=object)
    waits = host[(host["kind"] == SYNC) | host["blocking"].astype(bool)] if len(host) else host
    if len(waits):
        cs = waits["ts"].to_numpy(dtype=np.float64)
        ce = waits["end"].to_numpy(dtype=np.float64)
        ck = waits["sync_kind"].to_numpy(dtype=object)
        order = np.argsort(cs, kind="stable")
        cs, ce, ck = cs[order], ce[order], ck[order]
        longest = float((ce - cs).max())
        los = np.searchsorted(cs, gs - longest, side="left")
        his = np.searchsorted(cs, ge, side="left")
        for j in np.flatnonzero(his > los).tolist():
            g0, g1 = gs[j], ge[j]
            lo, hi = int(los[j]), int(his[j])
            cand = lo + np.flatnonzero(ce[lo:hi] > g0)
            if len(cand) == 0:
                continue
            rest = max(0.0, (g1 - g0) - data_us[j])
            first = int(cand[0])
            if cs[first] <= g0:
                sync_us[j] = rest
                sync_kind[j] = str(ck[first])
                continue
            span = min(rest, max(0.0, min(float(ce[cand].max()), g1) - cs[first]))
            kinds, counts = np.unique(ck[cand].astype(str), return_counts=True)
            sync_us[j] = span
            sync_kind[j] = str(kinds[int(np.argmax(counts))])
    remainder = np.clip((ge - gs) - data_us - sync_us, 0.0, None)
    # what ended the gap: the first GPU work starting at or after g1
    after = np.full(n, IDLE_OTHER, dtype=object)
    work = ops[ops["busy"].astype(bool)] if len(ops) else ops
    if len(work):
        wts = work["ts"].to_numpy(dtype=np.float64)
        wl = work["launch_ts"].to_numpy(dtype=np.float64)
        j = np.searchsorted(wts, ge - 1e-6, side="left")
        has = j < len(wts)
        # the work that ends the idle period (across a step boundary when the gap was cut there)
        lt = np.where(has, wl[np.clip(j, 0, len(wts) - 1)], np.nan)
        after[has & (lt >= gs - 1.0)] = IDLE_LAUNCH
        after[has & (lt < gs - 1.0)] = IDLE_DEPENDENCY
    rows_step: list[Any] = []
    rows_s: list[Any] = []
    rows_e: list[Any] = []
    rows_c: list[Any] = []
    rows_k: list[Any] = []
    cursor = gs.copy()
    for amount, cause, kinds in (
        (data_us, np.full(n, IDLE_DATA, dtype=object), np.full(n, "", dtype=object)),
        (sync_us, np.full(n, IDLE_SYNC, dtype=object), sync_kind),
        (remainder, after, np.full(n, "", dtype=object)),
    ):
        sel = amount > 0
        rows_step.append(gi[sel])
        rows_s.append(cursor[sel])
        rows_e.append(np.minimum(cursor[sel] + amount[sel], ge[sel]))
        rows_c.append(cause[sel])
        rows_k.append(kinds[sel])
        cursor = cursor + amount
    start = np.concatenate(rows_s)
    end = np.concatenate(rows_e)
    seg = np.concatenate(rows_step).astype(np.int64)
    out = pd.DataFrame(
        {
            "step": window.step_index(segments.starts[seg] + 1e-6) if len(seg) else seg,
            "seg": seg,
            "start": start,
            "end": end,
            "dur": end - start,
            "cause": np.concatenate(rows_c).astype(object),
            "sync_kind": np.concatenate(rows_k).astype(object),
        }
    )
    result: pd.DataFrame = (
        out[out["dur"] > 0].sort_values(["start", "end"], kind="stable").reset_index(drop=True)
    )
    return result


def estimate_facts(trace: TraceModel, ops: pd.DataFrame, host: pd.DataFrame, run: RunInfo | None) -> Facts:
    """Launch latency, launch cost, launch queue depth and copy bandwidths, from the trace."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    lag = 6.0
    call = 5.0
    depth = 1024
    depth_observed = False
    if len(ops):
        k = ops[ops["launch_ts"].notna()].sort_values("launch_ts")
        if len(k):
            # an op that started on an idle stream shows the pure launch latency
            start = k["ts"].to_numpy(dtype=np.float64)
            lts = k["launch_ts"].to_numpy(dtype=np.float64)
            prev_end = np.r_[-np.inf, np.maximum.accumulate(k["end"].to_numpy(dtype=np.float64))[:-1]]
            idle = prev_end < lts
            delays = (start - lts)[idle & (start >= lts)]
            if len(delays) >= 3:
                lag = float(np.clip(np.percentile(delays, 5), 0.5, 50.0))
    if len(host):
        launches = host[(host["kind"] == LAUNCH) & ~host["blocking"].astype(bool)]
        if len(launches):
            call = float(np.median(launches["dur"].to_numpy(dtype=np.float64)))
        held = launches[launches["backpressure"].astype(bool)]
        if len(held) >= 3:
            depth = int(np.median(held["in_flight"].to_numpy(dtype=np.int64)))
            depth_observed = True
    pageable = pinned = None
    copies = ops[(ops["kind"] == "copy") & ops["direction"].astype(str).eq("HtoD")] if len(ops) else ops
    if len(copies):
        big = copies[copies["bytes"].fillna(0) >= 1 << 20]
        for src in ("Pageable", "Pinned"):
            c = big[big["src_kind"].astype(str) == src]
            if len(c) and float(c["dur"].sum()) > 0:
                rate = float(c["bytes"].sum()) / float(c["dur"].sum()) / 1e3
                if src == "Pageable":
                    pageable = rate
                else:
                    pinned = rate
    sms = trace.meta.num_sms
    if sms is None and run is not None:
        g = run.gpu(0)
        v = g.get("sm_count") if g else None
        sms = int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None
    main_tid: int | None = None
    if len(host):
        counts = host[host["kind"] == LAUNCH]["tid"].value_counts()
        if len(counts):
            main_tid = int(counts.index[0])
    return Facts(
        launch_lag_us=lag,
        launch_call_us=call,
        queue_depth=depth,
        queue_depth_observed=depth_observed,
        pageable_htod_gbps=pageable,
        pinned_htod_gbps=pinned,
        num_sms=sms,
        main_tid=main_tid,
    )
