"""A FAKE NVML binding (module name `pynvml`) for the CPU reliability tests.

Put this folder first on PYTHONPATH and `gpuadvisor profile` samples these SYNTHETIC devices instead of
a real driver. $FAKE_NVML (JSON) describes them:

    {"init_error": "LibRmVersionMismatch" | null,
     "gpus": [{"uuid": "GPU-...", "name": "...", "util": 37 | null,
               "mig_devices": [{"uuid": "MIG-...", "name": "..."}]}]}

`util: null` (and every MIG device) answers utilization queries with NVMLError_NotSupported, as a real
MIG slice does. Only the calls gpuadvisor makes are here."""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    def __str__(self) -> str:
        return "Not Supported"


class NVMLError_LibRmVersionMismatch(NVMLError):
    def __str__(self) -> str:
        return "RM has detected an NVML/RM version mismatch."


class _Util(NamedTuple):
    gpu: int
    memory: int


class _Mem(NamedTuple):
    total: int
    free: int
    used: int


_CONFIG: dict[str, Any] = json.loads(os.environ.get("FAKE_NVML", "{}") or "{}")
_GPUS: list[dict[str, Any]] = list(_CONFIG.get("gpus", []))


def nvmlInit() -> None:
    err = _CONFIG.get("init_error")
    if err:
        raise globals()[f"NVMLError_{err}"]()


def nvmlShutdown() -> None:
    pass


def nvmlSystemGetDriverVersion() -> str:
    return "580.00-fake"


def nvmlDeviceGetCount() -> int:
    return len(_GPUS)


def nvmlDeviceGetHandleByIndex(i: int) -> dict[str, Any]:
    return _GPUS[i]


def nvmlDeviceGetMigMode(h: dict[str, Any]) -> tuple[int, int]:
    on = int(bool(h.get("mig_devices")))
    return on, on


def nvmlDeviceGetMaxMigDeviceCount(h: dict[str, Any]) -> int:
    return len(h.get("mig_devices", []))


def nvmlDeviceGetMigDeviceHandleByIndex(h: dict[str, Any], j: int) -> dict[str, Any]:
    return {**h["mig_devices"][j], "is_mig": True, "util": None}


def nvmlDeviceGetUUID(h: dict[str, Any]) -> str:
    return str(h["uuid"])


def nvmlDeviceGetName(h: dict[str, Any]) -> str:
    return str(h.get("name", "Fake GPU"))


def nvmlDeviceGetUtilizationRates(h: dict[str, Any]) -> _Util:
    if h.get("util") is None:
        raise NVMLError_NotSupported()
    return _Util(int(h["util"]), int(h["util"]) // 2)


def nvmlDeviceGetMemoryInfo(h: dict[str, Any]) -> _Mem:
    return _Mem(80 << 30, 70 << 30, 10 << 30)


def _not_on_mig(h: dict[str, Any], value: Any) -> Any:
    if h.get("is_mig"):
        raise NVMLError_NotSupported()
    return value


def nvmlDeviceGetPowerUsage(h: dict[str, Any]) -> int:
    return int(_not_on_mig(h, 350_000))


def nvmlDeviceGetEnforcedPowerLimit(h: dict[str, Any]) -> int:
    return int(_not_on_mig(h, 700_000))


def nvmlDeviceGetTemperature(h: dict[str, Any], sensor: int) -> int:
    return int(_not_on_mig(h, 45))


def nvmlDeviceGetClockInfo(h: dict[str, Any], clock: int) -> int:
    return int(_not_on_mig(h, 1980 if clock == NVML_CLOCK_SM else 2619))


def nvmlDeviceGetMaxClockInfo(h: dict[str, Any], clock: int) -> int:
    return int(_not_on_mig(h, 1980))


def nvmlDeviceGetPcieThroughput(h: dict[str, Any], counter: int) -> int:
    return int(_not_on_mig(h, 1000))


def nvmlDeviceGetCurrPcieLinkGeneration(h: dict[str, Any]) -> int:
    return int(_not_on_mig(h, 5))


def nvmlDeviceGetMaxPcieLinkGeneration(h: dict[str, Any]) -> int:
    return int(_not_on_mig(h, 5))


def nvmlDeviceGetCurrPcieLinkWidth(h: dict[str, Any]) -> int:
    return int(_not_on_mig(h, 16))


def nvmlDeviceGetMaxPcieLinkWidth(h: dict[str, Any]) -> int:
    return int(_not_on_mig(h, 16))


def nvmlDeviceGetCurrentClocksEventReasons(h: dict[str, Any]) -> int:
    return int(_not_on_mig(h, 0))
