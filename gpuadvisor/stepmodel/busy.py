"""Busy-time patterns of the step model that a code change would make faster (issue 31; docs/model.md,
"Busy-time transforms"): hand-written attention, convolutions in NCHW with cuDNN's layout transposes,
and what a kernel of the run would take at another precision. Each pattern is found once per model
from the kernel table (gpuadvisor.stepmodel.kernels) and the recorded op shapes; the remedies'
transforms (gpuadvisor.stepmodel.transforms) and the kernel_efficiency rules read the same objects.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gpuadvisor.hardware import GpuPeak, gpu_peak_for
from gpuadvisor.stepmodel.kernels import column_codes, combined_codes, dtype_of_types

if TYPE_CHECKING:
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
    # channels_last: normalization kernels of a conv net in channels_last are bound by their
    # per-element work, not their bytes: they stream the FP32-equivalent bytes (4 per element, bf16 or
    # not) at this share of the memory bandwidth (None: channels_last leaves them unchanged)
    channels_last_norm_fraction: float | None = 0.5
    # F.cross_entropy on bf16 logits: log_softmax reads and writes them (4 bytes per element), its
    # backward reads two and writes one (6), nll_loss's backward writes the gradient (2)
    bf16_cross_entropy_bytes_per_element: float = 12.0


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
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    table = model.kernel_table
    k = model.window_kernels
    steps = max(1, model.window.count)
    if len(table) == 0:
        return []
    op_c, op_u = column_codes(model, "op_name")
    dims_c, dims_u = column_codes(model, "op_input_dims")
    type_c, type_u = column_codes(model, "op_input_types")
    op = np.asarray(op_u, dtype=object)[op_c]
    not_opt = table["class"].to_numpy(dtype=object) != "optimizer"
    codes, first = combined_codes(op_c, dims_c, type_c)
    uniques = [(op_u[op_c[i]], dims_u[dims_c[i]], type_u[type_c[i]]) for i in first.tolist()]
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

    return gpu_peak_for(model.trace.meta.gpu_name or model._gpu_name(), model.facts.num_sms)


def attention_factor(model: StepModel) -> Any:
    """Per kernel-table row: the factor SDPA applies to its duration (1 outside the patterns)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    out = np.ones(len(model.kernel_table))
    for p in attention_patterns(model):
        if p.predicted_per_step_us is None or p.time_per_step_us <= 0:
            continue
        f = min(1.0, p.predicted_per_step_us / p.time_per_step_us)
        out = np.where(p.kernels, np.minimum(out, f), out)
    return out


def attention_bf16_factor(model: StepModel) -> Any:
    """Per kernel-table row, applied after `attention_factor` under bf16 autocast: an FP32 pattern's
    fused kernels (the memory-efficient kernel in FP32) become FlashAttention in bf16: the ratio of
    the two fused times. bf16/fp16 patterns and other rows: 1."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    out = np.ones(len(model.kernel_table))
    for p in attention_patterns(model):
        if p.dtype in ("bf16", "fp16") or not p.predicted_per_step_us:
            continue
        flash = fused_attention_us(model, replace(p, dtype="bf16"))
        if flash is None:
            continue
        out = np.where(p.kernels, np.minimum(out, min(1.0, flash / p.predicted_per_step_us)), out)
    return out


# ---- convolutions: precision (the layout: gpuadvisor.stepmodel.layout) ----------------------------------


def precision_factor(model: StepModel, c: BusyConstants | None = None) -> Any:
    """Per kernel-table row: the factor bf16 autocast applies to the duration of a kernel that runs on
    tensor cores in TF32 today (FP32 data, TF32 math): its time at the roofline halves (bf16 doubles the
    tensor-core peak and halves the bytes); the rest of its time (latency, a tail of blocks, a poor
    access pattern) stays. factor = 1 - r / 2 with r its roofline fraction. Kernels of other dtypes: 1.
    (Plain-FP32 CUDA-core kernels are GA701's and `kernel_speedups`'.)"""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    t = model.kernel_table
    if len(t) == 0:
        return np.ones(0)
    r = np.nan_to_num(t["roofline_fraction"].to_numpy(dtype=np.float64), nan=0.0)
    tf32 = t["dtype"].to_numpy(dtype=object) == "tf32"
    return np.where(tf32, 1.0 - 0.5 * np.clip(r, 0.0, 1.0), 1.0)


def table_to_program_rows(model: StepModel, program: Any) -> Any:
    """For each op of the replay program, its row in the kernel table (-1 when not a window kernel)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
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


# ---- GEMM shapes that defeat tensor cores ------------------------------------------------------------------


@dataclass
class OddGemms:
    """bf16/fp16 GEMM kernels whose M, N or K is not a multiple of 8 (tensor-core tiles want 8/16-element
    alignment), or whose K is tiny, and what they would take padded."""

    kernels: Any  # boolean mask over kernel-table rows
    predicted_us: Any  # per kernel-table row: the padded GEMM's time (NaN outside the mask)
    time_per_step_us: float
    predicted_per_step_us: float
    reference_fraction: float  # roofline fraction of this run's aligned GEMMs (what padding reaches)
    shapes: list[dict[str, Any]] = field(default_factory=list)  # the largest odd shapes


_GEMM_OPS = frozenset(
    {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}
)


def _mnk(op: str, shapes: list[tuple[int, ...]]) -> tuple[int, int, int, int] | None:
    mats = shapes[1:3] if op in ("aten::addmm", "aten::baddbmm") else shapes[:2]
    if len(mats) != 2:
        return None
    a, b = mats
    if op == "aten::linear" and len(a) >= 2 and len(b) == 2 and a[-1] == b[1]:
        return _prod(a[:-1]), int(a[-1]), int(b[0]), 1
    if len(a) >= 2 and len(b) >= 2 and a[-1] == b[-2]:
        batch = _prod(a[:-2]) if len(a) > 2 else 1
        return int(a[-2]), int(a[-1]), int(b[-1]), batch
    return None


def odd_gemms(
    model: StepModel, *, align: int = 8, min_k: int = 16, c: BusyConstants | None = None
) -> OddGemms | None:
    """The run's misaligned bf16/fp16 GEMMs (cached per model for the default arguments). Padded, a
    GEMM does the FLOPs of its padded shape at the roofline fraction this run's aligned bf16/fp16
    GEMMs reach (time-weighted; 0.6 of the peak when there are none), never slower than now."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    c = c or BUSY
    cache_key = ("odd_gemms", align, min_k)
    if cache_key in model._derived:
        hit: OddGemms | None = model._derived[cache_key]
        return hit
    t = model.kernel_table
    result: OddGemms | None = None
    peak = _peak(model)
    if len(t) and peak is not None:
        gemm = (t["class"].to_numpy(dtype=object) == "gemm") & np.isin(
            t["dtype"].to_numpy(dtype=object), ["bf16", "fp16"]
        )

        op_c, op_u = column_codes(model, "op_name")
        dims_c, dims_u = column_codes(model, "op_input_dims")
        codes, first = combined_codes(op_c, dims_c)
        uniques = [(op_u[op_c[i]], dims_u[dims_c[i]]) for i in first.tolist()]
        odd_u = np.zeros(len(uniques), dtype=bool)
        padded_flops_u = np.full(len(uniques), np.nan)
        shape_u: list[tuple[int, int, int, int] | None] = []
        for i, (o, d) in enumerate(uniques):
            mnk = _mnk(o, _shapes(d)) if o in _GEMM_OPS else None
            shape_u.append(mnk)
            if mnk is None:
                continue
            m, kk, n, batch = mnk
            if any(x % align for x in (m, kk, n)) or kk < min_k:
                odd_u[i] = True

                def up(x: int) -> int:
                    return max(min_k, -(-x // align) * align)

                padded_flops_u[i] = 2.0 * batch * up(m) * up(kk) * up(n)
        odd = gemm & odd_u[codes]
        aligned = gemm & ~odd_u[codes] & np.isfinite(t["roofline_fraction"].to_numpy(dtype=np.float64))
        dur = t["dur"].to_numpy(dtype=np.float64)
        if aligned.any() and dur[aligned].sum() > 0:
            ref = float(
                (t["roofline_fraction"].to_numpy(dtype=np.float64)[aligned] * dur[aligned]).sum()
                / dur[aligned].sum()
            )
        else:
            ref = 0.6
        ref = max(0.05, min(1.0, ref))
        if odd.any():
            dense = np.array(
                [peak.peak(x) or np.nan for x in t["dtype"].to_numpy(dtype=object)], dtype=np.float64
            )
            bw = (peak.bandwidth_tbps or np.nan) * c.achievable_bandwidth_fraction
            share = np.where(np.isfinite(t["flops"].to_numpy(dtype=np.float64)), 1.0, np.nan)
            # each kernel's share of its op's padded work follows its share of the op's FLOPs
            op_flops = np.asarray([np.nan] * len(uniques))
            for i, mnk in enumerate(shape_u):
                if mnk is not None:
                    m, kk, n, batch = mnk
                    op_flops[i] = 2.0 * batch * m * kk * n
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = padded_flops_u[codes] / op_flops[codes]
                flops_padded = t["flops"].to_numpy(dtype=np.float64) * ratio * share
                t_new = np.fmax(
                    flops_padded / (ref * dense * 1e6), t["bytes"].to_numpy(dtype=np.float64) / (bw * 1e6)
                )
            pred = np.where(odd & np.isfinite(t_new), np.minimum(t_new, dur), np.where(odd, dur, np.nan))
            steps = max(1, model.window.count)
            shapes: dict[tuple[int, int, int, int], float] = {}
            for i in np.flatnonzero(odd).tolist():
                s = shape_u[codes[i]]
                if s is not None:
                    shapes[s] = shapes.get(s, 0.0) + float(dur[i]) / steps
            result = OddGemms(
                kernels=odd,
                predicted_us=pred,
                time_per_step_us=float(dur[odd].sum()) / steps,
                predicted_per_step_us=float(np.nansum(pred[odd])) / steps,
                reference_fraction=ref,
                shapes=[
                    {"m": s[0], "k": s[1], "n": s[2], "batch": s[3], "time_per_step_us": round(us, 1)}
                    for s, us in sorted(shapes.items(), key=lambda kv: -kv[1])[:5]
                ],
            )
    model._derived[cache_key] = result
    return result


def padding_factor(model: StepModel) -> Any:
    """Per kernel-table row: the factor padding applies to its duration (1 outside the odd GEMMs)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    t = model.kernel_table
    odd = odd_gemms(model)
    if odd is None or len(t) == 0:
        return np.ones(len(t))
    dur = t["dur"].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        f = np.where(odd.kernels & (dur > 0), odd.predicted_us / dur, 1.0)
    return np.nan_to_num(np.clip(f, 0.0, 1.0), nan=1.0)


# ---- the loss over a large vocabulary in FP32 ----------------------------------------------------------------


@dataclass
class VocabLoss:
    """Kernels that read or write FP32 [rows, vocab] tensors around the loss (the upcast of the logits,
    log_softmax, nll_loss and their backward) in a run whose GEMMs are bf16/fp16."""

    rows: int
    vocab: int
    kernels: Any  # boolean mask over kernel-table rows
    time_per_step_us: float
    predicted_per_step_us: float  # a fused cross-entropy: read the bf16 logits once, write their gradient
    ops: dict[str, float] = field(default_factory=dict)
    passes_per_step: float = 1.0


# A log-softmax over the class axis, the core of a cross-entropy, as the recorded ops show it:
# PyTorch's own (one fused kernel each way, and the nll_loss that picks the targets)...
_LIBRARY_LOG_SOFTMAX_OPS = frozenset(
    {
        "aten::_log_softmax",
        "aten::log_softmax",
        "aten::cross_entropy_loss",
        "aten::nll_loss_forward",
        "aten::nll_loss_nd",
        "aten::nll_loss",
    }
)
# ... or written by hand: exp over the logits (a log-sum-exp, PyTorch's own or spelled out; PyTorch's
# log_softmax never launches a separate exp), or the log of a softmax
_HAND_LOG_SOFTMAX_OPS = frozenset({"aten::exp", "aten::exp_", "aten::logsumexp"})
_SOFTMAX_OPS = frozenset({"aten::_softmax", "aten::softmax"})
_LOG_OPS = frozenset({"aten::log", "aten::log_"})


def _loss_kind(ops_over_logits: Collection[str]) -> str | None:
    """What the ops over the [rows, V] logits compute: "hand_written" (a log-softmax spelled out: exp or
    logsumexp over the logits, or log of their softmax), "library" (PyTorch's log_softmax / cross_entropy /
    nll_loss and nothing spelled out), None (no log-softmax over the class axis: another loss, e.g. a
    squared error over a wide output)."""
    ops = set(ops_over_logits)
    if ops & _HAND_LOG_SOFTMAX_OPS or (ops & _SOFTMAX_OPS and ops & _LOG_OPS):
        return "hand_written"
    if ops & _LIBRARY_LOG_SOFTMAX_OPS:
        return "library"
    return None


def vocab_loss(
    model: StepModel, *, min_vocab: int = 16384, c: BusyConstants | None = None
) -> VocabLoss | None:
    """The FP32 large-vocabulary loss of a bf16/fp16 run, or None (cached per model)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    c = c or BUSY
    cache_key = ("vocab_loss", min_vocab)
    if cache_key in model._derived:
        hit: VocabLoss | None = model._derived[cache_key]
        return hit
    model._derived[cache_key] = None
    t = model.kernel_table
    peak = _peak(model)
    if len(t) == 0 or peak is None or not peak.bandwidth_tbps:
        return None
    dur = t["dur"].to_numpy(dtype=np.float64)
    cls = t["class"].to_numpy(dtype=object)
    dtype = t["dtype"].to_numpy(dtype=object)
    gemm = cls == "gemm"
    if not gemm.any():
        return None
    low = float(dur[gemm & np.isin(dtype, ["bf16", "fp16"])].sum())
    if low < 0.5 * float(dur[gemm].sum()):
        return None  # the run is not in low precision: GA701/GA1103 territory
    k = model.window_kernels

    op_c, op_u = column_codes(model, "op_name")
    dims_c, dims_u = column_codes(model, "op_input_dims")
    type_c, type_u = column_codes(model, "op_input_types")
    op = np.asarray(op_u, dtype=object)[op_c]
    codes, first = combined_codes(op_c, dims_c, type_c)
    uniques = [(op_u[op_c[i]], dims_u[dims_c[i]], type_u[type_c[i]]) for i in first.tolist()]
    parsed = [(o, _shapes(d), ty) for o, d, ty in uniques]
    # the LM head: a GEMM [rows, d] x [d, V] with V >= min_vocab makes the logits
    heads: dict[tuple[int, int], list[int]] = {}
    for i, (o, shapes, _ty) in enumerate(parsed):
        mnk = _mnk(o, shapes) if o in _GEMM_OPS else None
        if mnk is not None and mnk[2] >= min_vocab and mnk[3] == 1:
            heads.setdefault((mnk[0], mnk[2]), []).append(i)
    loss_shape: tuple[int, int] | None = None
    for o, shapes, ty in parsed:
        lead = _parse(ty)[:1]
        if o in _GEMM_OPS or not shapes or len(shapes[0]) < 2 or lead != ["float"]:
            continue
        key = (_prod(shapes[0][:-1]), int(shapes[0][-1]))
        if key in heads:  # an FP32 op over the logits
            loss_shape = key
            break
    if loss_shape is None:
        return None
    rows_, vocab = loss_shape
    member = np.array(
        [
            any(len(s) >= 2 and s[-1] == vocab and _prod(s[:-1]) == rows_ for s in shapes)
            for _, shapes, _ in parsed
        ],
        dtype=bool,
    )
    sel = member[codes] & ~gemm & (cls != "optimizer")
    if not sel.any():
        return None
    # Only a cross-entropy is this pattern: a log-softmax over the class axis (V) of the logits. Another
    # loss over a wide output (a squared error, a hand-written regression loss) has another remedy. And
    # PyTorch's own cross-entropy (autocast runs log_softmax/nll_loss in float32 by policy, the
    # documented mixed-precision recipe; an explicit .float() before it costs the same) is the standard
    # path: its fused alternatives were never measured here, so it is not reported. It takes a
    # log-softmax written by hand on FP32 logits.
    sel_codes = np.unique(codes[sel])
    kind = _loss_kind({str(parsed[int(i)][0]) for i in sel_codes.tolist()})
    if kind != "hand_written":
        return None
    steps = max(1, model.window.count)
    ext = k["external_id"].to_numpy(dtype=np.float64)
    head_rows = np.isin(codes, heads[loss_shape]) & np.isfinite(ext)
    passes = len(np.unique(ext[head_rows])) / steps or 1.0
    nbytes = c.bf16_cross_entropy_bytes_per_element * rows_ * vocab
    per_pass = max(
        nbytes / (peak.bandwidth_tbps * c.achievable_bandwidth_fraction * 1e6), c.fused_kernel_min_us
    )
    by_op: dict[str, float] = {}
    for name in np.unique(op[sel]).tolist():
        by_op[str(name)] = float(dur[sel & (op == name)].sum()) / steps
    result = VocabLoss(
        rows=rows_,
        vocab=vocab,
        kernels=sel,
        time_per_step_us=float(dur[sel].sum()) / steps,
        predicted_per_step_us=per_pass * passes,
        ops=dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
        passes_per_step=passes,
    )
    model._derived[cache_key] = result
    return result


def vocab_loss_factor(model: StepModel) -> Any:
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    t = model.kernel_table
    v = vocab_loss(model)
    if v is None or v.time_per_step_us <= 0:
        return np.ones(len(t))
    f = min(1.0, v.predicted_per_step_us / v.time_per_step_us)
    return np.where(v.kernels, f, 1.0)


# ---- hand-written chains of memory-bound kernels ------------------------------------------------------------

# Primitive aten arithmetic: what hand-written LayerNorm, GELU, scaling and residual code launches, one
# kernel per operator. Library ops that are already one kernel (native_layer_norm, native_batch_norm,
# gelu, softmax, native_dropout) are not chain links: a compiler gains little on them.
_PRIMITIVE_OPS = frozenset(
    {
        "aten::add",
        "aten::add_",
        "aten::sub",
        "aten::sub_",
        "aten::rsub",
        "aten::mul",
        "aten::mul_",
        "aten::div",
        "aten::div_",
        "aten::pow",
        "aten::sqrt",
        "aten::rsqrt",
        "aten::tanh",
        "aten::tanh_",
        "aten::exp",
        "aten::neg",
        "aten::reciprocal",
        "aten::mean",
        "aten::sum",
        "aten::var",
        "aten::where",
        "aten::clamp",
        "aten::clamp_min",
        "aten::maximum",
        "aten::minimum",
        "aten::sigmoid",
        "aten::abs",
        "aten::_to_copy",
        "aten::copy_",
        "aten::addcmul",
        "aten::tanh_backward",
        "aten::pow_",
        "aten::sigmoid_backward",
        "aten::masked_fill",
        "aten::bernoulli_",
        "aten::square",
        "aten::erf",
    }
)


@dataclass
class MemoryChains:
    """Runs of consecutive primitive memory-bound kernels on one stream (hand-written elementwise code)."""

    kernels: Any  # boolean mask over kernel-table rows: members of chains of at least `min_length`
    factor: Any  # per kernel-table row: fused chain time / chain time (1 outside)
    chains_per_step: float
    time_per_step_us: float
    predicted_per_step_us: float
    longest: int
    ops: dict[str, float] = field(default_factory=dict)


def time_by_op(codes: Any, labels: list[str], dur: Any, steps: int) -> dict[str, float]:
    """Per op name (labels[codes]; two codes may share a label), the summed `dur` per step, in the
    names' sorted order (the order `np.unique` of the names gives)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    by_name: dict[str, list[int]] = {}
    for c in np.flatnonzero(np.bincount(codes, minlength=len(labels))).tolist():
        by_name.setdefault(labels[c], []).append(c)
    # each name's rows summed as the selection of the old per-name mask (same rows, same order: same sum)
    return {name: float(dur[np.isin(codes, by_name[name])].sum()) / steps for name in sorted(by_name)}


def memory_chains(model: StepModel, *, min_length: int = 4) -> MemoryChains | None:
    """Chains of at least `min_length` consecutive primitive elementwise/reduction kernels on one stream
    (nothing else between them on that stream), outside the optimizer, with their bytes known. A fused
    kernel for a chain moves the bytes of its largest member (one read of the input, one write of the
    output) at the bandwidth the chain reaches now: fused time = chain time x max(bytes) / sum(bytes)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    cache_key = ("memory_chains", min_length)
    if cache_key in model._derived:
        hit: MemoryChains | None = model._derived[cache_key]
        return hit
    model._derived[cache_key] = None
    t = model.kernel_table
    if len(t) < min_length:
        return None
    # the launching op's name as codes (kernel_table rows are window_kernels rows): the tests and sums
    # below run once per distinct name ("" for a kernel without an op)
    op_c, op_u = column_codes(model, "op_name")
    cls = t["class"].to_numpy(dtype=object)
    nbytes = t["bytes"].to_numpy(dtype=np.float64)
    links = np.asarray([u in _PRIMITIVE_OPS for u in op_u], dtype=bool)[op_c]
    for p in attention_patterns(model):
        # a hand-written attention's scale, mask, casts and softmax (forward and backward) are one chain
        # a compiler fuses (its matmuls break the chain)
        links |= p.kernels & (cls != "gemm")
    ok = (
        links
        & np.isin(cls, ["elementwise", "reduction_softmax", "copy"])
        & np.isfinite(nbytes)
        & (nbytes > 0)
    )
    vocab = vocab_loss(model)
    if vocab is not None:
        # a hand-written FP32 loss over the logits is GA1105's to price (its fix, a fused cross-entropy,
        # is another remedy); written after the model's call, `torch.compile(model)` does not reach it
        # (vocab_fp32_loss on an H200: its chains were 41% of the step, compiling the model measured 1.04x)
        ok &= ~vocab.kernels
    order = np.lexsort(
        (t["ts"].to_numpy(dtype=np.float64), np.nan_to_num(t["stream"].to_numpy(dtype=np.float64), nan=-1.0))
    )
    ok_o = ok[order]
    stream_o = np.nan_to_num(t["stream"].to_numpy(dtype=np.float64), nan=-1.0)[order]
    new_chain = ~ok_o | np.r_[True, (stream_o[1:] != stream_o[:-1]) | ~ok_o[:-1]]
    chain_id = np.cumsum(new_chain)
    chain_id = np.where(ok_o, chain_id, 0)
    ids, counts = np.unique(chain_id[chain_id > 0], return_counts=True)
    long_ids = ids[counts >= min_length]
    if not len(long_ids):
        return None
    dur_o = t["dur"].to_numpy(dtype=np.float64)[order]
    bytes_o = nbytes[order]
    member_o = np.isin(chain_id, long_ids)
    factor_o = np.ones(len(t))
    predicted = 0.0
    # lazy: pandas stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import pandas as pd

    frame = pd.DataFrame({"id": chain_id[member_o], "dur": dur_o[member_o], "bytes": bytes_o[member_o]})
    g = frame.groupby("id").agg(dur=("dur", "sum"), total=("bytes", "sum"), largest=("bytes", "max"))
    f = (g["largest"] / g["total"]).clip(upper=1.0)
    predicted = float((g["dur"] * f).sum())
    factor_o[member_o] = pd.Series(chain_id[member_o]).map(f).to_numpy(dtype=np.float64)
    factor = np.ones(len(t))
    factor[order] = factor_o
    member = np.zeros(len(t), dtype=bool)
    member[order] = member_o
    steps = max(1, model.window.count)
    dur = t["dur"].to_numpy(dtype=np.float64)
    by_op = time_by_op(op_c[member], op_u, dur[member], steps)
    result = MemoryChains(
        kernels=member,
        factor=factor,
        chains_per_step=len(long_ids) / steps,
        time_per_step_us=float(dur[member].sum()) / steps,
        predicted_per_step_us=predicted / steps,
        longest=int(counts.max()),
        ops=dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
    )
    model._derived[cache_key] = result
    return result
