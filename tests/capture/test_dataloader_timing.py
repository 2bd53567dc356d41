"""The capture times a worker DataLoader's `__next__` and records whether the workers already had the
batch ready (environment.json `dataloaders[]`: batches_ready / batches_waited, next_ready_s /
next_waited_s), which tells the step model how much of the wait is the hand-off of a ready batch
(gpuadvisor.stepmodel.build.data_handoff_fraction). Real `gpuadvisor profile` runs on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.capture.capture_helpers import SCRIPTS, run_profile_cli


def _loader(tmp_path: Path, seconds: str) -> dict[str, object]:
    out = tmp_path / f"run-{seconds}"
    args = ["--skip-steps", "4", "--warmup-steps", "1", "--active-steps", "3", "--no-analyze"]
    r = run_profile_cli("-o", str(out), "-q", *args, str(SCRIPTS / "dl_pace.py"), seconds, timeout=240)
    assert r.returncode == 0, r.stderr
    loaders = json.loads((out / "environment.json").read_text())["dataloaders"]
    assert len(loaders) == 1
    rec: dict[str, object] = loaders[0]
    return rec


@pytest.mark.slow
def test_ready_and_waited_batches_are_told_apart(tmp_path: Path) -> None:
    from gpuadvisor.stepmodel.build import MIN_TIMED_BATCHES

    fast = _loader(tmp_path, "0")
    slow = _loader(tmp_path, "0.02")
    for rec in (fast, slow):
        timed = int(rec["batches_ready"]) + int(rec["batches_waited"])  # type: ignore[call-overload]
        # every batch but each epoch's first (which also waits for the workers to start) is timed
        assert int(rec["iterations"]) - 1 >= timed >= MIN_TIMED_BATCHES  # type: ignore[call-overload]
        # the calls made without the profiler (before the window: skip 4 steps, the epoch's first not
        # timed; after it: the steps observed until --observe-steps) are also counted apart; the rest
        # are the window's (1 warm-up + 3 recorded steps, and the step that carries the stop)
        outside = int(rec["batches_ready_unprofiled"]) + int(rec["batches_waited_unprofiled"])  # type: ignore[call-overload]
        assert 1 <= outside < timed and 1 <= timed - outside <= 5, (outside, timed)
    # fast workers: the loop waits until the next batch is delivered (dl_pace.py), so it is ready
    assert int(fast["batches_ready"]) > 2 * int(fast["batches_waited"])  # type: ignore[call-overload]
    assert float(fast["next_ready_s"]) > 0  # type: ignore[arg-type]
    # slow workers (40 ms per batch against a 5 ms loop): past the two prefetched batches, the loop waits
    assert int(slow["batches_waited"]) > int(slow["batches_ready"])  # type: ignore[call-overload]
    waited_each = float(slow["next_waited_s"]) / int(slow["batches_waited"])  # type: ignore[arg-type,call-overload]
    assert waited_each > 0.01


def test_single_process_loader_is_not_timed() -> None:
    from torch.utils.data import DataLoader

    from gpuadvisor.capture.hooks import batch_ready

    it = iter(DataLoader(list(range(8)), batch_size=2))
    next(it)
    assert batch_ready(it) is None
