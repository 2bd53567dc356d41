"""Which captured call sites a host-side finding points at (synthetic call-site lists)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gpuadvisor.rulekit import hostside as hs


def _ctx(sites: list[dict[str, Any]]) -> Any:
    return SimpleNamespace(run=SimpleNamespace(callsites=sites))


def test_copy_sites_ranked_by_bytes_and_setup_copies_left_out() -> None:
    sites = [
        {"kind": "host_to_device", "call": "Tensor.to", "line": 54, "code": "model = Net().to(device)",
         "count": 8, "per_step": 0.36, "bytes_per_call": 53_410},
        {"kind": "host_to_device", "call": "Tensor.to", "line": 97, "code": "y = y.to(device)",
         "count": 22, "per_step": 1.0, "bytes_per_call": 2048},
        {"kind": "host_to_device", "call": "Tensor.to", "line": 96, "code": "x = x.to(device)",
         "count": 22, "per_step": 1.0, "bytes_per_call": 154_140_672},
    ]
    assert [s["line"] for s in hs.callsites(_ctx(sites), "host_to_device")] == [96]


def test_sync_sites_called_once_are_left_out_when_per_step_ones_exist() -> None:
    sites = [
        {"kind": "host_sync", "call": "torch.cuda.synchronize", "line": 57, "count": 1, "per_step": 0.05},
        {"kind": "host_sync", "call": "Tensor.item", "line": 89, "count": 512, "per_step": 512.0},
        {"kind": "host_sync", "call": "Tensor.item", "line": 85, "count": 36, "per_step": 36.0},
    ]
    assert [s["line"] for s in hs.callsites(_ctx(sites), "host_sync")] == [89, 85]
    # only rare calls: they are all there is, so they are kept
    assert [s["line"] for s in hs.callsites(_ctx(sites[:1]), "host_sync")] == [57]
