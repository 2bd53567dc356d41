"""Build large SYNTHETIC Kineto traces for the scale benchmark by repeating a real trace's steps.

Every output is marked synthetic in its top-level metadata
(`"gpuadvisor_synthetic": "repeated steps of <source>"`) and carries `distributedInfo`
(rank, world_size) so that HTA accepts it. The source trace's recorded window (its ProfilerSteps)
is repeated N times; each copy is shifted in time by the window span (plus a 1 ms gap), and its
correlation ids, External ids, flow ids and ProfilerStep numbers are shifted so they stay unique.
Metadata events (`ph: M`) are written once. Output is written streaming (never held in memory).

    python benchmarks/scale/make_traces.py [--source PATH] [--out benchmarks/scale/out]
        [--sizes 10,100,1000] [--ranks 8 --rank-mb 50]
"""

from __future__ import annotations

import argparse
import gzip
import re
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "sample_runs" / "control_transformer-planted" / "trace" / "rank0.json.gz"
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _load(source: Path) -> dict[str, Any]:
    raw = source.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    obj: dict[str, Any] = orjson.loads(raw)
    return obj


def _shifted(
    ev: dict[str, Any], k: int, dt: float, dcorr: int, dext: int, dflow: int, dstep: int
) -> dict[str, Any]:
    if k == 0:
        return ev
    e = dict(ev)
    ts = e.get("ts")
    if isinstance(ts, (int, float)):
        e["ts"] = round(ts + k * dt, 3)
    if "id" in e and isinstance(e["id"], int):  # flow events (ac2g, fwdbwd)
        e["id"] = e["id"] + k * dflow
    name = e.get("name")
    if isinstance(name, str):
        m = _STEP.match(name)
        if m:
            e["name"] = f"ProfilerStep#{int(m.group(1)) + k * dstep}"
    args = e.get("args")
    if isinstance(args, dict):
        a = dict(args)
        if isinstance(a.get("correlation"), int) and a["correlation"] > 0:
            a["correlation"] += k * dcorr
        if isinstance(a.get("External id"), int) and a["External id"] > 0:
            a["External id"] += k * dext
        e["args"] = a
    return e


def build(source: Path, dest: Path, target_mb: float, rank: int = 0, world_size: int = 1) -> dict[str, Any]:
    """Write a synthetic trace of about `target_mb` MB (uncompressed) to `dest`; return a summary."""
    obj = _load(source)
    events: list[dict[str, Any]] = obj.pop("traceEvents")
    meta_events = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    ts = [float(e["ts"]) for e in body if isinstance(e.get("ts"), (int, float))]
    ends = [float(e["ts"]) + float(e.get("dur") or 0) for e in body if isinstance(e.get("ts"), (int, float))]
    dt = max(ends) - min(ts) + 1000.0

    def max_arg(key: str) -> int:
        vals = [
            e["args"][key]
            for e in body
            if isinstance(e.get("args"), dict) and isinstance(e["args"].get(key), int)
        ]
        return max(vals, default=0) + 1

    dcorr, dext = max_arg("correlation"), max_arg("External id")
    dflow = max((e["id"] for e in body if isinstance(e.get("id"), int)), default=0) + 1
    steps = [
        int(m.group(1)) for e in body if isinstance(e.get("name"), str) and (m := _STEP.match(e["name"]))
    ]
    dstep = (max(steps) - min(steps) + 1) if steps else 1
    body_bytes = sum(len(orjson.dumps(e)) + 2 for e in body)
    reps = max(1, round(target_mb * 1e6 / body_bytes))

    head = dict(obj)
    head["gpuadvisor_synthetic"] = f"repeated steps of {source.name} ({reps}x, shifted ts/ids)"
    head["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size}
    trace_name = head.pop("traceName", None)
    dest.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with dest.open("wb") as fh:
        fh.write(orjson.dumps(head)[:-1] + b', "traceEvents": [\n')
        first = True
        for e in meta_events:
            fh.write((b"" if first else b",\n") + orjson.dumps(e))
            first = False
            n += 1
        for k in range(reps):
            out = [orjson.dumps(_shifted(e, k, dt, dcorr, dext, dflow, dstep)) for e in body]
            fh.write((b"" if first else b",\n") + b",\n".join(out))
            first = False
            n += len(out)
        tail = {"traceName": trace_name} if trace_name is not None else {}
        fh.write(b"\n]" + (b", " + orjson.dumps(tail)[1:] if tail else b"}") + b"\n")
    return {
        "path": str(dest),
        "bytes": dest.stat().st_size,
        "events": n,
        "repeats": reps,
        "source": str(source),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--sizes", default="10,100,1000", help="single-rank sizes in MB (uncompressed)")
    ap.add_argument("--ranks", type=int, default=8, help="ranks of the multi-rank folder (0: none)")
    ap.add_argument("--rank-mb", type=float, default=50.0, help="size of each rank's trace in MB")
    a = ap.parse_args()
    summary = []
    for mb in (float(s) for s in a.sizes.split(",") if s.strip()):
        summary.append(build(a.source, a.out / f"trace_{int(mb)}mb.json", mb))
        print(orjson.dumps(summary[-1]).decode(), flush=True)
    if a.ranks > 0:
        folder = a.out / f"ranks{a.ranks}x{int(a.rank_mb)}mb"
        for r in range(a.ranks):
            summary.append(build(a.source, folder / f"rank{r}.json", a.rank_mb, rank=r, world_size=a.ranks))
            print(orjson.dumps(summary[-1]).decode(), flush=True)
    (a.out / "traces.json").write_bytes(
        orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    )


if __name__ == "__main__":
    main()
