"""Capture: run a training script under torch.profiler + NVML and write a run directory.

`run_profile(...)` (parent/child, what `gpuadvisor profile` uses) and `Capture` (in-process, for
notebooks and tests) are imported lazily: importing this package imports neither torch nor pynvml.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuadvisor.capture.inprocess import Capture
    from gpuadvisor.capture.options import ProfileOptions
    from gpuadvisor.capture.runner import ProfileOutcome, run_profile

__all__ = ["Capture", "ProfileOptions", "ProfileOutcome", "run_profile"]

_LAZY = {
    "run_profile": "gpuadvisor.capture.runner",
    "ProfileOutcome": "gpuadvisor.capture.runner",
    "ProfileOptions": "gpuadvisor.capture.options",
    "Capture": "gpuadvisor.capture.inprocess",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'gpuadvisor.capture' has no attribute {name!r}")

    return getattr(importlib.import_module(mod), name)


class _CallableModule(types.ModuleType):
    """`gpuadvisor.capture(out=...)` is the public in-process API (README, "Python API"). Importing this subpackage
    rebinds the attribute `gpuadvisor.capture` to the package, so the package itself forwards calls."""

    def __call__(self, out: str | os.PathLike[str], **options: Any) -> Any:
        # (`Capture` itself, not `gpuadvisor.api.capture`: the capture never imports the API above it)
        # lazy: importing the package stays light (the training child imports capture.child alone)
        from gpuadvisor.capture.inprocess import Capture

        return Capture(Path(out), **options)


sys.modules[__name__].__class__ = _CallableModule
