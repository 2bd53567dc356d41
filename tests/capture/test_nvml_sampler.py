"""The parent's NVML sampler against a FAKE NVML module (written here: it only counts calls and returns
fixed readings): full-rate sampling during the window, relaxed after it."""

from __future__ import annotations

import csv
import gzip
import json
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

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        return SimpleNamespace(gpu=50, memory=10)

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        return SimpleNamespace(used=1, total=2)

    def nvmlDeviceGetPcieThroughput(self, h: str, kind: int) -> int:
        self.pcie_calls += 1
        return 1000


def test_sampler_relaxes_after_the_window(tmp_path: Path) -> None:
    fake = FakeNvml()
    sampler = NvmlSampler(tmp_path, 0.01, nvml_module=fake)
    sampler.start(None)
    assert sampler.available
    time.sleep(0.3)
    before = fake.pcie_calls
    assert before > 4
    sampler.relax()
    time.sleep(0.05)  # a sample in flight may still finish
    during, samples = fake.pcie_calls, sampler.samples
    time.sleep(0.4)
    assert fake.pcie_calls == during  # no PCIe throughput query once relaxed
    assert sampler.samples - samples <= 1  # one sample a second at most
    sampler.stop()
    info = sampler.info()
    assert info.interval_s == 0.01 and info.interval_after_window_s == RELAXED_INTERVAL_S
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
