"""Fixture: a plain loop under Hugging Face accelerate, as its README shows it (CPU)."""

import torch
from accelerate import Accelerator

accelerator = Accelerator(cpu=True, gradient_accumulation_steps=1)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, optimizer = accelerator.prepare(model, optimizer)
for _ in range(12):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
print("trained", flush=True)
