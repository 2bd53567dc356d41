"""Counts, numbers and places in the sentences gpuadvisor prints (issue 30 item 7: "549.0 blocking
reads", "1 loader workers", "1 trials", C++ template names as "at" locations)."""

from __future__ import annotations

import pytest

from gpuadvisor.model import Location, kernel_base_name
from gpuadvisor.words import num, plural, plural_noun


@pytest.mark.parametrize(
    ("n", "noun", "said"),
    [
        (549.0, "blocking read", "549 blocking reads"),
        (1, "loader worker", "1 loader worker"),
        (1.0, "trial", "1 trial"),
        (3, "remedy", "3 remedies"),
        (1, "remedy", "1 remedy"),
        (2.5, "read", "2.5 reads"),
        (0, "trial", "0 trials"),
        (2, "process", "2 processes"),
        (12000, "kernel", "12,000 kernels"),
    ],
)
def test_plural(n: float, noun: str, said: str) -> None:
    assert plural(n, noun) == said


def test_plural_noun_and_num() -> None:
    assert plural_noun("day") == "days" and plural_noun("batch") == "batches"
    assert [num(x) for x in (549.0, 0.042, 12.5, 3100.4, float("nan"))] == ["549", "0.042", "12.5", "3,100", "n/a"]


def test_kernel_locations_are_not_at_locations() -> None:
    cpp = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormTwoOps<float>>>(...)"
    assert kernel_base_name(cpp) == "at::native::reduce_kernel"
    anon = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous ...>(...)"
    assert kernel_base_name(anon) == "at::native::multi_tensor_apply_kernel"
    assert kernel_base_name("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    assert Location(kernel=cpp).place() == "kernel at::native::reduce_kernel"
    assert Location(op="Optimizer.step#AdamW.step", kernel=anon).place() == (
        "kernel at::native::multi_tensor_apply_kernel in Optimizer.step#AdamW.step"
    )
    assert Location(file="train.py", line=3).place() == "at train.py:3"
    assert Location(op="aten::copy_").place() == "op aten::copy_"
    assert Location(function="rank 1").place() == "in rank 1"


def test_a_rule_summary_is_its_whole_first_paragraph() -> None:
    """GA302's summary wraps onto a second docstring line: `rules` and docs/rules.md cut it mid-sentence."""
    from gpuadvisor.engine import load_rules

    ga302 = next(r for r in load_rules() if r.id == "GA302")
    assert ga302.cls.summary().endswith("the GPU idles while the batch is prepared.")


def test_after_steps_counts_as_the_loop_does() -> None:
    """Issue 42 item 9: a script that raised in loop index 50, after that step's optimizer step, read
    "raised at step 51"."""
    from gpuadvisor.words import after_steps

    assert after_steps(51) == "after 51 completed steps (0-50)"
    assert after_steps(1) == "after 1 completed step (0)"
    assert after_steps(0) == "before its first step completed"


def test_kernel_names_keep_what_tells_them_apart_and_say_when_cut() -> None:
    """Issue 42 item 9: every CUTLASS SIMT GEMM read "cutlass::Kernel2" (the launcher's name), and a
    kernel name cut at 120 characters ended without an ellipsis ("...g1_execu": the "..." was taken
    for trailing dots)."""
    from gpuadvisor.model import Location, kernel_base_name
    from gpuadvisor.rulekit.gpuwork import short_kernel_name

    simt = "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_256x128_8x4_nn_align1::Params)"
    assert kernel_base_name(simt) == "cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>"
    assert kernel_base_name(short_kernel_name(simt, 40)).startswith("cutlass::Kernel2<cutlass_80_si")
    assert kernel_base_name("void at::native::reduce_kernel<512, 1>(int)") == "at::native::reduce_kernel"
    long = "sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_" * 2
    cut = short_kernel_name(long)
    assert len(cut) == 120 and cut.endswith("…")
    assert Location(kernel=cut, op="aten::mm").place().startswith("kernel sm90_") and "…" in Location(kernel=cut).place()
