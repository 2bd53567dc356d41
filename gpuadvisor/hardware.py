"""Hardware facts: peak FLOP/s per GPU and dtype, memory bandwidth, SM counts, and what a kernel's name
says about tensor cores. A leaf module: it imports nothing of the package (every stage may read it).

    peak = gpu_peak_for("NVIDIA H100 80GB HBM3")   # GpuPeak, or None for a GPU not in the table
    peak.peak("bf16")                               # 989.4 dense TFLOP/s
    peak.memory_bandwidth_gbps                      # 3350.0

Numbers are dense (no 2:4 sparsity) datasheet peaks; each entry of `_PEAKS` names its source. The
table is also printed in docs/model.md ("Hardware peaks"). An unknown GPU gets no peak (None): nothing
is judged against a number we do not have.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuadvisor.namepattern import NamePattern, by_signature

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "MATMUL_FAMILIES",
    "PEAK_TABLE",
    "GpuPeak",
    "classify_tensor_core",
    "dtype_class",
    "gpu_peak_for",
    "low_precision_data",
    "tensor_core_from_name",
    "tf32_allowed",
]


@dataclass(frozen=True)
class GpuPeak:
    """Peak numbers of a GPU model (dense, no sparsity), from vendor datasheets (see `_PEAKS`)."""

    name: str  # the matched table entry, e.g. "H100 SXM"
    sm_count: int | None
    tflops: dict[str, float]  # dtype ("bf16", "fp16", "tf32", "fp32", "fp8") -> dense TFLOP/s
    memory_bandwidth_gbps: float | None = None
    source: str = ""

    def peak(self, dtype: str) -> float | None:
        """Dense TFLOP/s for `dtype`; "tf32" falls back to "fp32" on GPUs without TF32 (V100, T4):
        an FP32 matmul there runs on the CUDA cores."""
        value = self.tflops.get(dtype)
        if value is None and dtype == "tf32":
            value = self.tflops.get("fp32")
        return value

    @property
    def bandwidth_tbps(self) -> float | None:
        bw = self.memory_bandwidth_gbps
        return bw / 1000.0 if bw else None


# (substring of the device name, label, SM count, TFLOP/s per dtype, memory GB/s, source); the first
# match wins, so more specific names come first. Device names as CUDA reports them: "NVIDIA H100 80GB
# HBM3" (SXM5), "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA A100-SXM4-80GB",
# "NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-40GB", "NVIDIA L4", "NVIDIA L40S", "NVIDIA A10",
# "Tesla V100-SXM2-16GB", "NVIDIA GeForce RTX 4090", "Tesla T4". Sparse datasheet figures are halved.
_PEAKS: tuple[tuple[str, str, int | None, dict[str, float], float | None, str], ...] = (
    (
        "H200 NVL",
        "H200 NVL",
        132,
        {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5},
        4800.0,
        "NVIDIA H200 datasheet (H200 NVL column)",
    ),
    (
        "H200",
        "H200 SXM",
        132,
        {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
        4800.0,
        "NVIDIA H200 datasheet (H200 SXM column)",
    ),
    (
        "H100 PCIe",
        "H100 PCIe",
        114,
        {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0},
        2000.0,
        "NVIDIA H100 datasheet (H100 PCIe column)",
    ),
    (
        "H100 NVL",
        "H100 NVL",
        132,
        {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5},
        3900.0,
        "NVIDIA H100 datasheet (H100 NVL column)",
    ),
    (
        "H100",
        "H100 SXM",
        132,
        {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
        3350.0,
        "NVIDIA H100 datasheet (H100 SXM column)",
    ),
    (
        "A100-SXM4-40GB",
        "A100 SXM 40GB",
        108,
        {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        1555.0,
        "NVIDIA A100 datasheet (A100 40GB SXM column)",
    ),
    (
        "A100-PCIE-40GB",
        "A100 PCIe 40GB",
        108,
        {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        1555.0,
        "NVIDIA A100 datasheet (A100 40GB PCIe column)",
    ),
    (
        "A100 80GB PCIe",
        "A100 PCIe 80GB",
        108,
        {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        1935.0,
        "NVIDIA A100 datasheet (A100 80GB PCIe column)",
    ),
    (
        "A100",
        "A100 SXM 80GB",
        108,
        {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        2039.0,
        "NVIDIA A100 datasheet (A100 80GB SXM column)",
    ),
    (
        "L40S",
        "L40S",
        142,
        {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0},
        864.0,
        "NVIDIA L40S datasheet",
    ),
    (
        "L4",
        "L4",
        58,
        {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5},
        300.0,
        "NVIDIA L4 datasheet",
    ),
    (
        "A10",
        "A10",
        72,
        {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
        600.0,
        "NVIDIA A10 datasheet",
    ),
    (
        "RTX 4090",
        "GeForce RTX 4090",
        128,
        # tensor math with FP32 accumulation (what PyTorch uses); GeForce runs it at half the FP16-accumulate rate
        {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2, "fp8": 330.3},
        1008.0,
        "NVIDIA Ada Lovelace architecture whitepaper, appendix (GeForce RTX 4090)",
    ),
    (
        "V100-PCIE",
        "V100 PCIe",
        80,
        {"fp32": 14.0, "fp16": 112.0},
        900.0,
        "NVIDIA V100 datasheet (V100 PCIe column)",
    ),
    (
        "V100",
        "V100 SXM2",
        80,
        {"fp32": 15.7, "fp16": 125.0},
        900.0,
        "NVIDIA V100 datasheet (V100 SXM2 column)",
    ),
    ("T4", "T4", 40, {"fp32": 8.1, "fp16": 65.0}, 320.0, "NVIDIA T4 datasheet"),
)

# The table as rows (label, SMs, TFLOP/s per dtype, GB/s, source): docs and tests read it.
PEAK_TABLE: tuple[tuple[str, int | None, dict[str, float], float | None, str], ...] = tuple(
    (label, sms, dict(tflops), bw, source) for _, label, sms, tflops, bw, source in _PEAKS
)


def gpu_peak_for(name: str | None, sm_count: int | None = None) -> GpuPeak | None:
    """Look up a GPU by its device name (trace deviceProperties / environment.json); None if unknown.

    `sm_count` (from the trace) overrides the table's when given: it is what this device really has.
    """
    if not name:
        return None
    lowered = name.lower()
    for key, label, sms, tflops, bw, source in _PEAKS:
        if key.lower() in lowered:
            return GpuPeak(
                name=label,
                sm_count=sm_count or sms,
                tflops=dict(tflops),
                memory_bandwidth_gbps=bw,
                source=source,
            )
    return None


# ---- tensor cores from kernel names ------------------------------------------------------------------

# Families whose math can run on tensor cores (the denominator of the tensor-core share).
MATMUL_FAMILIES: frozenset[str] = frozenset({"gemm", "conv", "attention"})

# Plain FP32 math, even where the name says xmma: `sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize..._ffma_...`
# computes with FFMA (docs/trace-inputs.md, "Facts from real traces": the TensorBoard plugin counted any xmma_gemm as tensor core).
_NOT_TENSOR_CORE = NamePattern(
    r"simt|ffma|sgemm|dgemm|gemv|gemmsn|\bdot_kernel|implicit_convolve_sgemm|winograd|_engine<float\b|"
    # PyTorch mem-efficient attention in float32 (fmha_cutlassF_f32_*, fmha_cutlassB_f32_*): FP32-accurate
    # math (SIMT, or 3xTF32 emulation on Sm80+): FP32 math for our purposes, bf16 runs several times faster
    r"fmha_cutlass[fb]_f32|"
    r"fft|precomputed_convolve")

# Tensor-core evidence in the name: MMA instruction families, Hopper cuBLAS JIT kernels, half/bf16/tf32
# cutlass/xmma tiles, tensor-op cutlass kernels, fused attention kernels.
_TENSOR_CORE = NamePattern(
    r"nvjet|hmma|wgmma|gmma|imma|tensorop|tensor_op|[shi](?:884|1688|16816)|"
    r"xmma_gemm_(?:bf16|f16|e4m3|e5m2|tf32)|"
    r"(?:bf16|f16|fp16|half|tf32|e4m3|e5m2)[a-z0-9_]*(?:gemm|fprop|dgrad|wgrad)|"
    r"(?:gemm|fprop|dgrad|wgrad)[a-z0-9_]*(?:bf16|f16|fp16|tf32)|"
    r"fmha|flash|cudnn_generated_fort_native_sdpa|sm\d+_xmma_(?:fprop|dgrad|wgrad)_.*(?:f16|bf16|tf32)|"
    r"ampere_(?:h|bf16|fp16|tf32)|turing_h|volta_h|sm\d0_(?:h|bf16|tf32)")

# 16-bit data in a kernel's template arguments or its op's input types: a CUDA-core kernel on bf16/fp16
# data (cuDNN's `implicit_convolve_sgemm<__nv_bfloat16, ...>` for a 3-channel patch embedding) is not
# FP32 math that autocast would move to tensor cores: it already runs in low precision.
_LOW_PRECISION = NamePattern(
    r"__nv_bfloat16|__half(?![a-z0-9])|c10::BFloat16|c10::Half|(?<![a-z0-9])(?:bf16|fp16|f16|bfloat16|half)(?![a-z0-9])")


@functools.lru_cache(maxsize=8192)  # a step repeats a few hundred (name, types) pairs thousands of times
def low_precision_data(name: str, input_types: str | None = None) -> bool:
    """The kernel works on bf16/fp16 data (its name's template arguments, else its op's input types)."""
    return _LOW_PRECISION.matches(name) or bool(input_types and _LOW_PRECISION.matches(input_types))


@by_signature(names=1)
def tensor_core_from_name(name: str) -> bool | None:
    """What the name says about tensor cores: True, False (plain FP32/FP64 math), None (can't tell).

    The FP32 patterns are checked first so that `xmma_gemm_f32f32_..._ffma` is False.
    """
    if _NOT_TENSOR_CORE.matches(name):
        return False
    if _TENSOR_CORE.matches(name):
        return True
    return None


_HALF_TYPES = ("BFloat16", "Half", "Float8", "bfloat16", "float16")


def dtype_class(types: Any) -> str | None:
    """'half' (bf16/fp16/fp8 inputs), 'float' (fp32 inputs), or None from an op's `Input type` text."""
    if not isinstance(types, str) or not types:
        return None
    if any(h in types for h in _HALF_TYPES):
        return "half"
    if "float" in types and "double" not in types:
        return "float"
    return None


def tf32_allowed(settings: dict[str, Any], family: str) -> bool | None:
    """Whether TF32 was allowed for this family per the captured settings; None when unknown."""
    if not settings:
        return None
    if family == "conv":
        v = settings.get("allow_tf32_cudnn")
        return bool(v) if isinstance(v, bool) else None
    prec = settings.get("float32_matmul_precision")
    flag = settings.get("allow_tf32_matmul")
    if isinstance(prec, str) and prec in ("high", "medium"):
        return True
    if isinstance(flag, bool):
        return flag
    return None


def classify_tensor_core(
    kernels_with_ops: pd.DataFrame, settings: dict[str, Any], fp32_peak_tflops: float | None
) -> pd.DataFrame:
    """Per distinct matmul/conv/attention kernel name: columns name, tensor_core (True/False/None), basis.

    `kernels_with_ops` needs the columns name, family, op_input_types, op_flops, dur, external_id.
    Order of evidence: (1) the kernel name (`tensor_core_from_name`; FP32 patterns such as `simt`,
    `sgemm`, `ffma` win over `xmma`); (2) when the name says nothing, the launching op's input dtypes:
    bf16/fp16/fp8 -> tensor core; fp32 -> tensor core only when the captured settings allow TF32;
    (3) achieved FLOP/s: a kernel whose op FLOPs over its time beat 1.1x the FP32 non-tensor peak must
    use tensor cores, whatever (1) said.
    """
    # lazy: numpy and pandas stay out of `gpuadvisor rules`, `import gpuadvisor.api` and the trace-split worker
    import numpy as np
    import pandas as pd

    k = kernels_with_ops[kernels_with_ops["family"].astype(str).isin(MATMUL_FAMILIES)]
    rows: list[tuple[str, bool | None, str]] = []
    if len(k) == 0:
        empty: pd.DataFrame = pd.DataFrame(
            {c: pd.Series([], dtype=object) for c in ("name", "tensor_core", "basis")}
        )
        return empty
    k = k.assign(_name=k["name"].astype(str), _fam=k["family"].astype(str))
    for name, g in k.groupby("_name", sort=True):
        verdict = tensor_core_from_name(str(name))
        basis = "name" if verdict is not None else "unknown"
        if verdict is None:
            classes = {c for c in (dtype_class(t) for t in g["op_input_types"]) if c is not None}
            if classes == {"half"}:
                verdict, basis = True, "dtype"
            elif classes == {"float"}:
                allowed = tf32_allowed(settings, str(g["_fam"].iloc[0]))
                if allowed is not None:
                    verdict, basis = allowed, "dtype+settings"
        if fp32_peak_tflops:
            per_op = g.dropna(subset=["op_flops"]).drop_duplicates("external_id")
            dur = float(g["dur"].sum())
            if len(per_op) and dur > 0:
                tflops = float(np.nansum(per_op["op_flops"].to_numpy())) / (dur * 1e-6) / 1e12
                if tflops > 1.1 * fp32_peak_tflops and verdict is not True:
                    verdict, basis = True, "flops"
        rows.append((str(name), verdict, basis))
    out: pd.DataFrame = pd.DataFrame.from_records(rows, columns=["name", "tensor_core", "basis"]).astype(
        object
    )
    return out
