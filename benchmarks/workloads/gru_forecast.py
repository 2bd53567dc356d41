"""Planted problem: host_device_transfer, two remedies (`float32_inputs`, `prefetch_copies`). A GRU forecaster.

A multivariate time-series forecaster: a 1-layer GRU of 256 (cuDNN) over 168-step windows (a week of
hourly data) of 256 features, predicting the next 24 steps of 8 targets; batch 256, AdamW, TF32 on.
The windows come from a numpy/pandas pipeline and stay what numpy made them: float64 arrays in
ordinary (pageable) host memory, each batch turned into a tensor with `torch.from_numpy` and moved
with a blocking `.to(device)`, then cast with `.float()` on the GPU. (A few ready batches are built
once and cycled, so that the measurement is the copy and not the pipeline.)

Why it is slow on an H200: a batch is 256 x 168 x 256 float64 = 88 MB; a pageable copy runs at
~10-12 GB/s through a staging buffer and blocks the host: ~7-9 ms per step with the GPU idle, against
~3-5 ms of GRU forward and backward.

--fix float32_inputs: the arrays are converted to float32 once on the host (half the bytes, ~4 ms);
the model is unchanged (it trains in float32 either way).
--fix prefetch_copies: the batches are page-locked (`pin_memory()`) and copied with non_blocking=True
on a side CUDA stream one step ahead (~2 ms at ~50 GB/s, overlapped with this step's compute).
--fixed: both.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name

HORIZON, TARGETS = 24, 8


class GRUForecaster(nn.Module):
    def __init__(self, features: int, hidden: int) -> None:
        super().__init__()
        self.gru = nn.GRU(features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, HORIZON * TARGETS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.gru(x)
        return self.head(h[-1]).view(-1, HORIZON, TARGETS)


def make_batches(n: int, batch: int, window: int, features: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Windows of a synthetic multivariate series (float64, as numpy produces them) and their targets."""
    rng = np.random.default_rng(0)
    t = np.arange(window + HORIZON)[None, :, None]
    out = []
    for _ in range(n):
        phase = rng.uniform(0, 2 * np.pi, size=(batch, 1, features))
        series = np.sin(2 * np.pi * t / 24.0 + phase) + 0.1 * rng.standard_normal((batch, window + HORIZON, features))
        out.append((np.ascontiguousarray(series[:, :window]), series[:, window:, :TARGETS].copy()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["float32_inputs", "prefetch_copies"], steps=1500)
    args = parser.parse_args()
    fixes = chosen_fixes(args)

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = pick_device(args.tiny)
    batch = args.batch_size or (4 if args.tiny else 256)
    window, features, hidden = (24, 16, 16) if args.tiny else (168, 256, 256)

    batches = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in make_batches(2, batch, window, features)]
    if "float32_inputs" in fixes:
        batches = [(x.float(), y.float()) for x, y in batches]
    pin = "prefetch_copies" in fixes and device.type == "cuda"
    if pin:
        batches = [(x.pin_memory(), y.pin_memory()) for x, y in batches]
    copy_stream = torch.cuda.Stream() if pin else None

    def fetch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batches[i % len(batches)]
        if copy_stream is None:
            return x.to(device), y.to(device)
        with torch.cuda.stream(copy_stream):
            return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    model = GRUForecaster(features, hidden).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    upcoming = fetch(0) if copy_stream is not None else None
    bench = StepBench("gru_forecast", variant_name(args), device, batch, args.steps)
    for step in range(args.steps):
        if copy_stream is not None and upcoming is not None:
            torch.cuda.current_stream().wait_stream(copy_stream)
            x, y = upcoming
            x.record_stream(torch.cuda.current_stream())
            y.record_stream(torch.cuda.current_stream())
            upcoming = fetch(step + 1)  # the next batch's copy overlaps this step's compute
        else:
            x, y = fetch(step)
        pred = model(x.float())
        loss = F.mse_loss(pred, y.float())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bench.step()
    bench.finish()


if __name__ == "__main__":
    main()
