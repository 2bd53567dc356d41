"""Building the step model from a trace (and a run's captured information).

What is built here, once per analysis (docs/model.md explains each piece):

* `ops`: every GPU activity (kernel, copy, memset) that runs in or is launched in the analyzed window,
  joined with the host call that launched it, the cpu op behind it, and its classification (family,
  origin, matmul math, optimizer kernel, scalar-read copy);
* `host`: the host calls of the threads that launch GPU work (`gpuadvisor.stepmodel.hostcalls`);
* the host spans that label host time: DataLoader `__next__` (waiting for data), `Optimizer.step`
  (`gpuadvisor.stepmodel.spans`);
* `busy`: the union of GPU work intervals (a scalar read's few-byte copy is not work);
* `idle`: every GPU idle interval inside the analyzed steps, each assigned to exactly one cause.

Everything is vectorized; only gaps that overlap a wait on the device are visited one by one. The
interval algebra is `gpuadvisor.stepmodel.intervals`. This module also names, for its callers, what
those parts define (`sb.covered`, `sb.SCALAR_READ`...): imports run intervals -> spans -> hostcalls
-> build.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuadvisor.namepattern import NamePattern, by_signature
from gpuadvisor.stepmodel.hostcalls import (
    ALLOC,
    ALLOCATOR,
    BACKPRESSURE_MIN_IN_FLIGHT,
    BLOCKING_COPY,
    DATA_DEPENDENT,
    DATA_DEPENDENT_OPS,
    EXPLICIT,
    HOST_COLUMNS,
    LAUNCH,
    RNN_OPS,
    SCALAR_READ,
    SYNC,
    SYNC_KINDS,
    WORK,
    build_host,
)
from gpuadvisor.stepmodel.intervals import (
    complement_in,
    covered,
    empty_frame,
    launch_order,
    sorted_by_start_end,
    texts,
    union_intervals,
    within,
)
from gpuadvisor.stepmodel.spans import (
    HANDOFF_CAP_US,
    MIN_TIMED_BATCHES,
    READ_LOOP_GAP_US,
    READ_LOOP_MAX_READ_US,
    SCALAR_OPS,
    Spans,
    data_handoff_fraction,
    dataloader_spans,
    host_spans,
    main_loader,
    model_spans,
    optimizer_own_spans,
    optimizer_spans,
    scalar_read_spans,
)
from gpuadvisor.stepmodel.window import StepWindow
from gpuadvisor.trace.model import _join_launch

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.runinfo import RunInfo
    from gpuadvisor.trace.model import TraceModel

# what the step model's builders define, named here for its callers (`sb.covered`, `sb.SCALAR_READ`)
__all__ = [
    "ALLOC",
    "ALLOCATOR",
    "BACKPRESSURE_MIN_IN_FLIGHT",
    "BLOCKING_COPY",
    "DATA_DEPENDENT",
    "DATA_DEPENDENT_OPS",
    "EXPLICIT",
    "HANDOFF_CAP_US",
    "HOST_COLUMNS",
    "IDLE_CAUSES",
    "IDLE_COLUMNS",
    "IDLE_DATA",
    "IDLE_DEPENDENCY",
    "IDLE_LAUNCH",
    "IDLE_OTHER",
    "IDLE_SYNC",
    "KIND_CODES",
    "LAUNCH",
    "MIN_TIMED_BATCHES",
    "OP_COLUMNS",
    "ORIGIN_ATEN",
    "ORIGIN_COLLECTIVE",
    "ORIGIN_CUSTOM",
    "ORIGIN_INDUCTOR",
    "ORIGIN_LIBRARY",
    "ORIGIN_OPTIMIZER",
    "READ_LOOP_GAP_US",
    "READ_LOOP_MAX_READ_US",
    "RNN_OPS",
    "SCALAR_OPS",
    "SCALAR_READ",
    "SYNC",
    "SYNC_KINDS",
    "TINY_COPY_BYTES",
    "WORK",
    "WORK_CLASSES",
    "WORK_COLLECTIVE",
    "WORK_COMPUTE",
    "WORK_COPY",
    "Facts",
    "Spans",
    "attribute_idle",
    "build_host",
    "build_ops",
    "busy_intervals",
    "complement_in",
    "covered",
    "data_handoff_fraction",
    "dataloader_spans",
    "estimate_facts",
    "host_spans",
    "kernel_origin",
    "main_loader",
    "model_spans",
    "optimizer_own_spans",
    "optimizer_spans",
    "scalar_read_spans",
    "union_intervals",
    "within",
    "work_classes",
    "work_time_by_class",
]

# ---- vocabularies -----------------------------------------------------------------------------------

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

IDLE_COLUMNS: tuple[str, ...] = ("step", "seg", "start", "end", "dur", "cause", "sync_kind")

TINY_COPY_BYTES = 64  # a device-to-host copy this small is a scalar read, not GPU work
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
            # hashed, not sorted: each pair is told once whatever the order (1.67M kernels: 30 ms, not 0.2 s)
            row_pair, pairs = pd.factorize(ncode * len(families.cat.categories) + fcode)
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


# ---- the model's pieces ----------------------------------------------------------------------------


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


def build_ops(trace: TraceModel, segments: StepWindow, window: StepWindow, optimizer: Spans) -> pd.DataFrame:
    """The GPU activities of the segmented steps (see OP_COLUMNS), sorted by start time."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    lo, hi = segments.lo, segments.hi
    parts: list[pd.DataFrame] = []
    # per part, row by row: its kind (KIND_CODES) and whether it is a scalar read's tiny copy (not work)
    kind_parts: list[Any] = []
    tiny_parts: list[Any] = []
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
                },
                copy=False,  # one block per column: stacking the float columns copied 1.67M rows x 25 (0.7 s)
            )
        )
        kind_parts.append(np.full(len(k), KIND_CODES["kernel"], dtype=np.int8))
        tiny_parts.append(np.zeros(len(k), dtype=bool))
    for kind, table, launched in (
        ("copy", trace.copies, trace.copy_launches() if len(trace.copies) else None),
        ("memset", trace.memsets, None),
    ):
        if len(table) == 0:
            continue
        if launched is None:
            launched = _join_launch(table, trace.runtime)
        is_copy = kind == "copy"
        direction = table["direction"].astype(str).to_numpy(dtype=object) if is_copy else ""
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
                    "direction": direction,
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
                },
                copy=False,
            )
        )
        kind_parts.append(np.full(len(table), KIND_CODES[kind], dtype=np.int8))
        nbytes = table["bytes"].to_numpy(dtype=np.float64)
        tiny_parts.append(
            (np.asarray(direction == "DtoH", dtype=bool) & (np.where(np.isnan(nbytes), np.inf, nbytes) <= TINY_COPY_BYTES))
            if is_copy
            else np.zeros(len(table), dtype=bool)
        )
    if not parts or segments.count == 0:
        out = empty_frame((*OP_COLUMNS, "launch_dur"))
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
    kind_code, tiny = np.concatenate(kind_parts), np.concatenate(tiny_parts)
    if not keep.all():  # (copy-on-write: the columns added below leave the parts as they are)
        ops = ops[keep]
        kind_code, tiny = kind_code[keep], tiny[keep]
    ops["seg"] = seg[keep]
    ops["step"] = window.step_index(anchor[keep])
    ops["busy"] = ~tiny
    ops["work"] = work_classes(kind_code, ops["is_collective"].to_numpy(dtype=bool))
    lts = ops["launch_ts"].to_numpy(dtype=np.float64)
    ops["in_optimizer"] = optimizer.covered(lts - 1e-3, lts) > 0 if optimizer.count else False
    ops["launch_end"] = lts + ops["launch_dur"].to_numpy(dtype=np.float64)
    if not sorted_by_start_end(ops["ts"].to_numpy(dtype=np.float64), ops["end"].to_numpy(dtype=np.float64)):
        ops = ops.sort_values(["ts", "end"], kind="stable")
    result: pd.DataFrame = ops.reset_index(drop=True)[list(OP_COLUMNS)]
    return result


# What GPU time is: compute (kernels that are not collectives, and memsets), collectives (NCCL/RCCL
# kernels: on a rank that waits for another, mostly waiting) and copies. "GPU busy" is compute only: a
# rank whose NCCL kernel spins for 98% of the step waiting for a straggler, or a step that is 83% copies,
# is not a busy GPU.
WORK_COMPUTE = "compute"
WORK_COLLECTIVE = "collective"
WORK_COPY = "copy"
WORK_CLASSES: tuple[str, ...] = (WORK_COMPUTE, WORK_COLLECTIVE, WORK_COPY)  # precedence, highest first


# The `kind` column of the ops table as codes (build_ops keeps them beside the text it writes)
KIND_CODES: dict[str, int] = {"kernel": 0, "copy": 1, "memset": 2}


def work_classes(kind_code: Any, is_collective: Any) -> Any:
    """The `work` column of the ops table from its kinds (KIND_CODES) and collective flags: WORK_COPY
    for copies, WORK_COLLECTIVE for collective kernels, WORK_COMPUTE for every other kernel and memset."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    kernel = kind_code == KIND_CODES["kernel"]
    # the three texts taken by code: an object array of shared strings, not 1.67M fixed-width copies
    # (a table types either as text; with no row, only the fixed-width one does)
    which = np.where(kind_code == KIND_CODES["copy"], 2, np.where(kernel & is_collective, 1, 0))
    texts = [WORK_COMPUTE, WORK_COLLECTIVE, WORK_COPY]
    return np.asarray(texts, dtype=object if len(which) else None)[which]


def work_time_by_class(ops: pd.DataFrame, starts: Any, ends: Any) -> dict[str, Any]:
    """GPU work time of each interval [starts[i], ends[i]) by class, exclusive (they add up to the
    busy_intervals union): WORK_COMPUTE is the time any compute kernel or memset runs; WORK_COLLECTIVE
    the time a collective runs with no compute beside it (communication not hidden, a rank's wait for
    the others); WORK_COPY the time a copy runs with neither beside it (copies on the critical path).
    Only GPU work (`busy`) counts."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    busy = _busy_rows(ops)
    any_busy = bool(busy.any())
    work = ops["work"].astype(str).to_numpy()[busy] if any_busy else np.zeros(0, dtype=object)
    ts = ops["ts"].to_numpy(dtype="float64")[busy] if any_busy else np.zeros(0)
    te = ops["end"].to_numpy(dtype="float64")[busy] if any_busy else np.zeros(0)
    out: dict[str, Any] = {}
    below = np.zeros(len(starts))
    mask = np.zeros(len(ts), dtype=bool)
    for cls in WORK_CLASSES:
        mask = mask | (work == cls)
        us, ue = union_intervals(ts[mask], te[mask])
        upto = covered(us, ue, starts, ends)
        out[cls] = np.clip(upto - below, 0.0, None)
        below = upto
    return out


def busy_intervals(ops: pd.DataFrame) -> tuple[Any, Any]:
    """Union of the GPU work intervals (kernels, copies, memsets on every stream)."""
    busy = _busy_rows(ops)
    return union_intervals(ops["ts"].to_numpy(dtype="float64")[busy], ops["end"].to_numpy(dtype="float64")[busy])


def _busy_rows(ops: pd.DataFrame) -> Any:
    """The rows of the ops table that are GPU work (`busy`), as a bool array: the columns a caller
    needs are taken at them, not the whole table (`ops[busy]` copied its 39 columns: ~500 MB at 1.67M
    rows, each time)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    return ops["busy"].to_numpy(dtype=bool) if len(ops) else np.zeros(0, dtype=bool)


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
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if segments.count == 0:
        return empty_frame(IDLE_COLUMNS)
    bs, be = busy
    gs, ge, gi = complement_in(bs, be, segments.starts, segments.ends)
    if len(gs) == 0:
        return empty_frame(IDLE_COLUMNS)
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
    after = texts(n, IDLE_OTHER)
    busy_rows = _busy_rows(ops)
    if busy_rows.any():
        wts = ops["ts"].to_numpy(dtype=np.float64)[busy_rows]
        wl = ops["launch_ts"].to_numpy(dtype=np.float64)[busy_rows]
        j = np.searchsorted(wts, ge - 1e-6, side="left")
        has = j < len(wts)
        # the work that ends the idle period (across a step boundary when the gap was cut there)
        lt = np.where(has, wl[np.clip(j, 0, len(wts) - 1)], np.nan)
        after[has & (lt >= gs - 1.0)] = IDLE_LAUNCH
        after[has & (lt < gs - 1.0)] = IDLE_DEPENDENCY
    empty = np.full(n, "", dtype=object)
    pieces = (
        (data_us, texts(n, IDLE_DATA), empty),
        (sync_us, texts(n, IDLE_SYNC), sync_kind),
        (remainder, after, empty),
    )
    return _idle_rows(segments, window, gs, ge, gi, pieces)


def _idle_rows(
    segments: StepWindow, window: StepWindow, gs: Any, ge: Any, gi: Any, pieces: tuple[tuple[Any, Any, Any], ...]
) -> pd.DataFrame:
    """The idle table: in each gap [gs, ge) of segment `gi`, the pieces (amount, cause, sync kind per
    gap) laid out from the gap's start in their order, empty ones left out, sorted by (start, end).

    Gaps are sorted and each one's pieces follow each other, so the rows taken gap by gap are in that
    order already whenever no two rows share a (start, end) and the starts rise: then they are the rows a
    stable sort of all the pieces gives, without the sort (1.67M rows: 0.35 s). Otherwise (segments that
    overlap, a rounding that puts two pieces at one time) the stable sort of the pieces, piece kind by
    piece kind, as always."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    amount = np.column_stack([p[0] for p in pieces])
    starts = np.empty_like(amount)
    starts[:, 0] = gs
    for i in range(1, len(pieces)):  # the cursor moves on by each piece's amount, piece after piece
        starts[:, i] = starts[:, i - 1] + amount[:, i - 1]
    ends = np.minimum(starts + amount, ge[:, None])
    sel = amount > 0
    start, end = starts[sel], ends[sel]  # row-major: gap by gap, the pieces of a gap in order
    keep = end - start > 0
    s, e = start[keep], end[keep]
    in_order = bool(((s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (e[1:] > e[:-1]))).all())
    if in_order:
        seg = np.broadcast_to(gi[:, None], sel.shape)[sel][keep]
        cause = np.column_stack([p[1] for p in pieces])[sel][keep]
        kind = np.column_stack([p[2] for p in pieces])[sel][keep]
    else:  # piece kind by piece kind, every gap's piece of that kind: the order the sort starts from
        by_kind = [(sel[:, i], i) for i in range(len(pieces))]
        seg = np.concatenate([gi[m] for m, _ in by_kind])
        s = np.concatenate([starts[m, i] for m, i in by_kind])
        e = np.concatenate([ends[m, i] for m, i in by_kind])
        cause = np.concatenate([pieces[i][1][m] for m, i in by_kind])
        kind = np.concatenate([pieces[i][2][m] for m, i in by_kind])
    seg = seg.astype(np.int64)
    out: pd.DataFrame = pd.DataFrame(
        {
            "step": window.step_index(segments.starts[seg] + 1e-6) if len(seg) else seg,
            "seg": seg,
            "start": s,
            "end": e,
            "dur": e - s,
            "cause": cause.astype(object),
            "sync_kind": kind.astype(object),
        },
        copy=False,
    )
    if in_order:
        return out
    result: pd.DataFrame = out[out["dur"] > 0].sort_values(["start", "end"], kind="stable").reset_index(drop=True)
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
        k = launch_order(ops)
        if len(k):
            # an op that started on an idle stream shows the pure launch latency
            start = ops["ts"].to_numpy(dtype=np.float64)[k]
            lts = ops["launch_ts"].to_numpy(dtype=np.float64)[k]
            prev_end = np.r_[-np.inf, np.maximum.accumulate(ops["end"].to_numpy(dtype=np.float64)[k])[:-1]]
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
