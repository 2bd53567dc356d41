"""Fixture (synthetic): inference over a DataLoader, never calls optimizer.step()."""

import torch
from torch.utils.data import DataLoader, TensorDataset

ds = TensorDataset(torch.randn(256, 8))
loader = DataLoader(ds, batch_size=8)
model = torch.nn.Linear(8, 2)
with torch.no_grad():
    for (x,) in loader:
        model(x)
print("inference done")
