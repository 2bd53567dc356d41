"""Switches for overhead experiments (undocumented for users; `benchmarks/overhead.py` sets them).

`GPUADVISOR_EXPERIMENT_DISABLE=tensor_hooks,nvml,...` turns off one suspect of the capture's cost at a
time, so that one GPU session can measure each alone against plain python (issue 15). The profiler
itself always runs. Unknown names are ignored (a typo must not change a user's run), and the parent
passes the variable on to the child unchanged.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping

ENV_VAR = "GPUADVISOR_EXPERIMENT_DISABLE"


class Suspect(str, enum.Enum):
    """One part of the capture that can be switched off for a measurement."""

    TENSOR_HOOKS = "tensor_hooks"  # Tensor.item/cpu/.../to/cuda/copy_ wrappers (host-sync and H2D call sites)
    DATALOADER_HOOKS = "dataloader_hooks"  # DataLoader __init__/__iter__/__next__ wrappers
    OPTIMIZER_HOOKS = "optimizer_hooks"  # Optimizer.__init__ wrapper (the step post-hook counts steps: kept)
    SETTINGS_HOOKS = "settings_hooks"  # autocast/compile/CUDA graphs/GradScaler/backward/framework wrappers
    MODULE_HOOKS = "module_hooks"  # nn.Module call tracking (forward-call steps, model call sites)
    STEP_TIMER = "step_timer"  # step accounting after the window (boundaries timed, hook kept)
    NVML = "nvml"  # the parent's NVML sampler
    NVML_PCIE = "nvml_pcie"  # the PCIe throughput queries of each NVML sample (they block ~20 ms each)
    NVML_RELAX = "nvml_relax"  # do not slow NVML sampling down (1 s, no PCIe queries) after the window
    CUPTI_TEARDOWN = "cupti_teardown"  # do not ask Kineto to finalize CUPTI after the window
    UNINSTALL_AFTER_WINDOW = "uninstall_after_window"  # keep every wrapper installed after the window
    SHORT_RUN = "short_run"  # no speculative recording of the first steps
    PERIODIC_HOOKS = "periodic_hooks"  # torch.save wrapper and gc callback (costs between steps)


ALIASES: Mapping[str, frozenset[Suspect]] = {
    "hooks": frozenset(
        {
            Suspect.TENSOR_HOOKS,
            Suspect.DATALOADER_HOOKS,
            Suspect.OPTIMIZER_HOOKS,
            Suspect.SETTINGS_HOOKS,
            Suspect.MODULE_HOOKS,
            Suspect.PERIODIC_HOOKS,
        }
    ),
    # The behaviour before issue 15's fix: wrappers left installed, CUPTI left attached.
    "legacy": frozenset({Suspect.UNINSTALL_AFTER_WINDOW, Suspect.CUPTI_TEARDOWN, Suspect.NVML_RELAX}),
}


def parse(value: str | None) -> frozenset[Suspect]:
    """The suspects named in `value` (comma-separated names or aliases)."""
    out: set[Suspect] = set()
    for raw in (value or "").split(","):
        name = raw.strip().lower()
        if not name:
            continue
        if name in ALIASES:
            out |= ALIASES[name]
            continue
        try:
            out.add(Suspect(name))
        except ValueError:
            continue
    return frozenset(out)


def disabled(environ: Mapping[str, str] | None = None) -> frozenset[Suspect]:
    """The suspects switched off in this process's environment."""
    return parse((os.environ if environ is None else environ).get(ENV_VAR))
