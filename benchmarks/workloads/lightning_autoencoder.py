"""Planted problems: small_batch (fix `larger_batch`) and fp32_math (fix `bf16_mixed`). An MLP, Lightning.

The autoencoder of PyTorch Lightning's README, written as the README shows it: a LightningModule with
an encoder (784 -> 128 -> 3) and a decoder (3 -> 128 -> 784), `self.log("train_loss", loss)`, Adam
(lr 1e-3) from `configure_optimizers`, trained by `L.Trainer().fit(autoencoder, data.DataLoader(train))`
(the DataLoader's default batch size: 1). The README's MNIST is replaced by a synthetic in-memory set of
28x28 images in [0, 1] (no download). The Trainer is built with `max_steps=--steps, accelerator="auto",
logger=False, enable_checkpointing=False, enable_progress_bar=False` (no files, no console noise) and
its default precision (32-true). Needs the `lightning` package (benchmarks/requirements-frameworks.txt).
The BENCH line comes from a Callback (`on_train_batch_end`).

Why it is slow on an H200: one image per step. Each step is a few dozen microsecond kernels for a
200k-parameter model, wrapped in ~1-2 ms of Lightning loop, hooks, logging and optimizer-closure work
on the host: the GPU is idle nearly all the time and samples/s equals steps/s.

--fix larger_batch: `data.DataLoader(train, batch_size=256)` (Adam's learning rate is left as is):
the same per-step host work carries 256 images.
--fix bf16_mixed: `Trainer(precision="bf16-mixed")`. At batch 1 this is a fix for the wrong problem
(the math is a negligible part of the step; autocast adds host work): measured to calibrate advice
that would recommend it.
--fixed: both.
--fused-adam (a probe, not a fix): `torch.optim.Adam(..., fused=True)` in `configure_optimizers`, to
measure what GA502's advice gains here (Lightning steps the optimizer with a closure that runs the
training step and the backward inside `optimizer.step`: only the update after it is the optimizer's).
"""

from __future__ import annotations

import argparse
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
import torch.utils.data as data
from _common import StepBench, add_workload_args, chosen_fixes, pick_device, variant_name
from torch import nn


class LitAutoEncoder(L.LightningModule):
    def __init__(self, fused_adam: bool = False) -> None:
        super().__init__()
        self.fused_adam = fused_adam
        self.encoder = nn.Sequential(nn.Linear(28 * 28, 128), nn.ReLU(), nn.Linear(128, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 128), nn.ReLU(), nn.Linear(128, 28 * 28))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in lightning, forward defines the prediction/inference actions
        embedding = self.encoder(x)
        return embedding

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        # training_step defines the train loop. It is independent of forward
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        loss = F.mse_loss(x_hat, x)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3, fused=True if self.fused_adam else None)
        return optimizer


class BenchCallback(L.Callback):
    """Times the training steps (the workload's BENCH line)."""

    def __init__(self, bench: StepBench) -> None:
        self.bench = bench

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self.bench.step()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.bench.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_workload_args(parser, fixes=["larger_batch", "bf16_mixed"], steps=3000)
    parser.add_argument("--fused-adam", action="store_true", help="probe: Adam(fused=True)")
    args = parser.parse_args()
    fixes = chosen_fixes(args)
    torch.manual_seed(0)

    # Synthetic stand-in for `tv.datasets.MNIST(".", download=True, transform=tv.transforms.ToTensor())`.
    n = 2_000 if args.tiny else 60_000
    images = torch.rand(n, 1, 28, 28)
    labels = torch.randint(0, 10, (n,))
    dataset = data.TensorDataset(images, labels)
    train, _val = data.random_split(dataset, [n - n // 12, n // 12])

    batch_size = args.batch_size or ((32 if args.tiny else 256) if "larger_batch" in fixes else 1)
    device = pick_device(args.tiny)
    bench = StepBench("lightning_autoencoder", variant_name(args), device, batch_size, args.steps)

    autoencoder = LitAutoEncoder(fused_adam=args.fused_adam and device.type == "cuda")
    trainer = L.Trainer(
        max_steps=args.steps,
        accelerator="cpu" if args.tiny else "auto",
        devices=1,
        precision="bf16-mixed" if "bf16_mixed" in fixes else "32-true",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[BenchCallback(bench)],
    )
    # As in the README, a DataLoader with its defaults (batch_size=1) unless the batch is fixed;
    # epochs repeat until max_steps.
    loader = data.DataLoader(train, batch_size=batch_size) if batch_size > 1 else data.DataLoader(train)
    trainer.fit(autoencoder, loader)
    bench.finish()


if __name__ == "__main__":
    main()
