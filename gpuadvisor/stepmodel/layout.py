"""channels_last (NHWC) in the replay (issue 41; docs/model.md, "channels_last and the NHWC table").

Converting a conv net to `torch.channels_last` changes every op that reads its 4-D activations, not
only the convolutions: cuDNN's layout transposes around its NHWC kernels go, BatchNorm runs its
channels-last kernels, and other families (GroupNorm, upsampling, pooling...) take their own NHWC path,
which PyTorch may implement well, poorly, or by converting back. Which way each family goes is
measured, not assumed: `benchmarks/nhwc_table.py` times each family in both layouts on a GPU and its
result ships as `gpuadvisor/data/nhwc_table.json` (gpuadvisor.stepmodel.nhwc reads it).

`channels_last_plan(model)` puts every kernel of the analyzed steps that works on a 4-D activation
into its family (`op_family`, from the launching op's name and recorded shapes) and gives it the factor
the conversion applies to its duration. Only a run whose convolutions show cuDNN's layout transposes
is known to run in NCHW; without them nothing changes (a channels_last net has none).

- Convolutions (plain, depthwise, grouped) follow the user's own trace: cuDNN's transposes go, its NHWC
  kernels are the ones it already runs, and a convolution it runs without transposes keeps its kernels.
  The table's convolutions, timed alone, are not used: on the three networks whose conversion was
  measured end to end (ResNet-50 FP32 and bf16, a bf16 UNet: 30%, 46%, 58%), removing the transposes
  predicted 31%, 49%, 67%, and the table's conv and BatchNorm ratios (bf16 0.73x and 1.13x) 5%, 1%, 0%.
  BatchNorm likewise: its channels-last kernels at the calibrated bytes model
  (`BusyConstants.channels_last_norm_fraction`; control_resnet50's recorded channels-last BatchNorm took
  what it predicts).
- Every other kernel of a family the table measured for its dtype: the ratio at the measured shape
  nearest its activation (`NhwcTable.ratio_at`), slower or faster.
- Any other family keeps its time and counts as unmeasured: the advice built on the replay is then
  unproven (GA1102 says so and rates it at most medium).
- Families whose channels_last path gives back NCHW on the GPU (GroupNorm, InstanceNorm:
  `NhwcTable.converts_back`) end the channels_last activations (`layout_flow`): walking each analyzed
  step's forward, the ops after such a family and before the next convolution see NCHW tensors in the
  converted net too, and run as they do now; a convolution fed by them gets an NCHW input with
  channels_last weights, which PyTorch converts (`input.contiguous(channels_last)`) in the forward and
  converts back for its gradient in the backward, at the conversion cost the table measured
  (`NhwcTable.conversion_ps_per_element`) instead of cuDNN's transposes.

Without the data file everything but the convolutions' transposes and BatchNorm is unmeasured: the
machinery works with an empty table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuadvisor.namepattern import NamePattern
from gpuadvisor.stepmodel.build import within
from gpuadvisor.stepmodel.busy import BUSY, BusyConstants, _parse, _peak, _prod, _shapes
from gpuadvisor.stepmodel.kernels import column_codes, combined_codes
from gpuadvisor.stepmodel.nhwc import (
    FAMILIES,
    FAMILY_LABELS,
    SAME_SPEED_BAND,
    NhwcEntry,
    NhwcTable,
    load_nhwc_table,
    table_dtype,
)

if TYPE_CHECKING:
    from gpuadvisor.stepmodel.model import StepModel

__all__ = [
    "FAMILIES",
    "FAMILY_LABELS",
    "ChannelsLastPlan",
    "FamilyTime",
    "LayoutFlow",
    "NhwcEntry",
    "NhwcTable",
    "channels_last_plan",
    "layout_flow",
    "layout_transposes",
    "load_nhwc_table",
    "op_family",
    "table_dtype",
]

# What an unmeasured family might cost in channels_last: an op whose NHWC path converts its input back to
# NCHW and its output to channels_last inside moves its activations twice more than it does today, about
# twice its time for a memory-bound op (the worst case the advice must survive to be called proven).
UNMEASURED_WORST_RATIO = 2.0

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


# cuDNN's own NCHW<->NHWC conversions (the kernel names; told once per name signature)
_CUDNN_TRANSPOSE = NamePattern(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw")
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
    cudnn_u = np.array([_CUDNN_TRANSPOSE.matches(n) for n in name_u], dtype=bool)
    conv_u = np.array(["conv" in o.lower() for o in op_u], dtype=bool)
    cls = t["class"].to_numpy(dtype=object)
    out: Any = (cls == "layout_transpose") & (cudnn_u[name_c] | conv_u[op_c])
    model._derived["layout_transposes"] = out
    return out


# ---- which activations stay NCHW in the converted net ------------------------------------------------------


def _activation(op: str, dims: str) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """(the 4-D activation an op reads, a convolution's weight) from its recorded input dims: a
    convolution's backward reads [grad_out, input, weight]; a concatenation its first tensor."""
    if op == "aten::cat":
        head = _parse(dims)[:1]
        tensors = [tuple(t) for t in (head[0] if head and isinstance(head[0], list) else []) if isinstance(t, list)]
        return next((t for t in tensors if len(t) == 4), None), None
    shapes = _shapes(dims)
    if op in _CONV_OPS and "backward" in op.lower() and len(shapes) >= 3:
        return shapes[1], shapes[2]
    x = shapes[0] if shapes and _four_d(shapes[0]) else None
    return x, (shapes[1] if op in _CONV_OPS and len(shapes) >= 2 else None)


def _variant(op: str) -> str:
    """The word of the NHWC table's variant names that an op's name spells ("" when none)."""
    name = op.lower()
    return next((v for v in ("bilinear", "bicubic", "nearest", "max", "avg") if v in name), "")


_ENGINE_PREFIX = "autograd::engine::evaluate_function"


@dataclass(frozen=True)
class LayoutFlow:
    """Where the converted net's activations would be NCHW again: per family, the share of its forward
    work (by activation elements) that comes after a family converting back and before the next
    convolution; per convolution (input, weight) shapes, the share of its calls fed that way."""

    breakers: frozenset[str] = frozenset()  # the converting-back families the forward runs
    family_share: dict[str, float] = field(default_factory=dict)
    conv_share: dict[tuple[tuple[int, ...], tuple[int, ...]], float] = field(default_factory=dict)


def layout_flow(model: StepModel, table: NhwcTable) -> LayoutFlow:
    """Walk each analyzed step's forward (the ops outside the autograd engine's backward, the outermost of
    each nest) with the layout the converted net would have: channels_last from the step's start and
    after every convolution, NCHW after a family of `table.converts_back`. Skip connections are not
    followed: the walk is in the order the ops ran."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    ops = model.trace.cpu_ops
    win = model.window
    if len(ops) == 0 or win.count == 0:
        return LayoutFlow()
    names = ops["name"].astype(str).to_numpy(dtype=object)
    ts = ops["ts"].to_numpy(dtype=np.float64)
    end = ops["end"].to_numpy(dtype=np.float64)
    tid = ops["tid"].astype("float64").to_numpy()
    dims = ops["input_dims"].fillna("").astype(str).to_numpy(dtype=object)
    step = win.step_index(ts)
    engine = np.array([n.startswith(_ENGINE_PREFIX) for n in names], dtype=bool)
    backward = np.zeros(len(ops), dtype=bool)
    for t in np.unique(tid[engine]).tolist():
        on = tid == t
        backward[on] = within(ts[engine & on], end[engine & on], ts[on])
    cand = np.flatnonzero((step >= 0) & ~backward & ~engine)
    cand = cand[np.argsort(ts[cand], kind="stable")]
    walked: list[tuple[int, str]] = []
    last_end: dict[float, float] = {}
    for i in cand.tolist():
        name = str(names[i])
        if "backward" in name.lower() or ts[i] < last_end.get(float(tid[i]), -np.inf):
            continue
        fam = op_family(name, str(dims[i]), "")
        if fam is None:
            continue
        last_end[float(tid[i])] = float(end[i])
        walked.append((i, fam))
    breakers = frozenset(f for _, f in walked if f in table.converts_back)
    if not breakers:
        return LayoutFlow()
    fam_w: dict[str, list[float]] = {}
    conv_n: dict[tuple[tuple[int, ...], tuple[int, ...]], list[float]] = {}
    nchw, current = False, -1
    for i, fam in walked:
        if step[i] != current:  # each step's input arrives in channels_last
            nchw, current = False, int(step[i])
        x, w = _activation(str(names[i]), str(dims[i]))
        weight = float(_prod(x)) if x else 1.0
        acc = fam_w.setdefault(fam, [0.0, 0.0])
        acc[0] += weight
        acc[1] += weight if nchw else 0.0
        if fam.startswith("conv"):
            if x is not None and w is not None:
                n = conv_n.setdefault((x, w), [0.0, 0.0])
                n[0] += 1.0
                n[1] += 1.0 if nchw else 0.0
            nchw = False
        elif fam in table.converts_back:
            nchw = True
    return LayoutFlow(
        breakers=breakers,
        family_share={f: a[1] / a[0] for f, a in fam_w.items() if a[0] > 0},
        conv_share={k: n[1] / n[0] for k, n in conv_n.items() if n[0] > 0},
    )


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
    ratio: float | None  # the ratio the table measured (MEASURED: time-weighted over its kernels), else None
    predicted_per_step_us: float  # its time after the conversion in the replay
    nchw_share: float = 0.0  # the share of its time that would still see NCHW tensors (`layout_flow`)
    conversion_per_step_us: float = 0.0  # PyTorch's conversions of NCHW inputs to convolutions, added

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
            "nchw_share": round(self.nchw_share, 3),
            "conversion_per_step_us": round(self.conversion_per_step_us, 1),
        }


@dataclass
class ChannelsLastPlan:
    factor: Any  # per kernel-table row: the factor the conversion applies to its duration
    families: list[FamilyTime]
    table: NhwcTable
    breakers: frozenset[str] = frozenset()  # families converting back that the forward runs

    @property
    def saving_us(self) -> float:
        """Kernel time per step the conversion saves (negative: it costs), in the trace's time."""
        return sum(f.time_per_step_us - f.predicted_per_step_us for f in self.families)

    @property
    def unmeasured_us(self) -> float:
        return sum(f.time_per_step_us for f in self.families if f.status == UNMEASURED)

    @property
    def conversion_us(self) -> float:
        """PyTorch's conversions of NCHW activations into channels_last convolutions, per step."""
        return sum(f.conversion_per_step_us for f in self.families)

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
    transposes = layout_transposes(model)
    if n == 0 or not transposes.any():
        # no cuDNN transposes: nothing says the activations are NCHW (a channels_last net has none)
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
    # the transposes belong to the convolution that launched them (a conv op's every kernel is the
    # family's time); those named by cuDNN without a known op too
    family = np.where(transposes & (family == None), "conv", family)  # noqa: E711
    acts = [_activation(o, d) for o, d, _ in uniques]
    elements = np.array([float(_prod(x)) if x else np.nan for x, _ in acts])[codes]
    variant_u = np.array([_variant(o) for o, _, _ in uniques], dtype=object)
    variant = variant_u[codes]
    group, _ = combined_codes(op_c, dims_c)  # the launching op and its shapes
    flow = layout_flow(model, table)
    norm_f = _batch_norm_bytes_factor(model, c)
    status = np.full(n, "", dtype=object)
    measured = np.full(n, np.nan)
    dur = t["dur"].to_numpy(dtype=np.float64)
    for fam in FAMILIES:
        sel = family == fam
        if not sel.any():
            continue
        for dt in sorted(set(dtype[sel].tolist())):
            rows = sel & (dtype == dt)
            if fam.startswith("conv"):
                # cuDNN already runs NHWC kernels where it transposes: channels_last removes the transposes,
                # nothing else; a convolution it runs without them keeps its kernels
                factor[rows & transposes] = 0.0
                status[rows] = STRUCTURAL
                continue
            if fam == "batch_norm" and c.channels_last_norm_fraction is not None:
                factor[rows] = norm_f[rows]
                status[rows] = STRUCTURAL
                continue
            rest = rows & (status == "")
            for i in np.flatnonzero(rest).tolist():
                r = table.ratio_at(fam, dt, elements[i], str(variant[i])) if dt else None
                if r is not None:
                    factor[i] = measured[i] = r
            status[rest & ~np.isnan(measured)] = MEASURED
            status[rest & np.isnan(measured)] = UNMEASURED
    share = np.zeros(n)
    for fam, s in flow.family_share.items():
        share[family == fam] = s
    conversion = _conversions(model, table, flow, family, dtype, group, codes, acts)
    share[[str(f).startswith("conv") for f in family]] = 0.0  # fed convolutions: converted instead (above)
    factor = share + (1.0 - share) * factor + np.where(dur > 0, conversion / np.where(dur > 0, dur, 1.0), 0.0)
    steps = max(1, model.window.count)
    families: list[FamilyTime] = []
    for fam in FAMILIES:
        for dt in sorted({str(d) for d in dtype[family == fam].tolist()}):
            rows = (family == fam) & (dtype == dt)
            m = rows & ~np.isnan(measured)
            total = float(dur[rows].sum())
            families.append(
                FamilyTime(
                    family=fam,
                    dtype=dt or "unknown",
                    time_per_step_us=total / steps,
                    status=_main_status(status[rows], dur[rows]),
                    ratio=float((dur[m] * measured[m]).sum() / dur[m].sum()) if dur[m].sum() > 0 else None,
                    predicted_per_step_us=float((dur[rows] * factor[rows]).sum()) / steps,
                    nchw_share=float((dur[rows] * share[rows]).sum() / total) if total > 0 else 0.0,
                    conversion_per_step_us=float(conversion[rows].sum()) / steps,
                )
            )
    families.sort(key=lambda f: -f.time_per_step_us)
    plan = ChannelsLastPlan(factor, families, table, flow.breakers)
    if cache:
        model._derived["channels_last_plan"] = plan
    return plan


def _main_status(status: Any, dur: Any) -> str:
    """The status holding most of the time of a family's kernels."""
    by: dict[str, float] = {}
    for s, d in zip(status.tolist(), dur.tolist(), strict=True):
        by[str(s) or UNMEASURED] = by.get(str(s) or UNMEASURED, 0.0) + float(d)
    return max(sorted(by), key=lambda s: by[s]) if by else UNMEASURED


def _conversions(
    model: StepModel, table: NhwcTable, flow: LayoutFlow, family: Any, dtype: Any, group: Any, codes: Any, acts: Any
) -> Any:
    """Per kernel-table row: the time (us, over the analyzed steps) PyTorch's conversion of a convolution's
    NCHW input to channels_last adds (forward), and of its input gradient back (a backward that computes
    it), spread over the op's kernels by duration: the op's calls x their share fed NCHW (`layout_flow`)
    x the input's elements x the table's conversion cost per element."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    t = model.kernel_table
    out = np.zeros(len(t))
    if not flow.conv_share:
        return out
    dur = t["dur"].to_numpy(dtype=np.float64)
    cls = t["class"].to_numpy(dtype=object)
    ext = model.window_kernels["external_id"].to_numpy(dtype=np.float64)
    is_conv = np.array([str(f).startswith("conv") for f in family], dtype=bool)
    for g in np.unique(group[is_conv]).tolist():
        rows = is_conv & (group == g)
        x, w = acts[int(codes[np.flatnonzero(rows)[0]])]
        share = flow.conv_share.get((x, w), 0.0) if x is not None and w is not None else 0.0
        rate = table.conversion_ps_per_element(str(dtype[rows][0]) or "fp32")
        if share <= 0 or rate is None or x is None:
            continue
        if "conv_dgrad" not in set(cls[rows].tolist()) and "conv_fprop" not in set(cls[rows].tolist()):
            continue  # a weight gradient alone: its input is converted already
        ids = np.unique(ext[rows][~np.isnan(ext[rows])])
        calls = len(ids) if len(ids) else int((rows & ~layout_transposes(model)).sum())
        added = calls * share * float(_prod(x)) * rate / 1e6
        out[rows] = added * dur[rows] / dur[rows].sum() if dur[rows].sum() > 0 else 0.0
    return out


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
