"""Host<->device copies in the step model, shared by GA101 (pageable), GA102 (exposed) and GA103
(wide dtype). The three findings act on the same copy time, so they form one group and carry one
combined prediction (every copy remedy the run needs, replayed together) beside their own."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuadvisor.remedies import RemedyId
from gpuadvisor.stepmodel import build as sb
from gpuadvisor.stepmodel.predict import DEFAULT_MIN_COPY_BYTES, group_fields, predict_combined
from gpuadvisor.stepmodel.predict import group_sentence as predict_group_sentence

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.rules_api import RuleContext
    from gpuadvisor.stepmodel import Prediction, StepModel

GROUP = "host_device_transfer"
CHANNELS = (1, 3, 4)
# the smallest copy that is an input batch (latency-bound copies below it do not gain from pinning)
BATCH_COPY_BYTES = 1 << 20


def image_like(dims: Any) -> list[int] | None:
    """First input's shape when it looks like a batch of images: NCHW or NHWC with 1/3/4 channels."""
    try:
        parsed = ast.literal_eval(dims) if isinstance(dims, str) else dims
        shape = [int(x) for x in parsed[0]]
    except (ValueError, SyntaxError, TypeError, IndexError):
        return None
    if (
        len(shape) == 4
        and (shape[1] in CHANNELS or shape[3] in CHANNELS)
        and min(shape[2], shape[1 if shape[3] in CHANNELS else 3]) >= 8
    ):
        return shape
    return None


def first_type(types: Any) -> str | None:
    try:
        parsed = ast.literal_eval(types) if isinstance(types, str) else types
        return str(parsed[0])
    except (ValueError, SyntaxError, TypeError, IndexError):
        return None


def window_copies(
    model: StepModel, min_bytes: float, directions: tuple[str, ...] = ("HtoD", "DtoH")
) -> pd.DataFrame:
    o = model.window_ops
    c = o[(o["kind"] == "copy") & o["direction"].astype(str).isin(directions)]
    out: pd.DataFrame = c[c["bytes"].fillna(0) >= min_bytes]
    return out


def image_copies(model: StepModel, min_bytes: float) -> tuple[pd.DataFrame, dict[str, int]]:
    """Host-to-device copies of float32 image-shaped tensors (the copy op's first input, from
    record_shapes), and the shapes seen with their counts."""
    trace = model.trace
    copies = window_copies(model, min_bytes, ("HtoD",))
    if len(copies) == 0 or len(trace.cpu_ops) == 0:
        return copies.iloc[0:0], {}
    rt = trace.runtime.dropna(subset=["correlation", "external_id"]).drop_duplicates("correlation")
    rt = rt[rt["correlation"].isin(copies["correlation"].dropna())]
    ext_of_corr = {int(c): int(x) for c, x in zip(rt["correlation"], rt["external_id"], strict=True)}
    wanted = {int(x) for x in copies["external_id"].dropna()} | set(ext_of_corr.values())
    ops = trace.cpu_ops.dropna(subset=["external_id"]).drop_duplicates("external_id", keep="last")
    ops = ops[ops["external_id"].isin(sorted(wanted))]
    op_of_ext = {
        int(e): (d, ty)
        for e, d, ty in zip(ops["external_id"], ops["input_dims"], ops["input_types"], strict=True)
    }
    keep: list[Any] = []
    shapes: dict[str, int] = {}
    for idx, corr, ext in zip(copies.index, copies["correlation"], copies["external_id"], strict=True):
        key = int(ext) if ext == ext else (ext_of_corr.get(int(corr)) if corr == corr else None)
        op = op_of_ext.get(key) if key is not None else None
        if op is None:
            continue
        shape = image_like(op[0])
        if shape is not None and first_type(op[1]) == "float":
            keep.append(idx)
            shapes[str(shape)] = shapes.get(str(shape), 0) + 1
    return copies.loc[keep], shapes


def wide_copies(model: StepModel, min_bytes: float) -> tuple[pd.DataFrame, dict[str, int]]:
    """Host-to-device copies of float64 tensors (any shape): float32 carries them in half the bytes
    for a model that computes in float32 or less. Returns (copies, dims text -> count)."""
    trace = model.trace
    copies = window_copies(model, min_bytes, ("HtoD",))
    if len(copies) == 0 or len(trace.cpu_ops) == 0:
        return copies.iloc[0:0], {}
    rt = trace.runtime.dropna(subset=["correlation", "external_id"]).drop_duplicates("correlation")
    rt = rt[rt["correlation"].isin(copies["correlation"].dropna())]
    ext_of_corr = {int(c): int(x) for c, x in zip(rt["correlation"], rt["external_id"], strict=True)}
    ops = trace.cpu_ops.dropna(subset=["external_id"]).drop_duplicates("external_id", keep="last")
    op_of_ext = {int(e): (d, ty) for e, d, ty in zip(ops["external_id"], ops["input_dims"], ops["input_types"], strict=True)}
    keep: list[Any] = []
    shapes: dict[str, int] = {}
    for idx, corr, ext in zip(copies.index, copies["correlation"], copies["external_id"], strict=True):
        key = int(ext) if ext == ext else (ext_of_corr.get(int(corr)) if corr == corr else None)
        op = op_of_ext.get(key) if key is not None else None
        if op is not None and first_type(op[1]) == "double":
            keep.append(idx)
            try:
                dims = str(ast.literal_eval(op[0])[0]) if isinstance(op[0], str) else str(op[0])
            except (ValueError, SyntaxError, TypeError, IndexError):
                dims = "?"
            shapes[dims] = shapes.get(dims, 0) + 1
    return copies.loc[keep], shapes


def narrowable_copies(model: StepModel, min_bytes: float) -> tuple[set[int], float]:
    """Rows (of StepModel.ops) of copies a narrower dtype would shrink, and the byte factor: float32
    images as uint8 (0.25) when there are any, else float64 tensors as float32 (0.5)."""
    images, _ = image_copies(model, min_bytes)
    if len(images):
        return {int(i) for i in images.index}, 0.25
    wide, _ = wide_copies(model, min_bytes)
    return {int(i) for i in wide.index}, 0.5


@dataclass(frozen=True)
class CopyStats:
    count: int
    total_us: float  # union of the copies' time
    exposed_us: float  # of it, not overlapped by any kernel
    bytes: float
    by_direction_exposed_us: Mapping[str, float]

    def gbps(self) -> float | None:
        return self.bytes / self.total_us / 1e3 if self.total_us > 0 else None


def copy_stats(model: StepModel, copies: pd.DataFrame) -> CopyStats:
    # lazy: numpy stays out of `gpuadvisor rules`
    import numpy as np

    k = model.ops[model.ops["kind"] == "kernel"]
    ks, ke = sb.union_intervals(k["ts"].to_numpy("float64"), k["end"].to_numpy("float64"))
    if len(copies) == 0:
        return CopyStats(0, 0.0, 0.0, 0.0, {})
    cs, ce = copies["ts"].to_numpy("float64"), copies["end"].to_numpy("float64")
    us, ue = sb.union_intervals(cs, ce)
    total = float((ue - us).sum())
    exposed = float(((ue - us) - sb.covered(ks, ke, us, ue)).sum())
    per_copy_exposed = (ce - cs) - sb.covered(ks, ke, cs, ce)
    by_dir: dict[str, float] = {}
    for d, e in zip(copies["direction"].astype(str).tolist(), per_copy_exposed.tolist(), strict=True):
        by_dir[d] = by_dir.get(d, 0.0) + float(e)
    return CopyStats(
        len(copies), total, exposed, float(np.nansum(copies["bytes"].to_numpy("float64"))), by_dir
    )


def group_remedies(ctx: RuleContext) -> list[tuple[RemedyId, dict[str, Any]]]:
    """Every copy remedy this run calls for, in the order a user would apply them."""
    model = ctx.model
    out: list[tuple[RemedyId, dict[str, Any]]] = []
    htod = window_copies(model, DEFAULT_MIN_COPY_BYTES, ("HtoD",))
    if len(htod) == 0:
        return out
    rows, factor = narrowable_copies(model, BATCH_COPY_BYTES)
    if rows:
        out.append((RemedyId.UINT8_INPUTS, {"rows": tuple(sorted(rows)), "factor": factor}))
    if (htod["src_kind"].astype(str) == "Pageable").any():
        out.append((RemedyId.PINNED_ASYNC_COPIES, {"min_bytes": DEFAULT_MIN_COPY_BYTES}))
    out.append((RemedyId.PREFETCH_COPIES, {"min_bytes": DEFAULT_MIN_COPY_BYTES}))
    return out


def group_prediction(ctx: RuleContext) -> Prediction | None:
    remedies = group_remedies(ctx)
    if len(remedies) < 2:
        return None
    return predict_combined(ctx.model, remedies)


def with_group(pred: Prediction, group: Prediction | None) -> dict[str, Any]:
    """A finding's prediction dict, with the group's combined prediction beside it."""
    out = pred.to_dict()
    if group is not None:
        out.update(group_fields(GROUP, group))
    return out


def group_sentence(group: Prediction | None) -> str:
    return "" if group is None else predict_group_sentence("These copy findings", "copy time", group)
