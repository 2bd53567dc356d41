"""Where a sentence compares a number with one that reads the same ("0.02 ms instead of 0.02 ms",
"2 GB/s instead of 2.0 GB/s", "0.50 -> 0.50 ms"): issue 30 item 7. Used on findings of synthetic
traces (tests/rules/test_compared_numbers.py) and of the sample runs (tests/test_sample_runs.py)."""

from __future__ import annotations

import re

_NUMBER = r"(\d[\d,]*(?:\.\d+)?)"
_UNIT = r"\s*(%|ms|s|GB/s|MiB|x)?"
# "A instead of B", "A -> B", "A → B", "from A to B", each number with an optional unit
_COMPARED = re.compile(
    rf"(?:{_NUMBER}{_UNIT}\s+(?:instead of|->|→)\s+{_NUMBER}{_UNIT})|(?:from {_NUMBER}{_UNIT} to {_NUMBER}{_UNIT})"
)


def same_number_comparisons(text: str) -> list[str]:
    """The places in `text` that compare a number with one that reads the same ("0.02 ms instead of
    0.02 ms", "2 GB/s instead of 2.0 GB/s", "0.50 -> 0.50 ms")."""
    found = []
    for m in _COMPARED.finditer(text):
        groups = m.groups()
        a, ua, b, ub = groups[:4] if groups[0] is not None else groups[4:]
        if ua and ub and ua != ub:
            continue  # different units: not the same quantity
        if float(a.replace(",", "")) == float(b.replace(",", "")):
            found.append(m.group(0))
    return found
