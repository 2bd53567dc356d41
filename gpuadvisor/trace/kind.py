"""What a trace is, decided once per trace: `TraceKind` (on `TraceModel.kind`).

Every rule sees it through the engine (`gpuadvisor.engine.available_requirements` turns it into the
TRAINING / NVIDIA_GPU / STEADY_STATE requirements) and the result says it once (`notes`, and
`environment.trace_kind`). The questions and the evidence each answer rests on:

* accelerator vendor (`Vendor`): MTIA when the trace holds `mtia_*` event categories, an MTIA
  collective backend (`mtia:hccl`) or MTIA runtime calls; AMD (ROCm) when runtime calls are `hip*`
  (hipLaunchKernel, hipExtModuleLaunchKernel...), device names are AMD/Radeon/Instinct/MI*, the
  device warp size is 64 or kernels are ROCm libraries' (Cijk_* Tensile GEMMs, MIOpen, rocBLAS);
  NVIDIA when runtime calls are `cuda*` / `cu*`, device names are NVIDIA's, or kernels are NVIDIA
  libraries' (nvjet, cutlass, cuDNN, NCCL); OTHER for other accelerator categories (`xpu_*`...);
  NONE when no accelerator activity was recorded.
* training or inference (`Workload`): training when the trace shows a backward pass (autograd nodes
  `*Backward*`, `autograd::engine::evaluate_function`, `aten::*_backward`, backward kernels) or an
  optimizer step (`Optimizer.step#...`, optimizer kernels); inference when the host was recorded
  (cpu ops) and shows neither; unknown when the trace holds no host ops and no such kernels.
* schema: Kineto's `schemaVersion` 1 is the only one written so far; another number is read as 1
  and said so; traces of 2021 spell categories `Operator`/`Runtime`/`Kernel` (old schema).
* CUDA/HIP graphs: launches captured between `cudaStreamBeginCapture` and `cudaStreamEndCapture`
  (`hip*` alike) never run as such (they are recorded into a graph): they are not GPU work and the
  loader drops them from the runtime table; `cudaGraphLaunch` / `hipGraphLaunch` replay a graph, one
  launch call running many kernels (kernels carry the graph launch's correlation id).
* torch.compile: Triton kernels, `CompiledFunction` / `Torch-Compiled Region` spans.
* ranks: `distributedInfo` rank / world size / backend.

Heavy imports (pandas, numpy) stay inside the functions.
"""

from __future__ import annotations

import contextlib
import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuadvisor.namepattern import NamePattern
from gpuadvisor.trace.kernels import is_triton
from gpuadvisor.trace.model import analyzed_mask, name_mask

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd

    from gpuadvisor.trace.model import TraceModel

__all__ = [
    "KNOWN_SCHEMA_VERSIONS",
    "CaptureScan",
    "SchemaStatus",
    "TraceKind",
    "Vendor",
    "Workload",
    "classify",
    "kind_of",
    "scan_graph_captures",
]

KNOWN_SCHEMA_VERSIONS: frozenset[int] = frozenset({1})
# A CPU-only trace is called inference (no backward, no optimizer) only with at least this many host
# ops: a trimmed trace of a few ops says nothing either way.
MIN_HOST_OPS_FOR_INFERENCE = 20


class Vendor(str, enum.Enum):
    """The accelerator the trace's device activity ran on."""

    NVIDIA = "nvidia"
    AMD = "amd"
    MTIA = "mtia"
    OTHER = "other"
    NONE = "none"  # no accelerator activity recorded

    def __str__(self) -> str:
        return self.value

    @property
    def words(self) -> str:
        return _VENDOR_WORDS[self]


_VENDOR_WORDS = {
    Vendor.NVIDIA: "NVIDIA GPU (CUDA)",
    Vendor.AMD: "AMD GPU (ROCm)",
    Vendor.MTIA: "MTIA accelerator",
    Vendor.OTHER: "non-NVIDIA accelerator",
    Vendor.NONE: "no accelerator activity",
}


class Workload(str, enum.Enum):
    TRAINING = "training"
    INFERENCE = "inference"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


class SchemaStatus(str, enum.Enum):
    CURRENT = "current"  # schemaVersion 1 with today's category names
    OLD = "old"  # 2021 category names (Operator, Runtime, Kernel, Memcpy, Memset)
    UNVERSIONED = "unversioned"  # no schemaVersion key
    UNKNOWN = "unknown"  # a schemaVersion other than the known ones

    def __str__(self) -> str:
        return self.value


# ---- evidence patterns ------------------------------------------------------------------------------

_BACKWARD_OP = NamePattern(
    r"Backward\d*$|^autograd::engine::evaluate_function|^aten::\w*_backward|^## backward ##$", flags=0
)
_BACKWARD_KERNEL = NamePattern(r"backward|_bwd|bwd_|wgrad|dgrad")
_OPTIMIZER_SPAN = re.compile(r"^Optimizer\.step#")
_COMPILE_SPAN = re.compile(r"^CompiledFunction|^Torch-Compiled Region|CompiledFxGraph|^TorchDynamo", re.I)
_AMD_DEVICE = re.compile(r"\bAMD\b|Radeon|Instinct|\bMI\d{2,3}\b|\bgfx\d", re.I)
_NVIDIA_DEVICE = re.compile(
    r"NVIDIA|Tesla|GeForce|Quadro|\bRTX\b|\bTITAN\b|\b[VAHBL]\d{2,3}\b|\bGH200\b|\bGB200\b|\bT4\b", re.I
)
_MTIA_DEVICE = re.compile(r"MTIA|ARTEMIS|FREYA", re.I)
_AMD_KERNEL = NamePattern(r"^Cijk_|rocblas|miopen|hipblaslt|\bhip[A-Z_]|_ZN\d+hip")
_NVIDIA_KERNEL = NamePattern(
    r"nvjet|cutlass|cudnn|cublas|^sm\d{2,3}_|volta_|turing_|ampere_|hopper_|ncclDevKernel|ncclKernel", flags=0
)
_OLD_CATEGORIES = ("Operator", "Runtime", "Kernel", "Memcpy", "Memset")
_GRAPH_LAUNCH = re.compile(r"GraphLaunch")
_BEGIN_CAPTURE = re.compile(r"^(?:cuda|hip|cu)StreamBeginCapture")
_END_CAPTURE = re.compile(r"^(?:cuda|hip|cu)StreamEndCapture")
# Runtime calls that enqueue GPU work on a stream (captured into a graph during stream capture).
# Runtime/driver calls that enqueue work with GPU activity of their own (found by correlation):
# kernels, copies, memsets. The capture scan also counts host functions (LaunchHostFunc), which a
# graph capture records but which have no GPU activity.
_ENQUEUE_WITH_GPU_WORK = r"LaunchKernel|LaunchCooperativeKernel|ModuleLaunchKernel|cuLaunch|Memcpy|Memset"
ENQUEUE_WITH_GPU_WORK = re.compile(_ENQUEUE_WITH_GPU_WORK)
_ENQUEUE = re.compile(_ENQUEUE_WITH_GPU_WORK + r"|LaunchHostFunc")


def _examples(names: Iterable[str], limit: int = 2) -> str:
    picked = sorted(set(names))[:limit]
    return ", ".join(picked)


@dataclass(frozen=True)
class CaptureScan:
    """Graph capture found in one rank's runtime table (see `scan_graph_captures`)."""

    begin_calls: int = 0  # cudaStreamBeginCapture / hipStreamBeginCapture calls
    spans: tuple[tuple[float, float], ...] = ()  # (begin ts, end of the matching EndCapture) per capture
    captured_launches: int = 0  # enqueue calls inside a capture with no GPU activity of their own
    api_prefix: str = "cuda"  # "cuda" or "hip" (for the wording)


def scan_graph_captures(
    runtime: pd.DataFrame, gpu_correlations: Iterable[Any] = ()
) -> tuple[CaptureScan, npt.NDArray[np.bool_]]:
    """Find stream captures and the runtime calls recorded into them.

    A capture is the time between a `*StreamBeginCapture` call and the next `*StreamEndCapture` on the
    same thread (to the end of the trace when it never ends). Enqueue calls (kernel launches, async
    copies and memsets) on that thread inside it, whose correlation id matches no GPU activity, were
    recorded into the graph and did not run. Returns (scan, mask over `runtime` rows of those calls).
    """
    # lazy: numpy stays out of `gpuadvisor rules`, `import gpuadvisor.api` and the trace-split worker
    import numpy as np

    n = len(runtime)
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return CaptureScan(), mask
    # the name tests run once per distinct name (name_mask), not once per call
    begin = name_mask(runtime["name"], lambda s: s.str.contains(_BEGIN_CAPTURE))
    if not begin.any():
        return CaptureScan(), mask
    names = runtime["name"].astype(str)
    end = name_mask(runtime["name"], lambda s: s.str.contains(_END_CAPTURE))
    enqueue = name_mask(runtime["name"], lambda s: s.str.contains(_ENQUEUE)) & ~name_mask(
        runtime["name"], lambda s: s.str.contains(_GRAPH_LAUNCH)
    )
    ran = set(int(c) for c in gpu_correlations if c is not None and c == c)
    corr = runtime["correlation"]
    no_gpu = np.array([pd_isna(c) or int(c) not in ran for c in corr], dtype=bool)
    ts = runtime["ts"].to_numpy(dtype=np.float64)
    ends = runtime["end"].to_numpy(dtype=np.float64)
    tids = runtime["tid"].to_numpy(dtype=object)
    last = float(np.nanmax(ends)) if n else 0.0
    spans: list[tuple[float, float]] = []
    for i in np.nonzero(begin)[0]:
        same = (tids == tids[i]) & end & (ts >= ts[i])
        stop = float(ends[same].min()) if same.any() else last
        spans.append((float(ts[i]), stop))
        inside = (tids == tids[i]) & (ts >= ts[i]) & (ts <= stop) & enqueue & no_gpu
        mask |= inside
    prefix = "hip" if any(str(nm).startswith("hip") for nm in names[begin]) else "cuda"
    scan = CaptureScan(
        begin_calls=int(begin.sum()),
        spans=tuple(spans),
        captured_launches=int(mask.sum()),
        api_prefix=prefix,
    )
    return scan, mask


def pd_isna(value: Any) -> bool:
    """`pd.NA`, None and NaN are all "missing" (without importing pandas here)."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except TypeError:  # pd.NA compares to NA and cannot be made a bool
        return True


@dataclass(frozen=True)
class TraceKind:
    """What one rank's trace is. Build it with `classify` (the loader does) or `kind_of`."""

    vendor: Vendor = Vendor.NONE
    vendor_evidence: str = ""
    device_name: str | None = None
    workload: Workload = Workload.UNKNOWN
    workload_evidence: str = ""
    has_events: bool = False
    accelerator_activity: bool = False  # kernels, copies, memsets or device events were recorded
    launches_without_kernels: int = 0  # kernel launch calls recorded although no kernel was
    device_events_not_analyzed: int = 0  # e.g. MTIA mtia_ccp_events (not read as GPU kernels)
    schema_version: int | None = None
    schema: SchemaStatus = SchemaStatus.CURRENT
    old_categories: tuple[str, ...] = ()
    graph_capture_calls: int = 0
    captured_launches: int = 0
    capture_in_window: bool = False  # a capture overlaps an analyzed (non-outlier) step
    capture_api: str = "cuda"
    graph_launches: int = 0
    graph_kernels: int = 0
    torch_compile: bool = False
    compile_evidence: str = ""
    triton_kernels: int = 0  # distinct Triton kernel names
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    notes: tuple[str, ...] = field(default=())  # extra labels (kept in this order)

    # ---- derived facts ----------------------------------------------------------------------------

    @property
    def cpu_only(self) -> bool:
        return self.has_events and not self.accelerator_activity

    @property
    def is_training(self) -> bool:
        return self.workload is Workload.TRAINING

    @property
    def is_nvidia(self) -> bool:
        return self.vendor is Vendor.NVIDIA

    @property
    def multi_rank_job(self) -> bool:
        return self.world_size is not None and self.world_size > 1

    # ---- words ------------------------------------------------------------------------------------

    def summary(self) -> str:
        """One line: "trace kind: training, NVIDIA GPU (CUDA) (NVIDIA H100), schema 1, rank 0 of 8"."""
        if not self.has_events:
            return "trace kind: empty (no events gpuadvisor can read)"
        parts = [
            str(self.workload) if self.workload is not Workload.UNKNOWN else "training or inference unknown"
        ]
        if self.vendor is Vendor.NONE:
            parts.append("CPU only" if self.has_events else "no events")
        else:
            parts.append(self.vendor.words + (f" ({self.device_name})" if self.device_name else ""))
        parts.append(self._schema_words())
        if self.world_size is not None and self.rank is not None:
            parts.append(f"rank {self.rank} of {self.world_size}")
        if self.torch_compile:
            parts.append("torch.compile")
        if self.graph_launches:
            parts.append(f"{self.capture_api_word()} graphs replayed")
        if self.graph_capture_calls:
            parts.append(f"{self.capture_api_word()} graph capture")
        return "trace kind: " + ", ".join(parts)

    def capture_api_word(self) -> str:
        return "HIP" if self.capture_api == "hip" or self.vendor is Vendor.AMD else "CUDA"

    def _schema_words(self) -> str:
        if self.schema is SchemaStatus.OLD:
            return "old Kineto schema (2021)"
        if self.schema is SchemaStatus.UNVERSIONED:
            return "no schemaVersion"
        return f"schema {self.schema_version}"

    def labels(self) -> tuple[str, ...]:
        """The notes a result shows for this trace: the summary line, then every caveat in words."""
        out = [self.summary()]
        if not self.has_events:
            out.append("The trace holds no events: nothing can be analyzed.")
            return tuple(out)
        if self.schema is SchemaStatus.UNKNOWN:
            out.append(
                f"unknown trace schema {self.schema_version}, read as schema 1 (the only Kineto schema known)"
            )
        elif self.schema is SchemaStatus.UNVERSIONED:
            out.append("the trace has no schemaVersion (hand-made or very old), read as schema 1")
        if self.old_categories:
            out.append(
                "old Kineto schema (2021 category names "
                + ", ".join(self.old_categories)
                + "), read as today's "
                "categories; ProfilerStep#N and other record_function spans logged as operators are read as steps "
                "and annotations"
            )
        if self.vendor is Vendor.AMD:
            out.append(
                f"AMD GPU (ROCm) trace ({self.vendor_evidence}): CUDA-specific advice (occupancy, tensor-core "
                "kernel names, TF32) does not apply; rules that need an NVIDIA GPU are not applicable"
            )
        elif self.vendor is Vendor.MTIA:
            detail = (
                f"{self.device_events_not_analyzed:,} device events (mtia_*) are not analyzed as GPU kernels"
                if self.device_events_not_analyzed
                else "its device activity is not analyzed as GPU kernels"
            )
            out.append(
                f"MTIA accelerator trace ({self.vendor_evidence}): {detail}; GPU rules are not applicable"
            )
        elif self.vendor is Vendor.OTHER:
            out.append(
                f"non-NVIDIA accelerator ({self.vendor_evidence}): its device activity is not analyzed; "
                "GPU rules are not applicable"
            )
        if self.cpu_only and self.vendor is not Vendor.MTIA:
            if self.launches_without_kernels:
                out.append(
                    f"no GPU kernels were recorded although the host made {self.launches_without_kernels:,} "
                    "kernel launch calls: CUPTI was unavailable or GPU activity was not enabled in the profiler; "
                    "GPU rules are not applicable"
                )
            else:
                out.append("CPU-only trace: no GPU activity was recorded; GPU rules are not applicable")
        if self.workload is Workload.INFERENCE:
            out.append(
                "inference run: no optimizer step or backward pass in the trace; training advice does not apply"
            )
        elif self.workload is Workload.UNKNOWN and self.has_events:
            out.append(
                f"training or inference cannot be told ({self.workload_evidence}); training advice is not applicable"
            )
        if self.graph_capture_calls:
            api = self.capture_api_word()
            out.append(
                f"{api} graph capture: {self.graph_capture_calls} stream capture(s) recorded "
                f"{self.captured_launches:,} launches into a graph; captured launches never run as such and are "
                "not counted as GPU work"
                + (
                    "; a capture overlaps the analyzed steps, so host-versus-GPU timing rules are not applicable"
                    if self.capture_in_window
                    else ""
                )
            )
        if self.graph_launches:
            api = self.capture_api_word()
            out.append(
                f"{api} graphs replayed: {self.graph_launches:,} graph launches ran {self.graph_kernels:,} kernels "
                "(one launch call runs many kernels; per-kernel launch timing is the graph launch's)"
            )
        if self.torch_compile:
            out.append(f"torch.compile: {self.compile_evidence}")
        if self.world_size is not None and self.world_size > 1:
            backend = f", backend {self.backend}" if self.backend else ""
            out.append(f"rank {self.rank} of a {self.world_size}-rank job (distributedInfo{backend})")
        out.extend(self.notes)
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (`environment.trace_kind`)."""
        return {
            "vendor": self.vendor.value,
            "vendor_evidence": self.vendor_evidence,
            "device_name": self.device_name,
            "workload": self.workload.value,
            "workload_evidence": self.workload_evidence,
            "cpu_only": self.cpu_only,
            "has_events": self.has_events,
            "launches_without_kernels": self.launches_without_kernels,
            "device_events_not_analyzed": self.device_events_not_analyzed,
            "schema_version": self.schema_version,
            "schema": self.schema.value,
            "old_categories": list(self.old_categories),
            "graph_capture_calls": self.graph_capture_calls,
            "captured_launches": self.captured_launches,
            "capture_in_window": self.capture_in_window,
            "graph_launches": self.graph_launches,
            "graph_kernels": self.graph_kernels,
            "torch_compile": self.torch_compile,
            "triton_kernels": self.triton_kernels,
            "rank": self.rank,
            "world_size": self.world_size,
            "backend": self.backend,
        }


# ---- classification -----------------------------------------------------------------------------


def _distinct(table: pd.DataFrame) -> tuple[list[str], list[int] | None]:
    """Distinct names of a table in its categories' order, and how many rows carry each (None when the
    `name` column is not a category). Counted from the codes: a million distinct names are neither
    re-categorized nor compared as text."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if not len(table):
        return [], []
    col = table["name"]
    if hasattr(col, "cat"):
        cats = col.cat.categories.tolist()
        codes = col.cat.codes.to_numpy(dtype=np.int64)
        counts = np.bincount(codes[codes >= 0], minlength=len(cats))
        used = np.flatnonzero(counts).tolist()
        return [str(cats[i]) for i in used], counts[used].tolist()
    return sorted({str(v) for v in col}), None


def _names(table: pd.DataFrame) -> list[str]:
    """Distinct names of a table (its `name` column is a category)."""
    return _distinct(table)[0]


def _count_matching(table: pd.DataFrame, pattern: re.Pattern[str] | NamePattern) -> tuple[int, list[str]]:
    """(rows whose name matches, the matching distinct names)."""
    distinct, counts = _distinct(table)
    told = [pattern.matches(n) if isinstance(pattern, NamePattern) else bool(pattern.search(n)) for n in distinct]
    names = [n for n, hit in zip(distinct, told, strict=True) if hit]
    if not names:
        return 0, []
    if counts is not None:
        return sum(c for c, hit in zip(counts, told, strict=True) if hit), names
    return int(table["name"].astype(str).isin(names).sum()), names


def _named_evidence(
    prefixes: tuple[str, ...],
    api: str,
    device_re: re.Pattern[str],
    kernel_re: NamePattern,
    library: str,
    runtime_names: list[str],
    devices: list[str],
    kernel_names: list[str],
) -> str | None:
    """A vendor's evidence in words, strongest first: its runtime API calls, device names, library kernels."""
    calls = [n for n in runtime_names if n.startswith(prefixes)]
    if calls:
        return f"{api} runtime calls: {_examples(calls)}"
    named = [d for d in devices if device_re.search(d)]
    if named:
        return f"device {named[0]}"
    kernels = [n for n in kernel_names if kernel_re.matches(n)]
    if kernels:
        return f"{library} library kernels: {_examples(kernels, 1)[:60]}"
    return None


def _vendor(model: TraceModel) -> tuple[Vendor, str]:
    meta = model.meta
    counts = model.counts
    backend = str((meta.distributed_info or {}).get("backend") or "")
    mtia_cats = {c: n for c, n in counts.items() if c.lower().startswith("mtia")}
    runtime_names = _names(model.runtime)
    devices = [str(p.get("name") or "") for p in meta.device_properties]
    kernel_names = _names(model.kernels)
    if mtia_cats:
        top = max(mtia_cats, key=lambda c: mtia_cats[c])
        return Vendor.MTIA, f"{sum(mtia_cats.values()):,} {'/'.join(sorted(mtia_cats))} events, most {top}"
    if "mtia" in backend.lower():
        return Vendor.MTIA, f"collective backend {backend}"
    if any(_MTIA_DEVICE.search(d) for d in devices):
        return Vendor.MTIA, f"device {next(d for d in devices if _MTIA_DEVICE.search(d))}"
    other = sorted(c for c in counts if re.match(r"(xpu|privateuse|hpu|npu)", c, re.I))
    if other:
        return Vendor.OTHER, f"{'/'.join(other)} events"
    amd = _named_evidence(
        ("hip",), "HIP", _AMD_DEVICE, _AMD_KERNEL, "ROCm", runtime_names, devices, kernel_names
    )
    if amd is None and any(p.get("warpSize") == 64 for p in meta.device_properties):
        amd = "device warp size 64 (AMD wavefront)"
    if amd is not None:
        return Vendor.AMD, amd
    nvidia = _named_evidence(
        ("cu",), "CUDA", _NVIDIA_DEVICE, _NVIDIA_KERNEL, "NVIDIA", runtime_names, devices, kernel_names
    )
    if nvidia is not None:
        return Vendor.NVIDIA, nvidia
    if meta.cuda_driver_version is not None or meta.cuda_runtime_version is not None:
        return Vendor.NVIDIA, "cuda_driver_version / cuda_runtime_version in the trace"
    if len(model.kernels) or len(model.copies) or len(model.memsets):
        # Kernels from a tool that says nothing else: gpuadvisor's home ground is CUDA; say so.
        return Vendor.NVIDIA, "GPU kernels without vendor details (assumed CUDA)"
    return Vendor.NONE, ""


def _workload(model: TraceModel) -> tuple[Workload, str]:
    evidence: list[str] = []
    for table in (model.cpu_ops, model.annotations):
        n, names = _count_matching(table, _BACKWARD_OP)
        if n:
            evidence.append(f"{n:,} backward spans ({_examples(names)})")
            break
    n_opt, opt_names = _count_matching(model.annotations, _OPTIMIZER_SPAN)
    if not n_opt:
        n_opt, opt_names = _count_matching(model.cpu_ops, _OPTIMIZER_SPAN)
    if n_opt:
        evidence.append(f"{n_opt:,} optimizer steps ({_examples(opt_names, 1)})")
    k = model.kernels
    if len(k):
        n_bk, _ = _count_matching(k, _BACKWARD_KERNEL)
        fam = k["family"].astype(str)
        n_ok = int((fam == "optimizer").sum())
        if n_bk and not evidence:
            evidence.append(f"{n_bk:,} backward kernels")
        if n_ok and not n_opt:
            evidence.append(f"{n_ok:,} optimizer kernels")
    if evidence:
        return Workload.TRAINING, "; ".join(evidence)
    host = len(model.cpu_ops)
    if len(k):
        # A training step runs backward kernels (*_backward*, wgrad/dgrad...) and an optimizer: GPU work
        # with neither, and host ops without a backward or an optimizer step, is inference.
        where = (
            f"{host:,} host ops without a backward pass or an optimizer step; " if host else "no host ops; "
        )
        return (
            Workload.INFERENCE,
            where + f"none of the {len(k):,} GPU kernels is a backward or optimizer kernel",
        )
    if host >= MIN_HOST_OPS_FOR_INFERENCE:
        return Workload.INFERENCE, f"{host:,} host ops recorded, no backward pass and no optimizer step"
    return Workload.UNKNOWN, f"only {host} host ops and no GPU kernels: too little to tell"


def _graph_launches(model: TraceModel) -> tuple[int, int]:
    rt = model.runtime
    if not len(rt):
        return 0, 0
    is_graph = name_mask(rt["name"], lambda s: s.str.contains(_GRAPH_LAUNCH))
    if not is_graph.any():
        return 0, 0
    corr = {int(c) for c in rt["correlation"][is_graph] if not pd_isna(c)}
    kernels = int(model.kernels["correlation"].isin(corr).sum()) if len(model.kernels) and corr else 0
    return int(is_graph.sum()), kernels


def _capture_in_window(spans: Iterable[tuple[float, float]], steps: pd.DataFrame) -> bool:
    if not len(steps):
        return False
    keep = steps[analyzed_mask(steps)]
    return any(bool(((keep["start"] < e) & (keep["end"] > s)).any()) for s, e in spans)


def classify(model: TraceModel, capture: CaptureScan | None = None) -> TraceKind:
    """Decide what `model` is. `capture`: the loader's scan (it removed the captured launches from the
    runtime table); without it the runtime table is scanned here."""
    meta = model.meta
    if capture is None:
        corr = [*model.kernels["correlation"], *model.copies["correlation"], *model.memsets["correlation"]]
        capture, _ = scan_graph_captures(model.runtime, corr)
    vendor, vendor_evidence = _vendor(model)
    workload, workload_evidence = _workload(model)
    device_events = sum(n for c, n in model.counts.items() if c.lower() in ("mtia_ccp_events",))
    tables = (model.kernels, model.copies, model.memsets, model.runtime, model.cpu_ops, model.annotations)
    has_events = any(len(t) for t in tables) or device_events > 0
    accelerator = bool(len(model.kernels) or len(model.copies) or len(model.memsets) or device_events)
    launches = 0
    if not len(model.kernels) and len(model.runtime):
        launches, _ = _count_matching(model.runtime, re.compile(r"LaunchKernel|cuLaunch"))
    old = tuple(c for c in _OLD_CATEGORIES if model.counts.get(c))
    version = meta.schema_version
    if old:
        schema = SchemaStatus.OLD
    elif version is None:
        schema = SchemaStatus.UNVERSIONED
    elif version not in KNOWN_SCHEMA_VERSIONS:
        schema = SchemaStatus.UNKNOWN
    else:
        schema = SchemaStatus.CURRENT
    graph_launches, graph_kernels = _graph_launches(model)
    triton = [n for n in _names(model.kernels) if is_triton(n)]
    compile_spans = 0
    compile_names: list[str] = []
    for table in (model.cpu_ops, model.annotations):
        n, names = _count_matching(table, _COMPILE_SPAN)
        compile_spans += n
        compile_names += names
    compile_bits = []
    if triton:
        compile_bits.append(f"{len(triton)} distinct Triton kernels")
    if compile_spans:
        compile_bits.append(f"{compile_spans} compiled-region spans ({_examples(compile_names)})")
    dist = meta.distributed_info or {}
    device_name = None
    if meta.device_properties:
        name = meta.device_properties[0].get("name")
        device_name = str(name) if name else None
    return TraceKind(
        vendor=vendor,
        vendor_evidence=vendor_evidence,
        device_name=device_name,
        workload=workload,
        workload_evidence=workload_evidence,
        has_events=bool(has_events),
        accelerator_activity=accelerator,
        launches_without_kernels=launches,
        device_events_not_analyzed=device_events if vendor is Vendor.MTIA else 0,
        schema_version=version,
        schema=schema,
        old_categories=old,
        graph_capture_calls=capture.begin_calls,
        captured_launches=capture.captured_launches,
        capture_in_window=_capture_in_window(capture.spans, model.steps),
        capture_api=capture.api_prefix,
        graph_launches=graph_launches,
        graph_kernels=graph_kernels,
        torch_compile=bool(triton or compile_spans),
        compile_evidence="; ".join(compile_bits),
        triton_kernels=len(triton),
        rank=_int(dist.get("rank")),
        world_size=_int(dist.get("world_size")),
        backend=str(dist["backend"]) if dist.get("backend") is not None else None,
    )


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def kind_of(model: TraceModel) -> TraceKind:
    """`model.kind`, classified (and kept on the model) when the model was built without the loader."""
    kind = getattr(model, "kind", None)
    if isinstance(kind, TraceKind):
        return kind
    kind = classify(model)
    with contextlib.suppress(AttributeError):  # a duck-typed stand-in without the attribute
        model.kind = kind
    return kind


def job_labels(kinds: Mapping[int, TraceKind]) -> tuple[str, ...]:
    """Labels for a multi-rank analysis (rank -> kind): said once for the job."""
    if len(kinds) <= 1:
        return ()
    ranks = sorted(kinds)
    sizes = {k.world_size for k in kinds.values() if k.world_size is not None}
    size = f" of a {sizes.pop()}-rank job" if len(sizes) == 1 else ""
    return (f"multi-rank analysis: {len(ranks)} ranks ({', '.join(map(str, ranks))}){size}",)
