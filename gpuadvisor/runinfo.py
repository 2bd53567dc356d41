"""Reading a run directory (docs/run-directory.md) into a `RunInfo`, and classifying an input path.

Every reader here is tolerant: a run killed early has only some files, a newer writer may add keys.
Missing or unreadable optional files become empty dicts / None with a reason in `RunInfo.notes`;
only a path that is neither a run directory, a trace file nor a folder of traces is an `InputError`.
"""

from __future__ import annotations

import csv
import functools
import gzip
import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gpuadvisor import rundir
from gpuadvisor.errors import InputError
from gpuadvisor.manifest import ChildState, Manifest
from gpuadvisor.received import MAX_NVML_BYTES, inside, read_json_file, run_file, trace_entry
from gpuadvisor.redact import redact_lines, redact_text
from gpuadvisor.runcheck import (
    EXAMPLES,
    MAX_NVML_COLUMNS,
    MAX_NVML_HEADER,
    MAX_NVML_INFLATED,
    NVML_RANGES,
    check_callsites,
    check_environment,
    check_manifest,
)
from gpuadvisor.trace.identify import sniff_file

if TYPE_CHECKING:
    import pandas as pd

InputKind = Literal["run", "trace", "folder"]

TRACE_SUFFIXES = (".json", ".json.gz")


@dataclass
class RunInfo:
    """What a run directory holds besides the trace.

    Attributes:
      run_dir: the directory.
      manifest, environment: the parsed JSON objects ({} when missing or unreadable); `record` is the
        manifest typed (`gpuadvisor.manifest.Manifest`).
      callsites: callsites.json "callsites" list ([] when missing).
      steps_counted: callsites.json "steps_counted" (else manifest "steps_seen", else None).
      nvml: DataFrame with rundir.NVML_COLUMNS (numeric columns float64, empty cell = NaN), or None.
      nvml_reason: why nvml is None (manifest nvml.reason, "nvml.csv.gz missing", ...), else None.
      trace_paths: the trace files of the run (manifest "traces", else trace/rank*.json[.gz]).
      notes: human sentences about missing/unreadable files.
    """

    run_dir: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    callsites: list[dict[str, Any]] = field(default_factory=list)
    steps_counted: int | None = None
    nvml: pd.DataFrame | None = None
    nvml_reason: str | None = None
    trace_paths: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @functools.cached_property
    def record(self) -> Manifest:
        """manifest.json as the typed `Manifest` (defaults for what is missing; docs/run-directory.md)."""
        return Manifest.from_json(self.manifest)

    @property
    def settings(self) -> dict[str, Any]:
        """environment.json "settings" ({} when absent)."""
        value = self.environment.get("settings")
        return value if isinstance(value, dict) else {}

    @property
    def degraded(self) -> list[str]:
        value = self.manifest.get("degraded")
        return [str(v) for v in value] if isinstance(value, list) else []

    def rank_callsites(self, rank: int) -> list[dict[str, Any]]:
        """The call sites rank `rank` recorded (`callsites.json` for rank 0, `callsites.rankN.json` for
        rank N of a multi-GPU run: docs/run-directory.md); [] when that file is missing or unreadable.
        The file name is the run directory's convention, never a path taken from the manifest."""
        if rank == 0 or rank < 0:
            return list(self.callsites) if rank == 0 else []
        name = f"callsites.rank{int(rank)}.json"
        cs = check_callsites(_read_json(self.run_dir, name, []), [], name)  # checked as callsites.json
        raw = cs.get("callsites")
        rows = [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []
        _redact_sites(rows, {})
        return rows

    def gpu(self, cuda_index: int = 0) -> dict[str, Any] | None:
        """environment.json gpus entry for a CUDA ordinal (or the first one), else None."""
        gpus = self.environment.get("gpus")
        if not isinstance(gpus, list) or not gpus:
            return None
        for g in gpus:
            if isinstance(g, dict) and g.get("cuda_index") == cuda_index:
                return g
        first = gpus[0]
        return first if isinstance(first, dict) else None


def _read_json(run_dir: Path, name: str, notes: list[str]) -> dict[str, Any]:
    data = read_json_file(run_dir, name, notes)
    if data is None:
        if not os.path.lexists(run_dir / name):
            notes.append(f"{name} is missing.")
        return {}
    if not isinstance(data, dict):
        notes.append(f"{name} is not a JSON object; it was ignored.")
        return {}
    return data


class _Inflated(io.RawIOBase):
    """A binary stream that stops with ValueError once more than `limit` bytes were read from it (a
    gzip that inflates without bound)."""

    def __init__(self, raw: gzip.GzipFile, limit: int) -> None:
        self.raw, self.left = raw, limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(min(len(buffer), self.left + 1))
        self.left -= len(data)
        if self.left < 0:
            raise ValueError(f"inflates past {MAX_NVML_INFLATED:,} bytes")
        buffer[: len(data)] = data
        return len(data)


def _read_nvml(run_dir: Path, notes: list[str]) -> tuple[pd.DataFrame | None, str | None]:
    """nvml.csv.gz as a DataFrame of rundir.NVML_COLUMNS, every reading checked against its range
    (`runcheck.NVML_RANGES`: one out of range becomes empty, a row without a valid time is left out,
    both counted in a note); only the known columns are parsed, and the inflated text is bounded."""
    # lazy: pandas stays out of `import gpuadvisor.api`
    import pandas as pd

    path, why = run_file(run_dir, rundir.NVML, max_bytes=MAX_NVML_BYTES)
    if path is None:
        return None, why or f"{rundir.NVML} is missing"
    try:
        with gzip.open(path, "rb") as raw, io.TextIOWrapper(
            io.BufferedReader(_Inflated(raw, MAX_NVML_INFLATED)), encoding="utf-8", newline=""
        ) as fh:
            header = fh.readline(MAX_NVML_HEADER + 1)
            if len(header) > MAX_NVML_HEADER:
                return None, f"{path.name} has a header of more than {MAX_NVML_HEADER:,} characters; it was not read"
            names = next(csv.reader([header]), [])
            if len(names) > MAX_NVML_COLUMNS:
                return None, f"{path.name} has {len(names):,} columns (the sampler writes 20); it was not read"
            known = [c for c in dict.fromkeys(names) if c in rundir.NVML_COLUMNS]
            df = pd.read_csv(
                fh, header=None, names=names, usecols=known, dtype={"gpu_uuid": str}, index_col=False
            )
    except (OSError, EOFError, UnicodeDecodeError, ValueError, pd.errors.ParserError) as exc:
        # A sampler killed mid-write leaves a truncated gzip: keep the rows pandas could read? gzip
        # streams cannot be resumed, so report it instead of guessing.
        return None, f"{path.name} could not be read ({type(exc).__name__}: {exc})"
    columns = {}
    for col in rundir.NVML_COLUMNS:
        if col == "gpu_uuid":
            columns[col] = df[col] if col in df.columns else pd.Series(pd.NA, index=df.index, dtype="object")
        else:
            values = df[col] if col in df.columns else pd.Series(float("nan"), index=df.index)
            columns[col] = pd.to_numeric(values, errors="coerce").astype("float64")
    df = pd.DataFrame(columns)
    df = _in_range(df, path.name, notes)
    df = df.sort_values(["t_unix_s", "gpu_index"], kind="stable").reset_index(drop=True)
    if len(df) == 0:
        return None, f"{path.name} holds no samples"
    return df, None


def _in_range(df: pd.DataFrame, name: str, notes: list[str]) -> pd.DataFrame:
    """`df` with every reading outside its range emptied and the rows without a valid time left out;
    one note counts them and names the first few."""
    dropped: list[str] = []
    count = 0
    for col, (lo, hi) in NVML_RANGES.items():
        values = df[col]
        bad = values.notna() & ~values.between(lo, hi)
        if bad.any():
            count += int(bad.sum())
            dropped.append(f"{col} {values[bad].iloc[0]:g}")
            df.loc[bad, col] = float("nan")
    untimed = df["t_unix_s"].isna()
    if untimed.any():
        dropped.append(f"{int(untimed.sum())} row(s) without a valid t_unix_s")
        df = df[~untimed]
    if dropped:
        shown = "; ".join(dropped[:EXAMPLES]) + ("; ..." if len(dropped) > EXAMPLES else "")
        notes.append(f"{name}: {count} reading(s) out of range left out ({shown})")
    return df


def _find_traces(run_dir: Path, manifest: dict[str, Any], notes: list[str] | None = None) -> list[Path]:
    """The run's traces: the manifest's `traces` list (paths inside the run directory only), else the
    trace files of RUN/trace/. A refused entry or file is left out with a note (`received.run_file`)."""
    refused: list[str] = []
    listed = manifest.get("traces")
    paths: list[Path] = []
    if isinstance(listed, list):
        for entry in listed:
            if not isinstance(entry, str):
                continue
            path, why = trace_entry(run_dir, entry)
            if path is not None:
                paths.append(path)
            elif why is not None:
                refused.append(why)
    if not paths:
        tdir = run_dir / rundir.TRACE_DIR
        if tdir.is_dir() and inside(run_dir, tdir):
            for p in sorted(tdir.iterdir()):
                if not _is_trace_name(p):
                    continue
                path, why = run_file(run_dir, p.relative_to(run_dir), what="trace")
                if path is not None:
                    paths.append(path)
                elif why is not None:
                    refused.append(why)
    if notes is not None:
        notes.extend(dict.fromkeys(refused))
    return paths


def _is_trace_name(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES)


CHILD_STATE_FILE = ".child_state.json"  # gpuadvisor.capture.session.STATE_FILE (not imported: no torch)


def _completed_manifest(run_dir: Path, manifest: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """A manifest the parent never finished (it was killed: the placeholder written before the script
    started) is completed from the training process's own hand-over file when there is one, and the
    run is said to be cut off, so that no reader sees "0 steps" beside a trace of 9."""
    if manifest.get("ended_unix_s") is not None or manifest.get("exit_reason") not in (None, "not_started"):
        return manifest
    state = _read_json(run_dir, CHILD_STATE_FILE, [])
    if not state:
        return manifest
    merged = Manifest.from_json(manifest).with_child(ChildState.from_json(state))
    note = (
        "the run was cut off: gpuadvisor profile ended (killed?) before it finished this run directory; "
        "what the training process handed over is used"
    )
    notes.append(note)
    out = merged.with_message(note).to_json()
    if merged.exit_reason.value == "not_started" and state.get("exit_reason"):
        out["exit_reason"] = state["exit_reason"]
    return out


def read_manifest(run_dir: Path, notes: list[str]) -> dict[str, Any]:
    """RUN/manifest.json, completed from the training process's hand-over when the parent never
    finished it, every value checked (`runcheck.check_manifest`); {} when missing or unreadable.
    The reasons go to `notes`."""
    return check_manifest(_completed_manifest(run_dir, _read_json(run_dir, rundir.MANIFEST, notes), notes), notes)


def read_environment(run_dir: Path, notes: list[str]) -> dict[str, Any]:
    """RUN/environment.json, every value checked (`runcheck.check_environment`); {} when missing."""
    return check_environment(_read_json(run_dir, rundir.ENVIRONMENT, notes), notes)


def _redact_sites(callsites: Sequence[Any], environment: Mapping[str, Any]) -> None:
    """The recorded lines masked (gpuadvisor.redact) as the capture masks them since issue 39: a run
    recorded before, or elsewhere, puts no credential of a nearby line into findings.json or a report."""
    for rec in rundir.site_records(callsites, environment):
        if isinstance(rec.get("code"), str):
            rec["code"] = redact_text(rec["code"])[0]
        snippet = rec.get("snippet")
        if isinstance(snippet, dict) and isinstance(snippet.get("lines"), list):
            snippet["lines"] = redact_lines([str(x) for x in snippet["lines"]])


def load_run_info(run_dir: Path) -> RunInfo:
    """Read manifest.json, environment.json, callsites.json and nvml.csv.gz of a run directory.

    Raises InputError only when `run_dir` is not a directory.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: not a run directory")
    notes: list[str] = []
    manifest = read_manifest(run_dir, notes)
    environment = read_environment(run_dir, notes)
    cs = check_callsites(_read_json(run_dir, rundir.CALLSITES, notes), notes)
    callsites_raw = cs.get("callsites")
    callsites = [c for c in callsites_raw if isinstance(c, dict)] if isinstance(callsites_raw, list) else []
    _redact_sites(callsites, environment)
    steps_counted: int | None = None
    for value in (cs.get("steps_counted"), manifest.get("steps_seen")):
        if isinstance(value, int) and not isinstance(value, bool):
            steps_counted = value
            break
    nvml_meta = manifest.get("nvml") if isinstance(manifest.get("nvml"), dict) else {}
    assert isinstance(nvml_meta, dict)
    nvml: pd.DataFrame | None = None
    reason: str | None = None
    if nvml_meta.get("available") is False:
        reason = str(nvml_meta.get("reason") or "NVML was not available during the run")
    else:
        nvml, reason = _read_nvml(run_dir, notes)
    return RunInfo(
        run_dir=run_dir,
        manifest=manifest,
        environment=environment,
        callsites=callsites,
        steps_counted=steps_counted,
        nvml=nvml,
        nvml_reason=reason,
        trace_paths=_find_traces(run_dir, manifest, notes),
        notes=notes,
    )


def resolve_input(path: Path) -> tuple[InputKind, Path | None, list[Path]]:
    """Classify an analyze/report/diff input.

    Returns (kind, run_dir, trace_paths):
      ("run", RUN, traces of the run)      a directory holding manifest.json
      ("trace", None, [file])               a .json / .json.gz file
      ("folder", None, [files...])          a directory of .json / .json.gz traces (sorted by name)
    Raises InputError (one line) for a missing path, another file type, or a folder without traces.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if rundir.is_run_dir(path):
        return "run", path, _find_traces(path, read_manifest(path, []))
    if path.is_file():
        if not _is_trace_name(path):
            # Another name: a trace all the same (read it), or say what it is.
            is_trace, what = sniff_file(path)
            if not is_trace:
                raise InputError(
                    f"{path}: not a trace: {what} (expected a .json or .json.gz Kineto trace or a run directory)"
                )
        return "trace", None, [path]
    if path.is_dir():
        # a folder of traces someone sent is data too: a link out of it is not one of its traces
        traces = sorted(p for p in path.iterdir() if p.is_file() and _is_trace_name(p) and inside(path, p))
        if not traces:
            tdir = path / rundir.TRACE_DIR
            if tdir.is_dir():
                traces = sorted(p for p in tdir.iterdir() if p.is_file() and _is_trace_name(p) and inside(path, p))
        if not traces:
            runs = sorted(p.name for p in path.iterdir() if p.is_dir() and rundir.is_run_dir(p))
            if runs:
                # a folder of runs (sample_runs/): say so, and how to analyze them
                shown = ", ".join(runs[:3]) + (", ..." if len(runs) > 3 else "")
                raise InputError(
                    f"{path}: not a run but a folder of {len(runs)} run director{'y' if len(runs) == 1 else 'ies'} "
                    f"({shown}): analyze one of them (gpuadvisor analyze {path / runs[0]})"
                )
            raise InputError(f"{path}: no run directory (manifest.json) and no .json/.json.gz traces in it")
        return "folder", None, traces
    raise InputError(f"{path}: not a file or directory")
