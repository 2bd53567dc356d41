"""SYNTHETIC fixture: a tiny CPU training loop with the knobs the reliability cases need.

--steps N          optimizer steps (default 30)
--fail-at K        raise ValueError at step K (steps count from 0, like torch's ProfilerStep#)
--exit CODE        end with sys.exit(CODE): an integer, a message, or "none" for sys.exit()
--sleep S          seconds to sleep after each step
--ready-file P     create P after step 6 (tests wait for it before sending signals)
--started-file P   create P before anything else (tests check that the script never started)
--on-sigterm P     on SIGTERM, create P and call sys.exit(0) (a script that catches SIGTERM)
--note TEXT        ignored (any text on the command line)
--ops N            N extra small tensor ops a step (a big trace: a slow export)
"""

import argparse
import signal
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--fail-at", type=int, default=-1)
p.add_argument("--exit", dest="exit_code", default=None)
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--ready-file", default=None)
p.add_argument("--started-file", default=None)
p.add_argument("--on-sigterm", default=None)
p.add_argument("--note", default=None)
p.add_argument("--ops", type=int, default=0)
args = p.parse_args()
if args.started_file:
    open(args.started_file, "w").close()
if args.on_sigterm:

    def caught(signum, frame):
        open(args.on_sigterm, "w").close()
        sys.exit(0)

    signal.signal(signal.SIGTERM, caught)

import torch  # noqa: E402

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def train_step(step):
    if step == args.fail_at:
        raise ValueError(f"planted failure at step {step}")
    x = torch.randn(16, 32)
    for _ in range(args.ops):
        x = x + 0.0
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


for step in range(args.steps):
    train_step(step)
    if args.ready_file and step == 6:
        open(args.ready_file, "w").close()
    if args.sleep:
        time.sleep(args.sleep)
if args.exit_code is not None:
    code = args.exit_code
    sys.exit(None if code == "none" else int(code) if code.isdigit() else code)
print("finished", args.steps, flush=True)
