"""SYNTHETIC fixture: inference over a DataLoader, no optimizer."""

import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(128, 8)), batch_size=4)
model = torch.nn.Linear(8, 2).eval()
with torch.no_grad():
    n = sum(int(model(x).argmax(1).numel()) for (x,) in loader)
print("predicted", n, flush=True)
