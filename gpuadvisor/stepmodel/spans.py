"""The host spans that label host time in the step model: DataLoader `__next__` (waiting for data),
`Optimizer.step` (and its own part without a closure), the scalar reads of device values, and where
the host runs the model's forward and backward; with the share of a DataLoader wait that is the
hand-off of ready batches.

Imports `intervals`; `hostcalls` and `build` import it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuadvisor.stepmodel.intervals import covered, union_intervals
from gpuadvisor.stepmodel.window import StepWindow
from gpuadvisor.trace.model import name_mask

if TYPE_CHECKING:
    from gpuadvisor.trace.model import TraceModel

READ_LOOP_GAP_US = 100.0  # short scalar reads closer than this form one read loop
READ_LOOP_MAX_READ_US = 50.0  # a read longer than this waited for GPU work: not part of a loop

SCALAR_OPS = ("aten::_local_scalar_dense", "aten::item")
_DATALOADER_RE = re.compile(r"DataLoader.*__next__")
_OPTIMIZER_SPAN_RE = re.compile(r"^Optimizer\.step#[^.]+\.step$")


@dataclass(frozen=True)
class Spans:
    """Host spans of one kind (disjoint after union), e.g. DataLoader waits."""

    starts: Any
    ends: Any
    names: tuple[str, ...] = ()  # the distinct annotation names seen

    @property
    def count(self) -> int:
        return len(self.starts)

    def covered(self, a: Any, b: Any) -> Any:
        return covered(self.starts, self.ends, a, b)


def host_spans(trace: TraceModel, pattern: re.Pattern[str]) -> Spans:
    """CPU-side annotation spans whose name matches `pattern` (union of them)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    ann = trace.annotations
    if len(ann) == 0:
        z = np.zeros(0)
        return Spans(z, z.copy())
    names = ann["name"].astype(str)
    mask = names.str.contains(pattern.pattern, regex=True).to_numpy(dtype=bool) & ~ann["on_gpu"].to_numpy(
        dtype=bool
    )
    s, e = union_intervals(ann["ts"].to_numpy()[mask], ann["end"].to_numpy()[mask])
    return Spans(s, e, tuple(sorted(set(names[mask].tolist()))))


def scalar_read_spans(trace: TraceModel) -> Spans:
    """Spans of the cpu ops that read a device value to the host (`aten::item`,
    `aten::_local_scalar_dense`) and hold a CUDA copy or synchronize: a `.item()` of a CPU tensor
    (AdamW's step counter) is not a read of the device."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    ops = trace.cpu_ops
    rt = trace.runtime
    if len(ops) == 0 or len(rt) == 0:
        z = np.zeros(0)
        return Spans(z, z.copy())
    names = ops["name"].astype(str)
    sel = names.isin(SCALAR_OPS).to_numpy(dtype=bool)
    if not sel.any():
        z = np.zeros(0)
        return Spans(z, z.copy())
    rn = rt["name"].astype(str)
    io = (rn.str.contains("Memcpy", regex=False) | rn.str.contains("Synchronize", regex=False)).to_numpy(
        dtype=bool
    )
    cs, ce = union_intervals(rt["ts"].to_numpy()[io], rt["end"].to_numpy()[io])
    s_, e_ = ops["ts"].to_numpy(dtype=np.float64)[sel], ops["end"].to_numpy(dtype=np.float64)[sel]
    holds = covered(cs, ce, s_, e_) > 0
    s2, e2 = union_intervals(s_[holds], e_[holds])
    # A read loop (`for i in range(n): x[i].item()`): short reads (the GPU had nothing left to do)
    # closer together than READ_LOOP_GAP_US are one span, Python between them included: vectorizing
    # the loop removes all of it. A read that waited for GPU work is not part of a loop.
    if len(s2) > 1:
        short = (e2 - s2) < READ_LOOP_MAX_READ_US
        close = ((s2[1:] - e2[:-1]) < READ_LOOP_GAP_US) & short[1:] & short[:-1]
        keep_start = np.r_[True, ~close]
        keep_end = np.r_[~close, True]
        s2, e2 = s2[keep_start], e2[keep_end]
    return Spans(s2, e2, tuple(SCALAR_OPS))


def optimizer_spans(trace: TraceModel) -> Spans:
    return host_spans(trace, _OPTIMIZER_SPAN_RE)


def optimizer_own_spans(optimizer: Spans, model: Spans | None) -> Spans:
    """The optimizer spans without the closure an optimizer ran before its update.

    `optimizer.step(closure)` runs the closure (forward and backward) inside the step's span before it
    updates the parameters: PyTorch Lightning always steps this way (its `training_step`, hooks and
    backward run in the closure), as do LBFGS-style loops. That work is the model's, not the
    optimizer's: a fused optimizer does not remove it. An optimizer span that holds model spans
    (`model_spans`) starts after the last of them; the others are kept whole."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if not optimizer.count or model is None or not model.count:
        return optimizer
    last = np.searchsorted(model.ends, optimizer.ends, side="right") - 1
    ok = last >= 0
    idx = np.clip(last, 0, None)
    inside = ok & (model.starts[idx] >= optimizer.starts) & (model.ends[idx] <= optimizer.ends)
    if not inside.any():
        return optimizer
    starts = np.where(inside, model.ends[idx], optimizer.starts)
    return Spans(starts, optimizer.ends.copy(), optimizer.names)


def dataloader_spans(trace: TraceModel) -> Spans:
    return host_spans(trace, _DATALOADER_RE)


# the longest hand-off of one batch from a worker process taken from a raw trace (profiled: the main
# process receives each tensor's shared memory from the worker, ~0.3 ms a tensor); a shorter wait in
# the window is taken as the hand-off, and what every batch waits beyond it as waiting for the workers
HANDOFF_CAP_US = 2000.0
# timed worker-loader batches the capture must have seen to use its own measurement
MIN_TIMED_BATCHES = 3


def main_loader(environment: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The DataLoader that produced most batches (environment.json `dataloaders`), or None."""
    loaders = [d for d in environment.get("dataloaders") or [] if isinstance(d, Mapping)]
    return max(loaders, key=lambda d: int(d.get("iterations") or 0)) if loaders else None


def data_handoff_fraction(data: Spans, window: StepWindow, environment: Mapping[str, Any]) -> float | None:
    """The share of the DataLoader wait that is the hand-off of ready batches (StepModel.data_handoff_fraction).

    With the capture's measurement (environment `dataloaders`: `__next__` calls that found the batch
    already delivered by a worker, and their time; those made outside the profiler when there are at
    least MIN_TIMED_BATCHES of them, else all): the ready batches' mean `__next__` time is the
    hand-off of every batch; its share of all the `__next__` time. From a raw trace whose iterator
    runs workers (`_MultiProcessingDataLoaderIter`): the shortest wait in the window (at most
    HANDOFF_CAP_US) is the hand-off, the rest of every wait is waiting for the workers. A
    single-process loader: 0."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    main = main_loader(environment)
    if main is not None:
        if not main.get("num_workers"):
            return 0.0
        # Prefer the calls made outside the profiler (the real run's pace): inside the window the main
        # loop is slower and the workers are ahead more often.
        for sfx in ("_unprofiled", ""):
            ready, waited = int(main.get(f"batches_ready{sfx}") or 0), int(main.get(f"batches_waited{sfx}") or 0)
            if ready + waited >= MIN_TIMED_BATCHES:
                break
        t_ready = float(main.get(f"next_ready{sfx}_s") or 0.0)
        t_waited = float(main.get(f"next_waited{sfx}_s") or 0.0)
        if ready + waited >= MIN_TIMED_BATCHES and t_ready + t_waited > 0:
            per_batch = t_ready / ready if ready else 0.0
            return float(min(1.0, per_batch * (ready + waited) / (t_ready + t_waited)))
    if data.count == 0 or not any("_MultiProcessingDataLoaderIter" in n for n in data.names):
        return 0.0
    inside = window.step_index(data.starts) >= 0 if window.count else np.zeros(data.count, dtype=bool)
    dur = (data.ends - data.starts)[inside]
    if len(dur) == 0 or float(dur.sum()) <= 0:
        return 0.0
    handoff = min(float(dur.min()), HANDOFF_CAP_US)
    return float(min(1.0, handoff * len(dur) / float(dur.sum())))


_BACKWARD_ENGINE_PREFIX = "autograd::engine::evaluate_function"


def model_spans(trace: TraceModel, segments: StepWindow) -> Spans:
    """Where the host runs the model's forward and backward: what torch.compile would compile.

    Backward: in each step, from the first to the last of the autograd engine's `evaluate_function`
    spans. Forward: in each step, from the first to the last host op that created an autograd node (its "Sequence number" is that of a backward
    function recorded in the trace), with the Python between those ops (module calls, hooks). Host
    work outside them (building the batch, logging, reading values, the optimizer) is not the model's:
    compiling the model does not remove it. Empty when the trace has no backward (inference, or a
    trace without autograd sequence numbers): callers then cannot tell the model's host work apart."""
    # lazy: numpy and pandas stay out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np
    import pandas as pd

    ops = trace.cpu_ops
    z = np.zeros(0)
    if len(ops) == 0 or "seq_num" not in ops.columns:
        return Spans(z, z.copy())
    engine = name_mask(ops["name"], lambda s: s.str.startswith(_BACKWARD_ENGINE_PREFIX))
    if not engine.any():
        return Spans(z, z.copy())
    seq = ops["seq_num"]
    has_seq = seq.notna().to_numpy(dtype=bool)
    # backward functions: named like the node ("AddmmBackward0"), with the forward op's sequence number
    backward_fn = has_seq & ~engine & name_mask(ops["name"], lambda s: s.str.contains("Backward", regex=False))
    bwd_seqs = set(seq[backward_fn].astype("int64").tolist())
    if not bwd_seqs:
        return Spans(z, z.copy())
    engine_tids = set(ops["tid"][engine].dropna().astype("int64").tolist())
    tid = ops["tid"].astype("float64").to_numpy()
    fwd = has_seq & ~backward_fn & ~engine & ~np.isin(tid, list(engine_tids))
    fwd &= seq.fillna(-1).astype("int64").isin(bwd_seqs).to_numpy(dtype=bool)
    starts: list[Any] = []
    ends: list[Any] = []

    def per_step(ts: Any, en: Any) -> None:
        """From the first start to the last end in each step (the Python between ops included)."""
        step = segments.step_index(ts)
        ok = step >= 0
        if ok.any():
            frame = pd.DataFrame({"step": step[ok], "ts": ts[ok], "end": en[ok]}).groupby("step")
            starts.append(frame["ts"].min().to_numpy(dtype=np.float64))
            ends.append(frame["end"].max().to_numpy(dtype=np.float64))

    if segments.count:
        # the backward: the engine's functions and its bookkeeping between them
        per_step(ops["ts"].to_numpy(dtype=np.float64)[engine], ops["end"].to_numpy(dtype=np.float64)[engine])
    if fwd.any() and segments.count:
        # An op records the sequence number autograd will give the next node, so every op since the
        # previous node carries it (a `.item()` or a batch copy before the model too): the op that
        # created the node is the last one with that number.
        cand = pd.DataFrame(
            {
                "seq": seq[fwd].astype("int64").to_numpy(),
                "ts": ops["ts"].to_numpy(dtype=np.float64)[fwd],
                "end": ops["end"].to_numpy(dtype=np.float64)[fwd],
            }
        )
        last = cand.loc[cand.groupby("seq")["ts"].idxmax()]
        per_step(last["ts"].to_numpy(dtype=np.float64), last["end"].to_numpy(dtype=np.float64))
    if not starts:
        return Spans(z, z.copy())
    s, e = union_intervals(np.concatenate(starts), np.concatenate(ends))
    return Spans(s, e, ("forward", "backward"))
