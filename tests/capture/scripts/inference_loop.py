"""Fixture (synthetic): the batch-inference loop of issue 17 on the CPU.

A small convnet under `torch.inference_mode()`, batch 8, each batch's predictions copied back with
`.cpu()` and a confidence read with `.item()`; no optimizer, no DataLoader."""

import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--batches", type=int, default=50)
p.add_argument("--device", default="cpu")
args = p.parse_args()

model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(128, 10)
).eval().to(args.device)
criterion = nn.CrossEntropyLoss()  # a parameter-free module called at top level: not the model
images = torch.randn(args.batches, 8, 3, 16, 16, device=args.device)
labels = torch.randint(0, 10, (args.batches, 8), device=args.device)
predictions = []
with torch.inference_mode():
    for i in range(args.batches):
        logits = model(images[i])
        loss = criterion(logits, labels[i])
        predictions.append(logits.argmax(1).cpu())
        confidence = logits.softmax(1).max().item()
print("batches", len(predictions), flush=True)
