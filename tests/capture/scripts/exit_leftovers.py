"""Leaves work for python's shutdown: an unclosed buffered file, an unclosed gzip file, an atexit
handler and a non-daemon thread that writes after the main script has ended; then exits with a status.

    python exit_leftovers.py OUTDIR STATUS
"""

import atexit
import gzip
import sys
import threading
import time
from pathlib import Path

import torch

out = Path(sys.argv[1])
status = int(sys.argv[2])
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(8):
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()

log = open(out / "unclosed.txt", "w")  # noqa: SIM115 - left open on purpose
log.write("buffered line\n")
gz = gzip.open(out / "unclosed.txt.gz", "wt")  # noqa: SIM115
gz.write("gzip line\n")
atexit.register(lambda: (out / "atexit.txt").write_text("atexit ran\n"))


def late_writer() -> None:
    time.sleep(0.5)
    (out / "thread.txt").write_text("thread finished\n")


threading.Thread(target=late_writer, daemon=False).start()
sys.exit(status)
