"""Fixture (synthetic): a training loop whose batch size and DataLoader workers come from its own
short options `-b` and `-j` only (no long form; torchvision's and timm's scripts spell them so). A
sleep per sample stands in for decoding a file, one per step for the device's share of the step."""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("-b", type=int, default=4, help="batch size")
p.add_argument("-j", type=int, default=0, help="DataLoader workers")
p.add_argument("--steps", type=int, default=400)
p.add_argument("--sample-ms", type=float, default=2.0)
p.add_argument("--step-ms", type=float, default=4.0)
args = p.parse_args()


class Samples(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(args.sample_ms / 1000.0)
        return torch.ones(8), torch.tensor(1.0)


def main():
    torch.set_num_threads(1)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Samples(), batch_size=args.b, num_workers=args.j)
    for step, (x, y) in enumerate(loader):
        if step >= args.steps:
            break
        loss = (model(x).squeeze(1) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        time.sleep(args.step_ms / 1000.0)
        opt.step()


if __name__ == "__main__":
    main()
