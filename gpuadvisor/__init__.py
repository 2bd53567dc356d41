"""gpuadvisor: a profiling and optimization advisor for PyTorch training on NVIDIA GPUs.

Public API (imports are lazy: `import gpuadvisor` does not import torch or pandas):

    run = gpuadvisor.profile("train.py", args=["--epochs", "1"], out="runs/a")
    result = gpuadvisor.analyze("runs/a")
    result.findings; result.metrics; result.to_dict(); result.exit_code(fail_on="high")
    result.write_html("report.html")
    delta = gpuadvisor.diff("runs/base", "runs/a")
    with gpuadvisor.capture(out="runs/nb") as cap: ...; cap.step()

For type checkers the names below are the real functions of `gpuadvisor.api` (their signatures and
return types: `AnalysisResult`, `DiffResult`, `Run`, `Capture`); at run time they are loaded on first
use by the module `__getattr__`, so `import gpuadvisor` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["__version__", "analyze", "capture", "diff", "profile"]

if TYPE_CHECKING:
    from gpuadvisor.api import analyze as analyze
    from gpuadvisor.api import capture as capture
    from gpuadvisor.api import diff as diff
    from gpuadvisor.api import profile as profile

_LAZY = {
    "analyze": ("gpuadvisor.api", "analyze"),
    "profile": ("gpuadvisor.api", "profile"),
    "diff": ("gpuadvisor.api", "diff"),
    "capture": ("gpuadvisor.api", "capture"),
}


def __getattr__(name: str) -> Any:
    spec = _LAZY.get(name)
    if spec is None:
        raise AttributeError(f"module 'gpuadvisor' has no attribute {name!r}")

    return getattr(importlib.import_module(spec[0]), spec[1])
