"""Fixture (synthetic): a training loop configured by Hugging Face's HfArgumentParser over a dataclass
with TrainingArguments' own names (`--bf16`, `--per_device_train_batch_size`,
`--dataloader_num_workers`). It imports transformers' HfArgumentParser where transformers is
installed, else the stand-in next to it (hf_standin.py: the same API and options). A sleep per sample
stands in for decoding, one per step for the device's share; --bf16 runs the model under CPU autocast.
"""

import contextlib
import os
import sys
import time
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset

try:
    from transformers import HfArgumentParser
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hf_standin import HfArgumentParser


@dataclass
class Args:
    per_device_train_batch_size: int = 4
    dataloader_num_workers: int = 0
    bf16: bool = False
    steps: int = 400
    sample_ms: float = 2.0
    step_ms: float = 4.0


(args,) = HfArgumentParser(Args).parse_args_into_dataclasses()


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
    loader = DataLoader(Samples(), batch_size=args.per_device_train_batch_size, num_workers=args.dataloader_num_workers)
    for step, (x, y) in enumerate(loader):
        if step >= args.steps:
            break
        with torch.autocast("cpu", dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext():
            out = model(x).squeeze(1)
        loss = (out.float() - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        time.sleep(args.step_ms / 1000.0)
        opt.step()


if __name__ == "__main__":
    main()
