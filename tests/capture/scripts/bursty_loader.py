"""Fixture (synthetic): a training loop fed by a DataLoader whose workers deliver in bursts.

Each of `--workers` worker processes takes `--batch-ms` to make a batch (a sleep standing in for JPEG
decoding), and they all start together, so batches arrive num_workers at a time; the loop's own step
takes `--step-ms` (a sleep standing in for the GPU's work) plus a tiny model's forward, backward and
optimizer step. When num_workers x step-ms < batch-ms, every num_workers-th step waits: the median step
shows no wait, the mean does (timm's ResNet-50 with 4 workers on a 16-CPU host). The script prints its
own mean step over the steps after `--warmup` as `mean_step_ms=...`.
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--workers", type=int, default=4)
p.add_argument("--batch-ms", type=float, default=240.0)
p.add_argument("--step-ms", type=float, default=40.0)
p.add_argument("--steps", type=int, default=200)
p.add_argument("--warmup", type=int, default=20)
args = p.parse_args()
torch.set_num_threads(1)


class Slow(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        time.sleep(args.batch_ms / 1e3 / 8)
        return torch.randn(16), torch.randn(1)


model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
loader = DataLoader(Slow(), batch_size=8, num_workers=args.workers)
ends = []
for step, (x, y) in enumerate(loader):
    time.sleep(args.step_ms / 1e3)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    ends.append(time.perf_counter())
    if step + 1 >= args.steps:
        break
steady = [b - a for a, b in zip(ends[args.warmup :], ends[args.warmup + 1 :], strict=False)]
print(f"mean_step_ms={1e3 * sum(steady) / len(steady):.3f}", flush=True)
