"""Fixture (synthetic): an evaluation pass (forward calls only) before training with an optimizer."""

import torch
from torch import nn

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with torch.no_grad():
    for _ in range(3):
        model(torch.randn(4, 16))
for _ in range(20):
    loss = model(torch.randn(4, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained", flush=True)
