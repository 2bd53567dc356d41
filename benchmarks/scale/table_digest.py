"""Digests of the analysis's tables, to show that a speed change leaves them as they were (issue 43).

    # from a checkout of the code before the change (a `git archive` of main works), then this one
    PYTHONPATH=/tmp/main-snapshot python benchmarks/scale/table_digest.py /tmp/digest-main.json INPUT...
    python benchmarks/scale/table_digest.py /tmp/digest-new.json INPUT...
    python benchmarks/scale/table_digest.py --compare /tmp/digest-main.json /tmp/digest-new.json

For each INPUT (a run directory or a trace; `sample_runs/*` from the code's root) it runs
`gpuadvisor.analyze` in this process and hashes every column of the step model's tables (`ops`,
`host`, `idle`, `kernel_table`, `per_step`) and of the display tables of the metrics (`kernels`,
`ops`, `gaps`, `busy_classes`): column names, dtypes, every value (pandas' row hashes, in order) and
the index. The findings JSON (benchmarks/sample_findings.py) shows what a user sees; this shows the
tables under it, dtypes included, which the findings may not reach. `--compare` prints each table whose
digest differs and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from typing import Any

MODEL_TABLES = ("ops", "host", "idle", "kernel_table", "per_step")
METRIC_TABLES = ("kernels", "ops", "gaps", "busy_classes")


def digest(frame: Any) -> str | None:
    """A short hash of a DataFrame's columns, dtypes, values (in row order) and index."""
    import pandas as pd

    if frame is None:
        return None
    h = hashlib.sha256()
    for column in frame.columns:
        values = frame[column]
        h.update(f"{column}\0{values.dtype}\0".encode())
        try:
            h.update(pd.util.hash_pandas_object(values, index=False).to_numpy().tobytes())
        except TypeError:  # values pandas cannot hash (lists): their text
            h.update(repr(values.tolist()).encode())
    h.update(f"{len(frame)}\0{list(frame.index[:5])!r}\0{type(frame.index).__name__}".encode())
    return h.hexdigest()[:16]


def tables_of(path: str) -> dict[str, str | None]:
    import gpuadvisor

    detail = gpuadvisor.analyze(path).metrics_detail
    out: dict[str, str | None] = {}
    if detail is None:
        return out
    if detail.model is not None:
        out.update({name: digest(getattr(detail.model, name)) for name in MODEL_TABLES})
    out.update({f"metrics.{name}": digest(getattr(detail, name)) for name in METRIC_TABLES})
    return out


def compare(old_path: str, new_path: str) -> int:
    with open(old_path) as fh:
        old = json.load(fh)
    with open(new_path) as fh:
        new = json.load(fh)
    differ = [
        f"{inp}: {table}"
        for inp in sorted(set(old) | set(new))
        for table in sorted(set(old.get(inp, {})) | set(new.get(inp, {})))
        if old.get(inp, {}).get(table) != new.get(inp, {}).get(table)
    ]
    for line in differ:
        print(line)
    total = sum(len(v) for v in old.values())
    print(f"{total - len(differ)} of {total} tables identical ({len(old)} inputs)")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the JSON file of digests to write (with --compare: the old one)")
    ap.add_argument("inputs", nargs="+", help="run directories or traces (with --compare: the new JSON file)")
    ap.add_argument("--compare", action="store_true")
    a = ap.parse_args()
    if a.compare:
        return compare(a.out, a.inputs[0])
    os.environ.setdefault("GPUADVISOR_LOAD_SPLIT", "0")
    result = {path: tables_of(path) for path in a.inputs}
    with open(a.out, "w") as fh:
        json.dump(result, fh, indent=1, sort_keys=True)
    print(f"{len(result)} inputs digested into {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
