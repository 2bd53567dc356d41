"""SYNTHETIC fixture: a script with its own SIGINT handler that counts its calls.

--log P        append one line to P per call of the handler
--ready-file P create P once the handler is installed and the loop runs
Runs a loop of short sleeps; the first SIGINT starts a 1.5 s grace (a second copy of the same Ctrl-C
would be counted in it), then the script ends normally (exit 0).
"""

import argparse
import signal
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--log", required=True)
p.add_argument("--ready-file", default=None)
args = p.parse_args()
state = {"first": None}


def on_sigint(signum, frame):
    with open(args.log, "a") as fh:
        fh.write(f"SIGINT {time.monotonic():.3f}\n")
    if state["first"] is None:
        state["first"] = time.monotonic()


signal.signal(signal.SIGINT, on_sigint)
if args.ready_file:
    open(args.ready_file, "w").close()
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.02)
    if state["first"] is not None and time.monotonic() - state["first"] > 1.5:
        break
print("handled", flush=True)
sys.exit(0)
