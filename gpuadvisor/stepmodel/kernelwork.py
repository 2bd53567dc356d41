"""Remedies that change the GPU's kernels, as transformations of a replay program: launch dimensions
(`fix_grids`), lower precision (`lower_precision`: bf16 autocast, TF32), attention through SDPA,
channels_last, padded GEMM shapes, a fused cross-entropy, fused elementwise chains, and the allocator
calls that expandable segments remove. The host and data remedies, the compile and CUDA-graph ones and
the `Constants` every transformation reads are `gpuadvisor.stepmodel.transforms`'s.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from gpuadvisor.hardware import gpu_peak_for, low_precision_data
from gpuadvisor.stepmodel.busy import (
    attention_bf16_factor,
    attention_factor,
    memory_chains,
    padding_factor,
    precision_factor,
    table_to_program_rows,
    vocab_loss_factor,
)
from gpuadvisor.stepmodel.hostcalls import _ALLOC_RE, _FREE_RE
from gpuadvisor.stepmodel.layout import channels_last_factor
from gpuadvisor.stepmodel.replay import EV_WORK, Program
from gpuadvisor.stepmodel.transforms import CONSTANTS, Constants, no_fixed_host, op_column

if TYPE_CHECKING:
    from gpuadvisor.stepmodel.model import StepModel


def fix_grids(
    model: StepModel, program: Program, names: Collection[str], c: Constants | None = None
) -> Program:
    """The named kernels launched with enough blocks: a small grid's time x max(blocks/SMs,
    1/`max_grid_speedup`); a full grid with low occupancy x occupancy/target."""
    c = c or CONSTANTS
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    name = op_column(model, program, "name").astype(str)
    sel = np.isin(name, np.asarray(sorted(names), dtype=object))
    if not sel.any():
        return program
    blocks = op_column(model, program, "blocks").astype(np.float64)
    occ = op_column(model, program, "occupancy_pct").astype(np.float64)
    sms = float(model.facts.num_sms or 0)
    for j in np.flatnonzero(sel).tolist():
        if sms > 0 and blocks[j] == blocks[j] and blocks[j] < sms:
            factor = max(blocks[j] / sms, 1.0 / c.max_grid_speedup)
        elif occ[j] == occ[j] and 0 < occ[j] < c.grid_target_occupancy_pct:
            factor = occ[j] / c.grid_target_occupancy_pct
        else:
            continue
        program.op_dur[j] = max(1.0, program.op_dur[j] * factor)
    return program


def autocast_speedup(
    achieved_tflops: float | None, fp32_peak: float | None, bf16_peak: float | None, c: Constants | None = None
) -> float:
    """Expected bf16 speed-up of one FP32 matmul kernel from how hard it drives the CUDA cores."""
    c = c or CONSTANTS
    if achieved_tflops is not None and fp32_peak and bf16_peak:
        use = min(1.0, achieved_tflops / fp32_peak)
        s = use * (bf16_peak / fp32_peak) * c.tensor_core_efficiency
        return min(c.max_autocast_speedup, max(c.min_autocast_speedup, s))
    return c.autocast_speedup_unknown


def tf32_speedup(
    achieved_tflops: float | None, fp32_peak: float | None, tf32_peak: float | None, c: Constants | None = None
) -> float:
    """Expected TF32 speed-up of one FP32 GEMM: only compute-bound kernels gain (same bytes)."""
    c = c or CONSTANTS
    if achieved_tflops is not None and fp32_peak and tf32_peak:
        use = min(1.0, achieved_tflops / fp32_peak)
        return min(c.max_tf32_speedup, max(1.0, use * (tf32_peak / fp32_peak) * c.tensor_core_efficiency))
    return 1.0 + (c.autocast_speedup_unknown - 1.0) / 2.0


def fp32_matmul_mask(model: StepModel, program: Program) -> Any:
    """Ops of the program that are matmul/conv/attention kernels running in plain FP32."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    math_of = model.matmul_math()
    name = op_column(model, program, "name").astype(str)
    types = op_column(model, program, "op_input_types")
    return np.array(
        [
            math_of.get(n) is False and not low_precision_data(n, t if isinstance(t, str) else None)
            for n, t in zip(name.tolist(), types.tolist(), strict=True)
        ],
        dtype=bool,
    )


# Ops autocast runs in float32 whatever the input (torch.amp, "CUDA Ops that can autocast to float32"):
# under bf16 autocast their kernels keep their time.
AUTOCAST_FP32_OPS = frozenset(
    {
        "aten::_softmax", "aten::softmax", "aten::_log_softmax", "aten::log_softmax",
        "aten::_softmax_backward_data", "aten::_log_softmax_backward_data", "aten::exp", "aten::expm1",
        "aten::log", "aten::log1p", "aten::log2", "aten::log10", "aten::pow", "aten::rsqrt",
        "aten::reciprocal", "aten::sum", "aten::prod", "aten::cumsum", "aten::cumprod", "aten::norm",
        "aten::linalg_vector_norm", "aten::nll_loss_forward", "aten::nll_loss_backward", "aten::nll_loss2d_forward",
        "aten::nll_loss2d_backward", "aten::mse_loss", "aten::mse_loss_backward", "aten::l1_loss",
        "aten::smooth_l1_loss", "aten::smooth_l1_loss_backward", "aten::binary_cross_entropy_with_logits",
        "aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::native_group_norm",
        "aten::native_group_norm_backward", "aten::logsumexp", "aten::softplus", "aten::cdist",
    }
)


def kernel_speedups(model: StepModel, program: Program, mode: str, c: Constants | None = None) -> Any:
    """Per op of the program: the expected speed-up under `mode` ("bf16" or "tf32")."""
    c = c or CONSTANTS
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np


    peak = gpu_peak_for(model.trace.meta.gpu_name or model._gpu_name(), model.facts.num_sms)
    fp32_peak = peak.peak("fp32") if peak else None
    other_peak = peak.peak("bf16" if mode == "bf16" else "tf32") if peak else None
    mask = fp32_matmul_mask(model, program)
    flops = op_column(model, program, "op_flops").astype(np.float64)
    out = np.ones(program.n_ops)
    for j in np.flatnonzero(mask).tolist():
        d = program.op_dur[j]
        tflops = flops[j] / d / 1e6 if flops[j] == flops[j] and flops[j] > 0 and d > 0 else None
        if mode == "bf16":
            out[j] = autocast_speedup(tflops, fp32_peak, other_peak, c)
        else:
            out[j] = tf32_speedup(tflops, fp32_peak, other_peak, c)
    if mode == "bf16":
        family = op_column(model, program, "family").astype(str)
        origin = op_column(model, program, "origin").astype(str)
        in_opt = op_column(model, program, "in_optimizer").astype(bool)
        kind = op_column(model, program, "kind")
        ew = (kind == "kernel") & np.isin(family, ["elementwise", "reduction"]) & ~in_opt & (origin == "aten")
        # only where the kernels run in FP32 today (inputs typed float)
        types = op_column(model, program, "op_input_types")
        fp32_inputs = np.array(
            [isinstance(t, str) and "float" in t and "BFloat16" not in t and "Half" not in t for t in types],
            dtype=bool,
        )
        memory = ew & fp32_inputs & (out == 1.0)
        if c.bf16_memory_by_roofline and len(model.kernel_table):
            # the part of a memory-bound kernel's time at the bandwidth roofline halves with its bytes
            # (factor 1 - r/2, r its roofline fraction); normalization kernels are bound by their
            # per-element work, not their bytes, and keep their time (measured on ResNet-50 in NCHW,
            # H200: BatchNorm 23.6 ms per step in FP32, 30.7 ms in bf16); without a roofline: flat
            rows = table_to_program_rows(model, program)
            known = rows >= 0
            r = np.full(program.n_ops, np.nan)
            cls = np.full(program.n_ops, "", dtype=object)
            r[known] = model.kernel_table["roofline_fraction"].to_numpy(dtype=np.float64)[rows[known]]
            cls[known] = model.kernel_table["class"].to_numpy(dtype=object)[rows[known]]
            by_roof = 1.0 / (1.0 - 0.5 * np.clip(np.nan_to_num(r, nan=0.0), 0.0, 1.0))
            op = op_column(model, program, "op_name")
            fp32_list = np.array([o in AUTOCAST_FP32_OPS for o in op.tolist()], dtype=bool)
            speed = np.where(
                (cls == "normalization") | fp32_list,
                1.0,
                np.where(np.isfinite(r), by_roof, c.bf16_elementwise_speedup),
            )
            out = np.where(memory, speed, out)
        else:
            out = np.where(memory, c.bf16_elementwise_speedup, out)
    return out


def lower_precision(model: StepModel, program: Program, mode: str, c: Constants | None = None) -> Program:
    """bf16 autocast ("bf16") or TF32 ("tf32") for the FP32 matmul/conv kernels (see kernel_speedups).
    Under bf16, the kernels already on tensor cores in TF32 (cuDNN's default for convolutions, or
    allow_tf32) gain by their roofline fraction too (gpuadvisor.stepmodel.busy.precision_factor)."""
    c = c or CONSTANTS
    program.op_dur = program.op_dur / kernel_speedups(model, program, mode, c)
    if mode == "bf16":
        program = _scale_table_kernels(model, program, precision_factor(model))
        if "sdpa" in program.applied:
            # the fused attention of an FP32 pattern now runs as FlashAttention in bf16
            program = _scale_table_kernels(model, program, attention_bf16_factor(model))
    return program


def no_allocator_calls(model: StepModel, program: Program) -> Program:
    """Allocation calls disappear from steady-state steps (expandable segments, static shapes):
    cudaMalloc/cudaFree cost nothing and cudaFree no longer waits for the device."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    names = program.ev_name.astype(str)
    alloc = np.array(
        [bool(_ALLOC_RE.search(n) or _FREE_RE.search(n)) for n in names.tolist()], dtype=bool
    )
    program.ev_kind[alloc] = EV_WORK
    program.ev_dur[alloc] = 0.0
    no_fixed_host(program, alloc)
    program.ev_post[alloc] = 0.0
    return program


# ---- busy time (issue 31; gpuadvisor.stepmodel.busy) ------------------------------------------------------


def _scale_table_kernels(model: StepModel, program: Program, factor_by_row: Any) -> Program:
    """Multiply the duration of each window kernel of the program by its kernel-table row's factor."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np


    if program.n_ops == 0 or len(factor_by_row) == 0:
        return program
    rows = table_to_program_rows(model, program)
    have = rows >= 0
    factors = np.ones(program.n_ops)
    factors[have] = np.asarray(factor_by_row, dtype=np.float64)[rows[have]]
    program.op_dur = program.op_dur * factors
    return program


def sdpa(model: StepModel, program: Program) -> Program:
    """Hand-written attention becomes F.scaled_dot_product_attention: each pattern's kernels
    (gpuadvisor.stepmodel.busy.attention_patterns) shrink together to the time the fused kernels need
    for the same work (`fused_attention_us`). Their launches stay (a conservative host side)."""

    program = _scale_table_kernels(model, program, attention_factor(model))
    program.applied.append("sdpa")
    return program


def channels_last(model: StepModel, program: Program) -> Program:
    """The model and its input in channels_last: each kernel on a 4-D activation scaled by its op
    family's factor (gpuadvisor.stepmodel.layout.channels_last_plan): the NHWC table's measured ratio,
    else cuDNN's transposes removed and BatchNorm at its channels-last speed, else unchanged."""
    return _scale_table_kernels(model, program, channels_last_factor(model))


def pad_gemm_shapes(model: StepModel, program: Program) -> Program:
    """Misaligned bf16/fp16 GEMMs padded to multiples of 8: each runs its padded FLOPs at the roofline
    fraction of this run's aligned GEMMs (gpuadvisor.stepmodel.busy.odd_gemms), never slower than now."""

    return _scale_table_kernels(model, program, padding_factor(model))


def fused_cross_entropy(model: StepModel, program: Program) -> Program:
    """The FP32 large-vocabulary loss as a fused cross-entropy: its kernels (upcast, log_softmax,
    nll_loss and their backward; gpuadvisor.stepmodel.busy.vocab_loss) shrink together to one read of
    the bf16 logits and one write of their gradient at the memory bandwidth."""

    return _scale_table_kernels(model, program, vocab_loss_factor(model))


def fuse_memory_chains(model: StepModel, program: Program) -> Program:
    """torch.compile in its default mode (no CUDA graphs) on hand-written elementwise code: each chain of
    primitive memory-bound kernels (gpuadvisor.stepmodel.busy.memory_chains) runs as one fused kernel
    that moves the bytes of the chain's largest member at the bandwidth the chain reaches now. Launches
    stay (a GPU-bound step does not wait for them)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np


    chains = memory_chains(model)
    if chains is None:
        return program
    return _scale_table_kernels(model, program, np.asarray(chains.factor, dtype=np.float64))
