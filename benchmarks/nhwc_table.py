"""Measure each op family of a conv net in NCHW and in channels_last (NHWC), per dtype: the NHWC table.

    python3 benchmarks/nhwc_table.py [-o nhwc_table.json] [--families A,B] [--dtypes fp32,bf16,fp16]
                                     [--rounds 5] [--iters 4] [--warmup 3] [--tiny]

For each op family the channels_last replay knows (gpuadvisor/stepmodel/layout.py: convolutions,
depthwise and grouped convolutions, BatchNorm, GroupNorm, LayerNorm over channels, InstanceNorm,
pooling, upsampling/interpolate, elementwise, concatenation), each dtype (fp32 with cuDNN's default
TF32 convolutions, bf16, fp16) and a few representative activation shapes (an early, a middle and a late
layer of an ImageNet-size network), it times the op's forward and backward (input gradient and, for
modules, the parameters' gradients) on the same data in both memory formats. The op runs with its input
in the dtype (explicit dtypes, no autocast: the table is keyed by the dtype of the op's input, as the
step model's kernel table is; under autocast GroupNorm and LayerNorm see FP32 inputs, its casts are
elementwise work); normalization parameters stay FP32 where the op accepts mixed dtypes, as under
autocast.

Timing: CUDA events around each iteration, after `--warmup` iterations (cuDNN autotuning with
cudnn.benchmark on, the caching allocator); `--rounds` rounds alternate the two formats, `--iters`
iterations each; the median per format. The ratio is channels_last / NCHW time (below 1: channels_last
is faster). A family's entry is the median ratio over its shapes (and variants: max and average pooling,
bilinear and nearest upsampling), with the range.

Each channels_last run also records whether the op's output is still channels_last (PyTorch converts
some families back to NCHW on the GPU: GroupNorm, InstanceNorm), and the layout conversion itself is timed
(`x.contiguous()` of a channels_last activation and its gradient back, against the same code in NCHW):
its cost per element is what a convolution fed NCHW tensors pays in a channels_last net.

Output (JSON, sorted keys): {"schema": 1, "source": {gpu, torch, cuda, cudnn, date, command},
"measurements": [{family, variant, dtype, shape, nchw_us, channels_last_us, ratio, output_channels_last}
or {..., error}], "families": {family: {dtype: {ratio, min, max, shapes}}}, "converts_back": [family],
"conversions": [{dtype, shape, ..., ps_per_element}], "conversion": {dtype: ps per element}}.
gpuadvisor reads the measurements, the summary, `converts_back` and `conversion`: copy the file to
gpuadvisor/data/nhwc_table.json (docs/model.md, "channels_last and the NHWC table"). `--tiny` runs tiny
shapes on the CPU (host timers): a smoke test of the script, not a table.
Exit 0 when every entry measured, 1 when some failed, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# the op families the channels_last replay puts kernels in: one list, the replay's
from gpuadvisor.stepmodel.nhwc import FAMILIES  # noqa: E402

DTYPES = ("fp32", "bf16", "fp16")
# (N, C, H, W): an early, a middle and a late layer of a 224-px network at a training batch size
SHAPES: tuple[tuple[int, int, int, int], ...] = ((32, 64, 112, 112), (32, 256, 28, 28), (64, 512, 14, 14))
TINY_SHAPES: tuple[tuple[int, int, int, int], ...] = ((2, 32, 8, 8),)


Op = Callable[[Any, Any], Any]  # op(x, y): y is the second input of binary cases, else None


@dataclass(frozen=True)
class Case:
    family: str
    variant: str
    # (torch, channels, dtype, device) -> the op and the parameters whose gradients its backward makes
    build: Callable[[Any, int, Any, str], tuple[Op, list[Any]]]
    needs_y: bool = False  # a second input of the same shape (residual add, concatenation)
    # where `build` keeps FP32 parameters: the same op with parameters in the input's dtype, for a build
    # of torch that has no mixed-dtype kernel for it
    fallback: Callable[[Any, int, Any, str], tuple[Op, list[Any]]] | None = None


def _module(make: Callable[[Any, int], Any], mixed_params: bool) -> Callable[[Any, int, Any, str], tuple[Op, list[Any]]]:
    """An op from an nn.Module: FP32 parameters with a low-precision input where the op accepts it (as
    under autocast: the normalizations), else parameters in the input's dtype (the convolutions)."""

    def build(torch: Any, c: int, dtype: Any, device: str) -> tuple[Op, list[Any]]:
        m = make(torch, c).to(device)
        if not mixed_params:
            m = m.to(dtype)
        return (lambda x, y: m(x)), list(m.parameters())

    return build


def _function(fn: Callable[[Any], Op]) -> Callable[[Any, int, Any, str], tuple[Op, list[Any]]]:
    """An op without parameters: `fn(torch)` returns it."""
    return lambda torch, c, dtype, device: (fn(torch), [])


def _layer_norm_channels(torch: Any, c: int, dtype: Any, device: str) -> tuple[Op, list[Any]]:
    # LayerNorm over the channels of a 4-D activation (ConvNeXt's LayerNorm2d): permuted to [N, H, W, C],
    # which is contiguous in channels_last and a copy in NCHW
    ln = torch.nn.LayerNorm(c).to(device=device, dtype=dtype)
    return (lambda x, y: ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)), list(ln.parameters())


def _norm(family: str, variant: str, make: Callable[[Any, int], Any]) -> Case:
    return Case(family, variant, _module(make, True), fallback=_module(make, False))


def cases() -> list[Case]:
    def conv(groups: Callable[[int], int]) -> Callable[[Any, int], Any]:
        return lambda torch, c: torch.nn.Conv2d(c, c, 3, padding=1, groups=groups(c), bias=False)

    return [
        Case("conv", "3x3", _module(conv(lambda c: 1), False)),
        Case("conv_depthwise", "3x3", _module(conv(lambda c: c), False)),
        Case("conv_grouped", "3x3 g32", _module(conv(lambda c: 32), False)),
        _norm("batch_norm", "train", lambda torch, c: torch.nn.BatchNorm2d(c)),
        _norm("group_norm", "32 groups", lambda torch, c: torch.nn.GroupNorm(32, c)),
        Case("layer_norm_channels", "permuted", _layer_norm_channels),
        _norm("instance_norm", "affine", lambda torch, c: torch.nn.InstanceNorm2d(c, affine=True)),
        Case("pooling", "max 3x3 s2", _function(lambda torch: lambda x, y: torch.nn.functional.max_pool2d(x, 3, 2, 1))),
        Case("pooling", "avg 2x2", _function(lambda torch: lambda x, y: torch.nn.functional.avg_pool2d(x, 2))),
        Case(
            "upsample",
            "bilinear x2",
            _function(lambda torch: lambda x, y: torch.nn.functional.interpolate(
                x, scale_factor=2.0, mode="bilinear", align_corners=False)),
        ),
        Case(
            "upsample",
            "nearest x2",
            _function(lambda torch: lambda x, y: torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")),
        ),
        Case("elementwise", "silu + residual", _function(lambda torch: lambda x, y: torch.nn.functional.silu(x) + y),
             needs_y=True),
        Case("cat", "2 on channels", _function(lambda torch: lambda x, y: torch.cat([x, y], dim=1)), needs_y=True),
    ]


def _dtype(torch: Any, name: str) -> Any:
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


class Timer:
    """Per-iteration times (us): CUDA events on a GPU, the host clock (after a synchronize) elsewhere."""

    def __init__(self, torch: Any, cuda: bool) -> None:
        self.torch, self.cuda = torch, cuda

    def time(self, fn: Callable[[], None], iters: int) -> list[float]:
        torch = self.torch
        out: list[float] = []
        if self.cuda:
            evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
            for a, b in evs:
                a.record()
                fn()
                b.record()
            torch.cuda.synchronize()
            return [1000.0 * a.elapsed_time(b) for a, b in evs]
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            out.append(1e6 * (time.perf_counter() - t0))
        return out


def measure_case(
    torch: Any, case: Case, dtype: str, shape: tuple[int, int, int, int], timer: Timer, opts: argparse.Namespace
) -> dict[str, Any]:
    """Forward + backward of the case's op in NCHW and channels_last: medians and their ratio (`error`
    instead when the op cannot run here, with its FP32 parameters nor with the input's dtype)."""
    entry: dict[str, Any] = {"family": case.family, "variant": case.variant, "dtype": dtype, "shape": list(shape)}
    try:
        entry.update(_measure(torch, case.build, case.needs_y, dtype, shape, timer, opts))
        if case.fallback is not None:
            entry["params"] = "fp32"
    except Exception as exc:  # an op without a kernel for this dtype or layout here: recorded, the table goes on
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        if case.fallback is not None and dtype != "fp32":
            try:
                entry.update(_measure(torch, case.fallback, case.needs_y, dtype, shape, timer, opts))
                entry["params"] = dtype
                return entry
            except Exception as again:
                error += f"; with {dtype} parameters: {type(again).__name__}: {str(again).splitlines()[0][:200]}"
        entry["error"] = error
    return entry


def _measure(
    torch: Any,
    build: Callable[[Any, int, Any, str], tuple[Op, list[Any]]],
    needs_y: bool,
    dtype: str,
    shape: tuple[int, int, int, int],
    timer: Timer,
    opts: argparse.Namespace,
) -> dict[str, Any]:
    device = "cuda" if timer.cuda else "cpu"
    dt = _dtype(torch, dtype)
    n, c, h, w = shape
    torch.manual_seed(0)
    op, module_params = build(torch, c, dt, device)
    runs: dict[str, Callable[[], None]] = {}
    keeps = True
    for fmt_name, fmt in (("nchw", torch.contiguous_format), ("channels_last", torch.channels_last)):
        x = torch.randn(n, c, h, w, device=device, dtype=dt).contiguous(memory_format=fmt).requires_grad_(True)
        y = torch.randn(n, c, h, w, device=device, dtype=dt).contiguous(memory_format=fmt) if needs_y else None
        with torch.no_grad():
            out = op(x, y)
        if fmt_name == "channels_last":
            keeps = bool(out.is_contiguous(memory_format=torch.channels_last))
        grad = torch.randn_like(out)  # the same layout as the op's output in this format

        def step(x: Any = x, y: Any = y, grad: Any = grad) -> None:
            x.grad = None
            for p in module_params:
                p.grad = None
            op(x, y).backward(grad)

        runs[fmt_name] = step
    for fn in runs.values():  # warm-up: cuDNN autotuning, the allocator
        timer.time(fn, opts.warmup)
    times: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(opts.rounds):  # the formats alternate; the order flips every round
        order = list(runs) if r % 2 == 0 else list(reversed(list(runs)))
        for k in order:
            times[k] += timer.time(runs[k], opts.iters)
    nchw, cl = statistics.median(times["nchw"]), statistics.median(times["channels_last"])
    return {"nchw_us": round(nchw, 2), "channels_last_us": round(cl, 2),
            "ratio": round(cl / nchw, 4) if nchw > 0 else None, "output_channels_last": keeps}


def measure_conversion(
    torch: Any, dtype: str, shape: tuple[int, int, int, int], timer: Timer, opts: argparse.Namespace
) -> dict[str, Any]:
    """PyTorch's conversion of a channels_last activation to NCHW (`x.contiguous()`) and of its gradient
    back, against the same code on an NCHW activation (where both are no-ops): the cost per element of
    one conversion, what a convolution fed NCHW tensors pays in a channels_last net."""
    case = Case("conversion", "contiguous", _function(lambda torch: lambda x, y: x.contiguous()))
    entry = measure_case(torch, case, dtype, shape, timer, opts)
    if "error" not in entry:
        extra = entry["channels_last_us"] - entry["nchw_us"]
        entry["ps_per_element"] = round(extra * 1e6 / (2 * math.prod(shape)), 3)
    return entry


def summarize(measurements: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per family and dtype: the median ratio over its shapes and variants, the range and the count."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for fam in FAMILIES:
        for dt in DTYPES:
            ratios = [m["ratio"] for m in measurements
                      if m["family"] == fam and m["dtype"] == dt and isinstance(m.get("ratio"), (int, float))]
            if ratios:
                out.setdefault(fam, {})[dt] = {
                    "ratio": round(statistics.median(ratios), 4),
                    "min": round(min(ratios), 4),
                    "max": round(max(ratios), 4),
                    "shapes": len(ratios),
                }
    return out


def converts_back(measurements: Sequence[dict[str, Any]]) -> list[str]:
    """Families whose channels_last input gave an output that is not channels_last (PyTorch converted it
    back to NCHW), in any measurement."""
    return sorted({m["family"] for m in measurements if m.get("output_channels_last") is False})


def conversion_summary(conversions: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Per dtype: the median cost per element of one layout conversion over the shapes."""
    out: dict[str, float] = {}
    for dt in DTYPES:
        ps = [m["ps_per_element"] for m in conversions if m.get("dtype") == dt and "ps_per_element" in m]
        if ps:
            out[dt] = round(statistics.median(ps), 3)
    return out


def source(torch: Any, cuda: bool, argv: Sequence[str]) -> dict[str, Any]:
    return {
        "gpu": torch.cuda.get_device_name(0) if cuda else "cpu (--tiny smoke test: not a table)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "command": "python3 benchmarks/nhwc_table.py " + " ".join(argv),
    }


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--out", type=Path, default=Path("nhwc_table.json"))
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU: a smoke test of the script")
    opts = parser.parse_args(argv)
    opts.families = [f for f in opts.families.split(",") if f]
    opts.dtypes = [d for d in opts.dtypes.split(",") if d]
    bad = [f for f in opts.families if f not in FAMILIES] + [d for d in opts.dtypes if d not in DTYPES]
    if bad:
        parser.error(f"unknown families/dtypes: {', '.join(bad)}")
    if min(opts.rounds, opts.iters, opts.warmup) < 1:
        parser.error("--rounds, --iters and --warmup must be >= 1")
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    opts = parse_args(args)
    import torch

    cuda = torch.cuda.is_available() and not opts.tiny
    torch.backends.cudnn.benchmark = True  # tuned nets run with it; autotuning happens in the warm-up
    timer = Timer(torch, cuda)
    shapes = TINY_SHAPES if opts.tiny else SHAPES
    measurements: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for case in cases():
        if case.family not in opts.families:
            continue
        for dtype in opts.dtypes:
            for shape in shapes:
                m = measure_case(torch, case, dtype, shape, timer, opts)
                measurements.append(m)
                what = f"{m.get('ratio')}x" if "ratio" in m else m.get("error")
                print(f"[nhwc +{time.monotonic() - t0:5.0f}s] {case.family:<20} {case.variant:<16} {dtype:<5} "
                      f"{'x'.join(map(str, shape)):<16} {what}", file=sys.stderr, flush=True)
    conversions = [measure_conversion(torch, dt, shape, timer, opts) for dt in opts.dtypes for shape in shapes]
    doc = {"schema": 1, "source": source(torch, cuda, args), "measurements": measurements,
           "families": summarize(measurements), "converts_back": converts_back(measurements),
           "conversions": conversions, "conversion": conversion_summary(conversions)}
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    for fam, by_dtype in doc["families"].items():
        print(f"{fam:<20} " + "  ".join(f"{dt} {e['ratio']:.2f}x [{e['min']:.2f}-{e['max']:.2f}]"
                                        for dt, e in sorted(by_dtype.items())))
    print(f"converts back to NCHW: {', '.join(doc['converts_back']) or 'none'}; conversion (ps per element): "
          + ", ".join(f"{dt} {v}" for dt, v in doc["conversion"].items()))
    return 1 if any("error" in m for m in measurements + conversions) else 0


if __name__ == "__main__":
    sys.exit(main())
