"""Busy-time patterns of the step model that a code change would make faster (issue 31; docs/model.md,
"Busy-time transforms"): hand-written attention, convolutions in NCHW with cuDNN's layout transposes,
and what a kernel of the run would take at another precision. Each pattern is found once per model
from the kernel table (gpuadvisor.stepmodel.kernels) and the recorded op shapes; the remedies'
transforms (gpuadvisor.stepmodel.transforms) and the kernel_efficiency rules read the same objects.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuadvisor.hardware import GpuPeak
    from gpuadvisor.stepmodel.model import StepModel


@dataclass(frozen=True)
class BusyConstants:
    # Fused attention (F.scaled_dot_product_attention): the share of the dtype's dense peak its kernels
    # reach. FlashAttention-2 on Hopper reaches about 35% of the bf16 peak forward and 28% backward at
    # head sizes 64-128 (Dao 2023, FlashAttention-2 paper, H100 benchmarks; PyTorch ships FA2); PyTorch's
    # memory-efficient kernel in float32 ran at about 70% of the FP32 peak on the corpus's fp32_transformer
    # (H200: fmha_cutlassF_f32 48.6 TFLOP/s for [16, 512, 12, 64]).
    flash_forward_fraction: float = 0.35
    flash_backward_fraction: float = 0.28
    efficient_fp32_fraction: float = 0.7
    # one fused kernel per layer and direction still costs at least this
    fused_kernel_min_us: float = 5.0
    # a memory-bound kernel reaches at most this share of the memory bandwidth
    achievable_bandwidth_fraction: float = 0.85
    # smallest sequence length of an attention pattern (shorter softmaxes are classifiers or gates)
    min_attention_seq: int = 32


BUSY = BusyConstants()


def _parse(text: Any) -> list[Any]:
    if not isinstance(text, str) or not text:
        return []
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return []
    return list(value) if isinstance(value, (list, tuple)) else []


def _shapes(text: Any) -> list[tuple[int, ...]]:
    return [
        tuple(s) for s in _parse(text) if isinstance(s, list) and s and all(isinstance(d, int) for d in s)
    ]


def _prod(values: tuple[int, ...]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


# ---- hand-written attention ------------------------------------------------------------------------------

_SOFTMAX_FWD = frozenset({"aten::_softmax", "aten::softmax", "aten::_log_softmax"})
_SOFTMAX_BWD = frozenset({"aten::_softmax_backward_data", "aten::_log_softmax_backward_data"})
_SDPA_MATH_SOFTMAX = frozenset({"aten::_safe_softmax"})  # SDPA's math backend (not hand-written)
_MATMUL = frozenset({"aten::bmm", "aten::baddbmm", "aten::mm", "aten::matmul"})
_MASK_OPS = frozenset({"aten::masked_fill", "aten::masked_fill_", "aten::where", "aten::add", "aten::add_"})


@dataclass
class AttentionPattern:
    """One hand-written attention shape: scores [lead, T, S] with lead = batch x heads."""

    lead: int
    t: int
    s: int
    head_dim: int | None
    dtype: str  # the matmuls' data dtype (bf16 / fp16 / fp32)
    causal: bool  # a mask is applied to square scores: a causal kernel skips half the blocks
    forward_per_step: float  # layers per step (forward softmaxes)
    backward_per_step: float
    kernels: Any  # boolean mask over model.kernel_table rows
    time_per_step_us: float
    ops: dict[str, float] = field(default_factory=dict)  # aten op -> kernel time per step (us)
    softmax_dtype: str = ""
    predicted_per_step_us: float | None = None  # the fused kernels' time for the same work

    @property
    def shape(self) -> str:
        return f"[{self.lead}, {self.t}, {self.s}]"


def attention_patterns(model: StepModel, c: BusyConstants | None = None) -> list[AttentionPattern]:
    """The hand-written attention patterns of the analyzed steps (cached on the model): a softmax over
    3-D/4-D scores [.., T, S] fed by a batched matmul q @ k^T ([lead, T, d] x [lead, d, S]) or feeding
    attn @ v ([lead, T, S] x [lead, S, d]). The pattern's kernels are every kernel whose op reads a
    tensor [.., T, S] with the same leading size (scale, mask, softmax, dropout, casts, attn @ v and all
    their backward ops) and the q @ k^T matmuls. SDPA's math backend (`aten::_safe_softmax`) is not
    hand-written code and is left out."""
    cached = model._derived.get("attention_patterns")
    if cached is not None:
        out: list[AttentionPattern] = cached
        return out
    c = c or BUSY
    result = _find_attention(model, c)
    model._derived["attention_patterns"] = result
    return result


def _find_attention(model: StepModel, c: BusyConstants) -> list[AttentionPattern]:
    import numpy as np
    import pandas as pd

    from gpuadvisor.stepmodel.kernels import dtype_of_types

    table = model.kernel_table
    k = model.window_kernels
    steps = max(1, model.window.count)
    if len(table) == 0:
        return []
    op = k["op_name"].fillna("").astype(str).to_numpy(dtype=object)
    dims = k["op_input_dims"].fillna("").astype(str).to_numpy(dtype=object)
    types = k["op_input_types"].fillna("").astype(str).to_numpy(dtype=object)
    not_opt = table["class"].to_numpy(dtype=object) != "optimizer"
    key = pd.MultiIndex.from_arrays([op, dims, types])
    codes, uniques = pd.factorize(key)
    parsed = [(o, _shapes(d), t) for o, d, t in uniques]
    # signatures from the forward softmaxes
    sigs: dict[tuple[int, int, int], dict[str, Any]] = {}
    for o, shapes, t in parsed:
        if o in _SOFTMAX_FWD and shapes and len(shapes[0]) in (3, 4):
            s0 = shapes[0]
            lead, tt, ss = _prod(s0[:-2]), s0[-2], s0[-1]
            if tt >= c.min_attention_seq and ss >= c.min_attention_seq:
                sigs.setdefault((lead, tt, ss), {"softmax_dtype": dtype_of_types(t)})
    if not sigs:
        return []
    patterns: list[AttentionPattern] = []
    ext = k["external_id"].to_numpy(dtype=np.float64)
    dur = table["dur"].to_numpy(dtype=np.float64)
    for (lead, tt, ss), info in sigs.items():
        member = np.zeros(len(parsed), dtype=bool)
        head_dim: int | None = None
        mm_dtype = ""
        causal = False
        fwd_codes: list[int] = []
        bwd_codes: list[int] = []
        found_mm = False
        for i, (o, shapes, t) in enumerate(parsed):
            if o in _SDPA_MATH_SOFTMAX:
                continue
            scores = any(len(s) >= 2 and s[-2:] == (tt, ss) and _prod(s[:-2]) == lead for s in shapes)
            qk = (
                o in _MATMUL
                and len(shapes) >= 2
                and len(shapes[0]) >= 2
                and len(shapes[1]) >= 2
                and shapes[0][-2] == tt
                and shapes[1][-1] == ss
                and shapes[0][-1] == shapes[1][-2]
                and _prod(shapes[0][:-2]) == lead
                and shapes[0][-1] <= 512
            )
            if qk:
                head_dim = head_dim or int(shapes[0][-1])
                mm_dtype = mm_dtype or dtype_of_types(t)
                found_mm = True
            av = (  # attn @ v: [lead, T, S] x [lead, S, d]
                scores
                and o in _MATMUL
                and len(shapes) >= 2
                and shapes[0][-2:] == (tt, ss)
                and len(shapes[1]) >= 2
                and shapes[1][-2] == ss
                and shapes[1][-1] <= 512
            )
            if av:
                head_dim = head_dim or int(shapes[1][-1])
                mm_dtype = mm_dtype or dtype_of_types(t)
                found_mm = True
            if scores or qk:
                member[i] = True
                if o in _MASK_OPS and tt == ss:
                    causal = causal or o.startswith("aten::masked_fill") or o == "aten::where"
                if o in _SOFTMAX_FWD and shapes and shapes[0][-2:] == (tt, ss):
                    fwd_codes.append(i)
                if o in _SOFTMAX_BWD:
                    bwd_codes.append(i)
        if not found_mm or head_dim is None:
            continue
        rows = member[codes] & not_opt
        if not rows.any():
            continue
        n_fwd = len(np.unique(ext[np.isin(codes, fwd_codes) & np.isfinite(ext)])) / steps
        n_bwd = len(np.unique(ext[np.isin(codes, bwd_codes) & np.isfinite(ext)])) / steps
        by_op: dict[str, float] = {}
        sel_ops = op[rows]
        sel_dur = dur[rows]
        for name in np.unique(sel_ops).tolist():
            by_op[str(name)] = float(sel_dur[sel_ops == name].sum()) / steps
        pat = AttentionPattern(
            lead=lead,
            t=tt,
            s=ss,
            head_dim=head_dim,
            dtype=mm_dtype or info["softmax_dtype"],
            causal=causal,
            forward_per_step=n_fwd,
            backward_per_step=n_bwd,
            kernels=rows,
            time_per_step_us=float(sel_dur.sum()) / steps,
            ops=dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
            softmax_dtype=info["softmax_dtype"],
        )
        pat.predicted_per_step_us = fused_attention_us(model, pat, c)
        patterns.append(pat)
    patterns.sort(key=lambda p: -p.time_per_step_us)
    return patterns


def fused_attention_us(model: StepModel, p: AttentionPattern, c: BusyConstants | None = None) -> float | None:
    """Per step: what F.scaled_dot_product_attention's fused kernels need for the pattern's work: per
    layer and direction, max(FLOPs at a realistic share of the dtype's peak, the bytes of q, k, v, the
    output and their gradients at the memory bandwidth) -- the T x S scores are never written.
    Forward 4 x lead x T x S x d FLOPs (halved for a causal mask), backward 2.5x that. bf16/fp16 run
    the flash kernel; float32 the memory-efficient kernel at FP32. None when the GPU is unknown."""
    c = c or BUSY
    peak = _peak(model)
    if peak is None or p.head_dim is None:
        return None
    low = p.dtype in ("bf16", "fp16")
    dense = peak.peak(p.dtype if low else "fp32")
    bw = peak.bandwidth_tbps
    if not dense or not bw:
        return None
    elt = 2 if low else 4
    d = p.head_dim
    flops = 4.0 * p.lead * p.t * p.s * d * (0.5 if p.causal and p.t == p.s else 1.0)
    io = (2.0 * p.lead * p.t * d + 2.0 * p.lead * p.s * d) * elt
    bw_eff = bw * c.achievable_bandwidth_fraction
    f_fwd = c.flash_forward_fraction if low else c.efficient_fp32_fraction
    f_bwd = c.flash_backward_fraction if low else c.efficient_fp32_fraction
    t_fwd = max(flops / (f_fwd * dense * 1e6), io / (bw_eff * 1e6), c.fused_kernel_min_us)
    t_bwd = max(2.5 * flops / (f_bwd * dense * 1e6), 2.0 * io / (bw_eff * 1e6), c.fused_kernel_min_us)
    return float(p.forward_per_step * t_fwd + p.backward_per_step * t_bwd)


def _peak(model: StepModel) -> GpuPeak | None:
    from gpuadvisor.hardware import gpu_peak_for

    return gpu_peak_for(model.trace.meta.gpu_name or model._gpu_name(), model.facts.num_sms)


def attention_factor(model: StepModel) -> Any:
    """Per kernel-table row: the factor SDPA applies to its duration (1 outside the patterns)."""
    import numpy as np

    out = np.ones(len(model.kernel_table))
    for p in attention_patterns(model):
        if p.predicted_per_step_us is None or p.time_per_step_us <= 0:
            continue
        f = min(1.0, p.predicted_per_step_us / p.time_per_step_us)
        out = np.where(p.kernels, np.minimum(out, f), out)
    return out


# ---- convolutions: layout and precision ----------------------------------------------------------------------


def layout_transposes(model: StepModel) -> Any:
    """Per kernel-table row: cuDNN's NCHW<->NHWC layout transposes around its NHWC kernels (launched by a
    convolution op, or named nchwToNhwc/nhwcToNchw): what channels_last removes."""
    import numpy as np

    t = model.kernel_table
    if len(t) == 0:
        return np.zeros(0, dtype=bool)
    names = t["name"].astype(str)
    cls = t["class"].to_numpy(dtype=object)
    ops = t["op_name"].fillna("").astype(str)
    cudnn = names.str.contains(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw", case=False, regex=True).to_numpy(
        dtype=bool
    )
    conv_op = ops.str.contains("conv", case=False, regex=False).to_numpy(dtype=bool)
    out: Any = (cls == "layout_transpose") & (cudnn | conv_op)
    return out


def precision_factor(model: StepModel, c: BusyConstants | None = None) -> Any:
    """Per kernel-table row: the factor bf16 autocast applies to the duration of a kernel that runs on
    tensor cores in TF32 today (FP32 data, TF32 math): its time at the roofline halves (bf16 doubles the
    tensor-core peak and halves the bytes); the rest of its time (latency, a tail of blocks, a poor
    access pattern) stays. factor = 1 - r / 2 with r its roofline fraction. Kernels of other dtypes: 1.
    (Plain-FP32 CUDA-core kernels are GA701's and `kernel_speedups`'.)"""
    import numpy as np

    t = model.kernel_table
    if len(t) == 0:
        return np.ones(0)
    r = np.nan_to_num(t["roofline_fraction"].to_numpy(dtype=np.float64), nan=0.0)
    tf32 = t["dtype"].to_numpy(dtype=object) == "tf32"
    return np.where(tf32, 1.0 - 0.5 * np.clip(r, 0.0, 1.0), 1.0)


def table_to_program_rows(model: StepModel, program: Any) -> Any:
    """For each op of the replay program, its row in the kernel table (-1 when not a window kernel)."""
    import numpy as np

    if program.n_ops == 0 or len(model.kernel_table) == 0:
        return np.full(program.n_ops, -1, dtype=np.int64)
    pos = model._derived.get("table_positions")
    if pos is None:
        # positions (in model.ops) of the kernel table's rows
        positions = model.ops.index.get_indexer(model.kernel_table.index)
        lookup = np.full(len(model.ops), -1, dtype=np.int64)
        lookup[positions[positions >= 0]] = np.flatnonzero(positions >= 0)
        pos = model._derived["table_positions"] = lookup
    rows: Any = pos[program.op_row]
    return rows


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
