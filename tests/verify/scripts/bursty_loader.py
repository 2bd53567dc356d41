"""Fixture (synthetic): a training loop with a slow start-up whose DataLoader delivers in bursts.

Start-up: a second of model building, then --slow-steps steps that each take --slow-ms more (what
compilation and autotuning cost the first steps). The loader: --workers worker processes that each
take --sample-ms per sample (a sleep standing in for decoding a file); they run in phase, so their
batches arrive together: the loop takes them one after another in --step-ms each, then waits for the
next burst. With the defaults every 4th step waits about 40 ms: the median step is about 6 ms, the
mean about 16 ms (what the user pays). --times FILE writes the host time of every optimizer step
(a plain run's own record, to compare with what verify measures). The loop is sleepy_loop.py's.
"""

import argparse
import json
import time

from sleepy_loop import train

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

if __name__ == "__main__":
    time.sleep(1.0)  # building the model
    stamps = train(args.batch, args.workers, args.steps, args.sample_ms, args.step_ms,
                   slow_steps=args.slow_steps, slow_ms=args.slow_ms)  # fmt: skip
    if args.times:
        with open(args.times, "w") as fh:
            json.dump(stamps, fh)
