"""Fixture (synthetic): a 'library' that builds the DataLoader for the script (as HF Trainer,
Lightning and timm's create_loader do), so the DataLoader levers must reach a constructor call that is
not in the user's script."""

import torch
from torch.utils.data import DataLoader, TensorDataset


def make_loader(workers: int) -> DataLoader:
    data = TensorDataset(torch.ones(256, 4), torch.ones(256))
    return DataLoader(data, batch_size=8, num_workers=workers)
