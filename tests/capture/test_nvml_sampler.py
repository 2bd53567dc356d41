"""The parent's NVML sampler against a FAKE NVML module (written here: it only counts calls and returns
fixed readings): full-rate sampling during the window, relaxed after it."""

from __future__ import annotations

import csv
import gzip
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gpuadvisor.capture.nvml import RELAXED_INTERVAL_S, NvmlSampler
from gpuadvisor.capture.runner import _WindowWatch
from gpuadvisor.manifest import CaptureState, CaptureWindow, ChildState, Manifest, NvmlInfo


class FakeNvml:
    """FAKE pynvml: one GPU, constant readings, call counts."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1

    def __init__(self) -> None:
        self.pcie_calls = 0
        self.rows: list[bool] = []  # per sampled row: whether it queried the PCIe throughput
        self.rows_done = 0
        self._done = threading.Condition()

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:  # the first reading of a row
        self.rows.append(False)
        return SimpleNamespace(gpu=50, memory=10)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:  # the last reading of a row
        with self._done:
            self.rows_done += 1
            self._done.notify_all()
        return 7

    def wait_rows(self, n: int) -> None:
        """Until `n` rows are complete: an event of the sampler's thread, not a sleep of the test."""
        with self._done:
            assert self._done.wait_for(lambda: self.rows_done >= n, timeout=30), (self.rows_done, n)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvmlDevice"):
            return lambda *a: 7
        raise AttributeError(name)

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str:
        return "999.0-fake"

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return "h0"

    def nvmlDeviceGetMigMode(self, h: str) -> tuple[int, int]:
        return 0, 0

    def nvmlDeviceGetUUID(self, h: str) -> str:
        return "GPU-fake"

    def nvmlDeviceGetName(self, h: str) -> str:
        return "Fake GPU"

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        return SimpleNamespace(used=1, total=2)

    def nvmlDeviceGetPcieThroughput(self, h: str, kind: int) -> int:
        self.pcie_calls += 1
        self.rows[-1] = True
        return 1000


def test_sampler_relaxes_after_the_window(tmp_path: Path) -> None:
    """Driven by the sampler's own rows (FakeNvml.wait_rows), not by sleeps: it slept 0.75 s and counted
    on rows arriving in time, which 2 loaded cores do not promise (issue 30: the quick tier deterministic)."""
    fake = FakeNvml()
    sampler = NvmlSampler(tmp_path, 0.01, nvml_module=fake)
    sampler.start(None)
    assert sampler.available
    fake.wait_rows(5)
    assert all(fake.rows[:5])  # in the window: every row with the PCIe throughput
    sampler.relax(0.05)  # RELAXED_INTERVAL_S (1 s) by default, below; shorter here to keep the test short
    done = fake.rows_done  # rows [0, done) came before relax(); row `done` may be in flight
    fake.wait_rows(done + 2)  # the next row starts after relax()
    assert fake.rows[done + 1] is False  # no PCIe throughput query once relaxed
    assert fake.pcie_calls == 2 * sum(fake.rows)  # TX and RX, on the rows that queried them only
    sampler.stop()
    info = sampler.info()
    assert info.interval_s == 0.01 and info.interval_after_window_s == 0.05
    unstarted = NvmlSampler(tmp_path / "other", 0.01, nvml_module=FakeNvml())
    unstarted.relax()
    assert unstarted.info().interval_after_window_s == RELAXED_INTERVAL_S
    assert NvmlInfo.from_json(info.to_json()) == info
    with gzip.open(tmp_path / "nvml.csv.gz", "rt") as fh:
        rows = list(csv.DictReader(fh))
    assert rows[0]["pcie_rx_kbps"] == "1000" and rows[-1]["pcie_rx_kbps"] == ""


def test_window_watch_reads_the_child_state(tmp_path: Path) -> None:
    path = tmp_path / ".child_state.json"
    watch = _WindowWatch(path)
    assert not watch.window_complete()  # no file yet
    path.write_text(json.dumps(ChildState(capture=CaptureWindow(state=CaptureState.NOT_REACHED)).to_json()))
    assert not watch.window_complete()
    time.sleep(0.01)
    path.write_text(json.dumps(ChildState(capture=CaptureWindow(state=CaptureState.COMPLETE)).to_json()))
    import os

    os.utime(path, (time.time() + 5, time.time() + 5))  # a distinct mtime even on coarse clocks
    assert watch.window_complete()
    assert Manifest.from_json({"nvml": {"interval_after_window_s": 1.0}}).nvml.interval_after_window_s == 1.0
