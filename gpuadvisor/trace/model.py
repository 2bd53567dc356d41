"""The trace model: one rank's Kineto trace as typed pandas tables.

`load_trace` (gpuadvisor/trace/load.py) builds a `TraceModel`; `compute_metrics`
(gpuadvisor/metrics.py) and the rules read it. Every table always exists (possibly empty) and always
has exactly the columns listed in the `*_COLUMNS` constants below, so consumers never need to check
for a missing column.

Units and conventions (all tables):
  * times `ts`, `dur`, `end` are float64 microseconds, exactly as in the file (`end = ts + dur`);
    events without `dur` get `dur = 0` (and a warning).
  * names are pandas `category` dtype (cheap group-by, few distinct values).
  * ids (`correlation`, `external_id`) are Int64 (nullable); -1 never appears, missing is <NA>.
  * numeric kernel args absent in the file are NaN (float64) - e.g. a kernel without `args`.

Flow links:
  * `runtime.correlation` <-> `kernels.correlation` / `copies.correlation` / `memsets.correlation`
    (the cudaLaunchKernel / cudaMemcpyAsync call that enqueued the GPU activity);
  * `cpu_ops.external_id` <-> `runtime.external_id` <-> `kernels.external_id` (the aten op whose
    launches these are). `TraceModel.kernel_launches()` and `TraceModel.kernel_ops()` do these joins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuadvisor.trace.flops import matmul_flops

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd

    from gpuadvisor.trace.kind import TraceKind

# ---- column lists (stable API: add columns at the end, never rename) -------------------------------

KERNEL_COLUMNS: tuple[str, ...] = (
    "ts",
    "dur",
    "end",
    "name",  # category
    "device",  # Int64
    "stream",  # Int64
    "correlation",  # Int64
    "external_id",  # Int64
    "grid_x",  # float64 (NaN when the kernel has no args)
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "blocks",  # grid_x*grid_y*grid_z
    "threads_per_block",  # block_x*block_y*block_z
    "registers_per_thread",
    "shared_memory",  # bytes per block (args "shared memory")
    "blocks_per_sm",  # args "blocks per SM" (fraction: blocks / numSms)
    "warps_per_sm",
    "occupancy_pct",  # args "est. achieved occupancy %"
    "is_collective",  # bool: NCCL kernel
    "family",  # category: see gpuadvisor.trace.kernels.FAMILIES
)

COPY_COLUMNS: tuple[str, ...] = (
    "ts",
    "dur",
    "end",
    "name",  # category, e.g. "Memcpy HtoD (Pageable -> Device)"
    "direction",  # category: HtoD / DtoH / DtoD / PtoP / other
    "src_kind",  # category: Pageable / Pinned / Device / Managed / Array / other
    "dst_kind",
    "bytes",  # float64 (NaN when absent)
    "bandwidth_gbps",  # float64; args "memory bandwidth (GB/s)", else bytes/dur
    "correlation",
    "external_id",
    "device",
    "stream",
)

MEMSET_COLUMNS: tuple[str, ...] = (
    "ts",
    "dur",
    "end",
    "name",
    "bytes",
    "correlation",
    "device",
    "stream",
)

RUNTIME_COLUMNS: tuple[str, ...] = (
    "ts",
    "dur",
    "end",
    "name",  # category, e.g. cudaLaunchKernel, cudaStreamSynchronize, cuLaunchKernelEx
    "correlation",
    "external_id",
    "tid",  # Int64 (string thread ids are hashed to a stable int)
    "cat",  # category: cuda_runtime / cuda_driver
)

CPU_OP_COLUMNS: tuple[str, ...] = (
    "ts",
    "dur",
    "end",
    "name",  # category, e.g. aten::mm
    "tid",
    "external_id",
    "input_dims",  # object: str form of args "Input Dims" (None when not recorded)
    "input_types",  # object: str form of args "Input type", e.g. "['float', 'float']"
    "flops",  # float64, NaN when absent
    "seq_num",  # Int64, args "Sequence number" (autograd), <NA> when absent
)

ANNOTATION_COLUMNS: tuple[str, ...] = (
    "ts",
    "dur",
    "end",
    "name",  # category: ProfilerStep#3, Optimizer.step#AdamW.step, enumerate(DataLoader)#...__next__
    "tid",
    "on_gpu",  # bool: True for gpu_user_annotation (GPU-side span), False for user_annotation
)

STEP_COLUMNS: tuple[str, ...] = (
    "step",  # int: N of ProfilerStep#N (or ordinal for fallbacks)
    "cpu_start",  # float64 us: CPU annotation start
    "cpu_end",
    "gpu_start",  # float64 us: GPU annotation span (NaN when absent)
    "gpu_end",
    "start",  # the interval [start, end) used for per-step metrics; see gpuadvisor/trace/steps.py
    "end",
    "outlier",  # bool: excluded from window medians (first step when >= 3 steps)
)


def analyzed_mask(steps: pd.DataFrame) -> npt.NDArray[np.bool_]:
    """Which rows of a steps table (`start`, `end`, `outlier`) are the analyzed steps: every segmented step
    but the outliers (all of them when every step is one), of defined, positive length.

    The one definition: the step model's window (`stepmodel.window.analyzed_window`), the metrics'
    `per_step.analyzed` column (which the cross-rank summaries, diff and the report read) and the
    trace kind all use it."""
    # lazy: numpy stays out of `gpuadvisor rules`, `import gpuadvisor.api` and the trace-split worker
    import numpy as np

    if len(steps) == 0:
        return np.zeros(0, dtype=bool)
    outlier = (
        steps["outlier"].fillna(False).to_numpy(dtype=bool) if "outlier" in steps else np.zeros(len(steps), bool)
    )
    chosen = ~outlier if (~outlier).any() else np.ones(len(steps), dtype=bool)
    s = steps["start"].to_numpy(dtype=np.float64, na_value=np.nan)
    e = steps["end"].to_numpy(dtype=np.float64, na_value=np.nan)
    with np.errstate(invalid="ignore"):
        usable = np.isfinite(s) & np.isfinite(e) & (e > s)
    out: npt.NDArray[np.bool_] = chosen & usable
    return out


# Values of TraceModel.step_source
STEP_SOURCE_PROFILER = "profiler_step"  # ProfilerStep#N annotations
STEP_SOURCE_OPTIMIZER = "optimizer_step"  # Optimizer.step#... annotations
STEP_SOURCE_DATALOADER = "dataloader"  # DataLoader __next__ annotations
STEP_SOURCE_WHOLE_TRACE = "whole_trace"  # no step markers: the whole trace is one step
STEP_SOURCE_NONE = "none"  # empty trace: no steps at all


@dataclass
class TraceMeta:
    """Top-level trace metadata (absent keys are None / empty)."""

    schema_version: int | None = None
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    cuda_driver_version: int | None = None
    cuda_runtime_version: int | None = None
    with_stack: bool | None = None
    record_shapes: bool | None = None
    with_flops: bool | None = None
    distributed_info: dict[str, Any] | None = None
    base_time_ns: int | None = None
    trace_span_us: float = 0.0  # last event end - first event start (us), 0 for an empty trace
    synthetic: bool = False  # the trace says "gpuadvisor_synthetic": true (built by tests/synth.py)
    torch_version: str | None = None  # from trace metadata when present (rarely)

    def device(self, index: int = 0) -> dict[str, Any] | None:
        """The deviceProperties entry with `id == index` (or position `index`), or None."""
        for props in self.device_properties:
            if props.get("id") == index:
                return props
        if 0 <= index < len(self.device_properties):
            return self.device_properties[index]
        return None

    @property
    def gpu_name(self) -> str | None:
        dev = self.device(0)
        name = dev.get("name") if dev else None
        return str(name) if name is not None else None

    @property
    def num_sms(self) -> int | None:
        dev = self.device(0)
        value = dev.get("numSms") if dev else None
        return int(value) if isinstance(value, (int, float)) and value > 0 else None


@dataclass
class TraceModel:
    """One rank's trace as tables. Build it with `gpuadvisor.trace.load.load_trace`.

    Attributes:
      path, rank: where it came from (rank from distributedInfo.rank, the file name rankN, or 0).
      meta: `TraceMeta`.
      kernels, copies, memsets, runtime, cpu_ops, annotations, steps: DataFrames with the columns of
        KERNEL_COLUMNS, COPY_COLUMNS, MEMSET_COLUMNS, RUNTIME_COLUMNS, CPU_OP_COLUMNS,
        ANNOTATION_COLUMNS, STEP_COLUMNS, each sorted by `ts` (steps by `start`).
      python_functions: DataFrame [ts, dur, end, name, tid] only when loaded with
        keep_python_functions=True, else None (their count is in `counts["python_function"]`).
      step_source: one of the STEP_SOURCE_* constants.
      warnings: human sentences about what was missing, salvaged or degraded.
      truncated: the file was cut short and its complete part salvaged; `segment_steps` then leaves
        out the steps whose events the cut lost (see `gpuadvisor.trace.steps`).
      counts: number of events per `cat` value in the file (all of them, including dropped ones).
      kind: what the trace is (vendor, training or inference, schema, graphs, torch.compile, ranks):
        `gpuadvisor.trace.kind.TraceKind`, decided once by the loader; `kind_of(model)` for models
        built otherwise. Runtime calls captured into a CUDA/HIP graph are not in `runtime` (they did
        not run); `kind.captured_launches` counts them.
    """

    path: Path
    rank: int
    meta: TraceMeta
    kernels: pd.DataFrame
    copies: pd.DataFrame
    memsets: pd.DataFrame
    runtime: pd.DataFrame
    cpu_ops: pd.DataFrame
    annotations: pd.DataFrame
    steps: pd.DataFrame
    step_source: str = STEP_SOURCE_NONE
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    python_functions: pd.DataFrame | None = None
    kind: TraceKind | None = None  # what the trace is (gpuadvisor.trace.kind); set by the loader
    truncated: bool = False  # the file ended early (salvaged): the steps the cut ran through are left out
    all_steps_cut: bool = False  # truncated through every step: no step is complete
    # joins computed once per pair of tables (kernel_ops), keyed by the tables' identity: read-only
    _joins: dict[str, tuple[int, int, pd.DataFrame]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    # ---- facts --------------------------------------------------------------------------------

    @property
    def has_gpu_kernels(self) -> bool:
        """True when the trace holds at least one `kernel` event (CUPTI worked)."""
        return len(self.kernels) > 0

    @property
    def has_gpu_activity(self) -> bool:
        return len(self.kernels) > 0 or len(self.copies) > 0 or len(self.memsets) > 0

    @property
    def has_record_shapes(self) -> bool:
        """cpu ops carry `Input Dims` / `Input type`."""
        return bool(len(self.cpu_ops)) and bool(self.cpu_ops["input_types"].notna().any())

    @property
    def has_flops(self) -> bool:
        return bool(len(self.cpu_ops)) and bool(self.cpu_ops["flops"].notna().any())

    @property
    def is_synthetic(self) -> bool:
        return self.meta.synthetic

    # ---- joins --------------------------------------------------------------------------------

    def kernel_launches(self) -> pd.DataFrame:
        """Kernels joined with their launching runtime call by correlation id.

        Returns the kernels table (same row order, same index) plus columns `launch_ts`, `launch_dur`,
        `launch_name`, `launch_tid` (NaN / <NA> when no runtime event carries the correlation id).
        """
        return _join_launch(self.kernels, self.runtime)

    def copy_launches(self) -> pd.DataFrame:
        """Copies joined with their runtime call (cudaMemcpyAsync...), same columns as kernel_launches."""
        return _join_launch(self.copies, self.runtime)

    def kernel_ops(self) -> pd.DataFrame:
        """Kernels joined with the cpu op that launched them (by external id).

        Adds `op_name`, `op_input_types`, `op_input_dims`, `op_flops`. When several cpu ops share an
        external id (rare; nested ops), the innermost (latest-starting) one wins. Computed once for
        these two tables (the step model and the metrics both read it): read-only.
        """
        hit = self._joins.get("kernel_ops")
        if hit is not None and hit[0] == id(self.kernels) and hit[1] == id(self.cpu_ops):
            return hit[2]
        out = self._kernel_ops()
        self._joins["kernel_ops"] = (id(self.kernels), id(self.cpu_ops), out)
        return out

    def _kernel_ops(self) -> pd.DataFrame:
        # lazy: pandas stays out of `gpuadvisor rules`, `import gpuadvisor.api` and the trace-split worker
        import pandas as pd

        k = self.kernels
        out: pd.DataFrame = k.copy(deep=False)  # copy-on-write: the kernels stay as they are
        if len(k) == 0 or len(self.cpu_ops) == 0:
            out["op_name"] = pd.Series([None] * len(k), index=k.index, dtype=object)
            out["op_input_types"] = pd.Series([None] * len(k), index=k.index, dtype=object)
            out["op_input_dims"] = pd.Series([None] * len(k), index=k.index, dtype=object)
            out["op_flops"] = pd.Series(float("nan"), index=k.index, dtype="float64")
            return out
        # lazy: numpy stays out of `gpuadvisor rules`, `import gpuadvisor.api` and the trace-split worker
        import numpy as np

        ops = self.cpu_ops[self.cpu_ops["external_id"].notna()].sort_values("ts")
        ops = ops.drop_duplicates("external_id", keep="last")
        # The op's FLOPs: the trace's `flops` arg, else 2*M*K*N from its input dims (torch 2.11 writes no
        # `flops` arg); shared by the op's kernels in proportion to their duration, so that a split-K
        # reduce or an epilogue kernel is not credited with the whole GEMM's FLOPs.
        derived = matmul_flops(ops)
        ext = k["external_id"]
        take = _Lookup(ops["external_id"], ext)
        out["op_name"] = take.objects(ops["name"].astype(object))
        out["op_input_types"] = take.objects(ops["input_types"])
        out["op_input_dims"] = take.objects(ops["input_dims"])
        dur = k["dur"].astype("float64")
        share = dur / dur.groupby(ext).transform("sum").replace(0.0, np.nan)
        out["op_flops"] = (take.floats(np.where(derived > 0, derived, np.nan)) * share).astype("float64")
        return out


class _Lookup:
    """Each row of `wanted` (nullable integer ids) located once in `keys` (unique, no NA), then any
    column of the keyed table taken at those rows: what `wanted.map(column.set_axis(keys))` gives, with
    the same dtypes, without one hash lookup per column."""

    def __init__(self, keys: pd.Series, wanted: pd.Series) -> None:
        # lazy: numpy and pandas stay out of `gpuadvisor rules`, `import gpuadvisor.api` and the trace-split worker
        import numpy as np
        import pandas as pd

        pos = pd.Index(keys).get_indexer(wanted)
        self.index = wanted.index
        self.missing = pos < 0
        self.at = np.where(self.missing, 0, pos)
        self.empty = len(keys) == 0

    def _take(self, values: Any, fill: Any, dtype: Any) -> Any:
        # lazy: numpy stays out of `gpuadvisor rules`, `import gpuadvisor.api` and the trace-split worker
        import numpy as np

        out = np.asarray(values, dtype=dtype)[self.at] if not self.empty else np.empty(len(self.at), dtype=dtype)
        out[self.missing] = fill
        return out

    def floats(self, values: Any) -> pd.Series:
        """float64, NaN where not found."""
        # lazy: numpy and pandas stay out of `gpuadvisor rules`, `import gpuadvisor.api` and the trace-split worker
        import numpy as np
        import pandas as pd

        out: pd.Series = pd.Series(self._take(values, np.nan, np.float64), index=self.index)
        return out

    def objects(self, values: pd.Series) -> pd.Series:
        """object, NaN where not found; <NA> everywhere when nothing is found (as `map` of a nullable
        integer column gives: an all-missing result is cast back to that column's type)."""
        # lazy: numpy and pandas stay out of `gpuadvisor rules`, `import gpuadvisor.api` and the trace-split worker
        import numpy as np
        import pandas as pd

        taken = self._take(values.to_numpy(dtype=object), np.nan, object)
        if len(taken) and pd.isna(taken).all():
            taken[:] = pd.NA
        out: pd.Series = pd.Series(taken, index=self.index, dtype=object)
        return out

    def ints(self, values: pd.Series) -> pd.Series:
        """Int64, <NA> where not found (or NA in `values`)."""
        # lazy: numpy and pandas stay out of `gpuadvisor rules`, `import gpuadvisor.api` and the trace-split worker
        import numpy as np
        import pandas as pd

        arr = values.astype("Int64").array
        data = self._take(arr.fillna(0).to_numpy(dtype=np.int64), 0, np.int64)
        mask = self._take(arr.isna(), True, bool)
        out: pd.Series = pd.Series(pd.arrays.IntegerArray(data, mask), index=self.index)
        return out


def _join_launch(gpu: pd.DataFrame, runtime: pd.DataFrame) -> pd.DataFrame:
    # lazy: pandas stays out of `gpuadvisor rules`, `import gpuadvisor.api` and the trace-split worker
    import pandas as pd

    out: pd.DataFrame = gpu.copy(deep=False)  # copy-on-write: the added columns leave `gpu` as it is
    if len(gpu) == 0 or len(runtime) == 0:
        out["launch_ts"] = pd.Series(float("nan"), index=gpu.index, dtype="float64")
        out["launch_dur"] = pd.Series(float("nan"), index=gpu.index, dtype="float64")
        out["launch_name"] = pd.Series([None] * len(gpu), index=gpu.index, dtype=object)
        out["launch_tid"] = pd.Series(pd.NA, index=gpu.index, dtype="Int64")
        return out
    rt = runtime[runtime["correlation"].notna()].drop_duplicates("correlation", keep="first")
    take = _Lookup(rt["correlation"], gpu["correlation"])
    out["launch_ts"] = take.floats(rt["ts"])
    out["launch_dur"] = take.floats(rt["dur"])
    out["launch_name"] = take.objects(rt["name"].astype(object))
    out["launch_tid"] = take.ints(rt["tid"])
    return out


def name_mask(names: pd.Series, test: Callable[[pd.Series], Any]) -> npt.NDArray[np.bool_]:
    """`test` (a vectorized string predicate, e.g. `lambda s: s.str.startswith("c10d::")`) over a name
    column, as a bool array. The tables' name columns are categorical: the test runs once per distinct
    name (a few thousand) instead of once per event (millions in a large trace), then maps back."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules`, `import gpuadvisor.api` and the trace-split worker
    import numpy as np
    import pandas as pd

    if isinstance(names.dtype, pd.CategoricalDtype):
        cats = pd.Series(names.cat.categories.astype(str))
        hit = np.asarray(test(cats), dtype=bool)
        codes = names.cat.codes.to_numpy()
        out: npt.NDArray[np.bool_] = np.zeros(len(codes), dtype=bool)
        known = codes >= 0
        out[known] = hit[codes[known]]
        return out
    return np.asarray(test(names.astype(str)), dtype=bool)
