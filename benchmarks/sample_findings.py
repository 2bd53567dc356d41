"""Dump and compare the findings JSON of every recorded run in sample_runs/ (issue 43: a speed change
must leave every finding and metric byte-identical).

    # the baseline, from a checkout of the code before the change (a `git archive` of main works)
    python benchmarks/sample_findings.py dump /tmp/findings-main --code /tmp/main-snapshot
    # the same from this checkout, then the comparison
    python benchmarks/sample_findings.py dump /tmp/findings-new
    python benchmarks/sample_findings.py compare /tmp/findings-main /tmp/findings-new

`dump` runs `python -m gpuadvisor analyze sample_runs/NAME --format json -o DIR/NAME.json` in a fresh
process per run with the working directory at the code's root, so the recorded source path
(`sample_runs/NAME`) reads the same from either checkout; it also records each run's exit status.
`compare` prints every file that differs (the first differing JSON paths) and exits 1 if any does. No
field is ignored: the analysis of a recorded run holds nothing that depends on the time it is run at.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def runs(code: Path) -> list[str]:
    return sorted(p.name for p in (code / "sample_runs").iterdir() if p.is_dir())


def dump(out: Path, code: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(code))
    statuses: dict[str, int] = {}
    for name in runs(code):
        proc = subprocess.run(
            [sys.executable, "-m", "gpuadvisor", "analyze", f"sample_runs/{name}", "--format", "json",
             "-o", str(out / f"{name}.json")],
            cwd=code, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        statuses[name] = proc.returncode
        if proc.returncode not in (0, 1):
            print(f"{name}: exit {proc.returncode}\n{proc.stderr}", file=sys.stderr)
    (out / "_exit_status.json").write_text(json.dumps(statuses, indent=1, sort_keys=True) + "\n")
    print(f"{len(statuses)} runs dumped into {out}")
    return 0


def _differences(a: Any, b: Any, path: str, found: list[str]) -> None:
    if len(found) >= 5:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                found.append(f"{path}.{key}: only in {'new' if key in b else 'old'}")
            else:
                _differences(a[key], b[key], f"{path}.{key}", found)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _differences(x, y, f"{path}[{i}]", found)
    elif a != b or type(a) is not type(b):
        found.append(f"{path}: {json.dumps(a)[:120]} != {json.dumps(b)[:120]}")


def compare(old: Path, new: Path) -> int:
    names = sorted({p.name for p in old.glob("*.json")} | {p.name for p in new.glob("*.json")})
    if not names:  # an empty or wrong folder compares nothing: that is no evidence of identity
        print(f"no findings files in {old} or {new}: nothing compared")
        return 1
    bad = 0
    for name in names:
        a, b = old / name, new / name
        if not a.exists() or not b.exists():
            print(f"{name}: missing in {'old' if not a.exists() else 'new'}")
            bad += 1
        elif a.read_bytes() != b.read_bytes():
            found: list[str] = []
            _differences(json.loads(a.read_bytes()), json.loads(b.read_bytes()), "$", found)
            print(f"{name}: differs\n  " + "\n  ".join(found or ["(same JSON, different bytes)"]))
            bad += 1
    print(f"{len(names) - bad} of {len(names)} files identical")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="analyze every sample run into DIR")
    d.add_argument("out", type=Path)
    d.add_argument("--code", type=Path, default=ROOT, help="root of the checkout whose code runs (default: this one)")
    c = sub.add_parser("compare", help="compare two dumps; exit 1 if any file differs")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    a = ap.parse_args()
    if a.command == "dump":
        return dump(a.out, a.code.resolve())
    return compare(a.old, a.new)


if __name__ == "__main__":
    sys.exit(main())
