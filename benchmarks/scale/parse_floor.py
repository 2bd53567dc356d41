"""What reading a trace's events costs with compiled JSON readers, beside gpuadvisor's own read (issue 43).

    python benchmarks/scale/parse_floor.py TRACE [--repeat 2]

For one uncompressed Kineto trace (one event per line, as `make_traces.py` writes them), prints the
CPU and wall seconds of:

- `msgspec`: decoding the `traceEvents` array into gpuadvisor's `Event` structs (the fields the tables
  read; `gpuadvisor.trace.decode`), nothing else;
- `gpuadvisor read`: the loader's whole read (`load_trace` up to its columns: decode, the per-column
  pass and its checks), one process (`GPUADVISOR_LOAD_SPLIT=0` behaviour: the collector is fed here);
- `pyarrow.json` and `polars` (only where installed; neither is a gpuadvisor dependency): the events
  rewritten as newline-delimited JSON (timed apart: "ndjson rewrite"), read with an explicit schema of
  the 8 top-level fields and the 4-14 args the kernel table needs (pyarrow uses both cores), and
  polars' `read_json` of the array itself. They stop at their own columns: gpuadvisor's checks and
  conversions are not in their time, so they bound from below what a compiled reader could give.

The machine's load matters: run it on quiet cores and compare CPU seconds.
"""

from __future__ import annotations

import argparse
import io
import re
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """Median wall and CPU seconds of `repeat` calls, and the last call's result."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        out = None
        w, c = time.perf_counter(), _cpu()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(_cpu() - c)
    return statistics.median(walls), statistics.median(cpus), out


def _events_array(data: bytes) -> bytes:
    at = data.index(b'"traceEvents"')
    return data[data.index(b"[", at) : data.rindex(b"]") + 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    data = a.trace.read_bytes()
    events = _events_array(data)
    rows: list[tuple[str, float, float, str]] = []

    from gpuadvisor.trace import decode

    w, c, out = _timed(lambda: decode.decode_events(events), a.repeat)
    n = len(out)
    del out
    rows.append(("msgspec: decode into Event structs", w, c, f"{n:,} events"))

    from gpuadvisor.trace.collect import Collector

    def gpuadvisor_read() -> int:
        col = Collector(keep_python_functions=False)
        col.feed(decode.decode_events(events))
        return sum(len(getattr(col, t)) for t in Collector.TABLES)

    w, c, kept = _timed(gpuadvisor_read, a.repeat)
    rows.append(("gpuadvisor read: decode + per-column pass", w, c, f"{kept:,} rows kept"))

    w, c, ndjson = _timed(lambda: re.sub(rb"\}\s*,\s*\n\s*\{", b"}\n{", events[1:-1]), 1)
    lines = ndjson.count(b"\n") + 1
    rows.append(("ndjson rewrite (for the readers below)", w, c, f"{lines:,} lines"))
    args = {
        "correlation": "i", "External id": "i", "device": "i", "stream": "i", "grid": "l", "block": "l",
        "registers per thread": "i", "shared memory": "i", "blocks per SM": "f", "warps per SM": "f",
        "est. achieved occupancy %": "f", "bytes": "i", "memory bandwidth (GB/s)": "f", "Sequence number": "i",
    }  # fmt: skip
    try:
        import pyarrow as pa
        import pyarrow.json as pj
    except ImportError:
        rows.append(("pyarrow.json", float("nan"), float("nan"), "not installed"))
    else:
        kinds = {"i": pa.int64(), "f": pa.float64(), "l": pa.list_(pa.int64())}
        schema = pa.schema(
            [("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()), ("ts", pa.float64()),
             ("dur", pa.float64()), ("tid", pa.int64()), ("pid", pa.int64()),
             ("args", pa.struct([(k, kinds[v]) for k, v in args.items()]))]
        )  # fmt: skip
        opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        try:
            w, c, table = _timed(lambda: pj.read_json(io.BytesIO(ndjson), parse_options=opts), a.repeat)
            rows.append(("pyarrow.json: ndjson, explicit schema", w, c, f"{table.num_rows:,} rows"))
        except Exception as err:  # a trace whose pid/tid are text ("Spans") has no one schema
            rows.append(("pyarrow.json: ndjson, explicit schema", float("nan"), float("nan"), f"refused: {str(err)[:80]}"))
    try:
        import polars as pl
    except ImportError:
        rows.append(("polars", float("nan"), float("nan"), "not installed"))
    else:
        kinds_pl = {"i": pl.Int64, "f": pl.Float64, "l": pl.List(pl.Int64)}
        schema_pl = {
            "ph": pl.String, "cat": pl.String, "name": pl.String, "ts": pl.Float64, "dur": pl.Float64,
            "tid": pl.String, "pid": pl.String, "args": pl.Struct({k: kinds_pl[v] for k, v in args.items()}),
        }  # fmt: skip
        for label, fn in (
            ("polars.read_ndjson: explicit schema", lambda: pl.read_ndjson(io.BytesIO(ndjson), schema=schema_pl)),
            ("polars.read_json: the array, explicit schema", lambda: pl.read_json(io.BytesIO(events), schema=schema_pl)),
        ):
            try:
                w, c, frame = _timed(fn, a.repeat)
                rows.append((label, w, c, f"{frame.height:,} rows"))
            except Exception as err:
                rows.append((label, float("nan"), float("nan"), f"refused: {str(err)[:80]}"))
    print(f"{a.trace.name}: {len(data) / 1e6:.0f} MB, median of {a.repeat}")
    print(f"{'reader':48} {'wall s':>8} {'cpu s':>8}")
    for label, w, c, note in rows:
        print(f"{label:48} {w:8.2f} {c:8.2f}  {note}")


if __name__ == "__main__":
    main()
