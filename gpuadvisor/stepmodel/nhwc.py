"""The NHWC table: what channels_last does to each op family, measured on a GPU (issue 41; docs/model.md,
"channels_last and the NHWC table").

`benchmarks/nhwc_table.py` times each op family of a conv net forward and backward in NCHW and in
channels_last, per dtype, at a few activation shapes; its JSON ships as `gpuadvisor/data/nhwc_table.json`
and is read here once. What the replay takes from it (gpuadvisor.stepmodel.layout):

- the ratio channels_last time / NCHW time of an op, at the measured shape nearest the op's activation
  (by element count: a family's small shapes are bounded by the host's launch time in both layouts, so
  their ratios say little about a large activation), of the op's own variant where the table measured
  several (bilinear or nearest upsampling, max or average pooling); the family's median over its shapes
  where the table kept no measurements;
- the families whose channels_last path gives back an NCHW tensor on the GPU (`converts_back`): the
  table's own record of the output's layout where it has one, else what PyTorch's CUDA code does
  (`group_norm` and `instance_norm` run on `input.contiguous()` off the CPU);
- what a layout conversion by PyTorch costs per element (`conversion_ps_per_element`): measured directly
  where the table has it, else from the families that convert back (their channels_last time less
  their NCHW time is their input's conversion and its gradient's, two conversions of the activation),
  at their largest measured shape.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = [
    "CONVERTS_BACK_ON_CUDA",
    "FAMILIES",
    "FAMILY_LABELS",
    "SAME_SPEED_BAND",
    "NhwcEntry",
    "NhwcMeasurement",
    "NhwcTable",
    "load_nhwc_table",
    "table_dtype",
]

FAMILIES: tuple[str, ...] = (
    "conv",
    "conv_depthwise",
    "conv_grouped",
    "batch_norm",
    "group_norm",
    "layer_norm_channels",
    "instance_norm",
    "pooling",
    "upsample",
    "elementwise",
    "cat",
)

FAMILY_LABELS: Mapping[str, str] = {
    "conv": "convolutions",
    "conv_depthwise": "depthwise convolutions",
    "conv_grouped": "grouped convolutions",
    "batch_norm": "BatchNorm",
    "group_norm": "GroupNorm",
    "layer_norm_channels": "LayerNorm over channels",
    "instance_norm": "InstanceNorm",
    "pooling": "pooling",
    "upsample": "upsampling/interpolate",
    "elementwise": "elementwise ops on 4-D activations",
    "cat": "concatenation",
}

# Families whose channels_last input PyTorch converts back to NCHW on the GPU, returning an NCHW output:
# aten/src/ATen/native/group_norm.cpp (`group_norm`: `input.contiguous(memory_format)` on the CPU only,
# `input.contiguous()` elsewhere) and Normalization.cpp (`instance_norm`: `input.contiguous().view(...)`
# into batch_norm). Used when the table does not record its ops' output layout (tables measured before
# benchmarks/nhwc_table.py recorded it).
CONVERTS_BACK_ON_CUDA: frozenset[str] = frozenset({"group_norm", "instance_norm"})

# A measured ratio within this band of 1 is "the same speed" in words (the replay uses the ratio as is).
SAME_SPEED_BAND = 0.05

# The table's dtypes: FP32 data is one entry whether cuDNN runs its convolutions in TF32 (the default)
# or not; the kernel table says "tf32" for FP32 data on tensor cores.
_TABLE_DTYPE: Mapping[str, str] = {"fp32": "fp32", "tf32": "fp32", "bf16": "bf16", "fp16": "fp16"}
DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp16")

TABLE_RESOURCE = "nhwc_table.json"


def table_dtype(kernel_dtype: str) -> str | None:
    """The NHWC table's dtype key of a kernel-table dtype (None: not a dtype the table measures)."""
    return _TABLE_DTYPE.get(kernel_dtype)


@dataclass(frozen=True)
class NhwcEntry:
    """One family in one dtype: the median over the measured shapes of channels_last time / NCHW time
    (forward + backward), and the range over the shapes."""

    ratio: float
    low: float
    high: float
    shapes: int

    @property
    def slower(self) -> bool:
        return self.ratio > 1.0 + SAME_SPEED_BAND

    @property
    def faster(self) -> bool:
        return self.ratio < 1.0 - SAME_SPEED_BAND


@dataclass(frozen=True)
class NhwcMeasurement:
    """One op of the table at one shape: forward + backward time in both layouts (us)."""

    family: str
    variant: str
    dtype: str
    elements: int
    nchw_us: float
    channels_last_us: float

    @property
    def ratio(self) -> float:
        return self.channels_last_us / self.nchw_us


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(float(x)):
        return None
    return float(x)


@dataclass(frozen=True)
class NhwcTable:
    """The measured NHWC table (`gpuadvisor/data/nhwc_table.json`), keyed by family and dtype; empty
    when the file is absent or unreadable (`problem` says why)."""

    entries: Mapping[tuple[str, str], NhwcEntry] = field(default_factory=dict)
    source: Mapping[str, Any] = field(default_factory=dict)
    problem: str | None = None
    measurements: tuple[NhwcMeasurement, ...] = ()
    # families whose channels_last output the table recorded as NCHW (None: not recorded)
    recorded_converts_back: frozenset[str] | None = None
    # a layout conversion's measured cost per element, by dtype (empty: not measured directly)
    recorded_conversion: Mapping[str, float] = field(default_factory=dict)

    def get(self, family: str, dtype: str) -> NhwcEntry | None:
        return self.entries.get((family, dtype))

    def ratio_at(self, family: str, dtype: str, elements: float | None, variant: str = "") -> float | None:
        """channels_last / NCHW time of an op of `family` in `dtype` on an activation of `elements`
        elements: the measurement nearest in element count (log scale; the larger on a tie) among the
        op's `variant` (a word of the table's variant names: "bilinear", "max"...) when the table has
        it, else among the family's; the family's median without measurements or a size; None when the
        family and dtype are not in the table."""
        ms = [m for m in self.measurements if m.family == family and m.dtype == dtype]
        if variant and any(variant in m.variant for m in ms):
            ms = [m for m in ms if variant in m.variant]
        if ms and elements and elements > 0:
            best = min(ms, key=lambda m: (abs(math.log(elements / m.elements)), -m.elements))
            return best.ratio
        entry = self.get(family, dtype)
        return entry.ratio if entry is not None else None

    @property
    def converts_back(self) -> frozenset[str]:
        """Families whose channels_last path returns NCHW on the GPU (see the module docstring)."""
        return self.recorded_converts_back if self.recorded_converts_back is not None else CONVERTS_BACK_ON_CUDA

    def conversion_ps_per_element(self, dtype: str) -> float | None:
        """What PyTorch's conversion of an activation between the layouts costs per element (ps), in
        `dtype`: measured directly, else derived from the families that convert back (at their largest
        measured shape, the median over those families); None when the table has neither."""
        direct = self.recorded_conversion.get(dtype)
        if direct is not None:
            return direct
        derived = []
        for fam in sorted(self.converts_back):
            ms = [m for m in self.measurements if m.family == fam and m.dtype == dtype]
            if ms:
                m = max(ms, key=lambda m: m.elements)
                extra = m.channels_last_us - m.nchw_us
                if extra > 0:
                    derived.append(extra * 1e6 / (2.0 * m.elements))
        return statistics.median(derived) if derived else None

    @property
    def where(self) -> str:
        """Where it was measured, in words ("" when unknown)."""
        parts = [str(self.source[k]) for k in ("gpu", "torch") if self.source.get(k)]
        return ", ".join(parts)

    @classmethod
    def from_json(cls, doc: Any) -> NhwcTable:
        """Read benchmarks/nhwc_table.py's JSON: its `families` summary, its `measurements` (each op at each
        shape), `converts_back` and `conversion` when recorded; entries that are not of that form are
        dropped."""
        if not isinstance(doc, Mapping):
            return cls(problem="not a JSON object")
        families = doc.get("families")
        entries: dict[tuple[str, str], NhwcEntry] = {}
        if isinstance(families, Mapping):
            for fam, by_dtype in families.items():
                if fam not in FAMILIES or not isinstance(by_dtype, Mapping):
                    continue
                for dt, e in by_dtype.items():
                    if not isinstance(e, Mapping) or dt not in DTYPES:
                        continue
                    ratio = _number(e.get("ratio"))
                    if ratio is None or not 0 < ratio < 100:
                        continue
                    low, high = _number(e.get("min")), _number(e.get("max"))
                    entries[(str(fam), str(dt))] = NhwcEntry(
                        ratio=ratio,
                        low=low if low is not None else ratio,
                        high=high if high is not None else ratio,
                        shapes=int(e.get("shapes", 1)) if isinstance(e.get("shapes"), int) else 1,
                    )
        source = doc.get("source")
        back = doc.get("converts_back")
        conversion = doc.get("conversion")
        return cls(
            entries=entries,
            source=dict(source) if isinstance(source, Mapping) else {},
            measurements=_measurements(doc.get("measurements")),
            recorded_converts_back=(
                frozenset(str(f) for f in back if f in FAMILIES) if isinstance(back, list) else None
            ),
            recorded_conversion={
                str(dt): ps
                for dt, raw in (conversion.items() if isinstance(conversion, Mapping) else ())
                if dt in DTYPES and (ps := _number(raw)) is not None and ps > 0
            },
        )


def _measurements(raw: Any) -> tuple[NhwcMeasurement, ...]:
    out: list[NhwcMeasurement] = []
    for m in raw if isinstance(raw, list) else ():
        if not isinstance(m, Mapping) or m.get("family") not in FAMILIES or m.get("dtype") not in DTYPES:
            continue
        shape = m.get("shape")
        nchw, cl = _number(m.get("nchw_us")), _number(m.get("channels_last_us"))
        if not (isinstance(shape, list) and len(shape) == 4 and all(isinstance(d, int) and d > 0 for d in shape)):
            continue
        if nchw is None or cl is None or nchw <= 0 or cl <= 0:
            continue
        out.append(
            NhwcMeasurement(
                family=str(m["family"]),
                variant=str(m.get("variant") or ""),
                dtype=str(m["dtype"]),
                elements=math.prod(shape),
                nchw_us=nchw,
                channels_last_us=cl,
            )
        )
    return tuple(out)


@lru_cache(maxsize=1)
def load_nhwc_table() -> NhwcTable:
    """The table shipped in the package (read once); an empty table when it is not there yet."""
    try:
        text = resources.files("gpuadvisor").joinpath("data").joinpath(TABLE_RESOURCE).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        return NhwcTable(problem="no NHWC table in this installation (gpuadvisor/data/nhwc_table.json)")
    try:
        return NhwcTable.from_json(json.loads(text))
    except ValueError as exc:
        return NhwcTable(problem=f"the NHWC table is not valid JSON: {exc}")
