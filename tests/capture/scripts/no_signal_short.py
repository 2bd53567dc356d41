"""Fixture (synthetic): tensor work with no optimizer, no nn.Module call and no DataLoader, ending
long before the time fallback."""

import torch

weight = torch.randn(8, 8)
for _ in range(20):
    torch.relu(torch.randn(4, 8) @ weight)
print("done", flush=True)
