"""The loader's one pass: decoded events into compact per-table columns, a block at a time.

A block of events is sorted by category with numpy, and each of its columns is converted at once: a
look at the types the column holds, then one numpy conversion. Only a column that holds something
unusual (a string where a number belongs, a 64-bit unsigned id, a grid of the wrong length) goes value
by value through the rules of `gpuadvisor.trace.decode`, so every cell is what a value-by-value pass
gives. Nothing of a block is kept but its columns (numpy chunks; strings as codes into each column's
distinct strings), so a parsed block is freed whole. `python_function` events (often the majority)
are only counted unless `keep_python_functions=True`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import chain, repeat
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import orjson

from gpuadvisor.trace.decode import (
    BAD_DIM,
    CAT_ALIASES,
    KERNEL_ARG_FIELDS,
    MAX_DIM,
    MAX_DURATION_US,
    NA_INT,
    NO_ARGS,
    NO_RAW,
    SPAN_AS_OP,
    Event,
    Progress,
    decode_events,
    event_of,
    int64_id,
    launch_dim3,
    lone_surrogates_note,
    number,
    shape_list,
    thread_id,
    type_list,
    without_lone_surrogates,
)
from gpuadvisor.words import plural

if TYPE_CHECKING:
    from types import ModuleType

_PROGRESS_EVERY = 200_000
_NAN = float("nan")
_NONE = type(None)
_NUMBERS = frozenset({float, int})
_NUMBERS_OR_NONE = frozenset({float, int, _NONE})
_INTS_OR_NONE = frozenset({int, _NONE})
_RAW = msgspec.Raw

# The categories the tables read, by code (an event's canonical category; -1: not read).
_READ = (
    "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cpu_op", "user_annotation",
    "gpu_user_annotation", "python_function",
)  # fmt: skip
KERNEL, MEMCPY, MEMSET, RUNTIME, DRIVER, CPU_OP, ANNOTATION, GPU_ANNOTATION, PYFUNC = range(len(_READ))
_NOT_READ = -1
_UNSEEN = -2
_MISSING = "\x00missing"  # a cache miss (a string: `in` compares it with strings at their length)
_INVALID = "\x00invalid"  # a value the analysis cannot compute with


def _numpy() -> ModuleType:
    # lazy: numpy stays out of `import gpuadvisor.api`; the split's worker imports it with its first block
    import numpy

    return numpy


def _category_code(raw: Any) -> int:
    canonical = CAT_ALIASES.get(raw.lower()) if type(raw) is str else None
    return _READ.index(canonical) if canonical is not None else _NOT_READ


class Columns:
    """One table's columns while the trace is read: per column a list of chunks, one per block (float64
    `f`, int64 `i` with `NA_INT` for a missing value, bool `b`, Python lists `o` of shared strings or
    None), and for `c` columns (codes, strings): int32 codes into a list of the column's distinct
    strings. `Columns.take` hands a worker's chunks over; `arrays` joins them once the trace is read."""

    def __init__(self, spec: tuple[tuple[str, str], ...]) -> None:
        self.spec = spec  # (column, kind)
        self.chunks: list[list[Any]] = [[] for _ in spec]
        self._index: list[dict[str, int]] = [{} for _ in spec]  # `c` columns: string -> code
        self._strings: list[list[str]] = [[] for _ in spec]  # `c` columns: code -> string
        self._sent = [0] * len(spec)  # `c` strings handed over by `take`
        self.rows = 0

    def __len__(self) -> int:
        return self.rows

    def add(self, values: Sequence[Any]) -> None:
        """Append one block's columns, in `spec` order (`c` columns as lists of strings)."""
        np = _numpy()
        for i, ((_, kind), v) in enumerate(zip(self.spec, values, strict=True)):
            if kind == "c":
                index, strings = self._index[i], self._strings[i]
                for s in set(v).difference(index):
                    index[s] = len(strings)
                    strings.append(s)
                v = (np.fromiter(map(index.__getitem__, v), dtype=np.int32, count=len(v)), strings)
            self.chunks[i].append(v)
        self.rows += len(values[0])

    def take(self) -> tuple[list[list[Any]], list[list[str]]]:
        """The chunks collected so far (`c` ones as bare codes) and each `c` column's strings not handed
        over before; the columns are left empty (a split read's worker sends these)."""
        chunks = [[c[0] if kind == "c" else c for c in col] for (_, kind), col in zip(self.spec, self.chunks, strict=True)]
        new = [s[sent:] for s, sent in zip(self._strings, self._sent, strict=True)]
        self._sent = [len(s) for s in self._strings]
        self.chunks = [[] for _ in self.spec]
        self.rows = 0
        return chunks, new

    def put(self, taken: tuple[list[list[Any]], list[list[str]]], strings: list[list[str]]) -> None:
        """Append another collector's `take()` after this one's rows; `strings` mirrors that collector's
        strings per column (extended here), which its codes index."""
        chunks, new = taken
        for i, ((_, kind), col) in enumerate(zip(self.spec, chunks, strict=True)):
            strings[i].extend(new[i])
            if kind == "c":
                self.chunks[i].extend((c, strings[i]) for c in col)
            else:
                self.chunks[i].extend(col)
        self.rows += sum(len(c) for c in chunks[0])

    def arrays(self) -> dict[str, Any]:
        """Every column joined (`c` columns as (codes, sorted strings)); the chunks are released."""
        np = _numpy()
        empty = {"f": np.float64, "i": np.int64, "b": np.bool_}
        out: dict[str, Any] = {}
        for i, (name, kind) in enumerate(self.spec):
            chunks, self.chunks[i] = self.chunks[i], []
            if kind == "o":
                out[name] = list(chain.from_iterable(chunks))
            elif kind == "c":
                out[name] = _joined_codes(np, chunks)
            else:
                out[name] = np.concatenate(chunks) if chunks else np.zeros(0, dtype=empty[kind])
        self.rows = 0
        return out


def _joined_codes(np: ModuleType, chunks: list[tuple[Any, list[str]]]) -> tuple[Any, list[str]]:
    """Codes of chunks that index different string lists (this process's, a worker's) as codes into
    one sorted list of the distinct strings (the categories pandas would infer)."""
    origins = {id(strings): strings for _, strings in chunks}
    merged = sorted(set().union(*origins.values()))
    position = {s: i for i, s in enumerate(merged)}
    rank = {key: np.array([position[s] for s in strings], dtype=np.int32) for key, strings in origins.items()}
    codes = [rank[id(strings)][c] for c, strings in chunks]
    return (np.concatenate(codes) if codes else np.zeros(0, dtype=np.int32)), merged


_KERNEL_SPEC = (
    ("ts", "f"), ("dur", "f"), ("name", "c"), ("device", "i"), ("stream", "i"), ("correlation", "i"),
    ("external_id", "i"), ("grid_x", "f"), ("grid_y", "f"), ("grid_z", "f"), ("block_x", "f"), ("block_y", "f"),
    ("block_z", "f"), ("registers_per_thread", "f"), ("shared_memory", "f"), ("blocks_per_sm", "f"),
    ("warps_per_sm", "f"), ("occupancy_pct", "f"),
)  # fmt: skip
_COPY_SPEC = (
    ("ts", "f"), ("dur", "f"), ("name", "c"), ("bytes", "f"), ("bandwidth_gbps", "f"), ("correlation", "i"),
    ("external_id", "i"), ("device", "i"), ("stream", "i"),
)  # fmt: skip
_MEMSET_SPEC = (
    ("ts", "f"), ("dur", "f"), ("name", "c"), ("bytes", "f"), ("correlation", "i"), ("device", "i"), ("stream", "i"),
)  # fmt: skip
_RUNTIME_SPEC = (
    ("ts", "f"), ("dur", "f"), ("name", "c"), ("correlation", "i"), ("external_id", "i"), ("tid", "i"), ("cat", "c"),
)  # fmt: skip
_CPU_OP_SPEC = (
    ("ts", "f"), ("dur", "f"), ("name", "c"), ("tid", "i"), ("external_id", "i"), ("input_dims", "o"),
    ("input_types", "o"), ("flops", "f"), ("seq_num", "i"),
)  # fmt: skip
_ANNOTATION_SPEC = (("ts", "f"), ("dur", "f"), ("name", "c"), ("tid", "i"), ("on_gpu", "b"))
_PYFUNC_SPEC = (("ts", "f"), ("dur", "f"), ("name", "c"), ("tid", "i"))


class Collector:
    """The one pass: sorts events into per-table columns, counting what it sets aside."""

    # the tables and counters that a split read's worker hands over (gpuadvisor/trace/_split.py)
    TABLES = ("kernels", "copies", "memsets", "runtime", "cpu_ops", "annotations", "pyfuncs")
    COUNTERS = (
        "no_dur", "no_ts", "bad_events", "kernels_without_args", "bad_launch_dims", "bad_dur", "negative_dur",
        "huge_dur", "total", "bad_shapes", "lone_surrogates",
    )  # fmt: skip

    def __init__(self, keep_python_functions: bool) -> None:
        self.keep_python_functions = keep_python_functions
        self.kernels = Columns(_KERNEL_SPEC)
        self.copies = Columns(_COPY_SPEC)
        self.memsets = Columns(_MEMSET_SPEC)
        self.runtime = Columns(_RUNTIME_SPEC)
        self.cpu_ops = Columns(_CPU_OP_SPEC)
        self.annotations = Columns(_ANNOTATION_SPEC)
        self.pyfuncs = Columns(_PYFUNC_SPEC)
        self.counts: dict[str, int] = {}
        self.no_dur = 0
        self.no_ts = 0
        self.bad_events = 0
        self.kernels_without_args = 0
        self.bad_launch_dims = 0
        self.bad_dur = 0
        self.negative_dur = 0
        self.huge_dur = 0
        self.total = 0
        self.bad_shapes = 0  # ops whose Input Dims / Input type the analysis cannot read (left out)
        self.lone_surrogates = 0  # escaped lone surrogates replaced with U+FFFD
        self._code_of_cat: dict[Any, int] = {}  # raw "cat" -> its code (_NOT_READ: not read)
        self._op_names: set[str] = set()  # cpu_op names checked against SPAN_AS_OP
        self._span_names: set[str] = set()  # ... and those that are record_function spans
        # Input Dims / Input type: repeated values share one string (a large trace repeats a few hundred
        # of them millions of times); keyed by raw JSON text (b"" is an absent field)
        self._strings: dict[str, str] = {}
        self._lists: dict[Any, dict[bytes, str | None]] = {shape_list: {b"": None}, type_list: {b"": None}}
        self._worker_strings: dict[str, list[list[str]]] = {}

    # -- a split read's handover (gpuadvisor/trace/_split.py) ------------------------------------------

    def take_columns(self) -> list[Any]:
        """Every table's columns collected so far, leaving empty ones (the worker sends these)."""
        return [getattr(self, name).take() for name in self.TABLES]

    def append_columns(self, tables: list[Any]) -> None:
        """Append another collector's `take_columns()` after this one's rows."""
        for name, taken in zip(self.TABLES, tables, strict=True):
            columns: Columns = getattr(self, name)
            mirror = self._worker_strings.setdefault(name, [[] for _ in columns.spec])
            columns.put(taken, mirror)

    def add_counts(self, counts: dict[str, int], counters: Sequence[int]) -> None:
        """Add another collector's category counts and `COUNTERS` to this one's."""
        for key, n in counts.items():
            self.counts[key] = self.counts.get(key, 0) + n
        for name, n in zip(self.COUNTERS, counters, strict=True):
            setattr(self, name, getattr(self, name) + n)

    # -- the pass ------------------------------------------------------------------------------------

    def decode(self, data: bytes) -> list[Any]:
        """`decode_events(data)`; a block holding an escaped lone surrogate (half a UTF-16 pair, which
        msgspec and orjson refuse) is read again with it replaced by U+FFFD, and counted."""
        try:
            return decode_events(data)
        except orjson.JSONDecodeError as exc:
            if "surrogate" not in str(exc):
                raise
        return decode_events(self.repair(data))

    def repair(self, data: bytes) -> bytes:
        """`data` with its escaped lone surrogates replaced by U+FFFD, counted."""
        data, count = without_lone_surrogates(data)
        self.lone_surrogates += count
        return data

    def feed(self, events: list[Any], progress: Progress | None = None, total: int = 0) -> None:
        """Sort `events` (`Event` structs; dicts and other values on the whole-document path) into the
        tables' columns; `progress(done, total)` is called after every 200,000 events."""
        if len(events) <= _PROGRESS_EVERY:
            self._feed(events)
            return
        for start in range(0, len(events), _PROGRESS_EVERY):
            self._feed(events[start : start + _PROGRESS_EVERY])
            if progress is not None and start + _PROGRESS_EVERY < len(events):
                progress(self.total, total)

    def _feed(self, events: list[Any]) -> None:
        np = _numpy()
        n = len(events)
        self.total += n
        if not _all_type(events, Event):  # dicts of the whole-document path, or not objects at all
            converted = [e if type(e) is Event else event_of(e) for e in events]
            events = [e for e in converted if e is not None]
            self.bad_events += n - len(events)
        if not events:
            return
        code = self._categories(np, [e.cat for e in events])
        read = np.flatnonzero(code >= 0)
        if len(read) < len(events):
            events, code = _pick(events, read), code[read]
        if not events:
            return
        phs = [e.ph for e in events]
        if not _all_equal(phs, "X"):  # complete events only ("X", the default)
            complete = np.flatnonzero(np.array([p == "X" for p in phs], dtype=bool))
            events, code = _pick(events, complete), code[complete]
        ts = _floats(np, [e.ts for e in events])
        dur, dur_missing = _durations(np, [e.dur for e in events])
        keep = np.isfinite(ts)
        self.no_ts += len(keep) - int(np.count_nonzero(keep))
        if dur_missing is not None:
            self.no_dur += int(np.count_nonzero(keep & dur_missing))
            dur[dur_missing] = 0.0
        for counter, bad in (
            ("bad_dur", ~np.isfinite(dur)),  # NaN, infinite (1e999), not a number
            ("negative_dur", dur < 0),
            ("huge_dur", dur > MAX_DURATION_US),
        ):
            bad &= keep
            if bad.any():
                setattr(self, counter, getattr(self, counter) + int(np.count_nonzero(bad)))
                keep &= ~bad
        if not self.keep_python_functions:
            keep &= code != PYFUNC  # counted only (often the majority of a with_stack trace)
        rows = np.flatnonzero(keep)
        if len(rows) < len(events):
            events, code, ts, dur = _pick(events, rows), code[rows], ts[rows], dur[rows]
        if not events:
            return
        names = [e.name for e in events]
        if not _all_type(names, str):
            names = [v if type(v) is str else "" if v is None else str(v) for v in names]
        self._spans_as_annotations(np, names, code)
        for table, codes in (
            (self.cpu_ops, (CPU_OP,)),
            (self.kernels, (KERNEL,)),
            (self.runtime, (RUNTIME, DRIVER)),
            (self.copies, (MEMCPY,)),
            (self.memsets, (MEMSET,)),
            (self.annotations, (ANNOTATION, GPU_ANNOTATION)),
            (self.pyfuncs, (PYFUNC,)),
        ):
            hit = code == codes[0]
            for other in codes[1:]:
                hit |= code == other
            if not hit.any():
                continue
            at = np.flatnonzero(hit)
            whole = len(at) == len(events)
            part = events if whole else _pick(events, at)
            table.add(
                self._columns(
                    np, table, part, ts if whole else ts[at], dur if whole else dur[at],
                    names if whole else _pick(names, at), code if whole else code[at],
                )
            )  # fmt: skip

    def _categories(self, np: ModuleType, cats: list[Any]) -> Any:
        """Count each raw category (a name that is not text counts as "") and return each event's code."""
        try:
            counted = Counter(cats)
        except TypeError:  # a list or an object as "cat"
            cats = [c if type(c) is str else "" for c in cats]
            counted = Counter(cats)
        counts = self.counts
        for key, k in counted.items():
            text = key if type(key) is str else ""
            counts[text] = counts.get(text, 0) + k
        code_of = self._code_of_cat
        for raw in counted.keys() - code_of.keys():
            code_of[raw] = _category_code(raw)
        return np.fromiter(map(code_of.get, cats, repeat(_UNSEEN)), dtype=np.int8, count=len(cats))

    def _spans_as_annotations(self, np: ModuleType, names: list[str], code: Any) -> None:
        """2021 traces log record_function spans (ProfilerStep#N and friends) as operators: read them as
        annotations, checking each distinct op name once."""
        ops = np.flatnonzero(code == CPU_OP)
        if not len(ops):
            return
        op_names = _pick(names, ops)
        distinct = set(op_names)
        for name in distinct - self._op_names:
            self._op_names.add(name)
            if SPAN_AS_OP.match(name):
                self._span_names.add(name)
        spans = distinct & self._span_names
        if spans:
            code[ops[np.array([n in spans for n in op_names], dtype=bool)]] = ANNOTATION

    def _columns(
        self, np: ModuleType, table: Columns, events: list[Any], ts: Any, dur: Any, names: list[str], code: Any
    ) -> list[Any]:
        """The columns of `table` (in its spec order) for `events`, all of its category."""
        if table is self.annotations:
            return [ts, dur, names, _tids(np, [e.tid for e in events]), code == GPU_ANNOTATION]
        if table is self.pyfuncs:
            return [ts, dur, names, _tids(np, [e.tid for e in events])]
        args = [e.args for e in events]
        if not _all_type(args, type(NO_ARGS)):
            args = [NO_ARGS if a is None else a for a in args]
        if table is self.cpu_ops:
            dims = [a.dims for a in args]
            absent = dims.count(NO_RAW)  # the default: no "Input Dims" (a trace without record_shapes)
            if absent == len(dims):
                dims = [a.dims_2021 for a in args]
            elif absent or not _all_type(dims, _RAW):
                old = [a.dims_2021 for a in args]
                # the common mix (ops with and without shapes, no 2021 spelling): an absent value stays
                # an absent value; else value by value
                if not (old.count(NO_RAW) == len(old) and _all_type(dims, _RAW)):
                    dims = [e if _absent(d) else d for d, e in zip(dims, old, strict=True)]
            return [
                ts, dur, names, _tids(np, [e.tid for e in events]), _ints(np, _external(args)),
                *self._shapes(dims, [a.types for a in args]), _floats(np, [a.flops for a in args]),
                _ints(np, [a.sequence for a in args]),
            ]  # fmt: skip
        correlation = _ints(np, [a.correlation for a in args])
        if table is self.runtime:
            cat = ["cuda_driver" if c == DRIVER else "cuda_runtime" for c in code.tolist()]
            return [ts, dur, names, correlation, _ints(np, _external(args)), _tids(np, [e.tid for e in events]), cat]
        device = _ints(np, _or_else([a.device for a in args], events, "pid"))
        stream = _ints(np, _or_else([a.stream for a in args], events, "tid"))
        if table is self.memsets:
            return [ts, dur, names, _floats(np, [a.bytes for a in args]), correlation, device, stream]
        if table is self.copies:
            return [
                ts, dur, names, _floats(np, [a.bytes for a in args]), _floats(np, [a.bandwidth for a in args]),
                correlation, _ints(np, _external(args)), device, stream,
            ]  # fmt: skip
        self.kernels_without_args += _without_args(np, args)
        grid, bad_grid = _dims3(np, [a.grid for a in args])
        block, bad_block = _dims3(np, [a.block for a in args])
        bad = bad_grid | bad_block
        if bad.any():
            self.bad_launch_dims += int(np.count_nonzero(bad))
            grid[bad] = np.nan
            block[bad] = np.nan
        return [
            ts, dur, names, device, stream, correlation, _ints(np, _external(args)),
            grid[:, 0], grid[:, 1], grid[:, 2], block[:, 0], block[:, 1], block[:, 2],
            _floats(np, [a.registers for a in args]), _floats(np, [a.shared_memory for a in args]),
            _floats(np, [a.blocks_per_sm for a in args]), _floats(np, [a.warps_per_sm for a in args]),
            _floats(np, [a.occupancy for a in args]),
        ]  # fmt: skip

    def _shapes(self, dims: list[Any], types: list[Any]) -> tuple[list[str | None], list[str | None]]:
        """Input Dims and Input type as shared strings (their `str()` form, None when absent). An op
        whose values the analysis cannot compute with (`shape_list`, `type_list`: strings among the
        dimensions, numbers beyond 2^53, not lists) keeps neither, and is counted."""
        dims_text, bad_dims = self._texts(dims, shape_list)
        types_text, bad_types = self._texts(types, type_list)
        if bad_dims or bad_types:
            none = [False] * len(dims)
            bad = [a or b for a, b in zip(bad_dims or none, bad_types or none, strict=True)]
            self.bad_shapes += sum(bad)
            dims_text = [None if b else t for t, b in zip(dims_text, bad, strict=True)]
            types_text = [None if b else t for t, b in zip(types_text, bad, strict=True)]
        return dims_text, types_text

    def _texts(self, values: list[Any], valid: Any) -> tuple[list[str | None], list[bool] | None]:
        """Values as shared strings, computed once per distinct value, and which ones `valid` refuses
        (None: none)."""
        cache = self._lists[valid]
        if values.count(NO_RAW) == len(values):  # absent everywhere (a trace without record_shapes)
            return [None] * len(values), None
        if _all_type(values, _RAW):
            keys = list(map(bytes, values))
            out = list(map(cache.get, keys, repeat(_MISSING)))
            if _MISSING in out:  # new values: each turned into text once
                for key in set(keys).difference(cache):
                    try:
                        value = orjson.loads(key)
                    except orjson.JSONDecodeError:  # a number beyond float64
                        value = _INVALID
                    cache[key] = self._text(value, valid)
                out = list(map(cache.__getitem__, keys))
        else:
            out = [self._text(v, valid) for v in values]
        return out, ([v is _INVALID for v in out] if _INVALID in out else None)  # type: ignore[return-value]

    def _text(self, v: Any, valid: Any) -> Any:
        """One parsed value as a shared string (or `_INVALID`), computed once per distinct value (keyed
        by orjson's bytes of it; a raw JSON text never starts with "=")."""
        if v is None:
            return None
        if type(v) is _RAW:
            return self._texts([v], valid)[0][0]
        if v is _INVALID or not valid(v):
            return _INVALID
        try:
            key = b"=" + orjson.dumps(v)
        except TypeError:  # not from JSON (a test's object): no cache
            return str(v)
        cache = self._lists[valid]
        hit = cache.get(key)
        if hit is None:
            t = str(v)
            hit = cache[key] = self._strings.setdefault(t, t)
        return hit

    def warnings(self, path: Path) -> list[str]:
        out: list[str] = []
        if self.total == 0:
            out.append(f"{path.name} holds no events (empty traceEvents).")
        if self.bad_events:
            out.append(f"{self.bad_events} trace events were not JSON objects and were skipped.")
        if self.no_ts:
            out.append(f"{self.no_ts} events had no usable 'ts' and were skipped.")
        if self.no_dur:
            out.append(f"{self.no_dur} complete events had no 'dur'; they were kept with a duration of 0.")
        if self.bad_dur:
            out.append(
                f"{self.bad_dur} events had a 'dur' that is not a finite number (NaN, Infinity, 1e999, text); "
                "they were set aside: every time and share below leaves them out."
            )
        if self.negative_dur:
            out.append(
                f"{self.negative_dur} events had a negative 'dur'; they were set aside: every time and share "
                "below leaves them out."
            )
        if self.huge_dur:
            out.append(
                f"{self.huge_dur} events had a 'dur' longer than a day ({MAX_DURATION_US:.3g} us; no profiler "
                "window records that); they were set aside: every time and share below leaves them out."
            )
        if self.bad_launch_dims:
            out.append(
                f"{self.bad_launch_dims} kernels carry impossible launch dimensions (negative or beyond 32 bits); "
                "their grid and block were ignored."
            )
        if self.kernels_without_args:
            out.append(
                f"{self.kernels_without_args} kernels carry no args (grid, occupancy, correlation unknown for them)."
            )
        if self.bad_shapes:
            out.append(
                f"{plural(self.bad_shapes, 'op')} carry Input Dims or Input type that are not shapes and type names (text "
                "among the dimensions, numbers beyond 2^53, not lists); their shapes were left out (no FLOPs or "
                "bytes from them)."
            )
        if self.lone_surrogates:
            out.append(lone_surrogates_note(path.name, self.lone_surrogates))
        return out


# ---- whole columns at once, value by value only where a column holds something unusual -------------


def _pick(items: Sequence[Any], at: Any) -> list[Any]:
    """The items at the positions `at` (an index array), in order."""
    if len(at) == 1:
        return [items[int(at[0])]]
    return list(itemgetter(*at.tolist())(items)) if len(at) else []


def _all_type(values: list[Any], kind: type) -> bool:
    return set(map(type, values)) == {kind} if values else True


def _all_equal(values: list[Any], value: Any) -> bool:
    try:
        return set(values) == {value}
    except TypeError:  # unhashable values: not all equal to a string
        return False


def _floats(np: ModuleType, values: list[Any]) -> Any:
    """`number(v)` of each value as a float64 cell: NaN where it is None."""
    types = set(map(type, values))
    if types <= _NUMBERS_OR_NONE:
        try:
            a = np.array(values, dtype=np.float64)
        except (OverflowError, TypeError, ValueError):  # an int too large for a float
            pass
        else:
            finite = np.isfinite(a)
            if types & _NUMBERS and not finite.all():
                a[~finite] = np.nan
            return a
    return np.array([_NAN if (f := number(v)) is None else f for v in values], dtype=np.float64)


def _durations(np: ModuleType, values: list[Any]) -> tuple[Any, Any]:
    """`dur` as float64 cells (NaN where it is not a finite number) and where it is missing (None: nowhere)."""
    if None not in values:
        return _floats(np, values), None
    return _floats(np, values), np.array([v is None for v in values], dtype=bool)


def _ints(np: ModuleType, values: list[Any]) -> Any:
    """`int64_id(v)` of each value as an int64 cell: `NA_INT` where it is None."""
    types = set(map(type, values))
    if types <= _INTS_OR_NONE:
        try:
            return np.array(values if _NONE not in types else [NA_INT if v is None else v for v in values], dtype=np.int64)
        except OverflowError:  # beyond int64: value by value
            pass
    return np.array([NA_INT if (i := int64_id(v)) is None else i for v in values], dtype=np.int64)


def _tids(np: ModuleType, values: list[Any]) -> Any:
    """`thread_id(v)` of each value as an int64 cell: `NA_INT` where it is None."""
    types = set(map(type, values))
    if types == {int}:
        try:
            a = np.array(values, dtype=np.int64)
        except OverflowError:
            pass
        else:
            if not (a == NA_INT).any():  # int64's minimum is a thread name's CRC, not a missing value
                return a
    return np.array([NA_INT if (t := thread_id(v)) is None else t for v in values], dtype=np.int64)


def _dims3(np: ModuleType, values: list[Any]) -> tuple[Any, Any]:
    """`launch_dim3(v)` of each value as an (n, 3) float64 array (NaN where absent) and where it is
    impossible."""
    n = len(values)
    types = set(map(type, values))
    if types == {list} and set(map(len, values)) == {3} and set(map(type, chain.from_iterable(values))) <= _NUMBERS:
        try:
            a = np.array(values, dtype=np.float64)
        except OverflowError:
            pass
        else:
            return a, ~((a >= 0) & (a <= MAX_DIM)).all(axis=1)  # NaN and infinities fail the test
    if types <= {_NONE}:
        return np.full((n, 3), np.nan), np.zeros(n, dtype=bool)
    dims = [launch_dim3(v) for v in values]
    bad = np.array([d[0] is BAD_DIM for d in dims], dtype=bool)
    return np.array([[_NAN if x is None else x for x in d] for d in dims], dtype=np.float64).reshape(n, 3), bad


def _absent(value: Any) -> bool:
    """An absent "Input Dims" (its 2021 spelling "Input dims" is read instead)."""
    return value is None or (type(value) is _RAW and not value)


def _external(args: list[Any]) -> list[Any]:
    """"External id" (today), else "external id" (2021 traces)."""
    ids = [a.external_id for a in args]
    if None not in ids:
        return ids
    return [b if a is None else a for a, b in zip(ids, [a.external_id_2021 for a in args], strict=True)]


def _or_else(values: list[Any], events: list[Any], field: str) -> list[Any]:
    """`values`, with the event's own `field` (pid, tid) where a value is None (a device or stream)."""
    if None not in values:
        return values
    return [getattr(e, field) if v is None else v for v, e in zip(values, events, strict=True)]


def _without_args(np: ModuleType, args: list[Any]) -> int:
    """How many kernels carry none of the args that say what they are (grid, correlation...)."""
    missing = None
    for field in KERNEL_ARG_FIELDS:
        values = [getattr(a, field) for a in args]
        if None not in values:
            return 0
        here = np.array([v is None for v in values], dtype=bool)
        missing = here if missing is None else missing & here
    return int(np.count_nonzero(missing))
