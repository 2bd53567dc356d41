"""channels_last and the NHWC table (gpuadvisor/stepmodel/layout.py, GA1102). Traces built here are
SYNTHETIC (tests/synth.py); kernel names are the real ones of the H200 recordings in sample_runs/."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuadvisor.model import Severity
from gpuadvisor.stepmodel import layout
from gpuadvisor.stepmodel.layout import NhwcTable, channels_last_plan, op_family
from gpuadvisor.stepmodel.model import StepModel
from gpuadvisor.stepmodel.nhwc import CONVERTS_BACK_ON_CUDA
from gpuadvisor.testing import RuleHarness
from tests.rules.cases.ga11_kernel_efficiency import K_DGRAD_BF16, K_FPROP_BF16, K_NCHW2NHWC, K_NHWC2NCHW
from tests.synth import SyntheticTrace

BF16 = "c10::BFloat16"
K_GROUP_NORM = "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<c10::BFloat16, float>(long, float, c10::BFloat16 const*, float*, float*)"
K_GROUP_NORM_BWD = "void at::native::(anonymous namespace)::ComputeInternalGradientsCUDAKernel<c10::BFloat16, float>(long, long, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*)"
K_UPSAMPLE = "void at::native::(anonymous namespace)::upsample_bilinear2d_out_frame<c10::BFloat16, float>(int, float, float, bool, at::GenericPackedTensorAccessor<c10::BFloat16 const, 4ul, at::DefaultPtrTraits, long>, at::GenericPackedTensorAccessor<c10::BFloat16, 4ul, at::DefaultPtrTraits, long>)"
K_UPSAMPLE_BWD = "void at::native::(anonymous namespace)::upsample_bilinear2d_backward_out_frame<c10::BFloat16, float>(unsigned long, int, int, int, int, int, int, float, float, bool, c10::BFloat16*, c10::BFloat16 const*)"


@pytest.mark.parametrize(
    ("op", "dims", "cls", "expected"),
    [
        ("aten::cudnn_convolution", "[[8, 64, 32, 32], [128, 64, 3, 3]]", "conv_fprop", "conv"),
        ("aten::cudnn_convolution", "[[8, 64, 32, 32], [64, 1, 3, 3]]", "conv_fprop", "conv_depthwise"),
        ("aten::cudnn_convolution", "[[8, 64, 32, 32], [64, 16, 3, 3]]", "conv_fprop", "conv_grouped"),
        (
            "aten::convolution_backward",
            "[[8, 64, 32, 32], [8, 64, 32, 32], [64, 1, 3, 3]]",
            "conv_dgrad",
            "conv_depthwise",
        ),
        ("aten::native_batch_norm", "[[8, 64, 32, 32], [64], [64]]", "normalization", "batch_norm"),
        ("aten::native_batch_norm", "[[1, 512, 32, 32], [512], [512]]", "normalization", "instance_norm"),
        ("aten::native_group_norm", "[[8, 64, 32, 32], [64], [64]]", "normalization", "group_norm"),
        ("aten::native_layer_norm", "[[8, 32, 32, 64], [64], [64]]", "normalization", "layer_norm_channels"),
        ("aten::native_layer_norm", "[[8, 1024, 768], [768], [768]]", "normalization", None),
        ("aten::max_pool2d_with_indices", "[[8, 64, 32, 32], [], [], [], []]", "other", "pooling"),
        ("aten::upsample_bilinear2d", "[[8, 64, 32, 32], [], [], []]", "other", "upsample"),
        ("aten::cat", "[[[8, 64, 32, 32], [8, 64, 32, 32]], []]", "copy", "cat"),
        ("aten::cat", "[[[8, 64], [8, 64]], []]", "copy", None),
        ("aten::add", "[[8, 64, 32, 32], [8, 64, 32, 32], []]", "elementwise", "elementwise"),
        ("aten::mm", "[[4096, 1024], [1024, 4096]]", "gemm", None),
    ],
)
def test_op_families(op: str, dims: str, cls: str, expected: str | None) -> None:
    assert op_family(op, dims, cls) == expected


def test_a_transposed_convolution_is_not_grouped() -> None:
    # ConvTranspose2d(128 -> 64): weight [128, 64, 2, 2] says nothing of groups; its backward has the same
    # (input, weight) shapes as the forward
    x, w = (8, 128, 16, 16), (128, 64, 2, 2)
    keys = layout.transposed_conv_keys([("aten::cudnn_convolution_transpose", f"[{list(x)}, {list(w)}]")])
    dims = f"[[8, 64, 32, 32], {list(x)}, {list(w)}]"
    assert op_family("aten::convolution_backward", dims, "conv_dgrad", keys) == "conv"
    assert op_family("aten::convolution_backward", dims, "conv_dgrad") == "conv_grouped"


def test_table_reads_the_benchmarks_summary_and_drops_what_it_cannot_use() -> None:
    doc = {
        "source": {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130"},
        "families": {
            "group_norm": {"bf16": {"ratio": 1.4, "min": 1.2, "max": 1.6, "shapes": 3}},
            "conv": {"bf16": {"ratio": 0.9}, "int8": {"ratio": 0.5}},
            "softmax": {"bf16": {"ratio": 2.0}},
            "pooling": {"fp16": {"ratio": -1}, "fp32": {"ratio": True}},
        },
    }
    t = NhwcTable.from_json(doc)
    assert set(t.entries) == {("group_norm", "bf16"), ("conv", "bf16")}
    gn = t.get("group_norm", "bf16")
    assert gn is not None and gn.slower and (gn.low, gn.high, gn.shapes) == (1.2, 1.6, 3)
    assert t.where == "NVIDIA H100 80GB HBM3, 2.11.0+cu130"
    assert NhwcTable.from_json([1, 2]).problem


def _gn_upsample_net(scale_norm: float = 1.0) -> SyntheticTrace:
    """SYNTHETIC: 4 GPU-bound steps of a bf16 NCHW decoder: per block a convolution (one op launching
    cuDNN's two transposes, 120 us each, around its NHWC kernel), GroupNorm (forward), a bilinear
    upsample (forward and backward), GroupNorm's backward, the backward convolution with its transposes."""
    st = SyntheticTrace()
    act = [16, 128, 64, 64]
    w = [128, 128, 3, 3]
    gn = [act, [128], [128]]
    Op = tuple[str, Sequence[Sequence[int]], list[tuple[str, float]]]
    block: list[Op] = [
        ("aten::cudnn_convolution", [act, w], [(K_NCHW2NHWC, 120.0), (K_FPROP_BF16, 300.0), (K_NHWC2NCHW, 120.0)]),
        ("aten::native_group_norm", gn, [(K_GROUP_NORM, 150.0 * scale_norm)]),
        ("aten::upsample_bilinear2d", [act, [], [], []], [(K_UPSAMPLE, 120.0)]),
        ("aten::upsample_bilinear2d_backward", [act, [], [], [], []], [(K_UPSAMPLE_BWD, 200.0)]),
        ("aten::native_group_norm_backward", [act, act, [16, 32]], [(K_GROUP_NORM_BWD, 250.0 * scale_norm)]),
        ("aten::convolution_backward", [act, act, w], [(K_NCHW2NHWC, 120.0), (K_DGRAD_BF16, 320.0), (K_NHWC2NCHW, 120.0)]),
    ]
    ops = block * 6
    period = sum(d + 2.0 for _, _, ks in ops for _, d in ks) + 200.0
    for n in range(4):
        t0 = n * period
        t, launch = t0 + 20.0, t0 + 5.0
        for op, dims, ks in ops:
            ext = st.add_cpu_op(op, launch - 2.0, 6.0 * len(ks) - 1.0, input_types=[BF16] * len(dims), input_dims=dims)
            for name, dur in ks:
                st.add_kernel(name, ts=t, dur=dur, grid=(264, 1, 1), op_external_id=ext, launch_ts=launch, launch_dur=3.0)
                launch += 6.0
                t += dur + 2.0
        st.add_step(n + 1, cpu_start=t0, cpu_dur=t - t0 + 60.0, gpu_dur=t - t0 + 60.0)
        st.add_item_read(ts=launch + 2.0, dur=t - launch, copy_ts=t + 2.0)
        st.add_optimizer_step(t + 10.0, 5.0)
    return st


def _table(converts_back: Sequence[str] | None = None, conversion: float | None = None, **ratios: float) -> NhwcTable:
    """A SYNTHETIC bf16 table: each family's ratio; `converts_back` as the table recorded it (None: not
    recorded, PyTorch's CUDA default applies); a conversion cost in ps per element."""
    doc: dict[str, object] = {"source": {"gpu": "synthetic"}, "families": {f: {"bf16": {"ratio": r}} for f, r in ratios.items()}}
    if converts_back is not None:
        doc["converts_back"] = list(converts_back)
    if conversion is not None:
        doc["conversion"] = {"bf16": conversion}
    return NhwcTable.from_json(doc)


# the synthetic transposes move [16, 128, 64, 64] in 120 us: PyTorch's conversion of the same tensor at
# 1.5x that time (on the H200, cuDNN's transposes ran at about 4.8 TB/s, the table's conversions at 1-1.4)
SLOW_CONVERSION_PS = 1.5 * 120.0 * 1e6 / (16 * 128 * 64 * 64)


def _ga1102(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: NhwcTable) -> list:  # type: ignore[type-arg]
    monkeypatch.setattr(layout, "load_nhwc_table", lambda: table)
    return RuleHarness(tmp_path).run("GA1102", _gn_upsample_net()).findings


def test_unmeasured_families_make_the_advice_unproven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # no table: the transposes go (the saving), GroupNorm and upsampling (more time than the saving) are
    # unmeasured: the advice is said to be unproven and rated medium at most
    findings = _ga1102(tmp_path, monkeypatch, NhwcTable(problem="none shipped"))
    assert len(findings) == 1
    f = findings[0]
    assert f.severity is Severity.MEDIUM and f.impact is not None and f.impact >= 0.2
    assert "unproven" in f.title and "gpuadvisor verify --only channels_last" in f.message
    assert f.evidence["unproven"] is True


def test_families_measured_slower_get_no_channels_last_advice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 41: a bf16 GroupNorm/upsample net measured 0.76x after conversion (gn_unet_bf16, H200). GroupNorm
    # gives back NCHW: the upsampling after it stays NCHW, the next convolution converts its input at
    # PyTorch's (slower) conversion cost instead of cuDNN's transposes, GroupNorm itself is slower: no finding
    table = _table(conversion=SLOW_CONVERSION_PS, conv=0.85, group_norm=1.6, upsample=0.5)
    assert _ga1102(tmp_path, monkeypatch, table) == []


def test_families_measured_faster_give_proven_advice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a table that recorded GroupNorm's channels_last output as channels_last: nothing converts back
    table = _table(converts_back=[], group_norm=0.8, upsample=0.9)
    findings = _ga1102(tmp_path, monkeypatch, table)
    assert len(findings) == 1
    f = findings[0]
    assert f.severity is Severity.HIGH and "unproven" not in f.title
    assert "measured 0.80x the NCHW time" in f.message and "give back NCHW" not in f.message


def _model(tmp_path: Path) -> StepModel:
    from gpuadvisor.stepmodel import build_step_model
    from gpuadvisor.trace.load import load_trace

    return build_step_model(load_trace(_gn_upsample_net().write(tmp_path / "t.json.gz")))


def test_plan_follows_the_trace_for_convolutions_and_the_table_for_the_rest(tmp_path: Path) -> None:
    model = _model(tmp_path)
    plan = channels_last_plan(model, table=_table(converts_back=[], conv=0.5, group_norm=2.0))
    by = {f.family: f for f in plan.families}
    # the convolution keeps its NHWC kernels and loses its transposes (the table's conv ratio is not used)
    conv = by["conv"]
    assert conv.status == layout.STRUCTURAL
    assert conv.predicted_per_step_us == pytest.approx(conv.time_per_step_us * (300 + 320) / (300 + 320 + 4 * 120))
    assert by["group_norm"].predicted_per_step_us == pytest.approx(2.0 * by["group_norm"].time_per_step_us)
    assert by["upsample"].status == layout.UNMEASURED
    assert plan.unmeasured_us == pytest.approx(by["upsample"].time_per_step_us)


def test_after_groupnorm_the_activations_stay_nchw_and_convolutions_convert(tmp_path: Path) -> None:
    model = _model(tmp_path)
    table = _table(conversion=SLOW_CONVERSION_PS, group_norm=1.6, upsample=0.5)
    flow = layout.layout_flow(model, table)
    # per step: conv (channels_last), GroupNorm (back to NCHW), upsample (NCHW), conv (fed NCHW)... six
    # blocks: five of the six convolutions follow a GroupNorm
    assert flow.breakers == {"group_norm"}
    assert flow.family_share["upsample"] == pytest.approx(1.0)
    assert flow.family_share["conv"] == pytest.approx(5 / 6)
    plan = channels_last_plan(model, table=table)
    by = {f.family: f for f in plan.families}
    assert by["upsample"].nchw_share == pytest.approx(1.0)
    assert by["upsample"].predicted_per_step_us == pytest.approx(by["upsample"].time_per_step_us)  # as now
    # each fed convolution converts its input (forward) and its input gradient (backward): 2 x 180 us
    assert plan.conversion_us == pytest.approx(5 * 2 * 1.5 * 120.0)
    assert plan.breakers == {"group_norm"}
    # a table that records GroupNorm keeping channels_last: nothing stays NCHW
    assert not layout.layout_flow(model, _table(converts_back=[], group_norm=1.6)).breakers


def test_a_run_without_cudnn_transposes_is_not_converted(tmp_path: Path) -> None:
    # a channels_last net (or one cuDNN runs in NCHW natively) shows no transposes: nothing says its
    # activations are NCHW, so the plan changes nothing
    st = SyntheticTrace()
    act, gn = [16, 128, 64, 64], [[16, 128, 64, 64], [128], [128]]
    for n in range(4):
        t0 = n * 2000.0
        st.add_kernel(K_FPROP_BF16, ts=t0 + 20, dur=300, op="aten::cudnn_convolution", op_input_types=[BF16, BF16],
                      op_input_dims=[act, [128, 128, 3, 3]], launch_ts=t0 + 5)
        st.add_kernel(K_GROUP_NORM, ts=t0 + 330, dur=150, op="aten::native_group_norm", op_input_types=[BF16] * 3,
                      op_input_dims=gn, launch_ts=t0 + 12)
        st.add_step(n + 1, cpu_start=t0, cpu_dur=1900.0, gpu_dur=1900.0)
        st.add_optimizer_step(t0 + 1800.0, 5.0)
    from gpuadvisor.stepmodel import build_step_model
    from gpuadvisor.trace.load import load_trace

    model = build_step_model(load_trace(st.write(tmp_path / "t.json.gz")))
    plan = channels_last_plan(model, table=_table(group_norm=0.5, conv=0.5))
    assert plan.families == [] and (plan.factor == 1.0).all()


def _measured(family: str, variant: str, shape: Sequence[int], nchw: float, cl: float, dtype: str = "bf16") -> dict[str, object]:
    return {"family": family, "variant": variant, "dtype": dtype, "shape": list(shape), "nchw_us": nchw,
            "channels_last_us": cl, "ratio": cl / nchw}


def test_the_table_gives_the_ratio_of_the_nearest_measured_size_and_variant() -> None:
    doc = {
        "families": {"upsample": {"bf16": {"ratio": 1.1}}, "group_norm": {"bf16": {"ratio": 1.2}}},
        "measurements": [
            _measured("upsample", "bilinear x2", (32, 64, 112, 112), 2000.0, 1500.0),
            _measured("upsample", "bilinear x2", (32, 256, 28, 28), 3600.0, 540.0),
            _measured("upsample", "nearest x2", (32, 64, 112, 112), 400.0, 900.0),
            _measured("group_norm", "32 groups", (32, 64, 112, 112), 300.0, 600.0),
            _measured("group_norm", "32 groups", (32, 256, 28, 28), 260.0, 290.0),
            {"family": "group_norm", "dtype": "bf16", "shape": [1, 2], "nchw_us": 1.0, "channels_last_us": 2.0},
        ],
    }
    t = NhwcTable.from_json(doc)
    assert len(t.measurements) == 5  # the malformed shape is dropped
    big, small = 32 * 64 * 112 * 112, 32 * 256 * 28 * 28
    assert t.ratio_at("upsample", "bf16", big * 2, "bilinear") == pytest.approx(0.75)
    assert t.ratio_at("upsample", "bf16", small, "bilinear") == pytest.approx(0.15)
    assert t.ratio_at("upsample", "bf16", big, "nearest") == pytest.approx(2.25)
    assert t.ratio_at("upsample", "bf16", None) == pytest.approx(1.1)  # no size: the family's median
    assert t.ratio_at("pooling", "bf16", big) is None
    # GroupNorm's extra time in channels_last at its largest shape is two conversions of its input
    assert t.converts_back == CONVERTS_BACK_ON_CUDA
    assert t.conversion_ps_per_element("bf16") == pytest.approx(300.0 * 1e6 / (2 * big))
    assert t.conversion_ps_per_element("fp32") is None
    direct = NhwcTable.from_json({**doc, "conversion": {"bf16": 4.0}, "converts_back": ["instance_norm"]})
    assert direct.conversion_ps_per_element("bf16") == 4.0 and direct.converts_back == {"instance_norm"}


def test_advice_that_survives_groupnorm_says_what_stays_nchw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GroupNorm gives back NCHW, but the conversions are cheap here (a tenth of cuDNN's transposes): the
    # conversion still pays, and the finding says which time stays NCHW and what the conversions cost
    table = _table(conversion=SLOW_CONVERSION_PS / 15, group_norm=1.0, upsample=1.0)
    findings = _ga1102(tmp_path, monkeypatch, table)
    assert len(findings) == 1
    f = findings[0]
    assert "GroupNorm give back NCHW tensors on the GPU" in f.message
    assert "100% of it after a family that gives back NCHW" in f.message  # the upsampling
    families = {d["family"]: d for d in f.evidence["families"]}  # type: ignore[union-attr]
    assert families["conv"]["conversion_per_step_us"] == pytest.approx(5 * 2 * 120.0 / 10)
