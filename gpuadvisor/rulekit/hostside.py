"""Captured call sites for the host-side rules (GA1xx transfers, GA2xx host syncs, GA3xx data loading):
which lines of the user's code issued the host syncs and host-to-device copies (callsites.json,
recorded by the capture), filtered to the ones that matter per step.

The timing side (waits, idle time by cause, predictions) is the step model's (gpuadvisor.stepmodel).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuadvisor.model import Location

if TYPE_CHECKING:
    from gpuadvisor.rules_api import RuleContext

MIN_CALLS_PER_STEP = 0.1
MIN_BYTES_SHARE = 0.01


def callsites(ctx: RuleContext, kind: str, calls: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Captured call sites of a kind (host_sync / host_to_device), optionally of some calls,
    most frequent first. Calls made less than once every `MIN_CALLS_PER_STEP`^-1 steps (set-up such as
    `model.to(device)`, a final `.item()`) are left out when more frequent ones exist: a per-step cost
    is not theirs."""
    if ctx.run is None:
        return []
    out = [
        c
        for c in ctx.run.callsites
        if c.get("kind") == kind and (calls is None or str(c.get("call")) in calls)
    ]
    frequent = [c for c in out if float(c.get("per_step") or 0) >= MIN_CALLS_PER_STEP]
    if frequent:
        out = frequent
    # Copies: what matters is the bytes they move per step. A site carrying under MIN_BYTES_SHARE of
    # them (`model.to(device)`: one small copy per parameter tensor, once) is not where the time goes.
    moved = {id(c): float(c.get("bytes_per_call") or 0) * float(c.get("per_step") or 0) for c in out}
    total = sum(moved.values())
    if kind == "host_to_device" and total > 0:
        out = [c for c in out if moved[id(c)] >= MIN_BYTES_SHARE * total]
        return sorted(out, key=lambda c: (-moved[id(c)], str(c.get("file")), int(c.get("line") or 0)))
    return sorted(
        out,
        key=lambda c: (
            -float(c.get("per_step") or c.get("count") or 0),
            str(c.get("file")),
            int(c.get("line") or 0),
        ),
    )


def fmt_ms(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us < 100_000 else f"{us / 1000:.0f} ms"


def fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}%" if x < 0.1 else f"{100 * x:.0f}%"


def site_location(site: Mapping[str, Any], *detail_keys: str) -> Location:
    """A finding location for a captured call site (callsites.json entry): file:line, the source line,
    the function, and the named fields of the site as detail."""
    return Location(
        file=str(site["file"]) if site.get("file") else None,
        line=int(site["line"]) if site.get("line") else None,
        code=site.get("code"),
        function=site.get("function"),
        detail={key: site.get(key) for key in detail_keys},
    )
