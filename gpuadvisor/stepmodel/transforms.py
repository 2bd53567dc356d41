"""Remedies as transformations of a replay program (gpuadvisor.stepmodel.replay.Program).

Each function takes the model and a copy of its program and returns the edited copy; it never looks
at anything the trace does not show. The numbers a transformation assumes (the cost of handing over
a batch from a DataLoader worker, what kernel fusion saves...) are the `Constants` below: each is
named, documented, and calibrated on the calibration half of the benchmark corpus
(docs/model.md, "Calibration"). Here: the host and data remedies, the compile and CUDA-graph ones; the
remedies that change the kernels themselves (precision, layout, shapes, fusion of chains) are
`gpuadvisor.stepmodel.kernelwork`'s.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuadvisor.hardware import gpu_peak_for
from gpuadvisor.stepmodel import build as b
from gpuadvisor.stepmodel.replay import EV_LAUNCH, EV_SYNC, EV_WORK, Program

if TYPE_CHECKING:
    from gpuadvisor.stepmodel.model import StepModel


@dataclass(frozen=True)
class Constants:
    # a sync the host no longer waits on still costs its call
    sync_call_us: float = 5.0
    # DataLoader with workers: handing over a ready batch (queue get, shared-memory tensors), per step;
    # outside the profiler on an H200, 8 workers handed 256x1x28x28 float32 batches (0.8 MB with their
    # labels) in 0.11-0.20 ms a step (verify of lightning_autoencoder --fixed: data wait 2-3% of the step)
    dataloader_handoff_us: float = 150.0
    # pinned host-to-device bandwidth by PCIe generation (GB/s, x16, measured practice) when the trace
    # has no pinned copy to measure
    pinned_gbps_by_gen: tuple[tuple[int, float], ...] = ((3, 11.0), (4, 22.0), (5, 45.0), (6, 90.0))
    pinned_gbps_default: float = 22.0
    # CUDA graphs: host cost left per step (graph launch, Python around the compiled call), and the
    # share of the eager host work between launches that remains
    graph_step_host_us: float = 40.0
    # ... plus, per input tensor that is new every step (the batch moved to the GPU), the copy into the
    # graph's static input buffer before each replay (torch.compile's CUDA graph trees; a hand-made graph
    # needs the same copy_): aten::copy_, its cudaMemcpyAsync and the wrapper's Python per input.
    # Measured on an H100 (torch 2.11): dlrm's compiled forward took 2.04 ms of host time for 53 inputs
    # against 2.07 ms eager (benchmarks/host_regions.py; docs/measurements/host-regions-h100.json)
    graph_input_copy_us: float = 36.0
    graph_host_fraction: float = 0.03
    graph_launch_gap_us: float = 1.0
    # torch.compile fusion of chains of elementwise/reduction kernels: fused time / sum of the chain
    fusion_factor: float = 0.5
    # fused optimizer: host time per step = base + per parameter tensor; GPU time vs. the current update
    fused_optimizer_host_base_us: float = 60.0
    fused_optimizer_host_per_tensor_us: float = 0.5
    per_tensor_to_fused_gpu: float = 0.35
    foreach_to_fused_gpu: float = 0.75
    # ... by optimizer class, from the memory passes of torch.optim's foreach update against the fused
    # one's single pass (read param, grad and state, write param and state): Adam 19 tensor passes
    # (lerp_ 3, mul_ 2, addcmul_ 4, sqrt 2, div_ 2, add_ 2, addcdiv_ 4) against 7; AdamW 21 (+ the
    # decay mul_) against 7; SGD with momentum 8 (mul_ 2, add_ 3, add_ 3) against 5. Measured on dlrm
    # (Adam, 166M parameters, H100): foreach update 4.5 ms per step, fused=True saved 13% of the step
    foreach_to_fused_gpu_by_class: tuple[tuple[str, float], ...] = (("Adam", 0.37), ("AdamW", 0.33), ("SGD", 0.63))
    # bf16 autocast: matmul/conv speed-up from the kernel's achieved share of the FP32 peak x the
    # bf16/fp32 peak ratio x this efficiency, within [min, max]; kernels without a FLOP count get
    # `autocast_speedup_unknown`; elementwise/reduction kernels of the forward/backward move half the bytes
    tensor_core_efficiency: float = 0.5
    min_autocast_speedup: float = 2.0
    max_autocast_speedup: float = 8.0
    autocast_speedup_unknown: float = 3.0
    bf16_elementwise_speedup: float = 1.5
    # ... by each kernel's roofline fraction where the kernel table knows it (see kernel_speedups)
    bf16_memory_by_roofline: bool = True
    # TF32: FP32 GEMMs only (elementwise work keeps its bytes)
    max_tf32_speedup: float = 6.0
    # a custom kernel given enough blocks: its time x max(blocks / SMs, 1 / this)
    max_grid_speedup: float = 32.0
    grid_target_occupancy_pct: float = 50.0
    # larger batch: a GEMM at a larger size reaches this share of the dtype's peak; an under-filled
    # kernel longer than `long_kernel_us` does more work per block (its grid does not grow)
    gemm_efficiency_at_scale: float = 0.6
    long_kernel_us: float = 50.0
    # a kernel's grid fills the GPU at this many blocks per SM: below it the kernel is latency-bound and
    # more blocks run in the same time; above it time grows with the work
    blocks_per_sm_full: float = 1.0


CONSTANTS = Constants()


# ---- helpers ---------------------------------------------------------------------------------------


def op_column(model: StepModel, program: Program, column: str) -> Any:
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    values = model.ops[column].to_numpy()
    return values[program.op_row] if program.n_ops else np.zeros(0, dtype=values.dtype)


def _launch_event_of_ops(program: Program) -> Any:
    """For each op, the index of the host event that launched it."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    out = np.full(program.n_ops, -1, dtype=np.int64)
    for i in np.flatnonzero(program.ev_kind == EV_LAUNCH).tolist():
        s, n = int(program.ev_ops_start[i]), int(program.ev_ops_count[i])
        out[s : s + n] = i
    return out


def remove_reads(model: StepModel, program: Program, c: Constants | None = None) -> Program:
    """Scalar reads leave the step: values accumulate on the device and are read once in a while.
    Each read's own host cost (the `aten::item` op: its copy launch, its wait, its dispatch) goes too;
    Python around it (indexing, comparisons on the host) stays: a conservative estimate."""
    c = c or CONSTANTS
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    program = remove_waits(model, program, (b.SCALAR_READ,), c)
    inside = program.ev_in_read
    program.gap_other = program.gap_other - program.gap_read
    program.gap_read = np.zeros_like(program.gap_read)
    program.ev_dur[inside] = 0.0
    no_fixed_host(program, inside)
    program.ev_post[inside] = 0.0
    program.ev_block[inside] = False
    launches = inside & (program.ev_kind == EV_LAUNCH)
    for i in np.flatnonzero(launches).tolist():
        s, n = int(program.ev_ops_start[i]), int(program.ev_ops_count[i])
        program.op_dur[s : s + n] = 0.0
    program.ev_kind[inside & (program.ev_kind == EV_SYNC)] = EV_WORK
    return program


def no_fixed_host(program: Program, where: Any) -> None:
    """The selected calls no longer do host work of their own (`Program.ev_fixed`)."""
    if program.ev_fixed is not None:
        program.ev_fixed[where] = 0.0


def add_fixed_host_before(program: Program, where: Any, per_step_us: float) -> None:
    """Add `per_step_us` of host work (plain-run microseconds, not scaled by the profiler correction)
    in each step, just before the first selected event of the step: where the mechanism runs (CUDA
    graphs copy their inputs into the static buffers before the first replay), so that it delays the
    GPU work that follows. Without the events' steps or a selected event in every step, it goes to the
    block's tail (host work after the last event)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    total = per_step_us * program.steps
    if total <= 0:
        return
    firsts: list[int] = []
    if program.ev_step is not None and program.n_events:
        sel = np.asarray(where, dtype=bool) & (program.ev_step >= 0)
        idx = np.flatnonzero(sel)
        if len(idx):
            _, first_pos = np.unique(program.ev_step[idx], return_index=True)
            firsts = idx[first_pos].tolist()
    if len(firsts) != program.steps:
        program.tail_fixed += total
        return
    if program.gap_fixed is None:
        program.gap_fixed = np.zeros(program.n_events)
    program.gap_fixed[firsts] += per_step_us


def remove_waits(
    model: StepModel, program: Program, kinds: Collection[str], c: Constants | None = None
) -> Program:
    """The host no longer waits on the device in waits of these kinds (the call itself remains)."""
    c = c or CONSTANTS
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    kinds_arr = np.asarray(sorted(kinds), dtype=object)
    hit = (program.ev_kind == EV_SYNC) & np.isin(program.ev_sync_kind, kinds_arr)
    program.ev_kind[hit] = EV_WORK
    program.ev_dur[hit] = program.ev_dur[hit] + np.minimum(program.ev_post[hit], c.sync_call_us)
    program.ev_post[hit] = 0.0
    blocking = program.ev_block & np.isin(program.ev_sync_kind, kinds_arr)
    program.ev_block[blocking] = False
    program.ev_post[blocking] = 0.0
    return program


def pinned_gbps(model: StepModel, c: Constants | None = None) -> tuple[float, str]:
    """Pinned host-to-device bandwidth: measured on this trace's pinned copies, else by the PCIe
    generation NVML reported, else a default. Returns (GB/s, how it was obtained)."""
    c = c or CONSTANTS
    measured = model.facts.pinned_htod_gbps
    if measured is not None and measured > 0:
        return measured, "measured on this run's pinned copies"
    gen = None
    if model.run is not None and model.run.nvml is not None and len(model.run.nvml):
        col = model.run.nvml.get("pcie_gen_max")
        if col is not None:
            vals = col.dropna()
            gen = int(vals.max()) if len(vals) else None
    if gen is not None:
        for g, rate in c.pinned_gbps_by_gen:
            if g == gen:
                return rate, f"typical for the PCIe Gen{gen} x16 link NVML reported"
    return c.pinned_gbps_default, "assumed (no pinned copy in this trace and no PCIe generation recorded)"


def htod_copy_mask(model: StepModel, program: Program, *, pageable_only: bool, min_bytes: float) -> Any:
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    kind = op_column(model, program, "kind")
    direction = op_column(model, program, "direction").astype(str)
    src = op_column(model, program, "src_kind").astype(str)
    nbytes = np.nan_to_num(op_column(model, program, "bytes").astype(np.float64), nan=0.0)
    mask = (kind == "copy") & (direction == "HtoD") & (nbytes >= min_bytes)
    if pageable_only:
        mask &= src == "Pageable"
    return mask


def pinned_async_copies(model: StepModel, program: Program, mask: Any, c: Constants | None = None) -> Program:
    """The selected host-to-device copies come from pinned memory with non_blocking=True: they run at
    the pinned bandwidth, their launch returns at once, and the host no longer waits for them."""
    c = c or CONSTANTS
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if not mask.any():
        return program
    rate, _ = pinned_gbps(model, c)
    nbytes = np.nan_to_num(program.op_bytes, nan=0.0)
    program.op_dur[mask] = np.minimum(program.op_dur[mask], nbytes[mask] / (rate * 1e3) + 2.0)
    events = np.unique(_launch_event_of_ops(program)[mask])
    events = events[events >= 0]
    program.ev_block[events] = False
    program.ev_post[events] = 0.0
    program.ev_dur[events] = np.minimum(program.ev_dur[events], model.facts.launch_call_us)
    no_fixed_host(program, events)  # a pinned non_blocking copy stages nothing on the host
    program.op_extra[mask] = 0.0  # nor waits for staging: it is ready when its call is made
    # the cudaStreamSynchronize of a non_blocking=False copy goes away too
    return remove_waits(model, program, (b.BLOCKING_COPY,), c)


def prefetch_copies(model: StepModel, program: Program, mask: Any, c: Constants | None = None) -> Program:
    """Pinned, asynchronous copies issued on a side stream one step ahead: no compute waits for them;
    the copy engine still has to move every byte each step."""
    c = c or CONSTANTS
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    program = pinned_async_copies(model, program, mask, c)
    if mask.any():
        side = int(program.op_stream.max()) + 1 if program.n_ops else 0
        program.op_stream[mask] = side
        program.op_dep[mask] = -1
        program.op_extra[mask] = 0.0
        # ops that waited on these copies no longer do (their input was copied a step earlier)
        dep = program.op_dep
        waits_on_copy = (dep >= 0) & np.isin(dep, np.flatnonzero(mask))
        program.op_dep[waits_on_copy] = -1
    return program


def narrow_copies(program: Program, mask: Any, factor: float) -> Program:
    """The selected copies move `factor` of their bytes (uint8 instead of float32: 0.25)."""
    program.op_dur[mask] = program.op_dur[mask] * factor
    program.op_bytes[mask] = program.op_bytes[mask] * factor
    return program


def faster_data(
    model: StepModel, program: Program, workers: int, current_workers: int, c: Constants | None = None
) -> Program:
    """DataLoader workers prepare batches in parallel: the host's wait per step shrinks to a hand-off,
    while the workers' throughput bounds the step from below. A loader that already runs workers
    keeps the hand-off the run shows (StepModel.data_handoff_fraction: receiving a batch a worker has
    ready); only the time spent waiting for the workers goes."""
    c = c or CONSTANTS
    steps = max(1, program.steps)
    data_total = float(program.gap_data.sum()) + program.tail_data
    if data_total <= 0:
        return program
    per_step = data_total / steps
    if current_workers > 0:
        factor = model.data_handoff_fraction
        if factor >= 1.0 - 1e-9:
            program.notes.append("the DataLoader wait is the hand-off of batches the workers already had ready")
    else:
        factor = min(per_step, c.dataloader_handoff_us) / per_step
    program.gap_data = program.gap_data * factor
    program.tail_data = program.tail_data * factor
    if current_workers <= 0:
        # one process produced a batch in `per_step`: `workers` processes produce one every per_step/workers
        program.min_period_us = per_step / max(1, workers)
    else:
        measured = model.window.median_step_us
        program.min_period_us = measured * current_workers / max(workers, current_workers)
    return program


# A stretch of host work in the training loop (outside the model's forward/backward, the optimizer,
# the DataLoader and scalar reads) at least this long, followed by the batch's copy to the device
# before the model runs, is preparing that batch on the host (a few launches' dispatch is well under it)
LOOP_PREPARATION_MIN_US = 500.0
# the copy that ends it moves at least this much (a batch, not a scalar)
LOOP_PREPARATION_MIN_COPY_BYTES = 16 * 1024
# events after a stretch searched for the batch's copy
_LOOP_PREPARATION_LOOKAHEAD = 32


def loop_work_us(program: Program) -> Any:
    """Per host event, the host work before it that ran in the training loop itself: outside the
    model's forward/backward, the optimizer, the DataLoader and scalar reads (zeros when the trace
    cannot tell the model's region apart)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if not model_region_known(program):
        return np.zeros(program.n_events)
    loop = program.gap_other - program.gap_model - program.gap_read
    loop = np.where(program.ev_in_optimizer | program.ev_in_data | program.ev_in_model, 0.0, loop)
    return np.clip(loop, 0.0, None)


def loop_preparation_mask(
    model: StepModel,
    program: Program,
    min_us: float = LOOP_PREPARATION_MIN_US,
    min_bytes: float = LOOP_PREPARATION_MIN_COPY_BYTES,
) -> Any:
    """Host events preceded by batch preparation in the loop: a loop-side stretch of at least `min_us`
    (loop_work_us) followed, before the model's next host event, by a launch that copies at least
    `min_bytes` from host to device (the prepared batch going to the GPU)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    loop = loop_work_us(program)
    mask = np.zeros(program.n_events, dtype=bool)
    candidates = np.flatnonzero(loop >= min_us)
    if len(candidates) == 0 or program.n_ops == 0:
        return mask
    kind = op_column(model, program, "kind")
    direction = op_column(model, program, "direction").astype(str)
    nbytes = np.nan_to_num(op_column(model, program, "bytes").astype(np.float64), nan=0.0)
    big_htod = (kind == "copy") & (direction == "HtoD") & (nbytes >= min_bytes)
    in_model = program.ev_in_model
    for i in candidates.tolist():
        for j in range(i, min(program.n_events, i + _LOOP_PREPARATION_LOOKAHEAD)):
            if j > i and in_model[j]:
                break
            n = int(program.ev_ops_count[j])
            if n and big_htod[int(program.ev_ops_start[j]) : int(program.ev_ops_start[j]) + n].any():
                mask[i] = True
                break
    return mask


def loop_preparation_to_workers(
    model: StepModel, program: Program, workers: int, mask: Any, c: Constants | None = None
) -> Program:
    """The batch preparation the loop does itself (`mask`: loop_preparation_mask) moves into a Dataset
    run by DataLoader workers: that host work leaves the loop, which takes over a ready batch instead
    (the hand-off of a worker-made batch, per step); the workers' throughput bounds the step from below
    (one process prepared a batch in the time removed; `workers` processes make that many)."""
    c = c or CONSTANTS
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if not mask.any():
        return program
    loop = loop_work_us(program)
    removed = np.where(mask, loop, 0.0)
    steps = max(1, program.steps)
    program.gap_other = program.gap_other - removed
    program.gap_data = program.gap_data + np.where(mask, c.dataloader_handoff_us * steps / int(mask.sum()), 0.0)
    per_step = float(removed.sum()) / steps
    program.min_period_us = max(program.min_period_us, per_step / max(1, workers))
    return program


def batch_scaled_durations(model: StepModel, program: Program, m: float, c: Constants | None = None) -> Any:
    """Each op's duration at `m` times the batch (see the docstring of `larger_batch`)."""
    c = c or CONSTANTS
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    d = program.op_dur.copy()
    kind = op_column(model, program, "kind")
    family = op_column(model, program, "family").astype(str)
    in_opt = op_column(model, program, "in_optimizer").astype(bool)
    collective = op_column(model, program, "is_collective").astype(bool)
    blocks = op_column(model, program, "blocks").astype(np.float64)
    flops = op_column(model, program, "op_flops").astype(np.float64)
    types = op_column(model, program, "op_input_types")
    sms = float(model.facts.num_sms or 0)

    peak = gpu_peak_for(model.trace.meta.gpu_name or model._gpu_name(), model.facts.num_sms)
    out = d.copy()
    for j in range(program.n_ops):
        if in_opt[j] or collective[j]:
            continue  # parameter-sized work and gradient all-reduce do not grow with the batch
        if kind[j] == "memset":
            continue
        if kind[j] == "copy":
            out[j] = d[j] * m
            continue
        if family[j] in ("gemm", "attention") and flops[j] == flops[j] and flops[j] > 0 and peak is not None:
            t = str(types[j]) if types[j] is not None else ""
            dtype = (
                "bf16"
                if ("BFloat16" in t or "Half" in t)
                else ("tf32" if model.settings.get("allow_tf32_matmul") else "fp32")
            )
            rate_peak = (peak.peak(dtype) or peak.peak("fp32") or 0.0) * 1e6  # FLOP/us
            rate_now = flops[j] / d[j] if d[j] > 0 else 0.0
            rate = max(rate_now, c.gemm_efficiency_at_scale * rate_peak)
            out[j] = max(d[j], m * flops[j] / rate) if rate > 0 else d[j] * m
            continue
        if blocks[j] != blocks[j] or sms <= 0:
            out[j] = d[j] * m  # unknown grid: linear (conservative)
            continue
        waves = blocks[j] / (sms * c.blocks_per_sm_full)
        if waves >= 1.0 or d[j] > c.long_kernel_us:
            out[j] = d[j] * m
        else:
            out[j] = d[j] * max(1.0, m * waves)
    return out


def larger_batch(model: StepModel, program: Program, m: float, c: Constants | None = None) -> Program:
    """`m` times the batch per step. Host work per step is unchanged (the same ops are dispatched),
    except the time waiting for data, which grows with the samples loaded (the hand-off of a batch a
    worker process had ready does not: StepModel.data_handoff_fraction), and read loops over the
    elements of a tensor, which grow with the batch. On the GPU, input copies
    grow m-fold; optimizer kernels, memsets and collectives do not; a GEMM grows to m x its FLOPs at the
    larger of its current rate and `gemm_efficiency_at_scale` of the peak; another kernel grows with
    the waves of blocks it needs: a kernel that under-fills the GPU (fewer blocks than the SMs can
    hold) keeps its time until the grid fills the GPU, unless it is long (a small grid looping over
    its work: linear)."""
    c = c or CONSTANTS
    program.op_dur = batch_scaled_durations(model, program, m, c)
    # the DataLoader: loading grows with the samples; the hand-off of a batch from a worker does not
    h = model.data_handoff_fraction
    data_factor = h + (1.0 - h) * m
    program.gap_data = program.gap_data * data_factor
    program.tail_data = program.tail_data * data_factor
    # Read loops (`for i in range(len(preds)): preds[i].item()`) walk the elements of a tensor: assume
    # they walk the batch, so their host cost grows with it (conservative for a loop over parameters).
    reads = program.ev_in_read
    program.gap_other = program.gap_other + program.gap_read * (m - 1.0)
    program.gap_read = program.gap_read * m
    program.ev_dur[reads] = program.ev_dur[reads] * m
    program.ev_post[reads] = program.ev_post[reads] * m
    return program


# The note of a compile/CUDA-graph replay that left the calls inside RNN modules eager (GA501 tells it)
RNN_EAGER_NOTE = "inside nn.LSTM/GRU/RNN stay as they are: torch.compile breaks the graph at those modules and runs them eagerly"


def _rnn_events(program: Program) -> Any:
    """Per event: inside an nn.LSTM/GRU/RNN op (build.RNN_OPS); all False for programs without it."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    rnn = program.ev_in_rnn
    if rnn is None or len(rnn) != program.n_events:
        return np.zeros(program.n_events, dtype=bool)
    return rnn


def _forward_backward_events(program: Program) -> Any:
    return ~program.ev_in_optimizer & ~program.ev_in_data


def model_region_known(program: Program) -> bool:
    """The trace tells the model's forward/backward apart from the loop around it (a backward ran)."""
    return program.ev_in_model is not None and program.gap_model is not None


def data_dependent_syncs_in_model(program: Program) -> int:
    """Syncs inside the model's forward/backward that wait for a data-dependent size (nonzero, masks)."""
    if not model_region_known(program):
        return 0
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    return int(
        np.sum(program.ev_in_model & (program.ev_kind == EV_SYNC) & (program.ev_sync_kind == b.DATA_DEPENDENT))
    )


def graph_inputs_per_step(model: StepModel, program: Program) -> float:
    """Tensors a CUDA graph of the model gets new every step: the host-to-device copies made outside the
    model's forward and backward (the batch), per step. A graph replays on fixed addresses, so each one
    is copied into the graph's input buffer before the replay."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if program.n_ops == 0 or program.steps == 0:
        return 0.0
    mask = htod_copy_mask(model, program, pageable_only=False, min_bytes=0.0)
    if program.ev_in_model is not None and program.n_events:
        ev_of = _launch_event_of_ops(program)
        mask &= ~program.ev_in_model[np.clip(ev_of, 0, None)]
    return float(np.count_nonzero(mask)) / program.steps


def cuda_graphs(
    model: StepModel, program: Program, c: Constants | None = None, *, input_copies: bool = True
) -> Program:
    """The forward and backward run as CUDA graph replays: the host's work between their launches
    almost disappears (one replay call per graph), and kernels follow each other back to back.

    Only the model's own host work shrinks when the trace shows where the model runs (a training step:
    the forward's autograd ops and the backward engine, `StepModel.model_spans`): building the batch,
    logging and reading values in the loop stay as they are, and so do waits on the device (a graph
    cannot hold them: the graph breaks there). Without that (inference), every host event outside the
    optimizer and the DataLoader counts as the model's. When the model itself waits for data-dependent
    sizes (nonzero, boolean masks), torch.compile breaks the graph there and the shapes after it change
    every step, so no CUDA graph is assumed: the program is returned unchanged, with a note.

    The graphs bring a cost of their own: each input that is new every step is copied into the graph's
    static buffer before a replay (`graph_inputs_per_step`); `input_copies=False` leaves it out (the
    launch cost alone, what GA501 tests the run against)."""
    c = c or CONSTANTS
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    dd = data_dependent_syncs_in_model(program)
    if dd:
        program.notes.append(
            f"{dd / max(1, program.steps):g} data-dependent waits per step inside the model: no CUDA graph "
            "assumed (the graph breaks there and the shapes after it change)"
        )
        return program
    base = _forward_backward_events(program) & (program.ev_kind != EV_SYNC)
    rnn = _rnn_events(program)
    if rnn.any():
        # Dynamo breaks the graph at nn.LSTM/GRU/RNN: their calls stay eager, launched one by one
        base &= ~rnn
        launches_rnn = int(np.count_nonzero(rnn & (program.ev_kind == EV_LAUNCH)))
        program.notes.append(
            f"{launches_rnn / max(1, program.steps):g} launch calls per step (kernels, copies, memsets) {RNN_EAGER_NOTE}"
        )
    graph_launches = (program.ev_kind == EV_LAUNCH) & (program.ev_ops_count > 1)
    if graph_launches.any():
        # Already graphed (torch.compile's reduce-overhead, CUDA graphs): the Python between graph
        # replays is the compiled wrapper's (guards, bookkeeping), which more graphs do not remove; only
        # the eager launches left (one kernel each) and the host work before them shrink.
        base &= (program.ev_kind == EV_LAUNCH) & (program.ev_ops_count == 1)
    if model_region_known(program):
        sel = base & program.ev_in_model
        shrink = np.where(sel, program.gap_model, 0.0) * (1.0 - c.graph_host_fraction)
        if not graph_launches.any():
            shrink = np.where(rnn, 0.0, program.gap_model) * (1.0 - c.graph_host_fraction)
        program.gap_other = program.gap_other - shrink
        program.gap_model = program.gap_model - shrink
    else:
        sel = base
        program.gap_other = np.where(sel, program.gap_other * c.graph_host_fraction, program.gap_other)
        if not graph_launches.any() and not rnn.any():
            program.tail_other = program.tail_other * c.graph_host_fraction
    launches = sel & (program.ev_kind == EV_LAUNCH)
    if not graph_launches.any():
        inputs = graph_inputs_per_step(model, program) if input_copies else 0.0
        # the copies run just before the first replay: the first graphed launch of the step (a scalar
        # read's copy or a blocking launch is not graphed: the graph breaks there)
        replays = launches & ~program.ev_in_read & ~program.ev_block
        add_fixed_host_before(program, replays, (c.graph_step_host_us + c.graph_input_copy_us * inputs))
        if inputs * c.graph_input_copy_us >= 500.0:
            program.notes.append(
                f"the graphs copy the {inputs:g} tensors moved to the GPU each step into their static input "
                f"buffers before every replay (~{inputs * c.graph_input_copy_us / 1000:.1f} ms of host time per step)"
            )
    program.ev_dur = np.where(launches, np.minimum(program.ev_dur, c.graph_launch_gap_us), program.ev_dur)
    no_fixed_host(program, launches)
    program.ev_dur = np.where(
        sel & (program.ev_kind == EV_WORK), program.ev_dur * c.graph_host_fraction, program.ev_dur
    )
    program.launch_lag_us = min(program.launch_lag_us, c.graph_launch_gap_us + 1.0)
    return program


def fuse_elementwise(model: StepModel, program: Program, c: Constants | None = None) -> Program:
    """torch.compile fuses chains of consecutive PyTorch elementwise/reduction kernels on one stream
    into one kernel: a chain's time becomes max(its longest kernel, `fusion_factor` x its sum) and its
    launches but the first disappear, with the model's Python between them.

    A chain never crosses a wait on the device (a graph break) nor, when the trace shows where the
    model runs, host work outside the model (building the batch, logging, the optimizer: the compiled
    graphs end there)."""
    c = c or CONSTANTS
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    if program.n_ops == 0:
        return program
    family = op_column(model, program, "family").astype(str)
    origin = op_column(model, program, "origin").astype(str)
    fusable = np.isin(family, ["elementwise", "reduction"]) & (origin == "aten")
    ev_of = _launch_event_of_ops(program)
    fusable &= ev_of >= 0
    fusable &= ~program.ev_in_optimizer[np.clip(ev_of, 0, None)] if program.n_events else fusable
    known = model_region_known(program)
    if known and program.n_events:
        fusable &= program.ev_in_model[np.clip(ev_of, 0, None)]  # only the model is compiled
    # single-op launches only (graph launches are already one call)
    single = program.ev_ops_count[np.clip(ev_of, 0, None)] == 1 if program.n_events else fusable
    fusable &= single
    # an nn.LSTM/GRU/RNN runs eagerly under torch.compile (a graph break): nothing in it fuses
    rnn = _rnn_events(program)
    if program.n_events:
        fusable &= ~rnn[np.clip(ev_of, 0, None)]
    # events a chain cannot run across: waits, RNN modules, and (model region known) host work outside
    # the model
    breaks = (program.ev_kind == EV_SYNC) | rnn
    if known:
        breaks = breaks | ~program.ev_in_model | (program.gap_other - program.gap_model > 1.0)
    breaks_before = np.r_[0, np.cumsum(breaks.astype(np.int64))]  # breaks among events [0, i)

    def joins(a: int, b_: int) -> bool:
        """No break among the events after op a's launch, up to and including op b_'s launch."""
        ea, eb = int(ev_of[a]), int(ev_of[b_])
        return eb > ea and breaks_before[eb + 1] - breaks_before[ea + 1] == 0

    j = 0
    n = program.n_ops
    while j < n:
        if not fusable[j]:
            j += 1
            continue
        k = j
        while (
            k + 1 < n
            and fusable[k + 1]
            and program.op_stream[k + 1] == program.op_stream[j]
            and joins(k, k + 1)
        ):
            k += 1
        if k > j:
            chain = program.op_dur[j : k + 1]
            program.op_dur[j] = max(float(chain.max()), c.fusion_factor * float(chain.sum()))
            for m_ in range(j + 1, k + 1):
                e = ev_of[m_]
                program.op_dur[m_] = 0.0
                program.ev_kind[e] = EV_WORK
                program.ev_dur[e] = 0.0
                no_fixed_host(program, e)
                program.ev_ops_count[e] = 0
                if program.gap_model is not None:
                    program.gap_other[e] = program.gap_other[e] - program.gap_model[e]
                    program.gap_model[e] = 0.0
                else:
                    program.gap_other[e] = 0.0
        j = k + 1
    return program


def torch_compile(
    model: StepModel, program: Program, c: Constants | None = None, *, input_copies: bool = True
) -> Program:
    """torch.compile(mode="reduce-overhead"): elementwise fusion, then CUDA graph replay."""
    c = c or CONSTANTS
    return cuda_graphs(model, fuse_elementwise(model, program, c), c, input_copies=input_copies)


def fused_optimizer(
    model: StepModel, program: Program, per_tensor: bool, param_tensors: int | None, c: Constants | None = None
) -> Program:
    """The optimizer update as a fused implementation: its host time per step becomes a base cost plus
    a small cost per parameter tensor (never more than now), and its GPU time shrinks by
    `per_tensor_to_fused_gpu` (from a per-tensor update) or, from foreach, the optimizer class's
    `foreach_to_fused_gpu_by_class` (`foreach_to_fused_gpu` for other classes)."""
    c = c or CONSTANTS
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    steps = max(1, program.steps)
    in_opt = program.ev_in_optimizer
    gaps, calls, whole_tail = optimizer_update_events(program)
    tail = program.tail_opt if whole_tail else 0.0
    host_now = (
        float(program.gap_opt[gaps].sum())
        + tail
        + float(program.ev_dur[calls].sum() + program.ev_post[calls].sum())
    )
    if host_now <= 0:
        return program
    tensors = (
        param_tensors
        if param_tensors
        else int(max(1, (in_opt & (program.ev_kind == EV_LAUNCH)).sum() / steps / 10))
    )
    target = steps * (c.fused_optimizer_host_base_us + c.fused_optimizer_host_per_tensor_us * tensors)
    factor = min(1.0, target / host_now)
    program.gap_opt = np.where(gaps, program.gap_opt * factor, program.gap_opt)
    if whole_tail:
        program.tail_opt = program.tail_opt * factor
    program.ev_dur = np.where(calls, program.ev_dur * factor, program.ev_dur)
    program.ev_post = np.where(calls, program.ev_post * factor, program.ev_post)
    gpu_factor = (
        c.per_tensor_to_fused_gpu
        if per_tensor
        else dict(c.foreach_to_fused_gpu_by_class).get(model.optimizer_class or "", c.foreach_to_fused_gpu)
    )
    ops_in_opt = op_column(model, program, "in_optimizer").astype(bool)
    program.op_dur = np.where(ops_in_opt, program.op_dur * gpu_factor, program.op_dur)
    return program


def optimizer_update_events(program: Program) -> tuple[Any, Any, bool]:
    """Where the optimizer's update runs on the host, per optimizer call (a run of consecutive events
    inside an optimizer span): the host work between its first and its last launch and those calls.
    The Python before the first launch (building the parameter lists: the same for a fused update)
    and after the last one (the caller's hooks) stay. A call without launches counts whole.
    Returns (gaps, calls, whole_tail): masks over the events whose preceding host work and whose call
    belong to the update, and whether the optimizer time after the block's last event does (the
    block ends inside an update with no launch seen)."""
    # lazy: numpy stays out of `gpuadvisor rules` and `import gpuadvisor.api`
    import numpy as np

    n = program.n_events
    gaps = np.zeros(n, dtype=bool)
    calls = np.zeros(n, dtype=bool)
    idx = np.flatnonzero(program.ev_in_optimizer)
    if not len(idx):
        return gaps, calls, True
    launch = program.ev_kind == EV_LAUNCH
    cut = np.flatnonzero(np.diff(idx) > 1)
    whole_tail = False
    for a, z in zip(np.r_[idx[0], idx[cut + 1]].tolist(), np.r_[idx[cut], idx[-1]].tolist(), strict=True):
        launches = np.flatnonzero(launch[a : z + 1]) + a
        if not len(launches):
            gaps[a : z + 1] = True
            calls[a : z + 1] = True
            whole_tail |= z == n - 1
            continue
        first, last = int(launches[0]), int(launches[-1])
        gaps[first + 1 : last + 1] = True
        calls[first : last + 1] = True
    return gaps, calls, whole_tail
