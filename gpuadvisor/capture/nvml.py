"""NVML sampling in the supervising process (never in the training process).

One row per visible GPU per sample, columns `rundir.NVML_COLUMNS`, into a gzip CSV that is flushed
about once a second so a killed run loses little. Values NVML cannot give are empty cells, never 0.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuadvisor import rundir
from gpuadvisor.manifest import NvmlGpu, NvmlInfo


@dataclass
class GpuHandle:
    nvml_index: int
    uuid: str
    name: str
    cuda_index: int | None
    mig: bool
    handle: Any = field(repr=False, default=None)


RELAXED_INTERVAL_S = 1.0


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def visible_gpus(nvml: Any, cuda_visible_devices: str | None) -> list[GpuHandle]:
    """The GPUs the child can see, mapped to NVML handles by UUID.

    `CUDA_VISIBLE_DEVICES` may list integers or (prefixes of) `GPU-...`/`MIG-...` UUIDs. Integers are
    taken as NVML indices (equal to CUDA ordinals under CUDA_DEVICE_ORDER=PCI_BUS_ID, the usual case on
    single-GPU and homogeneous machines). Unset: every GPU, with `cuda_index` null (CUDA's default
    ordering is not NVML's).
    """
    count = int(nvml.nvmlDeviceGetCount())
    all_gpus: list[GpuHandle] = []
    for i in range(count):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        mig = False
        try:
            cur, _pending = nvml.nvmlDeviceGetMigMode(h)
            mig = bool(cur)
        except Exception:
            mig = False
        all_gpus.append(
            GpuHandle(i, _s(nvml.nvmlDeviceGetUUID(h)), _s(nvml.nvmlDeviceGetName(h)), None, mig, h)
        )
    if cuda_visible_devices is None:
        return all_gpus
    chosen: list[GpuHandle] = []
    entries = [e.strip() for e in cuda_visible_devices.split(",") if e.strip()]
    for cuda_index, entry in enumerate(entries):
        match: GpuHandle | None = None
        if entry.lstrip("-").isdigit():
            idx = int(entry)
            if idx < 0:
                break  # CUDA stops at the first invalid entry
            match = next((g for g in all_gpus if g.nvml_index == idx), None)
        elif entry.startswith("MIG-"):
            match = _mig_handle(nvml, all_gpus, entry)
        else:
            want = entry if entry.startswith("GPU-") else f"GPU-{entry}"
            match = next((g for g in all_gpus if g.uuid.startswith(want)), None)
        if match is None:
            break
        chosen.append(
            GpuHandle(match.nvml_index, match.uuid, match.name, cuda_index, match.mig, match.handle)
        )
    return chosen


def _mig_handle(nvml: Any, gpus: list[GpuHandle], uuid: str) -> GpuHandle | None:
    for g in gpus:
        if not g.mig:
            continue
        try:
            n = nvml.nvmlDeviceGetMaxMigDeviceCount(g.handle)
        except Exception:
            continue
        for j in range(n):
            try:
                mh = nvml.nvmlDeviceGetMigDeviceHandleByIndex(g.handle, j)
            except Exception:
                continue
            mu = _s(nvml.nvmlDeviceGetUUID(mh))
            if mu.startswith(uuid):
                return GpuHandle(g.nvml_index, mu, g.name, None, True, mh)
    return None


def sample_row(nvml: Any, gpu: GpuHandle, now: float, pcie_throughput: bool = True) -> list[str]:
    """One CSV row; every reading guarded separately (an unsupported counter is an empty cell).

    `pcie_throughput=False` leaves the two PCIe throughput cells empty: each of those queries blocks
    for about 20 ms in the driver (an overhead experiment switches them off)."""
    h = gpu.handle

    def get(fn: Callable[[], Any]) -> str:
        try:
            v = fn()
        except Exception:
            return ""
        return "" if v is None else str(v)

    util: Any = None
    try:
        util = nvml.nvmlDeviceGetUtilizationRates(h)
    except Exception:
        util = None  # MIG slices: not supported; N/A, never 0
    mem: Any = None
    try:
        mem = nvml.nvmlDeviceGetMemoryInfo(h)
    except Exception:
        mem = None
    throttle = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    return [
        f"{now:.3f}",
        str(gpu.nvml_index),
        gpu.uuid,
        "" if util is None else str(util.gpu),
        "" if util is None else str(util.memory),
        "" if mem is None else str(mem.used),
        "" if mem is None else str(mem.total),
        get(lambda: round(nvml.nvmlDeviceGetPowerUsage(h) / 1000.0, 3)),
        get(lambda: round(nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0, 3)),
        get(lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
        get(lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
        get(lambda: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM)),
        get(lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),
        get(lambda: nvml.nvmlDeviceGetPcieThroughput(h, nvml.NVML_PCIE_UTIL_TX_BYTES) if pcie_throughput else None),
        get(lambda: nvml.nvmlDeviceGetPcieThroughput(h, nvml.NVML_PCIE_UTIL_RX_BYTES) if pcie_throughput else None),
        get(lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
        get(lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(h)),
        get(lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(h)),
        get(lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(h)),
        get(lambda: throttle(h) if throttle else None),
    ]


class NvmlSampler:
    """Background thread sampling NVML into `RUN/nvml.csv.gz`.

    `start()` never raises: when NVML cannot be used, `available` is False and `reason` says why.
    """

    def __init__(
        self, out: Path, interval_s: float = 0.1, nvml_module: Any = None, pcie_throughput: bool = True
    ) -> None:
        self.path = out / rundir.NVML
        self.pcie_throughput = pcie_throughput
        self.interval_s = max(0.01, float(interval_s))
        self._period = self.interval_s  # the sampling period now (longer once relaxed)
        self._nvml = nvml_module
        self.available = False
        self.reason: str | None = None
        self.gpus: list[GpuHandle] = []
        self.samples = 0
        self.driver: str | None = None
        self.write_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.relaxed = False

    def start(self, cuda_visible_devices: str | None = None) -> None:
        try:
            nvml = self._nvml
            if nvml is None:
                # lazy: nvidia-ml-py is the optional `profile` extra, absent where only the analysis is installed
                import pynvml

                nvml = pynvml
            nvml.nvmlInit()
            self._nvml = nvml
        except Exception as err:  # no driver, no library, mismatched library
            self.reason = f"NVML is not usable ({type(err).__name__}: {err})"
            return
        try:
            self.driver = _s(self._nvml.nvmlSystemGetDriverVersion())
        except Exception:
            self.driver = None
        try:
            self.gpus = visible_gpus(self._nvml, cuda_visible_devices)
        except Exception as err:
            self.reason = f"NVML could not list the GPUs ({type(err).__name__}: {err})"
            self._shutdown_nvml()
            return
        if not self.gpus:
            self.reason = "NVML sees no GPU visible to the script (CUDA_VISIBLE_DEVICES)"
            self._shutdown_nvml()
            return
        self.available = True
        self._thread = threading.Thread(target=self._run, name="gpuadvisor-nvml", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        pid = os.getpid()
        try:
            raw = open(self.path, "wb")  # noqa: SIM115 (closed in the finally below, after the writers)
        except OSError as err:
            self.write_error = f"nvml.csv.gz could not be created ({err.strerror or err})"
            return
        gz = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6)
        text = io.TextIOWrapper(gz, encoding="utf-8", newline="")
        writer = csv.writer(text)
        last_flush = time.monotonic()
        try:
            writer.writerow(rundir.NVML_COLUMNS)
            next_t = time.monotonic()
            while not self._stop.is_set():
                now = time.time()
                for gpu in self.gpus:
                    writer.writerow(sample_row(self._nvml, gpu, now, self.pcie_throughput))
                self.samples += 1
                if time.monotonic() - last_flush >= 1.0:
                    text.flush()
                    gz.flush(zlib.Z_SYNC_FLUSH)  # a killed parent still leaves readable rows
                    raw.flush()
                    last_flush = time.monotonic()
                next_t += self._period
                self._stop.wait(max(0.0, next_t - time.monotonic()))
        except OSError as err:
            self.write_error = f"NVML samples stopped early ({err.strerror or err})"
        finally:
            if os.getpid() == pid:
                try:
                    text.close()
                    raw.close()
                except OSError as err:
                    self.write_error = f"nvml.csv.gz could not be completed ({err.strerror or err})"

    def relax(self, interval_s: float = RELAXED_INTERVAL_S) -> None:
        """After the capture window: sample at most every `interval_s` and without the PCIe throughput
        queries (each blocks about 20 ms in the driver). The analysis reads clocks, power and PCIe
        throughput inside the window only; utilization over the run still gets a sample a second."""
        if self.relaxed:
            return
        self.relaxed = True
        self.pcie_throughput = False
        self._period = max(self.interval_s, interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._shutdown_nvml()

    def _shutdown_nvml(self) -> None:
        try:
            if self._nvml is not None:
                self._nvml.nvmlShutdown()
        except Exception:
            pass

    def info(self) -> NvmlInfo:
        """The manifest's `nvml` object."""
        return NvmlInfo(
            available=self.available,
            reason=self.reason if not self.available else self.write_error,
            file=rundir.NVML if self.available else None,
            interval_s=self.interval_s,
            interval_after_window_s=self._period if self.relaxed else None,
            samples=self.samples,
            gpus=tuple(
                NvmlGpu(g.nvml_index, g.uuid, g.name, g.cuda_index, g.mig) for g in self.gpus
            ),
        )

    def describe(self) -> dict[str, Any]:
        return self.info().to_json()
