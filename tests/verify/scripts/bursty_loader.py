"""Fixture (synthetic): a training loop with a slow start-up whose DataLoader delivers in bursts.

Start-up: a second of model building, then --slow-steps steps that each take --slow-ms more (what
compilation and autotuning cost the first steps). The loader: --workers worker processes that each
take --sample-ms per sample (a sleep standing in for decoding a file); they run in phase, so their
batches arrive together: the loop takes them one after another in --step-ms each, then waits for the
next burst. With the defaults every 4th step waits about 40 ms: the median step is about 6 ms, the
mean about 16 ms (what the user pays). --times FILE writes the host time of every optimizer step
(a plain run's own record, to compare with what verify measures).
"""

import argparse
import json
import time

import torch
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=400)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--workers", type=int, default=4)
p.add_argument("--sample-ms", type=float, default=8.0)
p.add_argument("--step-ms", type=float, default=6.0)
p.add_argument("--slow-steps", type=int, default=10)
p.add_argument("--slow-ms", type=float, default=60.0)
p.add_argument("--times", default=None)
args = p.parse_args()
torch.set_num_threads(1)


class SlowSamples(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        time.sleep(args.sample_ms / 1000.0)
        return torch.ones(4), torch.tensor(1.0)


def main():
    time.sleep(1.0)  # building the model
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    loader = DataLoader(SlowSamples(), batch_size=args.batch, num_workers=args.workers)
    stamps = []
    for step, (x, y) in enumerate(loader):
        if step >= args.steps:
            break
        loss = (model(x).squeeze(1) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        time.sleep((args.step_ms + (args.slow_ms if step < args.slow_steps else 0.0)) / 1000.0)
        opt.step()
        stamps.append(time.perf_counter())
    if args.times:
        with open(args.times, "w") as fh:
            json.dump(stamps, fh)


if __name__ == "__main__":
    main()
