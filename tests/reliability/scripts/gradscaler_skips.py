"""SYNTHETIC fixture: a GradScaler that skips every optimizer step (the gradients overflow every
time), so torch's optimizer.step() never runs."""

import torch

model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
skipped = 0
for _ in range(30):
    loss = model(torch.randn(8, 16)).sum() * float("inf")
    opt.zero_grad()
    scaler.scale(loss).backward()
    before = scaler.get_scale()
    scaler.step(opt)
    scaler.update()
    skipped += scaler.get_scale() < before
print("skipped", skipped, flush=True)
