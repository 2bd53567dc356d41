"""Test fixture helper (synthetic): the training loop the verify fixtures share. A DataLoader of
constant samples that each cost `sample_ms` (a sleep: reading and decoding a file), a linear model,
SGD, and `step_ms` of sleep per step (the device's share of a step); the first `slow_steps` steps take
`slow_ms` more (compilation, autotuning). Returns the host time of every optimizer step."""

import contextlib
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __init__(self, sample_ms):
        self.sample_ms = sample_ms

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        time.sleep(self.sample_ms / 1000.0)
        return torch.ones(8), torch.tensor(1.0)


def train(batch_size, num_workers, steps, sample_ms, step_ms, bf16=False, slow_steps=0, slow_ms=0.0):
    torch.set_num_threads(1)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    loader = DataLoader(Samples(sample_ms), batch_size=batch_size, num_workers=num_workers)
    stamps = []
    for step, (x, y) in enumerate(loader):
        if step >= steps:
            break
        with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            out = model(x).squeeze(1)
        loss = (out.float() - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        time.sleep((step_ms + (slow_ms if step < slow_steps else 0.0)) / 1000.0)
        opt.step()
        stamps.append(time.perf_counter())
    return stamps
