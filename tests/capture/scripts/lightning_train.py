"""Fixture: a Lightning autoencoder written as Lightning's README shows it, on the CPU. Runs against
the real `lightning` or the fake one the tests write."""

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitAutoEncoder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(28 * 28, 64), nn.ReLU(), nn.Linear(64, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 28 * 28))

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        x_hat = self(x)
        return nn.functional.mse_loss(x_hat, x)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


data = DataLoader(TensorDataset(torch.randn(256, 28 * 28)), batch_size=8)
trainer = L.Trainer(
    max_steps=12,
    accelerator="cpu",
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    accumulate_grad_batches=1,
)
trainer.fit(LitAutoEncoder(), data)
print("trained", flush=True)
