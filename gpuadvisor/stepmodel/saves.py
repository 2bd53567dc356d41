"""What saving a checkpoint in the background would still cost the loop (issue 41; GA304's
`async_checkpoint`, docs/model.md "Costs between steps").

A synchronous `torch.save` of GPU state stops the loop for the whole save: the device-to-host copy
(into pageable memory), the pickling and the write. Saved asynchronously (the state copied into pinned
host buffers, `torch.distributed.checkpoint.async_save` or a thread that calls `torch.save` on the
copy), the loop still pays the copy to pinned memory, on the step, and moves the rest off it; the rest
must end before the next save reuses the buffers, or that save waits for it. Priced from what the
capture recorded of each save (`manifest.capture.step_events`: its duration, the file's bytes and, since
issue 41, the bytes of the GPU tensors it held) and the pinned copy rate:

- copy = GPU bytes / pinned rate (the file's bytes when the GPU bytes were not recorded: all of the
  state came from the GPU at most);
- write = the save's recorded time - copy (the synchronous save's own copy went to pageable memory,
  slower than the pinned one: an upper bound on the write);
- wait = max(0, write - the steps until the next save, at the typical step);
- kept on the loop = copy + wait per save.

Not modeled: the background write's use of the CPU and the interpreter lock, which slows a host-bound
loop while it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuadvisor.stepmodel.stepcosts import CHECKPOINT, PeriodicCost
from gpuadvisor.stepmodel.transforms import pinned_gbps

if TYPE_CHECKING:
    from gpuadvisor.stepmodel.model import StepModel

__all__ = ["AsyncSavePrice", "async_save_price", "background_save"]


@dataclass(frozen=True)
class AsyncSavePrice:
    """One save made in the background, against the synchronous save recorded."""

    bytes_copied: int  # bytes copied to pinned memory on the step
    bytes_basis: str  # "gpu_tensors" (recorded) or "file" (the file's size: an upper bound)
    pinned_gbps: float
    pinned_gbps_source: str
    copy_ms: float  # on the step
    write_ms: float  # off the step (upper bound)
    window_ms: float  # the steps until the next save, at the typical step
    wait_ms: float  # the next save's wait for this write

    @property
    def kept_ms(self) -> float:
        """What the loop still pays per save."""
        return self.copy_ms + self.wait_ms

    def to_dict(self) -> dict[str, object]:
        return {
            "bytes_copied": self.bytes_copied,
            "bytes_basis": self.bytes_basis,
            "pinned_gbps": round(self.pinned_gbps, 2),
            "pinned_gbps_source": self.pinned_gbps_source,
            "copy_ms": round(self.copy_ms, 3),
            "write_ms": round(self.write_ms, 3),
            "window_ms": round(self.window_ms, 3),
            "wait_ms": round(self.wait_ms, 3),
            "kept_ms": round(self.kept_ms, 3),
        }


def async_save_price(
    cost: PeriodicCost, typical_step_ms: float, pinned_gbps: float, pinned_source: str
) -> AsyncSavePrice | None:
    """The background save's price for a checkpoint cost with a period; None without the bytes it
    copies (nothing recorded) or a period."""
    d = cost.detail
    gpu = d.get("device_bytes_each")
    file = d.get("bytes_each")
    if isinstance(gpu, int) and gpu > 0:
        nbytes, basis = gpu, "gpu_tensors"
    elif isinstance(file, int) and file > 0:
        nbytes, basis = file, "file"
    else:
        return None
    if cost.period_steps is None or pinned_gbps <= 0 or cost.count == 0:
        return None
    copy = min(cost.each_ms, nbytes / (pinned_gbps * 1e9) * 1e3)
    write = max(0.0, cost.each_ms - copy)
    window = cost.period_steps * max(0.0, typical_step_ms)
    return AsyncSavePrice(
        bytes_copied=nbytes,
        bytes_basis=basis,
        pinned_gbps=pinned_gbps,
        pinned_gbps_source=pinned_source,
        copy_ms=copy,
        write_ms=write,
        window_ms=window,
        wait_ms=max(0.0, write - window),
    )


def background_save(model: StepModel, cost: PeriodicCost) -> AsyncSavePrice | None:
    """The background save's price of a checkpoint cost of `model`'s timed run (the pinned copy rate
    measured on the trace, else by the PCIe link); None for another cost or without what it needs."""
    timing = model.run_timing
    if cost.cause != CHECKPOINT or timing is None:
        return None
    return async_save_price(cost, timing.typical_step_ms, *pinned_gbps(model))


def kept_per_step_ms(model: StepModel, cost: PeriodicCost) -> float:
    """What a background save still costs the loop per step (0 when it cannot be priced: removal)."""
    price = background_save(model, cost)
    if price is None or not cost.period_steps:
        return 0.0
    return price.kept_ms / cost.period_steps
