"""`gpuadvisor verify`: apply the remedies that need no edit of the script and measure them.

`verify_run(RUN, VerifyOptions(...))` re-runs the recorded command once per trial (baseline trials
interleaved with remedy trials), writes RUN/verify.json and returns it; `attach(findings, doc)` puts
the measurements on the findings (`Finding.verified`). Importing this package imports no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuadvisor.verify.results import attach, attach_from_run, summary_line
    from gpuadvisor.verify.runner import VerifyOptions, VerifyOutcome, verify_run

__all__ = ["VerifyOptions", "VerifyOutcome", "attach", "attach_from_run", "summary_line", "verify_run"]

_LAZY = {
    "VerifyOptions": "gpuadvisor.verify.runner",
    "VerifyOutcome": "gpuadvisor.verify.runner",
    "verify_run": "gpuadvisor.verify.runner",
    "attach": "gpuadvisor.verify.results",
    "attach_from_run": "gpuadvisor.verify.results",
    "summary_line": "gpuadvisor.verify.results",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuadvisor.verify' has no attribute {name!r}")

    return getattr(importlib.import_module(module), name)
