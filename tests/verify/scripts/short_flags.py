"""Fixture (synthetic): a training loop whose batch size and DataLoader workers come from its own
short options `-b` and `-j` only (no long form; torchvision's and timm's scripts spell them so); the
loop is sleepy_loop.py's (sleeps stand in for decoding and for the device's share of a step)."""

import argparse

from sleepy_loop import train

p = argparse.ArgumentParser()
p.add_argument("-b", type=int, default=4, help="batch size")
p.add_argument("-j", type=int, default=0, help="DataLoader workers")
p.add_argument("--steps", type=int, default=400)
p.add_argument("--sample-ms", type=float, default=2.0)
p.add_argument("--step-ms", type=float, default=4.0)
args = p.parse_args()

if __name__ == "__main__":
    train(args.b, args.j, args.steps, args.sample_ms, args.step_ms)
