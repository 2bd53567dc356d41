"""Kernel name classifiers: the kernel family, and whether a matmul/conv kernel uses tensor cores.

Both work on names only and are applied once per distinct name (names are a pandas category).
Name lists drift with every cuBLAS/cuDNN release; `gpuadvisor.metrics` cross-checks the tensor-core
verdict with the launching op's input dtypes, the TF32 settings and the achieved FLOP/s.
"""

from __future__ import annotations

import re

FAMILIES: tuple[str, ...] = (
    "gemm",
    "conv",
    "attention",
    "elementwise",
    "reduction",
    "optimizer",
    "collective",
    "memcpy-like",
    "other",
)

# Families whose math can run on tensor cores (the denominator of the tensor-core share).
MATMUL_FAMILIES: frozenset[str] = frozenset({"gemm", "conv", "attention"})

# Checked in order; the first match wins. Case-insensitive.
_FAMILY_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("collective", re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|sendrecv", re.I)),
    # `lamb(?!da)`: the LAMB optimizer, not every templated kernel's `{lambda(...)#1}`
    (
        "optimizer",
        re.compile(r"multi_tensor_apply|fused_?adam|adamw?_|_adam|sgd|lamb(?!da)|(?<![a-z])lion|optim", re.I),
    ),
    ("attention", re.compile(r"fmha|flash|attention|attn|sdpa|_mha|mha_|softmax_rescale", re.I)),
    (
        "conv",
        re.compile(
            r"conv(?!ert)|fprop|dgrad|wgrad|winograd|implicit_gemm|implicit_convolve|im2col|col2im|"
            r"cudnn::.*(?:fwd|bwd)|precomputed_convolve",
            re.I,
        ),
    ),
    (
        "gemm",
        re.compile(
            r"gemm|nvjet|cutlass|cublas|matmul|gemv|\bdot_kernel|hmma|wgmma|gmma|triton_tem|"
            r"splitkreduce|s1688|s16816|h1688|h16816|bmm|_mm_|addmm",
            re.I,
        ),
    ),
    (
        "memcpy-like",
        re.compile(
            r"memcpy|memset|direct_copy_kernel|copy_kernel|catarraybatchedcopy|CatArray|transpose", re.I
        ),
    ),
    # elementwise before reduction: "vectorized_elementwise_kernel<... sum_functor ...>" is elementwise
    ("elementwise", re.compile(r"elementwise|triton_poi|pointwise|vectorized|unrolled", re.I)),
    (
        "reduction",
        re.compile(
            r"reduce|reduction|softmax|norm|triton_red|triton_per|argmax|argmin|cross_entropy|nll_loss|"
            r"\bsum\b|mean|scan|cub::",
            re.I,
        ),
    ),
    (
        "elementwise",
        re.compile(r"fill|index|gather|scatter|where|cat_|embedding|dropout|relu|gelu|silu", re.I),
    ),
)


def kernel_family(name: str) -> str:
    """The family of a kernel name (one of FAMILIES)."""
    for family, pattern in _FAMILY_PATTERNS:
        if pattern.search(name):
            return family
    return "other"


# Plain FP32 math, even where the name says xmma: `sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize..._ffma_...`
# computes with FFMA (FIELD_NOTES trap: the TensorBoard plugin counted any xmma_gemm as tensor core).
_NOT_TENSOR_CORE = re.compile(
    r"simt|ffma|sgemm|dgemm|gemv|gemmsn|\bdot_kernel|implicit_convolve_sgemm|winograd|_engine<float\b|"
    # PyTorch mem-efficient attention in float32 (fmha_cutlassF_f32_*, fmha_cutlassB_f32_*): FP32-accurate
    # math (SIMT, or 3xTF32 emulation on Sm80+): FP32 math for our purposes, bf16 runs several times faster
    r"fmha_cutlass[fb]_f32|"
    r"fft|precomputed_convolve",
    re.I,
)

# Tensor-core evidence in the name: MMA instruction families, Hopper cuBLAS JIT kernels, half/bf16/tf32
# cutlass/xmma tiles, tensor-op cutlass kernels, fused attention kernels.
_TENSOR_CORE = re.compile(
    r"nvjet|hmma|wgmma|gmma|imma|tensorop|tensor_op|[shi](?:884|1688|16816)|"
    r"xmma_gemm_(?:bf16|f16|e4m3|e5m2|tf32)|"
    r"(?:bf16|f16|fp16|half|tf32|e4m3|e5m2)[a-z0-9_]*(?:gemm|fprop|dgrad|wgrad)|"
    r"(?:gemm|fprop|dgrad|wgrad)[a-z0-9_]*(?:bf16|f16|fp16|tf32)|"
    r"fmha|flash|cudnn_generated_fort_native_sdpa|sm\d+_xmma_(?:fprop|dgrad|wgrad)_.*(?:f16|bf16|tf32)|"
    r"ampere_(?:h|bf16|fp16|tf32)|turing_h|volta_h|sm\d0_(?:h|bf16|tf32)",
    re.I,
)


# 16-bit data in a kernel's template arguments or its op's input types: a CUDA-core kernel on bf16/fp16
# data (cuDNN's `implicit_convolve_sgemm<__nv_bfloat16, ...>` for a 3-channel patch embedding) is not
# FP32 math that autocast would move to tensor cores: it already runs in low precision.
_LOW_PRECISION = re.compile(
    r"__nv_bfloat16|__half(?![a-z0-9])|c10::BFloat16|c10::Half|(?<![a-z0-9])(?:bf16|fp16|f16|bfloat16|half)(?![a-z0-9])",
    re.I,
)


def low_precision_data(name: str, input_types: str | None = None) -> bool:
    """The kernel works on bf16/fp16 data (its name's template arguments, else its op's input types)."""
    return bool(_LOW_PRECISION.search(name) or (input_types and _LOW_PRECISION.search(input_types)))


def tensor_core_from_name(name: str) -> bool | None:
    """What the name says about tensor cores: True, False (plain FP32/FP64 math), None (can't tell).

    The FP32 patterns are checked first so that `xmma_gemm_f32f32_..._ffma` is False.
    """
    if _NOT_TENSOR_CORE.search(name):
        return False
    if _TENSOR_CORE.search(name):
        return True
    return None


def is_collective(name: str) -> bool:
    return kernel_family(name) == "collective"


def is_triton(name: str) -> bool:
    """torch.compile / Triton generated kernel (triton_poi_*, triton_red_*, triton_per_*, triton_tem_*)."""
    return name.startswith("triton_") or "triton" in name.lower()
