"""Forward work recomputed in the backward pass: activation checkpointing (issue 41; docs/model.md,
"Activation recompute").

`torch.utils.checkpoint` keeps a region's inputs instead of its activations and runs the region's
forward again when the backward needs them. The trace shows that second forward as it is: forward ops
(they record autograd nodes: they carry a "Sequence number") running inside the autograd engine's
`autograd::engine::evaluate_function: ...` spans, where the backward formulas' own ops carry none
(recorded on torch 2.13, reentrant or not: `aten::layer_norm`, `aten::linear`... under
`AddmmBackward0`). Such an op counts as recomputed when the same op with the same input shapes ran in
the step's forward too (a double backward's ops, `create_graph=True`, carry sequence numbers but are
not a second forward).

`recomputed(model)` gives the recompute regions (the outermost recomputed ops), the GPU work launched
inside them, their host time and an estimate of the activations checkpointing keeps out of memory: the
first tensor input of each recomputed op, the activation autograd would have saved for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuadvisor.stepmodel.build import covered, union_intervals, within
from gpuadvisor.stepmodel.busy import _parse, _prod, _shapes, time_by_op
from gpuadvisor.stepmodel.kernels import column_codes, element_bytes
from gpuadvisor.stepmodel.replay import EV_LAUNCH
from gpuadvisor.trace.model import name_mask

if TYPE_CHECKING:
    from gpuadvisor.stepmodel.model import StepModel
    from gpuadvisor.stepmodel.replay import Program

__all__ = ["Recompute", "drop_recompute", "recomputed"]

_ENGINE_PREFIX = "autograd::engine::evaluate_function"
# of the host time of the recompute candidates, the share whose (op, input shapes) ran in the forward too
MIN_FORWARD_MATCH = 0.5


@dataclass
class Recompute:
    """The analyzed steps' recomputed forward work."""

    starts: Any  # float64: recompute regions (outermost recomputed ops), host time
    ends: Any
    kernels: Any  # bool over kernel-table rows: launched inside a region
    time_per_step_us: float  # GPU kernel time launched by the recomputation
    host_per_step_us: float  # host time inside the regions
    regions_per_step: float
    saved_bytes_per_step: float  # activations the recomputation keeps out of memory (estimate)
    forward_match: float  # share of the regions' host time whose op and shapes ran in the forward
    ops: dict[str, float] = field(default_factory=dict)  # recomputed op -> its kernel time per step (us)

    def covered(self, a: Any, b: Any) -> Any:
        """Per interval [a, b): the time inside the regions (regions of different threads may overlap:
        their union)."""
        return covered(*union_intervals(self.starts, self.ends), a, b)


def recomputed(model: StepModel) -> Recompute | None:
    """The recomputed forward work of the analyzed steps (cached per model), or None without any."""
    if "recompute" in model._derived:
        hit: Recompute | None = model._derived["recompute"]
        return hit
    model._derived["recompute"] = result = _find(model)
    return result


def _find(model: StepModel) -> Recompute | None:
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    ops = model.trace.cpu_ops
    win = model.window
    if len(ops) == 0 or "seq_num" not in ops.columns or win.count == 0:
        return None
    # the name tests run once per distinct name (name_mask), not once per op
    engine = name_mask(ops["name"], lambda s: s.str.startswith(_ENGINE_PREFIX))
    if not engine.any():
        return None
    names = ops["name"].astype(str).to_numpy(dtype=object)
    ts = ops["ts"].to_numpy(dtype=np.float64)
    end = ops["end"].to_numpy(dtype=np.float64)
    tid = ops["tid"].astype("float64").to_numpy()
    has_seq = ops["seq_num"].notna().to_numpy(dtype=bool)
    aten = name_mask(ops["name"], lambda s: s.str.startswith("aten::"))
    in_window = win.contains(ts)
    inside_engine = np.zeros(len(ops), dtype=bool)
    for t in np.unique(tid[engine]).tolist():
        on = tid == t
        # engine spans nest (a reentrant checkpoint runs a backward inside one): their union
        inside_engine[on] = within(ts[engine & on], end[engine & on], ts[on])
    forward_op = has_seq & aten & ~engine
    candidates = forward_op & inside_engine & in_window
    if not candidates.any():
        return None
    # the outermost candidates (aten::linear, not the aten::addmm inside it)
    idx = np.flatnonzero(candidates)
    idx = idx[np.lexsort((ts[idx], tid[idx]))]
    outer: list[int] = []
    last_end: dict[float, float] = {}
    for i in idx.tolist():
        t = float(tid[i])
        if ts[i] < last_end.get(t, -np.inf):
            continue
        outer.append(i)
        last_end[t] = float(end[i])
    dims = ops["input_dims"].to_numpy(dtype=object)
    types = ops["input_types"].to_numpy(dtype=object)
    forward = forward_op & ~inside_engine
    signature = {(names[i], dims[i]) for i in np.flatnonzero(forward).tolist()}
    host = np.array([end[i] - ts[i] for i in outer])
    matched = np.array([(names[i], dims[i]) in signature for i in outer], dtype=bool)
    match = float(host[matched].sum() / host.sum()) if host.sum() > 0 else 0.0
    if match < MIN_FORWARD_MATCH:
        return None
    starts = np.array([ts[i] for i in outer])
    ends = np.array([end[i] for i in outer])
    steps = max(1, win.count)
    saved = 0.0
    for i in outer:
        shapes = _shapes(dims[i])
        first_type = next((str(x) for x in _parse(types[i]) if element_bytes(str(x))), None)
        if shapes and first_type:
            saved += float(_prod(shapes[0])) * float(element_bytes(first_type) or 0)
    kernels = _kernels_inside(model, starts, ends)
    t = model.kernel_table
    dur = t["dur"].to_numpy(dtype=np.float64) if len(t) else np.zeros(0)
    by_op: dict[str, float] = {}
    if len(t):
        op_c, op_u = column_codes(model, "op_name")  # kernel_table rows are window_kernels rows
        by_op = time_by_op(op_c[kernels], op_u, dur[kernels], steps)
    return Recompute(
        starts=starts,
        ends=ends,
        kernels=kernels,
        time_per_step_us=float(dur[kernels].sum()) / steps if len(t) else 0.0,
        host_per_step_us=float(host.sum()) / steps,
        regions_per_step=len(outer) / steps,
        saved_bytes_per_step=saved / steps,
        forward_match=match,
        ops=dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
    )


def _kernels_inside(model: StepModel, starts: Any, ends: Any) -> Any:
    """Per kernel-table row: launched by a host call inside one of the regions."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    k = model.window_kernels
    if len(k) == 0:
        return np.zeros(0, dtype=bool)
    launch = k["launch_ts"].to_numpy(dtype=np.float64)
    return within(starts, ends, launch) & np.isfinite(launch)


def drop_recompute(model: StepModel, program: Program, fraction: float = 1.0) -> Program:
    """The replay without `fraction` of the recomputation (checkpoint fewer blocks, or none): the GPU
    work launched inside the recompute regions and the host work there (the calls and the host time
    before them that lies inside a region) shrink by `fraction`. Forward and backward stay as they are:
    without checkpointing the forward runs the same kernels and saves what it computed."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    rc = recomputed(model)
    f = min(1.0, max(0.0, float(fraction)))
    if rc is None or f == 0.0 or program.ev_ts is None or program.n_events == 0:
        return program
    ts = np.asarray(program.ev_ts, dtype=np.float64)
    inside = rc.covered(ts - 1e-3, ts) > 0
    gap = program.gap_other + program.gap_data + program.gap_opt
    in_gap = np.minimum(np.asarray(rc.covered(ts - gap, ts), dtype=np.float64), program.gap_other)
    program.gap_other = program.gap_other - f * in_gap
    if program.gap_model is not None:
        program.gap_model = np.minimum(program.gap_model, program.gap_other)
    program.gap_read = np.minimum(program.gap_read, program.gap_other)
    program.ev_dur = np.where(inside, program.ev_dur * (1.0 - f), program.ev_dur)
    for i in np.flatnonzero(inside & (program.ev_kind == EV_LAUNCH)).tolist():
        s, n = int(program.ev_ops_start[i]), int(program.ev_ops_count[i])
        program.op_dur[s : s + n] = program.op_dur[s : s + n] * (1.0 - f)
    return program
