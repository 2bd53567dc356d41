"""SYNTHETIC multi-rank DDP training traces (built with tests/synth.py; labelled synthetic).

`ddp_run(...)` lays out one shared timeline for every rank, the way a data-parallel step really
behaves: each rank waits for its batch, computes forward+backward, joins the all-reduce (NCCL kernels on
their own stream), and the all-reduce ends on every rank when the LAST rank has joined plus the
transfer time. So a rank that is late (more data wait, more compute) makes the others' NCCL kernels
longer: exactly what a straggler looks like in real traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.synth import (
    K_NVJET_BF16,
    SyntheticTrace,
    add_collective,
    add_ddp_forward,
    rank_traces,
    write_ranks,
)


@dataclass(frozen=True)
class RankLoad:
    data_wait_us: float = 100.0
    compute_us: float = 8000.0


def ddp_run(
    loads: Sequence[RankLoad],
    *,
    steps: int = 6,
    transfer_us: float = 400.0,
    overlap: float = 0.9,
    calls: int = 4,
    nelems: int = 6_000_000,
    micro_batches: int = 1,
    no_sync: bool = True,
    with_kernels: bool = True,
) -> list[SyntheticTrace]:
    """Traces of `len(loads)` ranks. `overlap`: share of the all-reduce transfer that runs while the
    backward still computes (0 = all-reduce after backward). `calls` collectives per sync of `nelems`
    floats each. `micro_batches` > 1: gradient accumulation; with `no_sync=False` every micro-batch
    all-reduces (else only the last)."""
    traces = rank_traces(len(loads))
    t = 0.0
    for n in range(1, steps + 1):
        step_start = t
        cursor = [t] * len(loads)
        for mb in range(micro_batches):
            sync = (mb == micro_batches - 1) or not no_sync
            # when each rank has finished the compute that must precede the collective
            ready = []
            for r, load in enumerate(loads):
                st = traces[r]
                c = cursor[r]
                st.add_dataloader_wait(c, load.data_wait_us)
                c += load.data_wait_us
                add_ddp_forward(st, c, load.compute_us * 0.3)
                if with_kernels:
                    st.add_kernel(K_NVJET_BF16, ts=c + 20, dur=load.compute_us, op="aten::mm")
                cend = c + 20 + load.compute_us
                ready.append(cend - (overlap * transfer_us if sync else 0.0))
                cursor[r] = cend
            if sync:
                join = max(ready)
                done = join + transfer_us
                for r, st in enumerate(traces):
                    span = done - ready[r]
                    each = span / calls
                    for i in range(calls):
                        add_collective(
                            st,
                            ready[r] + i * each - 30.0 if i == 0 else ready[r] + i * each - 10.0,
                            nelems=nelems,
                            kernel_ts=ready[r] + i * each,
                            kernel_dur=each if with_kernels else None,
                        )
                    cursor[r] = max(cursor[r], done)
        for r, st in enumerate(traces):
            st.add_optimizer_step(cursor[r], 60.0)
            if with_kernels:
                st.add_kernel("void at::native::multi_tensor_apply_kernel<Adam>", ts=cursor[r] + 5, dur=50.0)
            cursor[r] += 60.0
        end = max(cursor)
        for st in traces:
            st.add_step(n, step_start, end - step_start, gpu_dur=end - step_start)
        t = end
    return traces


def write(folder: Path, traces: Sequence[SyntheticTrace]) -> Path:
    return write_ranks(folder, traces)
