"""Issue 39, "Done when": no exit 70 from any fuzzed run directory or trace. A seeded fuzzer over REAL
recordings of sample_runs/ (tutorial_cnn-planted, dlrm-planted; a SYNTHETIC verify.json built here)
damaged on purpose: values of manifest.json, environment.json, callsites.json and verify.json replaced
by hostile ones (wrong types, 1e300, 2^63, NaN, nested, huge lists), cells of nvml.csv.gz likewise, and
fields of the trace's events. Each damaged input is analyzed by the CLI in this process (`analyze
--format json`, and for some `report`); an internal error (exit 70) or a run past its time is a failure,
named with the seed and the damage so that it can be replayed. A usage error (exit 2) is an answer.

Slow: about 240 analyses of real recordings (1-3 s each on 2 cores)."""

from __future__ import annotations

import copy
import csv
import gzip
import io
import json
import random
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuadvisor.cli import cli
from tests.reliability.test_cases import SAMPLE_RUNS

pytestmark = pytest.mark.slow

SEED = 39
RUNS = ("tutorial_cnn-planted", "dlrm-planted")
CASES_PER_RUN = 60  # run-directory damages per recording
TRACE_CASES_PER_RUN = 30  # trace damages per recording
TIME_LIMIT_S = 90  # one analysis of a damaged recording (the undamaged ones take 1-3 s)

HOSTILE: list[Any] = [
    None, "", "x", "1e3", -1, 0, 1.5, -0.5, 1e300, -1e300, float("nan"), float("inf"), 2**63, 10**30,
    True, [], {}, [1, 2], {"a": 1}, [None], ["x"] * 3, "\n::error::x", "<script>", "../../etc/passwd",
]  # fmt: skip
NVML_HOSTILE = ["-50", "1e300", "nan", "inf", "x", "", "99999999999999999999", "-1e308", "0x10"]

# SYNTHETIC verify --explore document (the shape verify writes; numbers made up here)
VERIFY_DOC: dict[str, Any] = {
    "schema_version": 1,
    "synthetic": "written by tests/reliability/test_fuzz.py",
    "settings": {"budget_s": 600.0, "explore": True, "trials": 3},
    "baseline": {"status": "ok", "step_time_ms": 55.6, "samples_per_s": 2300.9, "trials": 3},
    "trials": [
        {"lever": "tf32", "label": "tf32", "remedy": "tf32", "status": "ok", "speedup": 1.1, "low": 1.0,
         "high": 1.2, "trials": 3, "verdict": "faster", "compared_in": "step_time_ms", "findings": ["GA701"]},
        {"lever": "fused_optimizer", "label": "fused", "remedy": "fused_optimizer", "status": "failed",
         "reason": "boom", "findings": ["GA502"]},
    ],
    "explore": {
        "levers": ["tf32", "fused_optimizer"],
        "best": {"levers": ["tf32"], "labels": ["tf32"], "speedup": 1.1, "low": 1.0, "high": 1.2, "trials": 3,
                 "verdict": "faster", "compared_in": "step_time_ms", "changes": [{"text": "TF32 on"}],
                 "text": "best measured configuration: tf32: 1.10x (1.00-1.20, 3 trials)"},
        "steps": [{"from": [], "candidates": [{"levers": ["tf32"], "trials": 3, "status": "ok", "speedup": 1.1}],
                   "chosen": ["tf32"]}],
        "stopped": "no lever adds to the best configuration beyond noise",
        "trials_run": 9,
    },
}  # fmt: skip


class _TooLong(BaseException):  # not an Exception: the CLI turns those into exit 70
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _TooLong


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if prefix:
        yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:4]):
            yield from _paths(v, (*prefix, i))


def _set(node: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _damage_json(rng: random.Random, doc: Any) -> list[str]:
    paths = list(_paths(doc))
    said = []
    for _ in range(rng.randint(1, 3)):
        if not paths:
            break
        path = rng.choice(paths)
        value = copy.deepcopy(rng.choice(HOSTILE))
        if rng.random() < 0.1:
            value = [value] * rng.choice((1000, 100_000))  # a long list
        try:
            _set(doc, path, value)
        except (KeyError, IndexError, TypeError):
            continue
        said.append(f"{'.'.join(map(str, path))}={str(value)[:40]!s}")
        paths = list(_paths(doc))
    return said


def _damage_nvml(rng: random.Random, run: Path) -> list[str]:
    with gzip.open(run / "nvml.csv.gz", "rt", encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    said = []
    for _ in range(rng.randint(1, 20)):
        r, c = rng.randrange(1, len(rows)), rng.randrange(len(rows[0]))
        rows[r][c] = rng.choice(NVML_HOSTILE)
        said.append(f"nvml[{r}][{rows[0][c]}]={rows[r][c]}")
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    (run / "nvml.csv.gz").write_bytes(gzip.compress(buf.getvalue().encode()))
    return said


TRACE_HOSTILE_DIMS: list[Any] = [
    [["x", "y"]],
    [[1e30, 2]],
    [[2**70]],
    [[-5, 3]],
    "[[1, 2]]",
    [[None]],
    [[float("nan")]],
]
TRACE_HOSTILE_STEPS = [str(2**64), str(2**63), "-1", "x", "1e300", "99999999999999999999999", ""]


def _damage_event(rng: random.Random, events: list[dict[str, Any]]) -> str | None:
    """One field of one event (`args` included), damaged; what was done, or None."""
    ev = rng.choice(events)
    keys = [k for k in ev if k != "args"] + [f"args.{k}" for k in (ev.get("args") or {})]
    if not keys:
        return None
    key = rng.choice(keys)
    value = copy.deepcopy(rng.choice(HOSTILE))
    if key.startswith("args."):
        ev["args"][key[5:]] = value
    else:
        ev[key] = value
    return f"{ev.get('cat', '?')}:{str(ev.get('name', '?'))[:30]}.{key}={str(value)[:30]}"


def _damage_trace(rng: random.Random, run: Path) -> list[str]:
    """Damage of the trace's content: a random field, an op's recorded shapes, a ProfilerStep's number,
    a device property, a kernel's launch arguments."""
    path = run / "trace" / "rank0.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    ops = [e for e in events if isinstance(e.get("args"), dict) and "Input Dims" in e["args"]]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    kernels = [e for e in events if e.get("cat") == "kernel" and isinstance(e.get("args"), dict)]
    props = doc.get("deviceProperties") if isinstance(doc.get("deviceProperties"), list) else []
    said = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["field", "field", "dims", "step", "device", "kernel"])
        if kind == "dims" and ops:
            op = rng.choice(ops)
            op["args"]["Input Dims"] = copy.deepcopy(rng.choice(TRACE_HOSTILE_DIMS))
            said.append(f"{op.get('name')}.Input Dims={op['args']['Input Dims']}")
        elif kind == "step" and steps:
            ev = rng.choice(steps)
            ev["name"] = "ProfilerStep#" + rng.choice(TRACE_HOSTILE_STEPS)
            said.append(f"name={ev['name']}")
        elif kind == "device" and props and isinstance(props[0], dict) and props[0]:
            key = rng.choice(sorted(props[0]))
            props[0][key] = copy.deepcopy(rng.choice(HOSTILE))
            said.append(f"deviceProperties[0].{key}={str(props[0][key])[:30]}")
        elif kind == "kernel" and kernels:
            k = rng.choice(kernels)
            key = rng.choice(sorted(k["args"]))
            k["args"][key] = copy.deepcopy(rng.choice(HOSTILE))
            said.append(f"kernel {str(k.get('name'))[:30]}.args.{key}={str(k['args'][key])[:30]}")
        else:
            what = _damage_event(rng, events)
            if what:
                said.append(what)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return said


def _analyze(run: Path, out: Path, report: bool) -> tuple[int, str]:
    runner = CliRunner()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT_S)
    try:
        r = runner.invoke(cli, ["analyze", str(run), "--format", "json", "-o", str(out)])
        code, text = r.exit_code, r.output
        if code == 0 and report:
            r = runner.invoke(cli, ["report", str(run), "-o", str(out.with_suffix(".html")), "--cdn"])
            code, text = r.exit_code, r.output
    except _TooLong:
        return -1, f"ran past {TIME_LIMIT_S} s"
    finally:
        signal.alarm(0)
    return code, text


def _fuzz(tmp_path: Path, name: str, cases: int, damage: str) -> list[str]:
    rng = random.Random(f"{SEED}-{name}-{damage}")
    failures: list[str] = []
    for case in range(cases):
        run = tmp_path / f"{damage}-{case}" / "RUN"
        shutil.copytree(SAMPLE_RUNS / name, run)
        (run / "verify.json").write_text(json.dumps(VERIFY_DOC), encoding="utf-8")
        if damage == "trace":
            said = _damage_trace(rng, run)
        else:
            target = rng.choice(
                ["manifest.json", "environment.json", "callsites.json", "verify.json", "nvml"]
            )
            if target == "nvml":
                said = _damage_nvml(rng, run) if (run / "nvml.csv.gz").is_file() else []
            else:
                doc = json.loads((run / target).read_text(encoding="utf-8"))
                said = [f"{target}: {s}" for s in _damage_json(rng, doc)]
                (run / target).write_text(json.dumps(doc), encoding="utf-8")
        code, text = _analyze(run, run.parent / "out.json", report=case % 5 == 0)
        if code not in (0, 1, 2, 3):
            last = text.strip().splitlines()[-1] if text.strip() else ""
            failures.append(f"{name} {damage} case {case} ({'; '.join(said)}): exit {code}: {last}")
        shutil.rmtree(run.parent, ignore_errors=True)
    return failures


@pytest.mark.parametrize("name", RUNS)
def test_no_fuzzed_run_directory_is_an_internal_error(tmp_path: Path, name: str) -> None:
    """Every value of a run directory's JSON files and NVML samples, damaged: an answer, never exit 70."""
    failures = _fuzz(tmp_path, name, CASES_PER_RUN, "rundir")
    assert not failures, "\n".join(failures)


# Found by this test on 2026-11-28: a ProfilerStep#N with N >= 2^63 (OverflowError in trace/steps.py)
# and a kernel's `stream` of 1e29 or -1e300 (tutorial_cnn-planted cases 8 and 28: no int64 id, so no
# stream; stepmodel/replay.py's stream map raised KeyError: nan). Both fixed; the cases stay in the seed.
@pytest.mark.parametrize("name", RUNS)
def test_no_fuzzed_trace_is_an_internal_error(tmp_path: Path, name: str) -> None:
    """Fields of a recording's trace events, damaged: an answer, never exit 70."""
    failures = _fuzz(tmp_path, name, TRACE_CASES_PER_RUN, "trace")
    assert not failures, "\n".join(failures)
