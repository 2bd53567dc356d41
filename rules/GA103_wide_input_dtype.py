from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from gpuadvisor.remedies import RemedyId
from gpuadvisor.rulekit import common as cm
from gpuadvisor.rulekit import hostside as hs
from gpuadvisor.rulekit import transfers as tr
from gpuadvisor.rules_api import Category, Finding, Location, Requirement, Rule, RuleContext, Threshold


class WideInputDtype(Rule):
    """Inputs cross PCIe in a wider dtype than they need: float32 images where uint8 would carry them in a quarter of the bytes, float64 tensors where float32 would carry them in half.

    Why it matters
    --------------
    Images decoded from 8-bit files hold 256 levels per channel. Converting and normalizing them to
    float32 on the CPU (`ToTensor()`, `Normalize()`) quadruples the bytes that cross PCIe every
    step; when those copies are on the critical path, the step pays for it.

    How it is detected
    ------------------
    Host-to-device copies (at least `min_copy_bytes`) issued by a copy op whose first input is a
    float32 4-D tensor shaped like images (NCHW or NHWC with 1, 3 or 4 channels), or else a float64
    tensor of any shape (numpy's default dtype, sent to a model that computes in float32), from the
    trace's record_shapes. Impact: the step time recovered in a replay of the analyzed steps in which these
    copies move a quarter of the bytes (uint8 images) or half (float32 in place of float64). Quiet when the copies are hidden behind compute. The
    rule cannot know the images came from 8-bit data: check that first. GA101 and GA102 act on the
    same copies: the findings share a group and a combined prediction.

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
            0.02, "report when shipping the narrower dtype would save at least this share of step time", "fraction"
        ),
        "min_copy_bytes": Threshold(1 << 20, "only copies of at least this size are input batches", "bytes"),
    }

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        model = ctx.model
        win = model.window
        if win.count == 0:
            return
        images, shapes = tr.image_copies(model, ctx.threshold("min_copy_bytes"))
        if len(images):
            copies, factor, dtype, narrow = images, 0.25, "float32", "uint8"
        else:
            copies, shapes = tr.wide_copies(model, ctx.threshold("min_copy_bytes"))
            factor, dtype, narrow = 0.5, "float64", "float32"
        if len(copies) == 0:
            return
        stats = tr.copy_stats(model, copies)
        pred = ctx.predict(RemedyId.UINT8_INPUTS, rows=tuple(sorted(int(i) for i in copies.index)), factor=factor)
        impact = pred.recovered_fraction
        if impact < ctx.threshold("min_impact"):
            return
        group = tr.group_prediction(ctx)
        shape_text = max(shapes, key=lambda s: shapes[s])
        torch_dtype = f"torch.{dtype}"
        sites = [s for s in hs.callsites(ctx, "host_to_device") if str(s.get("dtype")) == torch_dtype]
        locations = [
            Location(
                file=str(s.get("file")),
                line=s.get("line"),
                code=s.get("code"),
                detail={"dtype": s.get("dtype"), "bytes_per_call": s.get("bytes_per_call")},
            )
            for s in sites
            if s.get("file")
        ] or [Location(op="aten::copy_", detail={"shape": shape_text, "dtype": dtype})]
        mib = stats.bytes / win.count / 2**20
        at = f" at {locations[0].label()}" if locations[0].file else ""
        if dtype == "float32":
            title = f"float32 image batches ({shape_text}) cross PCIe: {mib:.0f} MiB per step, 4x what uint8 needs"
            what = f"float32 image-shaped tensors {shape_text}"
            rec = (
                "If these images come from 8-bit files, keep them uint8 on the CPU (e.g. `T.PILToTensor()` "
                "instead of `ToTensor()`+`Normalize()`), copy uint8 and convert/normalize on the GPU: "
                f"`x = x.cuda(non_blocking=True).float().div_(255)`{at}."
            )
        else:
            title = f"float64 tensors ({shape_text}) cross PCIe: {mib:.0f} MiB per step, 2x what float32 needs"
            what = f"float64 tensors {shape_text}"
            rec = (
                "The model computes in float32 or less: convert on the CPU before the copy "
                f"(`torch.from_numpy(a.astype(np.float32))`, or `x.float()` before `.to(device)`){at}, so "
                "half the bytes cross PCIe (numpy arrays default to float64)."
            )
        yield self.finding(
            impact=impact,
            title=title,
            message=(
                f"{stats.count} host-to-device copies of {what} in {win.count} analyzed steps: {mib:.1f} MiB "
                f"and {cm.ms(win.per_step(stats.total_us))} per step, of which "
                f"{cm.ms(win.per_step(stats.exposed_us))} runs while no kernel runs. "
                + cm.prediction_sentence(pred, f"{narrow} copies ({factor:g} of the bytes)")
                + tr.group_sentence(group)
                + cm.note_uncorrected(pred)
            ),
            evidence={
                "shape": shape_text,
                "dtype": dtype,
                "narrower_dtype": narrow,
                "bytes_per_step": stats.bytes / win.count,
                "copy_ms_per_step": win.per_step(stats.total_us) / 1000,
                "exposed_ms_per_step": win.per_step(stats.exposed_us) / 1000,
                "step_time_ms": pred.baseline_step_ms,
                "predicted_step_time_ms": pred.predicted_step_ms,
            },
            recommendation=rec + " " + cm.gain(pred, impact),
            locations=locations,
            impact_explanation=cm.impact_explanation(pred, f"the copies moving {narrow} ({factor:g} of the bytes)"),
            remedy=RemedyId.UINT8_INPUTS,
            prediction=tr.with_group(pred, group),
            group=tr.GROUP,
        )
