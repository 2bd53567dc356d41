"""Fixture (synthetic): inference over a DataLoader with a functional model (no nn.Module, no
optimizer): steps come from the DataLoader."""

import torch
from torch.utils.data import DataLoader, TensorDataset

ds = TensorDataset(torch.randn(256, 8))
loader = DataLoader(ds, batch_size=8)
weight = torch.randn(8, 2)
with torch.no_grad():
    for (x,) in loader:
        torch.relu(x @ weight)
print("inference done")
