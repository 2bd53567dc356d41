"""Build large SYNTHETIC Kineto traces for the scale benchmark by repeating a real trace's steps.

Every output is marked synthetic in its top-level metadata
(`"gpuadvisor_synthetic": "repeated steps of <source>"`) and carries `distributedInfo`
(rank, world_size) so that HTA accepts it. The source trace's recorded window (its ProfilerSteps)
is repeated N times; each copy is shifted in time by the window span (plus a 1 ms gap), and its
correlation ids, External ids, flow ids and ProfilerStep numbers are shifted so they stay unique.
Metadata events (`ph: M`) are written once. Output is written streaming (never held in memory).

    python benchmarks/scale/make_traces.py [--source PATH] [--out benchmarks/scale/out]
        [--sizes 10,100,1000] [--ranks 8 --rank-mb 50] [--tiny-events 5000000]

`--tiny-events N` also writes `tiny_{N/1e6}m_events.json`: N tiny SYNTHETIC events (~110 bytes each) in
launch groups (a cpu_op, its cudaLaunchKernel, the kernel) over 100 ProfilerSteps, the issue-43 load
of "5M tiny events". `--bombs` (default) writes `bombs/*.json.gz`: 256 MiB decompression bombs of
whitespace, nested brackets, one endless event, number or header string (a few MB each on disk).
"""

from __future__ import annotations

import argparse
import gzip
import re
import zlib
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


def build_tiny(dest: Path, events: int, steps: int = 100) -> dict[str, Any]:
    """Write a SYNTHETIC trace of about `events` tiny events (~110 bytes each): launch groups of one
    cpu_op, its cudaLaunchKernel and the kernel it launched (linked by External id and correlation
    id, one stream), in `steps` ProfilerSteps of equal length; written streaming."""
    groups = max(1, events // 3)
    per_step = max(1, groups // steps)
    head = {
        "schemaVersion": 1,
        "gpuadvisor_synthetic": f"tiny launch groups ({groups} x cpu_op + launch + kernel, {steps} steps)",
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "computeMajor": 9,
                              "computeMinor": 0, "totalGlobalMem": 85520809984}],
    }  # fmt: skip
    op = b'{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":%d,"dur":8,"args":{"External id":%d}}'
    rt = (
        b'{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":%d,"dur":4,'
        b'"args":{"External id":%d,"correlation":%d}}'
    )
    k = b'{"ph":"X","cat":"kernel","name":"k_add","pid":0,"tid":7,"ts":%d,"dur":6,"args":{"correlation":%d}}'
    step = b'{"ph":"X","cat":"user_annotation","name":"ProfilerStep#%d","pid":1,"tid":1,"ts":%d,"dur":%d}'
    n = 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("wb") as fh:
        fh.write(orjson.dumps(head)[:-1] + b', "traceEvents": [\n')
        for s in range(steps):
            t0 = 1_000_000 + s * per_step * 10
            parts = [step % (s, t0, per_step * 10 - 1)]
            for g in range(s * per_step, (s + 1) * per_step):
                t = 1_000_000 + g * 10
                parts += [op % (t, g + 1), rt % (t + 2, g + 1, g + 1), k % (t + 7, g + 1)]
            fh.write((b",\n" if s else b"") + b",\n".join(parts))
            n += len(parts)
        fh.write(b"\n]}\n")
    return {"path": str(dest), "bytes": dest.stat().st_size, "events": n, "steps": steps}


# Decompression bombs (issue 29's and issue 43's): (head, one MiB repeated, tail), 256 MiB inflated
BOMBS = {
    "whitespace_pure": (b"", b" " * (1 << 20), b""),
    "whitespace_between_events": (
        b'{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1},', b" " * (1 << 20),
        b'{"ph":"X","cat":"kernel","name":"k","ts":2,"dur":1}]}',
    ),
    "whitespace_then_junk": (b"", b" " * (1 << 20), b"x"),
    "whitespace_in_an_object": (b"{", b" " * (1 << 20), b"}"),
    "nested_brackets": (b'{"traceEvents":', b"[" * (1 << 20), b""),
    "one_endless_event": (b'{"traceEvents":[{', b'"a":1,' * ((1 << 20) // 6), b'"b":2}]}'),
    "one_endless_number": (b'{"traceEvents":[{"ph":"X","cat":"kernel","ts":1', b"0" * (1 << 20), b',"dur":1}]}'),
    "one_endless_header_string": (b'{"x":"', b"a" * (1 << 20), b'","traceEvents":[]}'),
}  # fmt: skip


def _gzip_member(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def write_bomb(path: Path, name: str, mib: int = 256) -> Path:
    """Write BOMBS[name] as a gzip of `mib` MiB inflated (one compressed MiB repeated: seconds)."""
    head, unit, tail = BOMBS[name]
    one = _gzip_member(unit)
    with path.open("wb") as fh:
        fh.write(_gzip_member(head) if head else b"")
        for _ in range(mib):
            fh.write(one)
        fh.write(_gzip_member(tail) if tail else b"")
    return path


def build_bombs(folder: Path, mib: int = 256) -> list[dict[str, Any]]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [write_bomb(folder / f"{name}.json.gz", name, mib) for name in BOMBS]
    return [{"path": str(p), "bytes": p.stat().st_size, "inflated_mib": mib} for p in paths]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--sizes", default="10,100,1000", help="single-rank sizes in MB (uncompressed)")
    ap.add_argument("--ranks", type=int, default=8, help="ranks of the multi-rank folder (0: none)")
    ap.add_argument("--rank-mb", type=float, default=50.0, help="size of each rank's trace in MB")
    ap.add_argument("--tiny-events", type=int, default=5_000_000, help="events of the tiny-events trace (0: none)")
    ap.add_argument("--bombs", action=argparse.BooleanOptionalAction, default=True, help="write out/bombs/*.json.gz")
    a = ap.parse_args()
    summary = []
    if a.bombs:
        summary.extend(build_bombs(a.out / "bombs"))
    if a.tiny_events > 0:
        summary.append(build_tiny(a.out / f"tiny_{a.tiny_events // 1_000_000}m_events.json", a.tiny_events))
        print(orjson.dumps(summary[-1]).decode(), flush=True)
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
