"""How verify applies each injectable remedy: the registry of injections (records with an `Injection` in
gpuadvisor.remedies), filled by gpuadvisor.verify.inject and gpuadvisor.verify.inject_memory and called
in the records' order by `Injections.install`; the registry test checks that the two agree."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuadvisor.remedies import RemedyId

if TYPE_CHECKING:
    from gpuadvisor.verify.inject import Injections

__all__ = ["INJECTORS", "Injector", "injector"]

Injector = Callable[["Injections", Any], None]

INJECTORS: dict[RemedyId, Injector] = {}


def injector(*remedies: RemedyId) -> Callable[[Injector], Injector]:
    def register(fn: Injector) -> Injector:
        for r in remedies:
            if r in INJECTORS:
                raise ValueError(f"two injections for {r.value}")
            INJECTORS[r] = fn
        return fn

    return register
