"""channels_last and the NHWC table (gpuadvisor/stepmodel/layout.py, GA1102). Traces built here are
SYNTHETIC (tests/synth.py); kernel names are the real ones of the H200 recordings in sample_runs/."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuadvisor.model import Severity
from gpuadvisor.stepmodel import layout
from gpuadvisor.stepmodel.layout import NhwcTable, channels_last_plan, op_family
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
    """SYNTHETIC: 4 GPU-bound steps of a bf16 NCHW decoder: per block a convolution with cuDNN's two
    transposes (120 us each) around its NHWC kernels, GroupNorm (forward and backward), a bilinear
    upsample (forward and backward), the backward convolution with its transposes."""
    st = SyntheticTrace()
    act = [16, 128, 64, 64]
    w = [128, 128, 3, 3]
    gn = [act, [128], [128]]
    ks: list[tuple[str, float, str, Sequence[Sequence[int]]]] = []
    for _ in range(6):
        ks += [
            (K_NCHW2NHWC, 120.0, "aten::cudnn_convolution", [act, w]),
            (K_FPROP_BF16, 300.0, "aten::cudnn_convolution", [act, w]),
            (K_NHWC2NCHW, 120.0, "aten::cudnn_convolution", [act, w]),
            (K_GROUP_NORM, 150.0 * scale_norm, "aten::native_group_norm", gn),
            (K_UPSAMPLE, 120.0, "aten::upsample_bilinear2d", [act, [], [], []]),
            (K_UPSAMPLE_BWD, 200.0, "aten::upsample_bilinear2d_backward", [act, [], [], [], []]),
            (K_GROUP_NORM_BWD, 250.0 * scale_norm, "aten::native_group_norm_backward", [act, act, [16, 32]]),
            (K_NCHW2NHWC, 120.0, "aten::convolution_backward", [act, act, w]),
            (K_DGRAD_BF16, 320.0, "aten::convolution_backward", [act, act, w]),
            (K_NHWC2NCHW, 120.0, "aten::convolution_backward", [act, act, w]),
        ]
    period = sum(k[1] + 2.0 for k in ks) + 200.0
    for n in range(4):
        t0 = n * period
        t, launch = t0 + 20.0, t0 + 5.0
        for name, dur, op, dims in ks:
            types = [BF16] * len(dims)
            st.add_kernel(name, ts=t, dur=dur, grid=(264, 1, 1), op=op, op_input_types=types,
                          op_input_dims=dims, launch_ts=launch, launch_dur=3.0)
            launch += 6.0
            t += dur + 2.0
        st.add_step(n + 1, cpu_start=t0, cpu_dur=t - t0 + 60.0, gpu_dur=t - t0 + 60.0)
        st.add_item_read(ts=launch + 2.0, dur=t - launch, copy_ts=t + 2.0)
        st.add_optimizer_step(t + 10.0, 5.0)
    return st


def _table(**ratios: float) -> NhwcTable:
    return NhwcTable.from_json(
        {"source": {"gpu": "synthetic"}, "families": {f: {"bf16": {"ratio": r}} for f, r in ratios.items()}}
    )


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
    # issue 41: a bf16 GroupNorm/upsample net measured 0.74x after conversion; with the table saying
    # GroupNorm and upsampling are slower in channels_last, the replay is slower: no finding
    table = _table(conv=0.85, group_norm=1.6, upsample=1.5)
    assert _ga1102(tmp_path, monkeypatch, table) == []


def test_families_measured_faster_give_proven_advice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(conv=0.6, group_norm=0.8, upsample=0.9)
    findings = _ga1102(tmp_path, monkeypatch, table)
    assert len(findings) == 1
    f = findings[0]
    assert f.severity is Severity.HIGH and "unproven" not in f.title
    assert "measured 0.80x the NCHW time" in f.message


def test_plan_applies_the_measured_ratio_to_every_kernel_of_the_family(tmp_path: Path) -> None:
    from gpuadvisor.stepmodel import build_step_model
    from gpuadvisor.trace.load import load_trace

    path = _gn_upsample_net().write(tmp_path / "t.json.gz")
    model = build_step_model(load_trace(path))
    plan = channels_last_plan(model, table=_table(conv=0.5, group_norm=2.0))
    by = {f.family: f for f in plan.families}
    # the convolution's time includes its transposes; both scale by the measured ratio
    assert by["conv"].predicted_per_step_us == pytest.approx(0.5 * by["conv"].time_per_step_us)
    assert by["group_norm"].predicted_per_step_us == pytest.approx(2.0 * by["group_norm"].time_per_step_us)
    assert by["upsample"].status == layout.UNMEASURED
    assert plan.unmeasured_us == pytest.approx(by["upsample"].time_per_step_us)
