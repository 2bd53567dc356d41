"""channels_last (NHWC) in the replay (issue 41; docs/model.md, "channels_last and the NHWC table").

Converting a conv net to `torch.channels_last` changes every op that reads its 4-D activations, not
only the convolutions: cuDNN's layout transposes around its NHWC kernels go, BatchNorm runs its
channels-last kernels, and other families (GroupNorm, upsampling, pooling...) take their own NHWC path,
which PyTorch may implement well, poorly, or by converting back. Which way each family goes is a
measured fact per op family and dtype, not a pattern: `benchmarks/nhwc_table.py` times each family in
both layouts on a GPU (forward and backward, CUDA events, medians) and its result ships as
`gpuadvisor/data/nhwc_table.json`.

`channels_last_plan(model)` puts every kernel of the analyzed steps that works on a 4-D activation
into its family (`op_family`, from the launching op's name and recorded shapes) and gives it the factor
the conversion applies to its duration:

- a family the table measured for the kernel's dtype: the measured ratio (channels_last time / NCHW
  time of the op, every kernel it launches: a convolution's transposes included), slower or faster;
- a family the table lacks, where the mechanism is known by construction: cuDNN's layout transposes
  launched by a convolution go (its NHWC kernels are the ones it already runs), BatchNorm runs its
  channels-last kernels at the calibrated bytes model (`BusyConstants.channels_last_norm_fraction`);
- any other unmeasured family keeps its time, and counts as unmeasured: the advice built on the replay
  is then unproven (GA1102 says so and rates it at most medium).

Without the data file (or with a family missing from it) everything falls back to the second and third
cases: the machinery works with an empty table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from gpuadvisor.stepmodel.busy import BUSY, BusyConstants, _parse, _peak, _shapes
from gpuadvisor.stepmodel.kernels import column_codes, combined_codes

if TYPE_CHECKING:
    from gpuadvisor.stepmodel.model import StepModel

__all__ = [
    "FAMILIES",
    "FAMILY_LABELS",
    "ChannelsLastPlan",
    "FamilyTime",
    "NhwcEntry",
    "NhwcTable",
    "channels_last_plan",
    "layout_transposes",
    "load_nhwc_table",
    "op_family",
    "table_dtype",
]

FAMILIES: tuple[str, ...] = (
    "conv",
    "conv_depthwise",
    "conv_grouped",
    "batch_norm",
    "group_norm",
    "layer_norm_channels",
    "instance_norm",
    "pooling",
    "upsample",
    "elementwise",
    "cat",
)

FAMILY_LABELS: Mapping[str, str] = {
    "conv": "convolutions",
    "conv_depthwise": "depthwise convolutions",
    "conv_grouped": "grouped convolutions",
    "batch_norm": "BatchNorm",
    "group_norm": "GroupNorm",
    "layer_norm_channels": "LayerNorm over channels",
    "instance_norm": "InstanceNorm",
    "pooling": "pooling",
    "upsample": "upsampling/interpolate",
    "elementwise": "elementwise ops on 4-D activations",
    "cat": "concatenation",
}

# What an unmeasured family might cost in channels_last: an op whose NHWC path converts its input back to
# NCHW and its output to channels_last inside moves its activations twice more than it does today, about
# twice its time for a memory-bound op (the worst case the advice must survive to be called proven).
UNMEASURED_WORST_RATIO = 2.0

# A measured ratio within this band of 1 is "the same speed" in words (the replay uses the ratio as is).
SAME_SPEED_BAND = 0.05

# The table's dtypes: FP32 data is one entry whether cuDNN runs its convolutions in TF32 (the default)
# or not; the kernel table says "tf32" for FP32 data on tensor cores.
_TABLE_DTYPE: Mapping[str, str] = {"fp32": "fp32", "tf32": "fp32", "bf16": "bf16", "fp16": "fp16"}

TABLE_RESOURCE = "nhwc_table.json"


def table_dtype(kernel_dtype: str) -> str | None:
    """The NHWC table's dtype key of a kernel-table dtype (None: not a dtype the table measures)."""
    return _TABLE_DTYPE.get(kernel_dtype)


# ---- the measured table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NhwcEntry:
    """One family in one dtype: the median over the measured shapes of channels_last time / NCHW time
    (forward + backward), and the range over the shapes."""

    ratio: float
    low: float
    high: float
    shapes: int

    @property
    def slower(self) -> bool:
        return self.ratio > 1.0 + SAME_SPEED_BAND

    @property
    def faster(self) -> bool:
        return self.ratio < 1.0 - SAME_SPEED_BAND


@dataclass(frozen=True)
class NhwcTable:
    """The measured NHWC table (`gpuadvisor/data/nhwc_table.json`), keyed by family and dtype; empty
    when the file is absent or unreadable (`problem` says why)."""

    entries: Mapping[tuple[str, str], NhwcEntry] = field(default_factory=dict)
    source: Mapping[str, Any] = field(default_factory=dict)
    problem: str | None = None

    def get(self, family: str, dtype: str) -> NhwcEntry | None:
        return self.entries.get((family, dtype))

    @property
    def where(self) -> str:
        """Where it was measured, in words ("" when unknown)."""
        parts = [str(self.source[k]) for k in ("gpu", "torch") if self.source.get(k)]
        return ", ".join(parts)

    @classmethod
    def from_json(cls, doc: Any) -> NhwcTable:
        """Read benchmarks/nhwc_table.py's JSON (its `families` summary); entries that are not
        {family: {dtype: {"ratio": positive number, ...}}} are dropped."""
        if not isinstance(doc, Mapping):
            return cls(problem="not a JSON object")
        families = doc.get("families")
        entries: dict[tuple[str, str], NhwcEntry] = {}
        if isinstance(families, Mapping):
            for fam, by_dtype in families.items():
                if fam not in FAMILIES or not isinstance(by_dtype, Mapping):
                    continue
                for dt, e in by_dtype.items():
                    if not isinstance(e, Mapping) or dt not in ("fp32", "bf16", "fp16"):
                        continue
                    ratio = e.get("ratio")
                    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < 100:
                        continue
                    low, high = e.get("min", ratio), e.get("max", ratio)
                    entries[(str(fam), str(dt))] = NhwcEntry(
                        ratio=float(ratio),
                        low=float(low) if isinstance(low, (int, float)) else float(ratio),
                        high=float(high) if isinstance(high, (int, float)) else float(ratio),
                        shapes=int(e.get("shapes", 1)) if isinstance(e.get("shapes"), int) else 1,
                    )
        source = doc.get("source")
        return cls(entries=entries, source=dict(source) if isinstance(source, Mapping) else {})


@lru_cache(maxsize=1)
def load_nhwc_table() -> NhwcTable:
    """The table shipped in the package (read once); an empty table when it is not there yet."""
    try:
        text = resources.files("gpuadvisor").joinpath("data").joinpath(TABLE_RESOURCE).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        return NhwcTable(problem="no NHWC table in this installation (gpuadvisor/data/nhwc_table.json)")
    try:
        return NhwcTable.from_json(json.loads(text))
    except ValueError as exc:
        return NhwcTable(problem=f"the NHWC table is not valid JSON: {exc}")


# ---- op families -------------------------------------------------------------------------------------------

_CONV_OPS = frozenset(
    {
        "aten::cudnn_convolution",
        "aten::cudnn_convolution_transpose",
        "aten::convolution",
        "aten::_convolution",
        "aten::conv2d",
        "aten::convolution_backward",
        "aten::_conv_depthwise2d",
        "aten::conv_depthwise2d",
        "aten::slow_conv_dilated2d",
        "aten::cudnn_convolution_relu",
        "aten::cudnn_convolution_add_relu",
    }
)


def _four_d(shape: tuple[int, ...] | None) -> bool:
    return shape is not None and len(shape) == 4


_TRANSPOSED_CONV_OPS = frozenset({"aten::cudnn_convolution_transpose", "aten::conv_transpose2d"})


def transposed_conv_keys(ops_dims: Any) -> set[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(input, weight) shapes of the transposed convolutions among (op, dims) pairs: their backward
    (`aten::convolution_backward`, the same input and weight) is a transposed convolution too."""
    out: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    for op, dims in ops_dims:
        if op in _TRANSPOSED_CONV_OPS:
            shapes = _shapes(dims)
            if len(shapes) >= 2:
                out.add((shapes[0], shapes[1]))
    return out


def op_family(
    op: str,
    dims: str,
    kernel_class: str,
    transposed: set[tuple[tuple[int, ...], tuple[int, ...]]] | frozenset[Any] = frozenset(),
) -> str | None:
    """The family of a kernel launched by `op` with recorded input dims `dims` (Kineto's "Input Dims"
    text), when the op works on a 4-D activation; None otherwise (a linear head, the optimizer, a
    reduction over the features...). Convolutions split by groups (weight [K, C/g, R, S] against the
    input's C): depthwise when g equals C, grouped when 1 < g < C; a transposed convolution's weight is
    [C, K/g, R, S], which says nothing of g: `transposed` holds the (input, weight) shapes of the run's
    transposed convolutions (`transposed_conv_keys`), counted as plain convolutions."""
    name = op.lower()
    if op == "aten::cat":
        head = _parse(dims)[:1]
        tensors = head[0] if head and isinstance(head[0], list) else []
        ok = any(isinstance(t, list) and len(t) == 4 for t in tensors)
        return "cat" if ok else None
    shapes = _shapes(dims)
    first: tuple[int, ...] | None = shapes[0] if shapes else None
    if op in _CONV_OPS:
        backward = "backward" in name
        x = shapes[1] if backward and len(shapes) >= 3 else first
        w = shapes[2] if backward and len(shapes) >= 3 else (shapes[1] if len(shapes) >= 2 else None)
        if not _four_d(x):
            return None
        if op in _TRANSPOSED_CONV_OPS or (x is not None and w is not None and (x, w) in transposed):
            return "conv"
        if not _four_d(w) or not w or w[1] <= 0 or x is None:
            return "conv"
        groups = x[1] // w[1] if x[1] % w[1] == 0 else 1
        if groups <= 1:
            return "conv"
        return "conv_depthwise" if groups == x[1] else "conv_grouped"
    if not _four_d(first):
        return None
    assert first is not None
    if "instance_norm" in name:
        return "instance_norm"
    if "batch_norm" in name:
        # F.instance_norm runs batch norm on the input viewed as [1, N x C, H, W]
        return "instance_norm" if first[0] == 1 else "batch_norm"
    if "group_norm" in name:
        return "group_norm"
    if "layer_norm" in name:
        return "layer_norm_channels"
    if "pool" in name:
        return "pooling"
    if "upsample" in name or "grid_sampler" in name:
        return "upsample"
    if kernel_class in ("elementwise", "copy"):
        return "elementwise"
    return None


def layout_transposes(model: StepModel) -> Any:
    """Per kernel-table row: cuDNN's NCHW<->NHWC layout transposes around its NHWC kernels (launched by a
    convolution op, or named nchwToNhwc/nhwcToNchw): what channels_last removes."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    t = model.kernel_table
    if len(t) == 0:
        return np.zeros(0, dtype=bool)
    cached = model._derived.get("layout_transposes")
    if cached is not None:
        return cached
    name_c, name_u = column_codes(model, "name")
    op_c, op_u = column_codes(model, "op_name")
    pattern = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw", re.I)
    cudnn_u = np.array([bool(pattern.search(n)) for n in name_u], dtype=bool)
    conv_u = np.array(["conv" in o.lower() for o in op_u], dtype=bool)
    cls = t["class"].to_numpy(dtype=object)
    out: Any = (cls == "layout_transpose") & (cudnn_u[name_c] | conv_u[op_c])
    model._derived["layout_transposes"] = out
    return out


# ---- the plan -----------------------------------------------------------------------------------------------

MEASURED = "measured"  # the NHWC table's ratio for the family and dtype
STRUCTURAL = "structural"  # known by construction (cuDNN's transposes) or calibrated (BatchNorm's bytes)
UNMEASURED = "unmeasured"  # kept as it is, and unknown


@dataclass(frozen=True)
class FamilyTime:
    """One family of the run in one dtype: its kernel time per analyzed step and what the replay does
    with it."""

    family: str
    dtype: str
    time_per_step_us: float
    status: str  # MEASURED / STRUCTURAL / UNMEASURED
    ratio: float | None  # the table's ratio (MEASURED), else None
    predicted_per_step_us: float  # its time after the conversion in the replay

    @property
    def label(self) -> str:
        return FAMILY_LABELS.get(self.family, self.family)

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "dtype": self.dtype,
            "time_per_step_us": round(self.time_per_step_us, 1),
            "status": self.status,
            "ratio": None if self.ratio is None else round(self.ratio, 3),
            "predicted_per_step_us": round(self.predicted_per_step_us, 1),
        }


@dataclass
class ChannelsLastPlan:
    factor: Any  # per kernel-table row: the factor the conversion applies to its duration
    families: list[FamilyTime]
    table: NhwcTable

    @property
    def saving_us(self) -> float:
        """Kernel time per step the conversion saves (negative: it costs), in the trace's time."""
        return sum(f.time_per_step_us - f.predicted_per_step_us for f in self.families)

    @property
    def unmeasured_us(self) -> float:
        return sum(f.time_per_step_us for f in self.families if f.status == UNMEASURED)

    @property
    def slower(self) -> list[FamilyTime]:
        """Families the table measured slower in channels_last (beyond the same-speed band)."""
        return [f for f in self.families if f.ratio is not None and f.ratio > 1.0 + SAME_SPEED_BAND]

    @property
    def unmeasured(self) -> list[FamilyTime]:
        return [f for f in self.families if f.status == UNMEASURED]

    def unproven(self, saving_us: float) -> bool:
        """Could the unmeasured families cancel a predicted saving of `saving_us` per step? A family whose
        NHWC path converts back to NCHW inside reads and writes its activations twice more: about
        `UNMEASURED_WORST_RATIO` times its time. Unproven when that extra reaches the saving."""
        extra = self.unmeasured_us * (UNMEASURED_WORST_RATIO - 1.0)
        return extra > 0 and extra >= saving_us


def channels_last_plan(
    model: StepModel, table: NhwcTable | None = None, c: BusyConstants | None = None
) -> ChannelsLastPlan:
    """What converting the model and its input to channels_last does to each kernel of the analyzed
    steps (cached per model for the shipped table). See the module docstring."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    cache = table is None and c is None
    if cache and "channels_last_plan" in model._derived:
        hit: ChannelsLastPlan = model._derived["channels_last_plan"]
        return hit
    table = table if table is not None else load_nhwc_table()
    c = c or BUSY
    t = model.kernel_table
    n = len(t)
    factor = np.ones(n)
    if n == 0:
        return ChannelsLastPlan(factor, [], table)
    op_c, op_u = column_codes(model, "op_name")
    dims_c, dims_u = column_codes(model, "op_input_dims")
    cls = t["class"].to_numpy(dtype=object)
    cls_u, cls_c = np.unique(cls.astype(str), return_inverse=True)
    codes, first = combined_codes(op_c, dims_c, cls_c)
    uniques = [(op_u[op_c[i]], dims_u[dims_c[i]], str(cls_u[cls_c[i]])) for i in first.tolist()]
    transposed = transposed_conv_keys((o, d) for o, d, _ in uniques)
    fam_u = [op_family(o, d, k, transposed) for o, d, k in uniques]
    family = np.asarray(fam_u, dtype=object)[codes] if len(fam_u) else np.full(n, None, dtype=object)
    dtype = np.array([table_dtype(str(d)) or "" for d in t["dtype"].to_numpy(dtype=object)], dtype=object)
    if (dtype == "").any():
        # ops whose inputs are tensor lists (aten::cat) record no element type: the kernel's name has it
        name_c, name_u = column_codes(model, "name")
        two_bytes = "bf16" if (dtype == "bf16").any() or not (dtype == "fp16").any() else "fp16"
        by_name = np.array([_dtype_in_name(x, two_bytes) for x in name_u], dtype=object)
        dtype = np.where(dtype == "", by_name[name_c], dtype)
    transposes = layout_transposes(model)
    # the transposes belong to the convolution that launched them (a conv op's every kernel is the
    # family's time); those named by cuDNN without a known op too
    family = np.where(transposes & (family == None), "conv", family)  # noqa: E711
    norm_f = _batch_norm_bytes_factor(model, c) if transposes.any() else np.ones(n)
    status = np.full(n, "", dtype=object)
    dur = t["dur"].to_numpy(dtype=np.float64)
    for fam in FAMILIES:
        sel = family == fam
        if not sel.any():
            continue
        for dt in sorted(set(dtype[sel].tolist())):
            rows = sel & (dtype == dt)
            entry = table.get(fam, dt) if dt else None
            if entry is not None:
                factor[rows] = entry.ratio
                status[rows] = MEASURED
            elif fam in ("conv", "conv_grouped", "conv_depthwise") and transposes[rows].any():
                # cuDNN already runs NHWC kernels here: channels_last removes the transposes, nothing else
                factor[rows & transposes] = 0.0
                status[rows] = STRUCTURAL
            elif fam == "batch_norm" and transposes.any() and c.channels_last_norm_fraction is not None:
                factor[rows] = norm_f[rows]
                status[rows] = STRUCTURAL
            else:
                status[rows] = UNMEASURED
    steps = max(1, model.window.count)
    families: list[FamilyTime] = []
    for fam in FAMILIES:
        for dt in sorted({str(d) for d in dtype[family == fam].tolist()}):
            rows = (family == fam) & (dtype == dt)
            entry = table.get(fam, dt) if dt else None
            families.append(
                FamilyTime(
                    family=fam,
                    dtype=dt or "unknown",
                    time_per_step_us=float(dur[rows].sum()) / steps,
                    status=str(status[rows][0]),
                    ratio=entry.ratio if entry is not None else None,
                    predicted_per_step_us=float((dur[rows] * factor[rows]).sum()) / steps,
                )
            )
    families.sort(key=lambda f: -f.time_per_step_us)
    plan = ChannelsLastPlan(factor, families, table)
    if cache:
        model._derived["channels_last_plan"] = plan
    return plan


def _dtype_in_name(kernel: str, two_bytes: str) -> str:
    """The table dtype a kernel's name spells out in its template arguments ("" when none); an opaque
    2-byte element (the concatenation kernels') is the run's 16-bit dtype `two_bytes`."""
    if "OpaqueType<2u>" in kernel:
        return two_bytes
    if "OpaqueType<4u>" in kernel:
        return "fp32"
    if "BFloat16" in kernel:
        return "bf16"
    if "Half" in kernel or "__half" in kernel:
        return "fp16"
    if "<float" in kernel or " float," in kernel or "float>" in kernel:
        return "fp32"
    return ""


def _batch_norm_bytes_factor(model: StepModel, c: BusyConstants) -> Any:
    """Per kernel-table row: BatchNorm's channels-last kernels, bound by their per-element work, stream
    the FP32-equivalent bytes (4 per element, bf16 or not) at `channels_last_norm_fraction` of the
    bandwidth, never slower than now (calibrated on ResNet-50 FP32 NCHW -> channels_last; docs/model.md).
    1 for rows this does not apply to."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    t = model.kernel_table
    out = np.ones(len(t))
    peak = _peak(model)
    if c.channels_last_norm_fraction is None or peak is None or not peak.bandwidth_tbps:
        return out
    norm = t["class"].to_numpy(dtype=object) == "normalization"
    dtype = t["dtype"].to_numpy(dtype=object)
    elt = np.where(np.isin(dtype, ["bf16", "fp16"]), 2.0, np.where(dtype == "fp8", 1.0, 4.0))
    nbytes = t["bytes"].to_numpy(dtype=np.float64)
    dur = t["dur"].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        new = nbytes * (4.0 / elt) / (c.channels_last_norm_fraction * peak.bandwidth_tbps * 1e6)
        f = np.where(norm & np.isfinite(new) & (dur > 0), np.minimum(1.0, new / dur), 1.0)
    return np.asarray(f, dtype=np.float64)


def channels_last_factor(model: StepModel) -> Any:
    """Per kernel-table row: the factor channels_last applies to its duration (the plan's)."""
    return channels_last_plan(model).factor
