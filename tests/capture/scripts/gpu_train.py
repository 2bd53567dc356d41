"""Fixture (synthetic): small CUDA training loop with a per-step .item() (GPU test)."""

import sys

import torch

dev = "cuda"
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
hist = []
for _step in range(40):
    x = torch.randn(64, 256)
    x = x.to(dev)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    hist.append(loss.item())
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
