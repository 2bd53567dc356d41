"""JSON renderer: exactly the JSON contract (gpuadvisor/schemas/findings.schema.json, docs/ci.md), byte-deterministic.

Keys are sorted, floats were rounded by `model.jsonable`, NaN/inf became null, and the text ends with
one newline, so the same analysis always gives the same bytes (snapshot tests, `diff` of findings.json).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuadvisor.result import AnalysisResult


__all__ = ["render"]


def render(result: AnalysisResult, *, fail_on: str | None = None) -> str:
    """`result.to_dict()` as indented JSON with sorted keys. `fail_on` is accepted for a uniform
    renderer signature; the JSON always holds every finding (CI tools apply their own gate)."""
    del fail_on
    return json.dumps(result.to_dict(), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
