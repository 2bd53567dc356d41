"""The per-kernel table of the step model: what each kernel of the analyzed steps does (its class), in
which dtype, how much work it does (FLOPs and bytes, from the launching op's recorded shapes) and how
far it is from its roofline on this GPU (docs/model.md, "Kernel classes and the roofline").

    table = model.kernel_table          # one row per kernel of `model.window_kernels`, same index
    by_class = model.busy_by_class      # busy time per class, its share, and its distance to the roofline

Built once per model and vectorized: each distinct (kernel name, op) is classified once and each
distinct (op, input shapes, input types) is measured once, then mapped onto the rows.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from gpuadvisor.hardware import GpuPeak, gpu_peak_for, tensor_core_from_name
from gpuadvisor.namepattern import NamePattern, by_signature
from gpuadvisor.trace.kernels import MATH_CLASSES, MEMORY_CLASSES, kernel_class

if TYPE_CHECKING:
    import pandas as pd

    from gpuadvisor.stepmodel.model import StepModel

# A kernel shorter than this, or whose grid does not fill the SMs, is latency-bound: its time is the
# launch and the tail of a few blocks, not its FLOPs or bytes.
LATENCY_BOUND_US = 8.0

TABLE_COLUMNS: tuple[str, ...] = (
    "name",
    "op_name",
    "class",
    "dtype",  # bf16 / fp16 / fp8 / tf32 / fp32 / fp64 / int / "" (unknown); math dtype for GEMM/conv/attention
    "stream",
    "step",
    "ts",
    "dur",
    "blocks",
    "flops",  # this kernel's share of its op's FLOPs (NaN: unknown)
    "bytes",  # this kernel's share of the bytes its op reads and writes (NaN: unknown)
    "achieved_tflops",
    "achieved_tbps",
    "intensity",  # FLOPs per byte
    "roofline_us",  # max(FLOPs / peak, bytes / bandwidth): the fastest this work could run
    "roofline_fraction",  # roofline_us / dur (1 = at the roofline)
    "bound",  # compute / memory / latency / unknown
)

_ELEMENT_BYTES: tuple[tuple[str, int], ...] = (
    ("complex<double>", 16),
    ("complex<float>", 8),
    ("double", 8),
    ("bfloat16", 2),
    ("half", 2),
    ("float8", 1),
    ("float", 4),
    ("long", 8),
    ("int", 4),
    ("short", 2),
    ("bool", 1),
    ("char", 1),
    ("byte", 1),
)


def element_bytes(type_name: str) -> int | None:
    """Bytes per element of a recorded `Input type` entry ('float', 'c10::BFloat16', 'long int'...);
    None for non-tensors ('Scalar', 'ScalarList', '')."""
    t = type_name.lower()
    if not t or "scalar" in t or "list" in t or t in ("none", "generator", "device", "string"):
        return None
    for key, size in _ELEMENT_BYTES:
        if key in t:
            return size
    return None


def dtype_of_types(types: str | None) -> str:
    """The data dtype of an op from its first tensor input type ("" when unknown)."""
    if not isinstance(types, str):
        return ""
    for entry in _parse_list(types):
        t = str(entry).lower()
        if "bfloat16" in t:
            return "bf16"
        if "half" in t:
            return "fp16"
        if "float8" in t:
            return "fp8"
        if t == "float":
            return "fp32"
        if t == "double":
            return "fp64"
        if "int" in t or "long" in t or "bool" in t or "char" in t:
            return "int"
    return ""


_NAME_DTYPE = (
    (NamePattern(r"e4m3|e5m2|fp8"), "fp8"),
    (NamePattern(r"bf16|bfloat16"), "bf16"),
    (NamePattern(r"tf32"), "tf32"),
    (NamePattern(r"(?<![a-z0-9])(?:f16|fp16|half)|_h_|hmma|__half"), "fp16"),
)


def _parse_list(text: Any) -> list[Any]:
    if isinstance(text, (list, tuple)):
        return list(text)
    if not isinstance(text, str) or not text:
        return []
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return []
    return list(value) if isinstance(value, (list, tuple)) else []


def _numel(shape: Sequence[Any]) -> float:
    n = 1.0
    for d in shape:
        if not isinstance(d, (int, float)):
            return 0.0
        n *= float(d)
    return n


def _tensor_inputs(dims: Any, types: Any) -> list[tuple[list[int], int]]:
    """(shape, element bytes) of each tensor input of an op."""
    shapes = _parse_list(dims)
    kinds = _parse_list(types)
    out: list[tuple[list[int], int]] = []
    for i, shape in enumerate(shapes):
        if not isinstance(shape, (list, tuple)) or not shape or not all(isinstance(d, int) for d in shape):
            continue
        size = element_bytes(str(kinds[i])) if i < len(kinds) else None
        if size is None:
            continue
        out.append((list(shape), size))
    return out


def _gemm_work(op: str, ins: list[tuple[list[int], int]]) -> tuple[float, float]:
    """(FLOPs, bytes) of a matrix multiply from its inputs; NaN when the shapes do not fit."""
    nan = float("nan")
    mats = ins[1:3] if op in ("aten::addmm", "aten::baddbmm") and len(ins) >= 3 else ins[:2]
    if len(mats) != 2:
        return nan, nan
    (a, ea), (b, eb) = mats
    if len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        batch, m, k, n = 1.0, a[0], a[1], b[1]
    elif len(a) == 3 and len(b) == 3 and a[2] == b[1] and a[0] == b[0]:
        batch, m, k, n = float(a[0]), a[1], a[2], b[2]
    elif len(a) >= 3 and len(b) == 2 and a[-1] == b[0]:  # linear/matmul on a batch of rows
        batch, m, k, n = _numel(a[:-2]), a[-2], a[-1], b[1]
    else:
        return nan, nan
    flops = 2.0 * batch * m * k * n
    nbytes = batch * (m * k * ea + n * m * ea) + (k * n * eb if len(b) == 2 else batch * k * n * eb)
    if op in ("aten::addmm", "aten::baddbmm") and len(ins) >= 3:
        nbytes += _numel(ins[0][0]) * ins[0][1]
    return flops, nbytes


def _attention_work(op: str, ins: list[tuple[list[int], int]]) -> tuple[float, float]:
    """(FLOPs, bytes) of a fused attention op: q, k, v as [B, T, H, d] (flash/efficient) or
    [B, H, T, d] (cuDNN); the backward does 2.5x the forward's FLOPs."""
    nan = float("nan")
    if len(ins) < 3 or any(len(s) != 4 for s, _ in ins[:3]):
        return nan, nan
    (q, e), (k, _), _v = ins[0], ins[1], ins[2]
    if "cudnn" in op:
        b_, h, t, d = q
        s = k[2]
    else:
        b_, t, h, d = q
        s = k[1]
    fwd = 4.0 * b_ * h * t * s * d
    io = (_numel(q) + 2 * _numel(k)) * e
    if "backward" in op:
        return 2.5 * fwd, 2.0 * io + 2.0 * _numel(q) * e
    return fwd, io + _numel(q) * e


def _conv_work(
    op: str,
    ins: list[tuple[list[int], int]],
    out_hw: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, int]],
) -> tuple[float, float]:
    """(FLOPs, bytes) of a convolution: 2 x N x K x C/g x R x S x Ho x Wo per pass. The backward op's
    inputs are (grad_out, input, weight) and give the output size; the forward takes it from the
    backward of the same (input, weight) shapes when the step has one (else unknown)."""
    nan = float("nan")
    if "backward" in op:
        if len(ins) < 3 or len(ins[0][0]) != 4 or len(ins[2][0]) != 4:
            return nan, nan
        (go, e), (x, _), (w, ew) = ins[0], ins[1], ins[2]
        per_pass = 2.0 * go[0] * w[0] * w[1] * w[2] * w[3] * go[2] * go[3]
        # dgrad + wgrad: read grad_out twice, input and weight; write grad_in and grad_w
        nbytes = (2 * _numel(go) + 2 * _numel(x)) * e + 2 * _numel(w) * ew
        return 2.0 * per_pass, nbytes
    if len(ins) < 2 or len(ins[0][0]) != 4 or len(ins[1][0]) != 4:
        return nan, nan
    (x, e), (w, ew) = ins[0], ins[1]
    hw = out_hw.get((tuple(x), tuple(w)))
    if hw is None:
        return nan, nan
    flops = 2.0 * x[0] * w[0] * w[1] * w[2] * w[3] * hw[0] * hw[1]
    return flops, (_numel(x) + x[0] * w[0] * hw[0] * hw[1]) * e + _numel(w) * ew


_REDUCING_OPS = re.compile(
    r"^aten::(?:sum|mean|amax|amin|max|min|norm|linalg_vector_norm|var|std|argmax|argmin|prod|any|all|nll_loss)",
    re.I,
)


def _op_work(
    op: str,
    dims: Any,
    types: Any,
    op_class: str,
    out_hw: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, int]],
) -> tuple[float, float]:
    """(FLOPs, bytes) of one op instance shape; FLOPs NaN for non-math ops."""
    nan = float("nan")
    ins = _tensor_inputs(dims, types)
    if not ins:
        return nan, nan
    if op_class == "gemm":
        return _gemm_work(op, ins)
    if op_class.startswith("attention"):
        return _attention_work(op, ins)
    if op_class.startswith("conv"):
        return _conv_work(op, ins, out_hw)
    read = sum(_numel(s) * e for s, e in ins)
    if _REDUCING_OPS.search(op):
        return nan, read
    largest = max(_numel(s) * e for s, e in ins)
    return nan, read + largest  # the output is the size of the largest input (elementwise, norm, softmax)


def _conv_output_sizes(
    backward_dims: list[str],
) -> dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, int]]:
    """(input shape, weight shape) -> (Ho, Wo) from the convolution backward ops' grad_out (their
    distinct `Input Dims` texts)."""
    out: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, int]] = {}
    for dims in backward_dims:
        shapes = _parse_list(dims)
        if len(shapes) >= 3 and all(isinstance(s, list) and len(s) == 4 for s in shapes[:3]):
            go, x, w = shapes[0], shapes[1], shapes[2]
            out[(tuple(x), tuple(w))] = (int(go[2]), int(go[3]))
    return out


def _math_dtype(name: str, data_dtype: str, tensor_core: bool | None) -> str:
    if data_dtype in ("bf16", "fp16", "fp8"):
        return data_dtype
    for pattern, dtype in _NAME_DTYPE:
        if pattern.matches(name):
            if dtype == "tf32" and data_dtype not in ("", "fp32"):
                continue
            return dtype
    if data_dtype == "fp32":
        return "tf32" if tensor_core else "fp32"
    return data_dtype


def column_codes(model: StepModel, column: str) -> tuple[Any, list[str]]:
    """(codes, distinct values as str; "" for missing) of a `window_kernels` column, factorized once per
    model: every distinct-value computation of the busy-time code maps through these."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    key = ("codes", column)
    hit = model._derived.get(key)
    if hit is not None:
        out: tuple[Any, list[str]] = hit
        return out
    values = model.window_kernels[column]
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    labels = [str(u) for u in np.asarray(uniques, dtype=object).tolist()]
    codes = np.asarray(codes, dtype=np.int64)
    if (codes < 0).any():
        labels.append("")
        codes = np.where(codes < 0, len(labels) - 1, codes)
    result = (codes, labels)
    model._derived[key] = result
    return result


def combined_codes(*codes: Any) -> tuple[Any, Any]:
    """(inverse, first row of each distinct combination) of several integer code arrays (hash-based:
    the codes are packed into one int64 key)."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    key = np.zeros(len(codes[0]), dtype=np.int64)
    for c in codes:
        c = np.asarray(c, dtype=np.int64)
        key = key * (int(c.max()) + 1 if len(c) else 1) + c
    inverse, uniques = pd.factorize(key)
    inverse = np.asarray(inverse, dtype=np.int64)
    first = np.full(len(uniques), -1, dtype=np.int64)
    rows = np.arange(len(inverse), dtype=np.int64)
    first[inverse[::-1]] = rows[::-1]
    return inverse, first


def sorted_name_groups(names: pd.Series) -> tuple[Any, list[str]]:
    """(group of each row, or -1 for a missing name; the distinct names as text, in sorted order) of a
    name column: group g is the g-th distinct `str` name, as `groupby(names.astype(str), sort=True)`
    orders its groups, without hashing a million long names again at each grouping (a categorical
    column's codes are ranked once)."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    if isinstance(names.dtype, pd.CategoricalDtype):
        cats = names.cat.categories.tolist()
        if all(type(c) is str for c in cats):  # distinct texts: one group per category used
            codes = names.cat.codes.to_numpy(dtype=np.int64)
            used = np.flatnonzero(np.bincount(codes[codes >= 0], minlength=len(cats))).tolist()
            order = sorted(used, key=cats.__getitem__)  # the loader's categories come sorted: linear
            rank = np.full(len(cats) + 1, -1, dtype=np.int64)
            rank[order] = np.arange(len(order), dtype=np.int64)
            return rank[codes], [cats[i] for i in order]
    groups, distinct = pd.factorize(names.astype(str), sort=True, use_na_sentinel=True)
    return np.asarray(groups, dtype=np.int64), [str(d) for d in np.asarray(distinct, dtype=object).tolist()]


def group_modes(keys: Any, values: Any) -> dict[Any, Any]:
    """Per key, its most common non-missing value (ties: the pair seen first); missing keys left out.
    Counted on integer codes of the keys, the values and their pairs (no Python call per group: a
    trace can hold a million distinct names or op names)."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    k = pd.Series(keys).to_numpy()
    v = pd.Series(values).to_numpy()
    keep = np.asarray(pd.notna(v), dtype=bool)
    key_code, key_of = pd.factorize(k[keep], sort=False, use_na_sentinel=True)
    value_code, value_of = pd.factorize(v[keep], sort=False, use_na_sentinel=True)
    key_code = np.asarray(key_code, dtype=np.int64)
    value_code = np.asarray(value_code, dtype=np.int64)
    present = key_code >= 0
    if not present.any():
        return {}
    width = len(value_of)
    pair, pairs = pd.factorize(key_code[present] * width + value_code[present], sort=False)
    counts = np.bincount(np.asarray(pair, dtype=np.int64))
    pairs = np.asarray(pairs, dtype=np.int64)
    pair_key = pairs // width
    # per key: the most pairs, then the pair seen first (pairs are numbered in order of appearance)
    order = np.lexsort((np.arange(len(pairs)), -counts, pair_key))
    lead = order[np.r_[True, pair_key[order][1:] != pair_key[order][:-1]]]
    keys_out = np.asarray(key_of, dtype=object)[pair_key[lead]].tolist()
    values_out = np.asarray(value_of, dtype=object)[pairs[lead] % width].tolist()
    return dict(zip(keys_out, values_out, strict=True))


def kernel_classes(
    u_class: list[str], codes: Any, in_optimizer: Any
) -> tuple[Any, Any, Callable[[Iterable[str]], Any]]:
    """Each kernel's class from the classes of the distinct kernels (`u_class[codes]`), "optimizer"
    for a kernel launched inside an Optimizer.step span that is not a collective; as (the classes, an
    object array; their ranks among the distinct classes present, in sorted order; a test of
    membership in a set of classes). Worked on integer codes: the text comparisons, the sort of 1.67M
    strings and the membership tests over object arrays they replace took ~0.8 s at 1.67M kernels."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    labels = sorted({*u_class, "optimizer"})
    code_of = {c: i for i, c in enumerate(labels)}
    row = np.asarray([code_of[c] for c in u_class], dtype=np.int64)[codes]
    row = np.where(in_optimizer & (row != code_of.get("collective", -1)), code_of["optimizer"], row)
    present = np.zeros(len(labels), dtype=bool)
    present[row] = True
    rank = np.cumsum(present) - 1

    def in_classes(chosen: Iterable[str]) -> Any:
        return np.isin(row, [code_of[c] for c in chosen if c in code_of])

    return np.asarray(labels, dtype=object)[row], rank[row], in_classes


def build_kernel_table(model: StepModel) -> pd.DataFrame:
    """One row per kernel of `model.window_kernels` (same index); columns TABLE_COLUMNS."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    k = model.window_kernels
    n = len(k)
    if n == 0:
        empty: pd.DataFrame = pd.DataFrame({c: pd.Series([], dtype=object) for c in TABLE_COLUMNS})
        return empty
    name_c, name_u = column_codes(model, "name")
    op_c, op_u = column_codes(model, "op_name")
    fam_c, fam_u = column_codes(model, "family")
    type_c, type_u = column_codes(model, "op_input_types")
    dims_c, dims_u = column_codes(model, "op_input_dims")
    names = np.asarray(name_u, dtype=object)[name_c]
    # ---- classes, once per distinct (name, op) -------------------------------------------------------
    codes, first = combined_codes(name_c, op_c, fam_c)
    math_of = model.matmul_math()
    u_class = [
        kernel_class(name_u[name_c[i]], op_u[op_c[i]] or None, fam_u[fam_c[i]]) for i in first.tolist()
    ]
    cls, cls_c, in_classes = kernel_classes(u_class, codes, k["in_optimizer"].to_numpy(dtype=bool))
    # ---- dtypes, once per distinct (name, types) ------------------------------------------------------
    tcodes, tfirst = combined_codes(name_c, type_c)
    u_dtype: list[str] = []
    for i in tfirst.tolist():
        nm, ty = name_u[name_c[i]], type_u[type_c[i]]
        data = dtype_of_types(ty or None)
        tc = math_of.get(nm)
        if tc is None:
            tc = tensor_core_from_name(nm)
        u_dtype.append(
            _math_dtype(nm, data, tc) if nm in math_of or tc is not None else (data or _name_dtype(nm))
        )
    dtype = np.asarray(u_dtype, dtype=object)[tcodes]
    # ---- work, once per distinct (op, dims, types, class) -----------------------------------------------
    wcodes, wfirst = combined_codes(op_c, dims_c, type_c, cls_c)
    back = [i for i, o in enumerate(op_u) if "convolution_backward" in o]
    out_hw = _conv_output_sizes([dims_u[d] for d in np.unique(dims_c[np.isin(op_c, back)]).tolist()])
    work = []
    for i in wfirst.tolist():
        op = op_u[op_c[i]]
        work.append(
            _op_work(op, dims_u[dims_c[i]], type_u[type_c[i]], str(cls[i]), out_hw)
            if op
            else (math.nan, math.nan)
        )
    op_flops_est = np.asarray([w[0] for w in work], dtype=np.float64)[wcodes]
    op_bytes = np.asarray([w[1] for w in work], dtype=np.float64)[wcodes]
    recorded = k["op_flops"].to_numpy(dtype=np.float64)
    op_flops = np.where(np.isfinite(recorded) & (recorded > 0), recorded, op_flops_est)
    # ---- split each op's work across its kernels by duration -------------------------------------------
    dur = k["dur"].to_numpy(dtype=np.float64)
    ext = k["external_id"].to_numpy(dtype=np.float64)
    is_math = in_classes(MATH_CLASSES)
    have_op = np.isfinite(ext)
    grp = pd.Series(np.where(have_op, ext, -1.0 - np.arange(n)))  # kernels without an op: their own group
    total = pd.Series(dur).groupby(grp).transform("sum").to_numpy(dtype=np.float64)
    math_dur = pd.Series(np.where(is_math, dur, 0.0))
    total_math = math_dur.groupby(grp).transform("sum").to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        flops = np.where(is_math & (total_math > 0), op_flops * dur / total_math, np.nan)
        nbytes = np.where(total > 0, op_bytes * dur / total, np.nan)
    nbytes = np.where(in_classes(("collective", "optimizer", "other")), np.nan, nbytes)
    # ---- roofline ------------------------------------------------------------------------------------------
    peak = _peak(model)
    peak_tflops = np.full(n, np.nan)
    bw_tbps = np.nan
    if peak is not None:
        bw_tbps = peak.bandwidth_tbps or np.nan
        fp32 = peak.peak("fp32") or np.nan
        by_dtype = {d: (peak.peak(d) or np.nan) for d in ("bf16", "fp16", "fp8", "tf32", "fp32")}
        peak_tflops = np.array([by_dtype.get(d, fp32) for d in u_dtype], dtype=np.float64)[tcodes]
        peak_tflops = np.where(is_math, peak_tflops, fp32)
    with np.errstate(invalid="ignore", divide="ignore"):
        t_compute = flops / (peak_tflops * 1e6)
        t_memory = nbytes / (bw_tbps * 1e6)
        roof = np.fmax(t_compute, t_memory)
        achieved_tflops = flops / (dur * 1e6)
        achieved_tbps = nbytes / (dur * 1e6)
        intensity = flops / nbytes
        fraction = np.where(dur > 0, np.minimum(roof / dur, 1.0), np.nan)
    blocks = k["blocks"].to_numpy(dtype=np.float64)
    sms = float(model.facts.num_sms or (peak.sm_count if peak and peak.sm_count else 0) or 0)
    # a grid under half the SMs (persistent GEMMs launch one block per SM by design: docs/trace-inputs.md)
    latency = (dur < LATENCY_BOUND_US) | (
        (sms > 0) & np.isfinite(blocks) & (blocks < 0.5 * sms) & ~(fraction >= 0.5)
    )
    compute = np.isfinite(t_compute) & ~(t_memory > t_compute)
    memory = np.isfinite(t_memory) & ~compute
    # four shared texts, indexed (a numpy text array would become one Python string per kernel: ~40 MB
    # at a million kernels)
    bounds = np.array(["latency", "compute", "memory", "unknown"], dtype=object)
    bound = bounds[np.where(latency, 0, np.where(compute, 1, np.where(memory, 2, 3)))]
    out: pd.DataFrame = pd.DataFrame(
        {
            "name": names,
            "op_name": k["op_name"].to_numpy(dtype=object),
            "class": cls,
            "dtype": dtype,
            "stream": k["stream"].to_numpy(dtype=np.float64),
            "step": k["step"].to_numpy(),
            "ts": k["ts"].to_numpy(dtype=np.float64),
            "dur": dur,
            "blocks": blocks,
            "flops": flops,
            "bytes": nbytes,
            "achieved_tflops": achieved_tflops,
            "achieved_tbps": achieved_tbps,
            "intensity": intensity,
            "roofline_us": roof,
            "roofline_fraction": fraction,
            "bound": bound,
        },
        index=k.index,
        copy=False,  # one block per column, no stacked copy of the float columns
    )
    return out


@by_signature(names=1)
def _name_dtype(name: str) -> str:
    for pattern, dtype in _NAME_DTYPE:
        if pattern.matches(name):
            return dtype
    return ""


def _peak(model: StepModel) -> GpuPeak | None:
    return gpu_peak_for(model.trace.meta.gpu_name or model._gpu_name(), model.facts.num_sms)


BY_CLASS_COLUMNS: tuple[str, ...] = (
    "class",
    "time_us",  # per analyzed step
    "share",  # of the kernel busy time
    "kernels",  # per analyzed step
    "roofline_fraction",  # time-weighted over the kernels with a roofline (NaN: none known)
    "known_fraction",  # share of the class's time whose roofline is known
    "bound",  # the bound of most of the class's time
)


def busy_by_class(table: pd.DataFrame, steps: int) -> pd.DataFrame:
    """Kernel time per class over the analyzed steps (per step), sorted by time."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    if len(table) == 0 or steps <= 0:
        none: pd.DataFrame = pd.DataFrame({c: pd.Series([], dtype=object) for c in BY_CLASS_COLUMNS})
        return none
    t = table
    known = np.isfinite(t["roofline_us"].to_numpy(dtype=np.float64))
    frame = pd.DataFrame(
        {
            "class": t["class"].to_numpy(dtype=object),
            "dur": t["dur"].to_numpy(dtype=np.float64),
            "known_dur": np.where(known, t["dur"].to_numpy(dtype=np.float64), 0.0),
            "roof": np.where(
                known, np.minimum(t["roofline_us"].to_numpy(dtype=np.float64), t["dur"].to_numpy()), 0.0
            ),
            "bound": t["bound"].to_numpy(dtype=object),
        }
    )
    g = frame.groupby("class", sort=False)
    agg = g.agg(dur=("dur", "sum"), n=("dur", "size"), known=("known_dur", "sum"), roof=("roof", "sum"))
    bound_time = frame.groupby(["class", "bound"], sort=False)["dur"].sum().reset_index()
    top_bound = (
        bound_time.sort_values("dur", ascending=False).drop_duplicates("class").set_index("class")["bound"]
    )
    total = float(agg["dur"].sum())
    out = pd.DataFrame(
        {
            "class": agg.index.to_numpy(dtype=object),
            "time_us": agg["dur"].to_numpy() / steps,
            "share": agg["dur"].to_numpy() / total if total > 0 else np.nan,
            "kernels": agg["n"].to_numpy() / steps,
            "roofline_fraction": np.where(
                agg["known"] > 0, agg["roof"] / agg["known"].where(agg["known"] > 0, 1.0), np.nan
            ),
            "known_fraction": agg["known"].to_numpy() / agg["dur"].to_numpy(),
            "bound": top_bound.reindex(agg.index).to_numpy(dtype=object),
        }
    )
    ranked: pd.DataFrame = out.sort_values("time_us", ascending=False, kind="stable").reset_index(drop=True)
    return ranked


__all__ = [
    "BY_CLASS_COLUMNS",
    "LATENCY_BOUND_US",
    "MATH_CLASSES",
    "MEMORY_CLASSES",
    "TABLE_COLUMNS",
    "build_kernel_table",
    "busy_by_class",
    "dtype_of_types",
    "element_bytes",
    "group_modes",
    "sorted_name_groups",
]
