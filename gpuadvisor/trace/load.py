"""Loading Kineto traces (`.json` / `.json.gz`) into a `TraceModel`: one file (`load_trace`), a folder
of per-rank traces or a list of files (`load_traces`, `load_trace_files`, ranks in parallel worker
processes).

The loader's jobs live in their own modules, each importing only the ones before it: reading and
guarding the bytes (`read`, with the streaming reader `_stream` and the two-process read `_split`),
decoding events into columns (`decode`), the whole-document path for damaged files (`salvage`), and
building the tables (`tables`). Bad input never raises a traceback: a file that cannot be read as a
trace at all raises `InputError` with a one-line message; anything partially usable (truncated file,
invalid UTF-8, events without `dur`, `ts: 0` events, kernels without args, an old `cat` spelling) is
loaded as far as possible and explained in `TraceModel.warnings`.
"""

from __future__ import annotations

import gc
import os
import re
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import orjson

from gpuadvisor.errors import InputError
from gpuadvisor.heap import give_back
from gpuadvisor.trace import _split
from gpuadvisor.trace._split_worker import forked_main
from gpuadvisor.trace._stream import CHUNK_BYTES, EventStream, StreamFallback
from gpuadvisor.trace.collect import Collector
from gpuadvisor.trace.decode import Progress, int_or_none
from gpuadvisor.trace.identify import read_head
from gpuadvisor.trace.job import RankClaim, check_one_job, not_one_job_error, rank_in_name, rank_problems
from gpuadvisor.trace.kind import classify
from gpuadvisor.trace.limits import TraceLimits, too_many_events
from gpuadvisor.trace.model import TraceMeta, TraceModel
from gpuadvisor.trace.read import Damage, read_tail
from gpuadvisor.trace.salvage import collect_whole
from gpuadvisor.trace.steps import segment_steps
from gpuadvisor.trace.tables import (
    build_tables,
    check_time_resolution,
    drop_captured_launches,
    drop_colliding_correlations,
    drop_duplicate_events,
    drop_zero_ts,
    frame,
    refuse_if_all_set_aside,
    span_of,
    trace_meta,
)

__all__ = ["load_trace", "load_trace_files", "load_traces", "peek_rank_claim", "read_tail"]

_OPEN_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')


def _collect_streaming(
    path: Path,
    keep_python_functions: bool,
    progress: Progress | None,
    chunk_bytes: int,
    split: bool = True,
    limits: TraceLimits | None = None,
) -> tuple[dict[str, Any], Collector]:
    """Stream the file in blocks (bounded memory); raises StreamFallback when it cannot. With `split`,
    a large file's second half is read by a worker process (`gpuadvisor.trace._split`)."""
    col = Collector(keep_python_functions)
    handover = (
        _split.start(path, col, chunk_bytes, while_waiting=_import_table_libraries, forked_main=forked_main)
        if split
        else None
    )
    report = progress
    if handover is not None and progress is not None:
        other = handover

        def report(done: int, total: int) -> None:
            progress(min(total, done + other.worker_pos), total)

    limits = limits or TraceLimits.from_env()
    stream = EventStream(
        path, chunk_bytes=chunk_bytes, progress=report, handover=handover, decode=col.decode, limits=limits, repair=col.repair
    )
    try:
        for events in stream.chunks():
            if limits.events_exceeded(col.total + len(events)):
                raise too_many_events(path, limits.max_events)
            col.feed(events)
    finally:
        if handover is not None:
            handover.close()
    if limits.events_exceeded(col.total):  # this process's part and the split worker's together
        raise too_many_events(path, limits.max_events)
    return stream.top, col


def _import_table_libraries() -> None:
    """Import pandas (~0.3 s), which the tables need next: done while the split's worker finishes."""
    # lazy: pandas stays out of `import gpuadvisor.api` and the trace-split worker
    import pandas  # noqa: F401


def load_trace(
    path: Path,
    *,
    rank: int | None = None,
    keep_python_functions: bool = False,
    progress: Progress | None = None,
    chunk_bytes: int | None = None,
    split: bool = True,
    limits: TraceLimits | None = None,
) -> TraceModel:
    """Load one Kineto trace file (.json or .json.gz, gzip detected by content) into a `TraceModel`.

    rank: overrides the rank (else distributedInfo.rank, else `rankN` in the file name, else 0).
    progress: called as progress(done, total) while loading (done/total is the fraction read: bytes
      of the file while streaming, events for a damaged file) and finally as (events, events).
    chunk_bytes: block size of the streaming reader (default 2 MiB; memory use grows with it).
    split: a trace of 32 MB or more (decompressed) is read by two processes when a second CPU is free
      (`gpuadvisor.trace._split`; same tables); False reads it in this process only.
    The file is streamed in blocks; a damaged file (truncated, invalid UTF-8, not an object) is
    re-read as a whole document so that its complete part can be salvaged.
    limits: the most decompressed text and events read (`gpuadvisor.trace.limits`; default: the
      environment's, else 2 GB and 20 million); past either, `TraceTooLarge` (an InputError, exit 2).
    Raises InputError (one line) when the file cannot be read as a trace at all.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a trace file")
    warnings: list[str] = []
    damage = Damage()
    limits = limits or TraceLimits.from_env()
    # The load allocates millions of dicts and tuples that all stay alive until the tables are
    # built: the cyclic GC would rescan them again and again for nothing (it doubled load time).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            obj, col = _collect_streaming(
                path, keep_python_functions, progress, chunk_bytes or CHUNK_BYTES, split, limits
            )
        except StreamFallback:
            warnings = []
            obj, col = collect_whole(path, keep_python_functions, progress, warnings, damage, limits)
        if progress is not None:
            progress(col.total, col.total)
        warnings.extend(col.warnings(path))
        tables = build_tables(col.kernels, col.copies, col.memsets, col.runtime, col.cpu_ops, col.annotations)
        del col.kernels, col.copies, col.memsets, col.runtime, col.cpu_ops, col.annotations
        give_back()  # the read's blocks and columns, freed under the tables
    finally:
        if gc_was_enabled:
            gc.enable()
    if col.total and not any(len(df) for df in tables.values()):
        refuse_if_all_set_aside(path, col)
    drop_duplicate_events(tables, warnings)
    drop_zero_ts(tables, warnings)
    check_time_resolution(path, tables, warnings)
    drop_colliding_correlations(tables, warnings)
    capture = drop_captured_launches(tables)
    span = span_of(tables)
    meta = trace_meta(obj, span, warnings)
    if rank is None:
        rank = _rank(meta, path)
    py_df = frame(col.pyfuncs) if keep_python_functions else None
    model = TraceModel(
        path=path,
        rank=rank,
        meta=meta,
        kernels=tables["kernels"],
        copies=tables["copies"],
        memsets=tables["memsets"],
        runtime=tables["runtime"],
        cpu_ops=tables["cpu_ops"],
        annotations=tables["annotations"],
        steps=tables["annotations"].iloc[0:0],  # replaced below
        warnings=warnings,
        counts=dict(sorted(col.counts.items())),
        python_functions=py_df,
        truncated=damage.truncated,
    )
    model.steps, model.step_source = segment_steps(model)
    model.kind = classify(model, capture)
    return model


def _rank(meta: TraceMeta, path: Path) -> int:
    if meta.distributed_info is not None:
        r = int_or_none(meta.distributed_info.get("rank"))
        if r is not None:
            return r
    r = rank_in_name(path.name)
    return 0 if r is None else r


def load_traces(
    path: Path,
    *,
    keep_python_functions: bool = False,
    progress: Progress | None = None,
) -> list[TraceModel]:
    """Load every `.json` / `.json.gz` trace in a folder (or one file), sorted by rank.

    The rank of each comes from distributedInfo.rank, else `rankN` in the file name. The files of a
    folder must be the distinct ranks of one job (`gpuadvisor.trace.job.check_one_job`), else
    InputError. Several files load in parallel processes (see `load_trace_files`); `progress` is only
    used for a single file.
    """
    path = Path(path)
    if path.is_file():
        return [load_trace(path, keep_python_functions=keep_python_functions, progress=progress)]
    if not path.is_dir():
        raise InputError(f"{path}: no such file or directory")
    files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))
    if not files:
        raise InputError(f"{path}: no .json or .json.gz traces in this folder")
    models = load_trace_files(files, keep_python_functions=keep_python_functions)
    return sorted(models, key=lambda m: m.rank)


def _load_one(path: Path, keep_python_functions: bool) -> TraceModel:
    """Worker-process entry point (module level so that it pickles). The ranks already use the
    CPUs: no second process per file."""
    return load_trace(path, keep_python_functions=keep_python_functions, split=False)


def load_trace_files(
    paths: Sequence[Path],
    *,
    keep_python_functions: bool = False,
    workers: int | None = None,
    on_done: Callable[[Path, int, int], None] | None = None,
    one_job: bool = True,
) -> list[TraceModel]:
    """Load several trace files, in parallel worker processes when there are several files and CPUs.

    Returns the models in the order of `paths` (ranks as `load_trace` finds them). workers: number of
    processes (default: min(files, CPUs); 1 loads in this process). on_done(path, done, total) is
    called in this process as each file finishes. An InputError of any file is raised as is.
    one_job: several files are the ranks of one job; when they are not (two files claim one rank, a
    file says no rank, world sizes, schemas or accelerators differ) InputError names why
    (`gpuadvisor.trace.job.check_one_job`).
    """
    paths = [Path(p) for p in paths]
    if one_job and len(paths) > 1:
        _refuse_early(paths)
    if workers is None:
        workers = min(len(paths), os.cpu_count() or 1)
    models: list[TraceModel] = []
    if workers <= 1 or len(paths) <= 1:
        for i, p in enumerate(paths):
            models.append(load_trace(p, keep_python_functions=keep_python_functions))
            if on_done is not None:
                on_done(p, i + 1, len(paths))
    else:
        models = _load_parallel(paths, keep_python_functions, workers, on_done)
    if one_job and len(models) > 1:
        check_one_job(models, _common_folder(paths))
    return models


def _refuse_early(paths: list[Path]) -> None:
    """Refuse a folder that cannot be one job before parsing it, when every file's rank claim can be
    read cheaply (`peek_rank_claim`): a folder of 30 MB traces that all say no rank fails in a
    fraction of a second instead of after loading them all."""
    claims = []
    for p in paths:
        claim = peek_rank_claim(p)
        if claim is None:
            return  # unknown without a full load: check_one_job decides after loading
        claims.append(claim)
    problems = rank_problems(claims)
    if problems:
        raise not_one_job_error(_common_folder(paths), len(paths), problems)


_TAIL_BYTES = 64 * 1024


def peek_rank_claim(path: Path) -> RankClaim | None:
    """The rank a trace file claims, read from its head (and tail) without parsing its events; None
    when that cannot be told cheaply. Kineto writes `distributedInfo` before `traceEvents`; hand-made
    traces may write it after, so a header without it is confirmed by the file's last 64 KB."""
    name_rank = rank_in_name(path.name)
    try:
        head = read_head(path, _TAIL_BYTES).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError:
        return None
    if head.startswith(b"["):
        return RankClaim(path.name, name_rank)  # a bare event array carries no metadata
    m = _OPEN_EVENTS.search(head)
    if not head.startswith(b"{") or m is None:
        return None
    try:
        header = orjson.loads(head[: m.start()] + b'"traceEvents": []}')
    except orjson.JSONDecodeError:
        return None
    info = header.get("distributedInfo") if isinstance(header, dict) else None
    if isinstance(info, dict):
        rank = int_or_none(info.get("rank"))
        size = int_or_none(info.get("world_size"))
        return RankClaim(path.name, rank if rank is not None else name_rank, size)
    try:
        tail = read_tail(path, _TAIL_BYTES)
    except (OSError, EOFError, zlib.error):
        return None
    if b'"distributedInfo"' in tail:
        return None  # metadata after the events: only a full load can read it
    return RankClaim(path.name, name_rank)


def _common_folder(paths: Sequence[Path]) -> Path:
    parents = {p.parent for p in paths}
    return parents.pop() if len(parents) == 1 else Path(os.path.commonpath([str(p) for p in paths]))


def _load_parallel(
    paths: list[Path],
    keep_python_functions: bool,
    workers: int,
    on_done: Callable[[Path, int, int], None] | None,
) -> list[TraceModel]:
    results: dict[int, TraceModel] = {}
    # Each worker parses one file at a time and sends the finished tables back (pickled DataFrames:
    # a few MB even for a large trace, since python_function and args are already dropped).
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(_load_one, p, keep_python_functions): i for i, p in enumerate(paths)}
        for fut in as_completed(futures):
            i = futures[fut]
            results[i] = fut.result()
            if on_done is not None:
                on_done(paths[i], len(results), len(paths))
    return [results[i] for i in range(len(paths))]
