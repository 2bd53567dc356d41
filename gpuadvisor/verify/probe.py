"""Where verify measures: the machine, its GPUs and torch, read by the recorded interpreter.

`python -m gpuadvisor.verify.probe` (or this file run as a script) prints one JSON object, with the fields the capture writes into
environment.json (`platform`, `cpu_count`, `torch`, `cuda_available`, GPU names), plus whether the
GPU runs bf16. `compare(recorded, here)` lists what differs between the recording and this machine;
`gpuadvisor verify` refuses to measure on another machine unless told to (docs/verify.md).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["compare", "describe", "probe", "recorded_machine"]

PROBE_TIMEOUT_S = 120.0


def _probe_here() -> dict[str, Any]:
    # lazy: torch is the optional `profile` extra, absent where only the analysis is installed
    import torch

    out: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "cuda_available": bool(torch.cuda.is_available()),
        "gpus": [],
        "bf16_supported": None,
    }
    if out["cuda_available"]:
        out["gpus"] = [torch.cuda.get_device_properties(i).name for i in range(torch.cuda.device_count())]
        try:
            out["bf16_supported"] = bool(torch.cuda.is_bf16_supported())
        except Exception as err:  # an old torch or a broken device: unknown, not a failure
            del err
    return out


def probe(python: str, cwd: Path, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """This machine as the recorded interpreter sees it; {"error": why} when the probe fails."""
    try:
        r = subprocess.run(
            [python, str(Path(__file__).resolve())],  # as a file: whatever package the cwd holds
            cwd=cwd,
            env=dict(env) if env is not None else None,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"error": f"{type(err).__name__}: {err}"}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"the probe exited with status {r.returncode}: {tail}"}
    try:
        data = json.loads(lines[-1])
    except ValueError as err:
        return {"error": f"unreadable probe output: {err}"}
    return data if isinstance(data, dict) else {"error": "unreadable probe output"}


def recorded_machine(manifest: Mapping[str, Any], environment: Mapping[str, Any]) -> dict[str, Any]:
    """The recording's machine from environment.json (GPU names from NVML in manifest.json when the
    script's own record has none)."""
    gpus = [str(g.get("name")) for g in environment.get("gpus") or [] if isinstance(g, dict) and g.get("name")]
    if not gpus:
        nvml = manifest.get("nvml")
        if isinstance(nvml, dict):
            gpus = [str(g.get("name")) for g in nvml.get("gpus") or [] if isinstance(g, dict) and g.get("name")]
    return {
        "platform": environment.get("platform"),
        "cpu_count": environment.get("cpu_count"),
        "torch": environment.get("torch"),
        "cuda_available": environment.get("cuda_available"),
        "gpus": gpus,
        "cwd": manifest.get("cwd"),
    }


def describe(machine: Mapping[str, Any]) -> str:
    """ "NVIDIA H200, torch 2.11.0+cu130" or "CPU only, torch 2.13.0+cpu"."""
    gpus = [str(g) for g in machine.get("gpus") or []]
    if gpus:
        where = gpus[0] if len(set(gpus)) == 1 and len(gpus) == 1 else f"{len(gpus)}x {gpus[0]}"
    elif machine.get("cuda_available"):
        where = "a CUDA GPU"
    else:
        where = "CPU only"
    return f"{where}, torch {machine.get('torch') or '?'}"


def compare(recorded: Mapping[str, Any], here: Mapping[str, Any]) -> list[str]:
    """What differs between the recording's machine and this one (empty: the same)."""
    diffs: list[str] = []
    if here.get("error"):
        return [f"this machine could not be probed ({here['error']})"]

    def known(key: str) -> bool:
        return recorded.get(key) not in (None, "", [])

    rec_gpus, here_gpus = list(recorded.get("gpus") or []), list(here.get("gpus") or [])
    if rec_gpus and sorted(rec_gpus) != sorted(here_gpus):
        diffs.append(f"GPU: recorded on {', '.join(rec_gpus)}, here {', '.join(here_gpus) or 'none'}")
    elif recorded.get("cuda_available") is not None and bool(recorded["cuda_available"]) != bool(
        here.get("cuda_available")
    ):
        diffs.append(
            f"CUDA: recorded {'with' if recorded['cuda_available'] else 'without'} a CUDA GPU, here "
            f"{'with' if here.get('cuda_available') else 'without'}"
        )
    if known("torch") and recorded["torch"] != here.get("torch"):
        diffs.append(f"torch: recorded {recorded['torch']}, here {here.get('torch')}")
    if known("platform") and (recorded["platform"], recorded.get("cpu_count")) != (
        here.get("platform"),
        here.get("cpu_count"),
    ):
        diffs.append(
            f"machine: recorded on {recorded['platform']} ({recorded.get('cpu_count')} CPUs), here "
            f"{here.get('platform')} ({here.get('cpu_count')} CPUs)"
        )
    if known("cwd") and here.get("cwd") and os.path.realpath(str(recorded["cwd"])) != os.path.realpath(
        str(here["cwd"])
    ):
        diffs.append(f"working directory: recorded in {recorded['cwd']}, verify runs from {here['cwd']}")
    return diffs


if __name__ == "__main__":
    print(json.dumps(_probe_here()), flush=True)
