from __future__ import annotations

import ast
import math
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold

CHANNELS = (1, 3, 4)


def _image_like(dims: Any) -> list[int] | None:
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


def _first_type(types: Any) -> str | None:
    try:
        parsed = ast.literal_eval(types) if isinstance(types, str) else types
        return str(parsed[0])
    except (ValueError, SyntaxError, TypeError, IndexError):
        return None


class WideInputDtype(Rule):
    """Input images are shipped to the GPU as float32 where uint8 would carry the same information in a quarter of the bytes.

    Why it matters
    --------------
    Images decoded from 8-bit files hold 256 levels per channel. Converting and normalizing them to
    float32 on the CPU (`ToTensor()`, `Normalize()`) quadruples the bytes that cross PCIe every
    step; when those copies are on the critical path, the step pays for it.

    How it is detected
    ------------------
    Host-to-device copies (at least `min_copy_bytes`) issued by a copy op whose first input is a
    float32 4-D tensor shaped like images (NCHW or NHWC with 1, 3 or 4 channels), from the trace's
    record_shapes. Impact = the exposed part of those copies (not overlapped by kernels) x 3/4 / step
    time: shipping uint8 moves a quarter of the bytes. Quiet when the copies are hidden behind
    compute. The rule cannot know the images came from 8-bit data: check that first.

    How to fix
    ----------
    Ship uint8 and normalize on the GPU. Before::

        tf = T.Compose([T.ToTensor(), T.Normalize(mean, std)])     # float32 on the CPU
        x = x.cuda()

    After::

        tf = T.PILToTensor()                                       # uint8, 4x smaller
        x = x.cuda(non_blocking=True).float().div_(255)
        x = (x - mean_gpu) / std_gpu                               # normalize on the GPU
    """

    id = "GA103"
    name = "wide-input-dtype"
    category = Category.HOST_DEVICE_TRANSFER
    requires = frozenset({Requirement.GPU_KERNELS, Requirement.STEPS, Requirement.RECORD_SHAPES})
    thresholds: ClassVar[Mapping[str, Threshold]] = {
        "min_impact": Threshold(
            0.02, "report when shipping uint8 would save at least this share of step time", "fraction"
        ),
        "min_copy_bytes": Threshold(1 << 20, "only copies of at least this size are input batches", "bytes"),
    }

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        t = ctx.trace
        copies = t.copies
        if len(copies) == 0 or len(t.cpu_ops) == 0:
            return
        # Only large host-to-device copies can be selected below: look up just their launching ops
        # (building the lookup tables over every cpu op dominated this rule on large traces).
        nbytes_all = copies["bytes"].to_numpy(dtype="float64", na_value=math.nan)
        htod = copies["direction"].astype(str).eq("HtoD").to_numpy(dtype=bool)
        big = copies[htod & (nbytes_all >= ctx.threshold("min_copy_bytes"))]
        rt = t.runtime.dropna(subset=["correlation", "external_id"]).drop_duplicates("correlation")
        rt = rt[rt["correlation"].isin(big["correlation"].dropna())]
        ext_of_corr = {int(c): int(x) for c, x in zip(rt["correlation"], rt["external_id"], strict=True)}
        wanted = {int(x) for x in big["external_id"].dropna()} | set(ext_of_corr.values())
        ops = t.cpu_ops.dropna(subset=["external_id"]).drop_duplicates("external_id", keep="last")
        ops = ops[ops["external_id"].isin(sorted(wanted))]
        op_of_ext = {
            int(e): (str(n), d, ty)
            for e, n, d, ty in zip(
                ops["external_id"], ops["name"], ops["input_dims"], ops["input_types"], strict=True
            )
        }
        selected = []
        shapes: dict[str, int] = {}
        for idx, corr, ext, direction, nbytes in zip(
            copies.index,
            copies["correlation"],
            copies["external_id"],
            copies["direction"],
            copies["bytes"],
            strict=True,
        ):
            if (
                str(direction) != "HtoD"
                or math.isnan(float(nbytes))
                or nbytes < ctx.threshold("min_copy_bytes")
            ):
                continue
            key = hs._int(ext)
            if key is None and hs._int(corr) is not None:
                key = ext_of_corr.get(int(corr))
            op = op_of_ext.get(key) if key is not None else None
            if op is None:
                continue
            shape = _image_like(op[1])
            if shape is not None and _first_type(op[2]) == "float":
                selected.append(idx)
                shapes[str(shape)] = shapes.get(str(shape), 0) + 1
        if not selected:
            return
        mask = copies.index.isin(selected)
        import pandas as pd

        stats = hs.copy_stats(ctx, pd.Series(mask, index=copies.index))
        win = stats.window
        if win.count == 0:
            return
        saved = stats.exposed_us * 0.75
        impact = saved / win.total_us
        if impact < ctx.threshold("min_impact"):
            return
        shape_text = max(shapes, key=lambda s: shapes[s])
        sites = [s for s in hs.callsites(ctx, "host_to_device") if str(s.get("dtype")) == "torch.float32"]
        locations = [
            Location(
                file=str(s.get("file")),
                line=s.get("line"),
                code=s.get("code"),
                detail={"dtype": s.get("dtype"), "bytes_per_call": s.get("bytes_per_call")},
            )
            for s in sites
            if s.get("file")
        ] or [Location(op="aten::copy_", detail={"shape": shape_text, "dtype": "float32"})]
        mib = stats.bytes / win.count / 2**20
        yield self.finding(
            impact=impact,
            title=f"float32 image batches ({shape_text}) cross PCIe: {mib:.0f} MiB per step, 4x what uint8 needs",
            message=(
                f"{len(stats.copies)} host-to-device copies of float32 image-shaped tensors {shape_text} in {win.count} "
                f"analyzed steps: {mib:.1f} MiB and {stats.total_us / win.count / 1000:.2f} ms per step, of which "
                f"{hs.fmt_ms(stats.exposed_us / win.count)} runs while no kernel runs."
            ),
            evidence={
                "shape": shape_text,
                "dtype": "float32",
                "bytes_per_step": stats.bytes / win.count,
                "copy_ms_per_step": stats.total_us / win.count / 1000,
                "exposed_ms_per_step": stats.exposed_us / win.count / 1000,
                "step_time_ms": win.median_step_us / 1000,
            },
            recommendation=(
                "If these images come from 8-bit files, keep them uint8 on the CPU (e.g. `T.PILToTensor()` "
                "instead of `ToTensor()`+`Normalize()`), copy uint8 and convert/normalize on the GPU: "
                "`x = x.cuda(non_blocking=True).float().div_(255)`"
                + (f" at {locations[0].label()}" if locations[0].file else "")
                + f". The copy shrinks 4x: saves up to {hs.fmt_ms(saved / win.count)} per step ({hs.fmt_pct(impact)})."
            ),
            locations=locations,
            impact_explanation="Exposed time of the float32 image copies x 3/4 (uint8 moves a quarter of the bytes), divided by the total step time.",
        )
