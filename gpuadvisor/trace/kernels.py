"""Kernel name classifiers: the kernel family, and whether a matmul/conv kernel uses tensor cores.

Both work on names only and are applied once per distinct name (names are a pandas category).
Name lists drift with every cuBLAS/cuDNN release; `gpuadvisor.metrics` cross-checks the tensor-core
verdict with the launching op's input dtypes, the TF32 settings and the achieved FLOP/s.
"""

from __future__ import annotations

from gpuadvisor.hardware import MATMUL_FAMILIES, low_precision_data, tensor_core_from_name

# The tensor-core name classifier lives with the other hardware facts (a leaf module); re-exported here.
from gpuadvisor.namepattern import NamePattern, by_signature

__all__ = [
    "FAMILIES",
    "MATMUL_FAMILIES",
    "is_collective",
    "is_triton",
    "kernel_family",
    "low_precision_data",
    "tensor_core_from_name",
]

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

# Checked in order; the first match wins. Case-insensitive.
_FAMILY_PATTERNS: tuple[tuple[str, NamePattern], ...] = (
    ("collective", NamePattern(r"nccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|sendrecv")),
    # `lamb(?!da)`: the LAMB optimizer, not every templated kernel's `{lambda(...)#1}`
    (
        "optimizer",
        NamePattern(r"multi_tensor_apply|fused_?adam|adamw?_|_adam|sgd|lamb(?!da)|(?<![a-z])lion|optim"),
    ),
    ("attention", NamePattern(r"fmha|flash|attention|attn|sdpa|_mha|mha_|softmax_rescale")),
    (
        "conv",
        NamePattern(
            r"conv(?!ert)|fprop|dgrad|wgrad|winograd|implicit_gemm|implicit_convolve|im2col|col2im|"
            r"cudnn::.*(?:fwd|bwd)|precomputed_convolve",
        ),
    ),
    (
        "gemm",
        NamePattern(
            r"gemm|nvjet|cutlass|cublas|matmul|gemv|\bdot_kernel|hmma|wgmma|gmma|triton_tem|"
            r"splitkreduce|s1688|s16816|h1688|h16816|bmm|_mm_|addmm",
        ),
    ),
    (
        "memcpy-like",
        NamePattern(
            r"memcpy|memset|direct_copy_kernel|copy_kernel|catarraybatchedcopy|CatArray|transpose"
        ),
    ),
    # elementwise before reduction: "vectorized_elementwise_kernel<... sum_functor ...>" is elementwise
    ("elementwise", NamePattern(r"elementwise|triton_poi|pointwise|vectorized|unrolled")),
    (
        "reduction",
        NamePattern(
            r"reduce|reduction|softmax|norm|triton_red|triton_per|argmax|argmin|cross_entropy|nll_loss|"
            r"\bsum\b|mean|scan|cub::",
        ),
    ),
    (
        "elementwise",
        NamePattern(r"fill|index|gather|scatter|where|cat_|embedding|dropout|relu|gelu|silu"),
    ),
)


@by_signature(names=1)
def kernel_family(name: str) -> str:
    """The family of a kernel name (one of FAMILIES)."""
    for family, pattern in _FAMILY_PATTERNS:
        if pattern.matches(name):
            return family
    return "other"


def is_collective(name: str) -> bool:
    return kernel_family(name) == "collective"


def is_triton(name: str) -> bool:
    """torch.compile / Triton generated kernel (triton_poi_*, triton_red_*, triton_per_*, triton_tem_*)."""
    return name.startswith("triton_") or "triton" in name.lower()


# ---- kernel classes (busy time by what the kernel does; docs/model.md, "Kernel classes") -------------

KERNEL_CLASSES: tuple[str, ...] = (
    "gemm",
    "conv_fprop",
    "conv_dgrad",
    "conv_wgrad",
    "attention_flash",
    "attention_efficient",
    "attention_math",
    "elementwise",
    "normalization",
    "reduction_softmax",
    "layout_transpose",
    "copy",
    "collective",
    "optimizer",
    "other",
)

# Classes whose math can run on tensor cores (judged against the dtype's matmul peak).
MATH_CLASSES: frozenset[str] = frozenset(
    {"gemm", "conv_fprop", "conv_dgrad", "conv_wgrad", "attention_flash", "attention_efficient", "attention_math"}
)
# Classes whose time follows the bytes they move (judged against the memory bandwidth).
MEMORY_CLASSES: frozenset[str] = frozenset(
    {"elementwise", "normalization", "reduction_softmax", "layout_transpose", "copy"}
)

_OPTIMIZER_NAME = NamePattern(r"multi_tensor_apply|fused_?adam|adamw?_|_adam|(?<![a-z])sgd|lamb(?!da)|(?<![a-z])lion")
# cuDNN's layout transposes around its NHWC kernels in an NCHW network, and explicit transpose kernels
_TRANSPOSE_NAME = NamePattern(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|transpose")
_FLASH_NAME = NamePattern(
    r"flash_fwd|flash_bwd|flash::|pytorch_flash|flash_attn|cudnn_generated_fort_native_sdpa|fmha_v2|"
    r"fmha_.*sm(?:90|100)|fmhaSm\d|sdpa_flash")
_EFFICIENT_NAME = NamePattern(r"fmha_cutlass|efficient_attention|mem_eff|AttentionKernel|AttentionBackwardKernel")
_ATTENTION_NAME = NamePattern(r"fmha|flash|attention|(?<![a-z])attn|sdpa")
_CONV_NAME = NamePattern(
    r"conv(?!ert)|fprop|dgrad|wgrad|winograd|implicit_gemm|implicit_convolve|im2col|col2im|precomputed_convolve|"
    r"cudnn::.*(?:fwd|bwd)")
_FORWARD_NAME = NamePattern(r"fprop|fwd|forward")
_DGRAD_NAME = NamePattern(r"dgrad|bwd_data|backward_data|col2im")
_WGRAD_NAME = NamePattern(r"wgrad|bwd_filter|backward_filter|bwd_weight")
_CONV_OPS = NamePattern(r"^aten::(?:cudnn_convolution|_convolution|convolution|conv\d?d|miopen_convolution|_slow_conv|slow_conv|thnn_conv|convolution_overrideable|mkldnn_convolution)")
_CONV_BACKWARD_OPS = NamePattern(r"convolution_backward|conv.*backward")
_GEMM_OPS = NamePattern(r"^aten::(?:mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm|addmv|mv|_addmm_activation|addbmm|einsum)$")
_NORM_OPS = NamePattern(
    r"^aten::(?:native_batch_norm|batch_norm|_batch_norm|cudnn_batch_norm|native_layer_norm|layer_norm|"
    r"native_group_norm|group_norm|_fused_rms_norm|rms_norm|instance_norm|miopen_batch_norm|_native_batch_norm)")
_NORM_NAME = NamePattern(
    r"batch_norm|layer_norm|group_norm|rms_?norm|instance_norm|bn_fw|bn_bw|RowwiseMoments|ComputeInternalGradients|"
    r"GammaBeta|welford|norm_kernel|batchnorm|layernorm")
_SOFTMAX_OPS = NamePattern(
    r"^aten::(?:_?softmax|_?log_softmax|_softmax_backward_data|_log_softmax_backward_data|nll_loss|nll_loss2d|"
    r"cross_entropy_loss|sum|mean|amax|amin|max|min|norm|linalg_vector_norm|var|std|var_mean|std_mean|cumsum|"
    r"argmax|argmin|prod|any|all|logsumexp|topk|sort)")
_SOFTMAX_NAME = NamePattern(
    r"softmax|reduce_kernel|reduction|cross_entropy|nll_loss|argmax|argmin|\bsum\b|logsumexp|cub::|triton_red|triton_per")
_COPY_OPS = NamePattern(r"^aten::(?:copy_|_to_copy|to|clone|contiguous|cat|_cat|stack|fill_|zero_|zeros|ones|full|index_put_|_unsafe_view)$")
_COPY_NAME = NamePattern(r"memcpy|memset|direct_copy_kernel|copy_kernel|catarraybatchedcopy|CatArray|AddPadding|fill_kernel|FillFunctor")
_EFFICIENT_OPS = NamePattern(r"efficient_attention", flags=0)  # case-sensitive, as the op names are


@by_signature(names=2)
def kernel_class(name: str, op_name: str | None = None, family: str | None = None) -> str:
    """The class of a kernel (one of KERNEL_CLASSES) from its name, the cpu op that launched it, and its
    family (`kernel_family`, computed when not given). The op decides where the name is ambiguous: a
    cuDNN helper launched by aten::convolution_backward is still a conversion or a reduction by name;
    a `vectorized_layer_norm_kernel` is normalization, not elementwise. The name and the op are read
    through NamePatterns only: the answer is kept per signature (gpuadvisor/namepattern.py)."""
    fam = family or kernel_family(name)
    op = op_name or ""
    if fam == "collective":
        return "collective"
    if _OPTIMIZER_NAME.matches(name):
        return "optimizer"
    if _TRANSPOSE_NAME.matches(name):
        return "layout_transpose"
    if _FLASH_NAME.matches(name):
        return "attention_flash"
    if _EFFICIENT_NAME.matches(name) or _EFFICIENT_OPS.matches(op):
        return "attention_efficient"
    if _ATTENTION_NAME.matches(name) and fam == "attention":
        return "attention_math"
    conv_op = bool(_CONV_OPS.matches(op) or _CONV_BACKWARD_OPS.matches(op))
    if _CONV_NAME.matches(name) or (conv_op and fam in ("gemm", "conv")):
        if _DGRAD_NAME.matches(name):
            return "conv_dgrad"
        if _WGRAD_NAME.matches(name):
            return "conv_wgrad"
        if _FORWARD_NAME.matches(name) or (conv_op and not _CONV_BACKWARD_OPS.matches(op)):
            return "conv_fprop"
        if conv_op:
            return "conv_dgrad" if fam != "other" else "other"
        return "conv_fprop"
    if fam == "gemm" or (_GEMM_OPS.matches(op) and fam not in ("elementwise", "reduction", "memcpy-like")):
        return "gemm"
    if _NORM_OPS.matches(op) or _NORM_NAME.matches(name):
        return "normalization"
    if _COPY_NAME.matches(name) or (_COPY_OPS.matches(op) and fam in ("memcpy-like", "elementwise", "other")):
        return "copy"
    if _SOFTMAX_OPS.matches(op) or _SOFTMAX_NAME.matches(name) or fam == "reduction":
        return "reduction_softmax"
    if fam == "elementwise":
        return "elementwise"
    if fam == "optimizer":  # only `optim...` names get here (cuDNN's `..._optimized_...` conv tiles did above)
        return "other"
    if fam == "memcpy-like":
        return "copy"
    return "other"
