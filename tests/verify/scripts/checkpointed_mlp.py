"""A tiny MLP whose blocks run under torch.utils.checkpoint (imported by name, as most scripts do), and a
loop that calls torch.cuda.empty_cache() every step. --dump PATH writes, at the end, how many times the
blocks' forward ran per step (2 when the backward recomputes them, 1 when not) and how many times the
script called empty_cache, after step 3 (a verify trial stops the script once it has timed its steps)."""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

CALLS = {"block_forward": 0, "empty_cache": 0}


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALLS["block_forward"] += 1
        return torch.relu(self.fc(x)) + x


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--dump", default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    blocks = nn.ModuleList([Block(16) for _ in range(3)])
    opt = torch.optim.SGD(blocks.parameters(), lr=0.01)
    x = torch.randn(8, 16)
    for step in range(args.steps):
        h = x
        for b in blocks:
            h = checkpoint(b, h, use_reentrant=False)
        loss = h.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.empty_cache()
        CALLS["empty_cache"] += 1
        if args.dump and step == 2:
            per_step = CALLS["block_forward"] / (3 * len(blocks))
            with open(args.dump, "w") as f:
                json.dump({"forwards_per_block_per_step": per_step, "empty_cache_calls": CALLS["empty_cache"]}, f)


if __name__ == "__main__":
    main()
