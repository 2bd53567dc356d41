"""Load one trace with and without the two-process read (gpuadvisor/trace/_split.py): check that every
table, count, warning and metadata field is the same, and time both.

    python benchmarks/scale/compare_split.py TRACE [--repeat 3] [--analyze]

Prints one JSON object: the trace's size, whether the split happened, the load times (interleaved
repeats, fresh processes), and with --analyze the wall time of `gpuadvisor analyze` with
GPUADVISOR_LOAD_SPLIT=0 and 1. Exit 1 when the tables differ.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

_CHILD = """
import json, sys, time, pickle
t0 = time.perf_counter()
from gpuadvisor.trace import _split
from gpuadvisor.trace.load import load_trace
done = []
finish = _split.SplitRead.finish
def spy(self):
    out = finish(self)
    done.append(out is not None)
    return out
_split.SplitRead.finish = spy
m = load_trace(sys.argv[1], split=sys.argv[2] == "1")
took = time.perf_counter() - t0
tables = {t: getattr(m, t) for t in ("kernels", "copies", "memsets", "runtime", "cpu_ops", "annotations", "steps")}
with open(sys.argv[3], "wb") as fh:
    pickle.dump((tables, m.counts, m.warnings, m.meta, m.rank, m.step_source), fh)
print(json.dumps({"load_s": took, "split_done": done}))
"""


def _load(trace: Path, split: bool, out: Path) -> dict[str, object]:
    res = subprocess.run(
        [sys.executable, "-c", _CHILD, str(trace), "1" if split else "0", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def _same(a: Path, b: Path) -> str | None:
    import pickle

    import pandas as pd

    with a.open("rb") as fa, b.open("rb") as fb:
        x, y = pickle.load(fa), pickle.load(fb)
    for name in x[0]:
        try:
            pd.testing.assert_frame_equal(x[0][name], y[0][name], check_exact=True)
        except AssertionError as err:
            return f"{name}: {str(err)[:300]}"
    for i, what in enumerate(("counts", "warnings", "meta", "rank", "step_source"), start=1):
        if x[i] != y[i]:
            return what
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--analyze", action="store_true", help="also time `gpuadvisor analyze` with the split off/on")
    a = ap.parse_args()
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    one, two = tmp / "compare_split_one.pkl", tmp / "compare_split_two.pkl"
    times: dict[str, list[float]] = {"one_process": [], "split": []}
    split_done: list[object] = []
    for _ in range(a.repeat):
        times["one_process"].append(float(_load(a.trace, False, one)["load_s"]))  # type: ignore[arg-type]
        r = _load(a.trace, True, two)
        times["split"].append(float(r["load_s"]))  # type: ignore[arg-type]
        split_done.append(r["split_done"])
    diff = _same(one, two)
    result: dict[str, object] = {
        "trace": str(a.trace),
        "bytes_on_disk": a.trace.stat().st_size,
        "cpus": os.cpu_count(),
        "identical": diff is None,
        "difference": diff,
        "split_done": split_done,
        "load_s": {k: [round(v, 3) for v in vs] for k, vs in times.items()},
        "load_median_s": {k: round(statistics.median(vs), 3) for k, vs in times.items()},
    }
    if a.analyze:
        walls: dict[str, list[float]] = {"0": [], "1": []}
        for _ in range(a.repeat):
            for flag in ("0", "1"):
                start = time.monotonic()
                subprocess.run(
                    [sys.executable, "-m", "gpuadvisor", "analyze", str(a.trace), "--format", "json", "-o", os.devnull],
                    env={**os.environ, "GPUADVISOR_LOAD_SPLIT": flag},
                    check=False,
                    capture_output=True,
                )
                walls[flag].append(round(time.monotonic() - start, 3))
        result["analyze_wall_s"] = {"split_off": walls["0"], "split_on": walls["1"]}
    one.unlink(missing_ok=True)
    two.unlink(missing_ok=True)
    print(json.dumps(result, indent=2))
    return 0 if diff is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
