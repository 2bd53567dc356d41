"""Fixture (synthetic): a DataLoader with 2 workers whose samples take `sys.argv[1]` seconds each to
make, feeding a loop that spends 5 ms per step: with 0 the loop also waits, before each `next`, until a
worker has delivered the next batch (so "ready" does not depend on how loaded the machine is: on 2 busy
cores a worker process was once not scheduled within the 5 ms); with 0.02 (4 samples: 80 ms a batch,
40 ms per batch from two workers) the loop waits for them (past the two batches prefetched while the
first is awaited)."""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __len__(self) -> int:
        return 400

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.seconds:
            time.sleep(self.seconds)
        return torch.full((8,), float(i))


def wait_until_delivered(it: object, timeout_s: float = 20.0) -> None:
    """Until the worker iterator holds the next batch (what gpuadvisor.capture.hooks.batch_ready reads:
    the out-of-order cache or the result queue), or the epoch has no batch left."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rcvd, info, queue = it._rcvd_idx, it._task_info, it._data_queue  # type: ignore[attr-defined]
        if rcvd == 0 or rcvd >= it._send_idx:  # type: ignore[attr-defined]
            return  # the epoch's first batch (not timed) or nothing left to wait for
        entry = info.get(rcvd)
        if (isinstance(entry, tuple) and len(entry) == 2) or not queue.empty():
            return
        time.sleep(0.001)


def main() -> None:
    loader = DataLoader(Slow(float(sys.argv[1])), batch_size=4, num_workers=2, prefetch_factor=1)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    it = iter(loader)
    while True:
        if not float(sys.argv[1]):
            wait_until_delivered(it)
        try:
            x = next(it)
        except StopIteration:
            break
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.005)


if __name__ == "__main__":
    main()
