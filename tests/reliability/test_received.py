"""Issue 39: a run directory someone sends you is data, not a key to your machine; outputs never destroy
inputs. Each probe of the issue, with its input built here by code: a REAL recording of sample_runs/
(tutorial_cnn-planted, recorded on an H200) copied and edited on purpose, or SYNTHETIC files. The
commands run in-process through the CLI (`gpuadvisor.cli`, click's runner: the exit codes, stdout and
stderr a user sees) so that the quick tier keeps them; docs/capture.md lists them ("A run directory
someone sent you")."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gpuadvisor.cli import cli
from tests.reliability.test_cases import SAMPLE_RUNS, SCRIPTS

REAL = "tutorial_cnn-planted"  # REAL, H200: two findings located at the DataLoader's line
# The quick tier keeps one probe of each item: the other inputs of a probe, each an analysis of a real
# recording (1-5 s), run in the slow tier.
SLOW_PARAM = pytest.mark.slow


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every command runs from an empty folder (no pyproject.toml of the repository above it)."""
    home = tmp_path / "cwd"
    home.mkdir()
    monkeypatch.chdir(home)
    monkeypatch.setenv("NO_COLOR", "1")
    yield


def ga(*args: str) -> Result:
    """`gpuadvisor ARGS` in this process: exit code, stdout and stderr as the user sees them."""
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def received(tmp_path: Path, name: str = REAL) -> Path:
    """A copy of a REAL recording, as someone sends it."""
    run = tmp_path / "received" / "RUN"
    shutil.copytree(SAMPLE_RUNS / name, run)
    return run


def edit(run: Path, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads((run / name).read_text(encoding="utf-8"))
    change(doc)
    (run / name).write_text(json.dumps(doc), encoding="utf-8")


def _records(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("callsites", "dataloaders", "optimizers", "model_calls"):
        for row in doc.get(key) or []:
            if isinstance(row, dict) and "file" in row:
                yield row


def point_sites_at(run: Path, file: str) -> None:
    """Every recorded call site names `file`, with neither its line's text nor a snippet (as a run
    recorded before snippets existed, or edited to read the recipient's files)."""

    def change(doc: dict[str, Any]) -> None:
        for row in _records(doc):
            row["file"] = file
            row.pop("code", None)
            row.pop("snippet", None)

    edit(run, "callsites.json", change)
    edit(run, "environment.json", change)


def json_out(run: Path, *extra: str) -> dict[str, Any]:
    out = run.parent / "out.json"
    r = ga("analyze", str(run), "--format", "json", "-o", str(out), *extra)
    assert r.exit_code == 0, r.output
    return dict(json.loads(out.read_text(encoding="utf-8")))


# ------------------------------------------------------------------ 1. local file disclosure


def test_issue39_01_report_never_reads_a_file_named_by_an_absolute_path(tmp_path: Path) -> None:
    """1. "A received run dir whose callsites.json rows name an absolute `.py` path (no recorded
    snippet) ...: `gpuadvisor report` reads 'today's file' and embeds its lines in report.html: a private
    settings file's DB_PASSWORD". The report shows the recorded line only and says the snippet is
    missing."""
    secret = tmp_path / "private" / "settings.py"
    secret.parent.mkdir()
    secret.write_text("".join(f"DB_PASSWORD_{i} = 'hunter{i}'\n" for i in range(200)), encoding="utf-8")
    run = received(tmp_path)
    point_sites_at(run, str(secret))
    r = ga("report", str(run), "-o", str(tmp_path / "report.html"))
    assert r.exit_code == 0, r.output
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "hunter" not in page and "DB_PASSWORD" not in page
    assert "the run recorded no lines around" in page


@pytest.mark.slow  # slow: the quick tier keeps one probe of this item (the analysis of a real recording takes 1-5 s)
def test_issue39_01_report_never_follows_a_symlink_out_of_the_run_dir(tmp_path: Path) -> None:
    """1. "... or a `.py`-named symlink shipped inside the run dir: ... through the symlink the first
    lines of the system's passwd file"."""
    target = tmp_path / "system-passwd"
    target.write_text("root:x:0:0:root:/root:/bin/bash\n" * 100, encoding="utf-8")
    run = received(tmp_path)
    (run / "settings.py").symlink_to(target)
    edit(run, "manifest.json", lambda d: d.update(cwd=str(run)))
    point_sites_at(run, "settings.py")
    r = ga("report", str(run), "-o", str(tmp_path / "report.html"))
    assert r.exit_code == 0, r.output
    assert "root:x:0:0" not in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_issue39_01_sarif_names_no_file_uri_of_the_recipient(tmp_path: Path) -> None:
    """1. "SARIF carries `file:///` URIs of the recipient's paths": a path outside the recorded
    working directory is named (a logical location), never a URI a viewer would open here."""
    run = received(tmp_path)
    point_sites_at(run, "/etc/gpuadvisor-probe/settings.py")
    r = ga("analyze", str(run), "--format", "sarif")
    assert r.exit_code == 0, r.output
    log = json.loads(r.stdout)
    assert "file:" not in r.stdout
    names = [
        loc["logicalLocations"][0]["name"]
        for res in log["runs"][0]["results"]
        for loc in res.get("locations", [])
        if "logicalLocations" in loc
    ]
    assert any(n.startswith("/etc/gpuadvisor-probe/settings.py:") for n in names), names


@pytest.mark.parametrize("entry", ["../../outside.json.gz", "ABSOLUTE"])
def test_issue39_01_manifest_traces_outside_the_run_dir_are_refused(tmp_path: Path, entry: str) -> None:
    """1. "manifest `traces` entries pointing outside the run dir (`../../x`, absolute) are loaded and
    analyzed": they are left out with a note; the run is analyzed without them."""
    run = received(tmp_path)
    outside = tmp_path / "outside.json.gz"
    shutil.move(run / "trace" / "rank0.json.gz", outside)
    name = str(outside) if entry == "ABSOLUTE" else entry
    edit(run, "manifest.json", lambda d: d.update(traces=[name]))
    doc = json_out(run)
    assert not doc["findings"] or all(f["rule"] == "GA001" for f in doc["findings"]), doc["findings"]
    assert any("holds no trace" in n for n in doc["notes"]), doc["notes"]
    assert any("outside the run directory" in n or "by an absolute path" in n for n in doc["notes"]), doc[
        "notes"
    ]


def test_issue39_01_a_trace_linked_out_of_the_run_dir_is_refused(tmp_path: Path) -> None:
    """A trace file, or a recorded JSON file, that is a symbolic link out of the run directory is not
    read: the note says so."""
    run = received(tmp_path)
    outside = tmp_path / "elsewhere.json.gz"
    shutil.move(run / "trace" / "rank0.json.gz", outside)
    (run / "trace" / "rank0.json.gz").symlink_to(outside)
    shutil.move(run / "environment.json", tmp_path / "env.json")
    (run / "environment.json").symlink_to(tmp_path / "env.json")
    doc = json_out(run)
    notes = " ".join(doc["notes"])
    assert "trace/rank0.json.gz is a symbolic link out of the run directory" in notes, notes
    assert "environment.json is a symbolic link out of the run directory" in notes, notes
    assert doc["environment"].get("torch") is None or doc["environment"]["torch"] == "n/a"


@pytest.mark.slow  # slow: the quick tier keeps one probe of this item (the analysis of a real recording takes 1-5 s)
def test_issue39_01_links_inside_the_run_dir_still_work(tmp_path: Path) -> None:
    """The policy refuses only what leads outside: a run directory reached through a link, and a trace
    linked to another file of the same run directory, are read as before."""
    run = received(tmp_path)
    shutil.move(run / "trace" / "rank0.json.gz", run / "kept.json.gz")
    (run / "trace" / "rank0.json.gz").symlink_to(run / "kept.json.gz")
    alias = tmp_path / "alias"
    alias.symlink_to(run)
    doc = json_out(alias)
    assert {f["rule"] for f in doc["findings"]} >= {"GA301"}, doc["findings"]


# ------------------------------------------------------------------ 3. loops whose length comes from the input


def _timed(run: Path) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    doc = json_out(run)
    return time.monotonic() - started, doc


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            lambda c: c["step_ends"].append([1_000_000_000, c["step_ends"][-1][1] + 1]), id="step-1e9"
        ),
        pytest.param(
            lambda c: c["step_ends"].append([10**300, c["step_ends"][-1][1] + 1]),
            id="step-1e300",
            marks=SLOW_PARAM,
        ),
        pytest.param(lambda c: c.update(last_recorded_step=1e300), id="last-1e300", marks=SLOW_PARAM),
        pytest.param(lambda c: c.update(speculation_end_step=2**63), id="speculation-2^63", marks=SLOW_PARAM),
        pytest.param(
            lambda c: c.update(first_recorded_step=-(10**15)), id="first-negative", marks=SLOW_PARAM
        ),
        pytest.param(
            lambda c: c.update(skip_steps=0, first_recorded_step=10**11, last_recorded_step=10**11 + 4),
            id="window-at-1e11",
            marks=SLOW_PARAM,
        ),
    ],
)
def test_issue39_03_step_numbers_never_set_a_loop_length(
    tmp_path: Path, change: Callable[[dict[str, Any]], None]
) -> None:
    """3. "One `[1000000000, t]` entry appended to manifest `capture.step_ends` makes analyze/report/diff
    iterate `range(last + 2, max(ends))` forever." Any such number: answered in seconds, the value
    left out or used without a loop over its span, a note naming it where it was left out."""
    run = received(tmp_path)
    edit(run, "manifest.json", lambda d: change(d["capture"]))
    took, doc = _timed(run)
    assert took < 30, took
    assert doc["metrics"]["step_time_ms"] > 0


def test_issue39_03_a_number_left_out_is_named_in_a_note(tmp_path: Path) -> None:
    run = received(tmp_path)
    edit(run, "manifest.json", lambda d: d["capture"]["step_ends"].append([10**300, 1.0]))
    doc = json_out(run)
    mine = [
        n for n in doc["notes"] if n.startswith("manifest.json: 1 value of the wrong type or out of range")
    ]
    assert len(mine) == 1 and "capture.step_ends[" in mine[0], doc["notes"]
    # the capture's own boundaries are untouched: the same step time as the unedited recording
    clean = json_out(received(tmp_path / "clean"))
    assert doc["metrics"]["step_time_ms"] == clean["metrics"]["step_time_ms"]


@pytest.mark.slow  # slow: the quick tier keeps one probe of this item (the analysis of a real recording takes 1-5 s)
def test_issue39_03_diff_and_report_answer_too(tmp_path: Path) -> None:
    run = received(tmp_path)
    edit(run, "manifest.json", lambda d: d["capture"]["step_ends"].append([1_000_000_000, 2e9]))
    started = time.monotonic()
    r = ga("report", str(run), "-o", str(tmp_path / "r.html"))
    assert r.exit_code == 0, r.output
    r = ga("diff", str(received(tmp_path / "base")), str(run))
    assert r.exit_code == 0, r.output
    assert time.monotonic() - started < 60


# ------------------------------------------------------------------ 2. verify runs nothing the run names


def _planted_command(tmp_path: Path, run: Path, **manifest: Any) -> Path:
    """The run's command pointed at a SYNTHETIC script in a folder of this machine, with `manifest`
    entries over it; returns the marker file any planted program writes."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text("print('synthetic')\n", encoding="utf-8")
    marker = tmp_path / "PLANTED-RAN"

    def change(d: dict[str, Any]) -> None:
        d.update(cwd=str(work), target={"kind": "script", "path_or_name": "train.py", "argv": ["train.py"]})
        d.pop("argv_redacted", None)
        d.update(manifest)

    edit(run, "manifest.json", change)
    return marker


@pytest.mark.slow  # slow: verify probes the machine with a child that imports torch (~5 s)
def test_issue39_02_verify_never_runs_the_python_the_manifest_names(tmp_path: Path) -> None:
    """2. "manifest `python` set to an executable shipped in the run dir: `gpuadvisor verify RUN` runs it
    (the machine probe) before it refuses the run as recorded elsewhere." The probe runs the interpreter
    running gpuadvisor (or --python), from here; the refusal is the same."""
    run = received(tmp_path)
    shipped = run / "python"
    marker = _planted_command(tmp_path, run, python=str(shipped))
    shipped.write_text(f"#!/bin/sh\ntouch {marker}\necho '{{}}'\n", encoding="utf-8")
    shipped.chmod(0o755)
    r = ga("verify", str(run), "-o", str(tmp_path / "verify.json"))
    assert r.exit_code == 2, r.output
    assert "verify measures on the recording's machine" in r.output
    assert not marker.exists()


@pytest.mark.slow  # slow: the quick tier keeps one probe of this item (the analysis of a real recording takes 1-5 s)
def test_issue39_02_verify_never_imports_the_recorded_module(tmp_path: Path) -> None:
    """Checking a recorded `-m pkg.mod` finds it without importing `pkg` (its __init__.py would run in
    gpuadvisor's own process)."""
    run = received(tmp_path)
    marker = _planted_command(tmp_path, run)
    pkg = tmp_path / "work" / "plantedpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    (pkg / "train.py").write_text("print('synthetic')\n", encoding="utf-8")
    edit(
        run,
        "manifest.json",
        lambda d: d.update(target={"kind": "module", "path_or_name": "plantedpkg.train"}),
    )
    r = ga("verify", str(run), "-o", str(tmp_path / "verify.json"))
    assert r.exit_code == 2, r.output
    assert not marker.exists()
    # a module that is not there is still a clear usage error
    edit(
        run, "manifest.json", lambda d: d.update(target={"kind": "module", "path_or_name": "plantedpkg.nope"})
    )
    r = ga("verify", str(run), "-o", str(tmp_path / "verify.json"))
    assert r.exit_code == 2 and "module not found: plantedpkg.nope" in r.output and not marker.exists()


def test_issue39_02_python_option_must_be_an_executable(tmp_path: Path) -> None:
    run = received(tmp_path)
    _planted_command(tmp_path, run)
    r = ga("verify", str(run), "--python", str(tmp_path / "missing"), "-o", str(tmp_path / "verify.json"))
    assert r.exit_code == 2 and "--python" in r.output and "not an executable file" in r.output, r.output


@pytest.mark.slow  # slow: the quick tier keeps one probe of this item (the analysis of a real recording takes 1-5 s)
def test_issue39_02_the_git_check_runs_no_program_of_the_run_dir(tmp_path: Path) -> None:
    """verify asks git whether the run directory is tracked (then it writes verify.json elsewhere);
    a received run directory can ship a .git/config whose `core.fsmonitor` names a program, which
    `git ls-files` runs: verify's question turns it off."""
    import subprocess

    run = received(tmp_path)
    marker = _planted_command(tmp_path, run)
    subprocess.run(["git", "init", "-q", str(run)], check=True)
    monitor = run / "monitor.sh"
    monitor.write_text(f"#!/bin/sh\ntouch {marker}\n", encoding="utf-8")
    monitor.chmod(0o755)
    subprocess.run(["git", "-C", str(run), "config", "core.fsmonitor", str(monitor)], check=True)
    r = ga("verify", str(run))
    assert r.exit_code == 2, r.output
    assert not marker.exists()


# ------------------------------------------------------------------ 3 and 10. nvml.csv.gz


def _nvml_rows(run: Path) -> list[dict[str, str]]:
    with gzip.open(run / "nvml.csv.gz", "rt", encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _write_nvml(run: Path, rows: list[dict[str, str]]) -> None:
    with gzip.open(run / "nvml.csv.gz", "wt", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_issue39_10_nvml_readings_out_of_range_are_left_out_with_a_note(tmp_path: Path) -> None:
    """10. "NVML readings out of range (-50% utilisation, 1e300 W) reach the metrics": each reading
    outside its range is left out, and one note counts them."""
    run = received(tmp_path)
    rows = _nvml_rows(run)
    for row in rows:
        row.update(util_gpu_pct="-50", power_w="1e300")
    _write_nvml(run, rows)
    doc = json_out(run)
    metrics = doc["metrics"]
    assert metrics["nvml_util_mean_pct"] is None and metrics["nvml_power_mean_w"] is None, metrics
    mine = [n for n in doc["notes"] if n.startswith("nvml.csv.gz: ")]
    assert len(mine) == 1 and f"{2 * len(rows)} reading(s) out of range" in mine[0], doc["notes"]
    assert "util_gpu_pct -50" in mine[0] and "power_w 1e+300" in mine[0]


def test_issue39_10_a_tiny_nvml_file_with_100k_columns_costs_no_minutes(tmp_path: Path) -> None:
    """10. "a 433-byte nvml.csv.gz with 100k columns costs 3 minutes": refused in a moment, said why."""
    run = received(tmp_path)
    header = ",".join(["t_unix_s", *(["x"] * 100_000)])
    (run / "nvml.csv.gz").write_bytes(gzip.compress((header + "\n" + "1," * 100_000 + "\n").encode(), 9))
    assert (run / "nvml.csv.gz").stat().st_size < 1000
    took, doc = _timed(run)
    assert took < 20, took
    assert "nvml.csv.gz has a header of more than 65,536 characters" in json.dumps(doc)


# ------------------------------------------------------------------ 9. wrong types in a run directory


WRONG_TYPES: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("optimizers-number", lambda e: e.update(optimizers=1e300)),
    ("torch-number", lambda e: e.update(torch=-1)),
    ("gpus-string", lambda e: e.update(gpus="H100")),
    ("settings-list", lambda e: e.update(settings=[1, 2])),
    ("dataloaders-object", lambda e: e.update(dataloaders={"a": 1})),
    ("memory-string", lambda e: e.update(memory="lots")),
    ("model-calls-numbers", lambda e: e.update(model_calls=[1, "x", None])),
    ("framework-number", lambda e: e.update(framework=3)),
    (
        "loader-fields",
        lambda e: [d.update(batch_size="64", num_workers=-3, code=[1]) for d in e["dataloaders"]],
    ),
    (
        "optimizer-fields",
        lambda e: [o.update({"class": 7, "param_tensors": "8", "fused": "no"}) for o in e["optimizers"]],
    ),
    (
        "gpu-fields",
        lambda e: [g.update(sm_count="132", name=7, total_memory_bytes=-1) for g in e.get("gpus") or []],
    ),
]


@pytest.mark.parametrize(
    "change",
    [pytest.param(c, id=n, marks=() if i < 2 else SLOW_PARAM) for i, (n, c) in enumerate(WRONG_TYPES)],
)
def test_issue39_09_a_wrong_typed_environment_never_makes_report_exit_70(
    tmp_path: Path, change: Callable[[dict[str, Any]], None]
) -> None:
    """9. "a wrong-typed environment.json makes `report` exit 70": the value is left out where the
    run directory is loaded, a note names it, and every output is written."""
    from gpuadvisor.analysis import analyze
    from gpuadvisor.render import github, junit, markdown, sarif, text

    run = received(tmp_path)
    edit(run, "environment.json", change)
    r = ga("report", str(run), "-o", str(tmp_path / "r.html"))
    assert r.exit_code == 0, r.output
    result = analyze(run)  # what `analyze --format F` renders
    for renderer in (text, markdown, github, junit, sarif):
        renderer.render(result)
    assert any(n.startswith("environment.json: ") for n in result.notes), result.notes


@pytest.mark.parametrize("steps", ["many", *(pytest.param(v, marks=SLOW_PARAM) for v in (2.5, [3], 1e300))])
def test_issue39_09_ga502_with_a_non_integer_optimizer_step_count(tmp_path: Path, steps: Any) -> None:
    """9. "GA502 raises on a non-integer optimizer `steps`": the count is left out (with a note) and
    GA502 judges the optimizer as before."""
    run = received(tmp_path, "dlrm-planted")
    edit(run, "environment.json", lambda e: [o.update(steps=steps) for o in e["optimizers"]])
    doc = json_out(run, "--fail-on", "none")
    statuses = {s["rule"]: s["status"] for s in doc["rules"]}
    assert statuses["GA502"] != "error", doc["rules"]
    assert "GA502" in {f["rule"] for f in doc["findings"]}
    assert any("optimizers[0].steps" in n for n in doc["notes"]), doc["notes"]


# ------------------------------------------------------------------ 4. -o never destroys


def _bytes(*paths: Path) -> list[bytes]:
    return [p.read_bytes() for p in paths]


def test_issue39_04_the_output_is_never_the_input(tmp_path: Path) -> None:
    """4. "`analyze t.json.gz -o t.json.gz` overwrites the input": exit 2 before any analysis, the input
    as it was (also when -o reaches it through a link or a second hard link)."""
    run = received(tmp_path)
    trace = tmp_path / "t.json.gz"
    shutil.copy(run / "trace" / "rank0.json.gz", trace)
    (tmp_path / "hard.json.gz").hardlink_to(trace)
    (tmp_path / "soft.json.gz").symlink_to(trace)
    before = _bytes(trace)
    for out in ("t.json.gz", "hard.json.gz", "soft.json.gz"):
        r = ga("analyze", str(trace), "-o", str(tmp_path / out))
        assert r.exit_code == 2, (out, r.output)
        assert _bytes(trace) == before
    assert "is the input" in ga("analyze", str(trace), "-o", str(trace)).output


@pytest.mark.parametrize("target", ["trace/rank0.json.gz", "manifest.json", "environment.json", "nvml.csv.gz",
                                    "callsites.json", "trace/rank1.json.gz"])  # fmt: skip
def test_issue39_04_no_command_writes_a_file_of_the_recording(tmp_path: Path, target: str) -> None:
    """4. "`report RUN -o RUN/trace/rank0.json.gz` or `-o RUN/manifest.json` destroys the recording":
    every command with -o refuses the recording's files (and the names it would read as such)."""
    run = received(tmp_path)
    (run / "environment.json").unlink()  # a recorded name is refused even where it is missing
    files = sorted(p for p in run.rglob("*") if p.is_file())
    before = _bytes(*files)
    other = received(tmp_path / "other")
    for args in (
        ("report", str(run)),
        ("analyze", str(run), "--format", "json"),
        ("analyze", str(other)),
        ("diff", str(other), str(other)),
        ("verify", str(other)),
    ):
        r = ga(*args, "-o", str(run / target))
        assert r.exit_code == 2, (args, r.output)
        assert "recording" in r.output or "is the input" in r.output, r.output
    assert sorted(p for p in run.rglob("*") if p.is_file()) == files and _bytes(*files) == before


@pytest.mark.slow  # slow: the quick tier keeps one probe of this item (the analysis of a real recording takes 1-5 s)
def test_issue39_04_derived_outputs_of_a_run_dir_are_still_written(tmp_path: Path) -> None:
    run = received(tmp_path)
    assert ga("report", str(run)).exit_code == 0 and (run / "report.html").is_file()
    r = ga("analyze", str(run), "--format", "json", "-o", str(run / "findings.json"))
    assert r.exit_code == 0 and json.loads((run / "findings.json").read_text())["findings"]


def _special_files(tmp_path: Path) -> dict[str, Path]:
    out = {
        "fifo": tmp_path / "fifo",
        "stdout-link": tmp_path / "to-stdout.txt",
        "file-link": tmp_path / "link.txt",
    }
    os.mkfifo(out["fifo"])
    out["stdout-link"].symlink_to("/dev/stdout")
    (tmp_path / "kept.txt").write_text("kept\n")
    out["file-link"].symlink_to(tmp_path / "kept.txt")
    if os.geteuid() == 0:  # a device node of our own (the same device as /dev/null), never the system's
        out["device"] = tmp_path / "null-device"
        os.mknod(out["device"], stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return out


def test_issue39_04_special_files_are_never_replaced(tmp_path: Path) -> None:
    """4. "`-o` naming a device node, a FIFO or a stdout symlink replaces it with a regular file and
    exits 0 (as root, `-o /dev/full` replaced the system's device node)": exit 2, each left as it was.
    (The device node is one this test makes, as root; never a node of /dev.)"""
    run = received(tmp_path)
    for name, path in _special_files(tmp_path).items():
        mode = path.lstat().st_mode
        for args in (("analyze", str(run)), ("report", str(run)), ("diff", str(run), str(run))):
            r = ga(*args, "-o", str(path))
            assert r.exit_code == 2, (name, args, r.output)
            assert "not a regular file" in r.output, r.output
            assert path.lstat().st_mode == mode
    assert (tmp_path / "kept.txt").read_text() == "kept\n"


def test_issue39_04_the_rename_goes_only_over_a_regular_file(tmp_path: Path) -> None:
    """The last step of every write checks again (a FIFO put there after the check stays a FIFO)."""
    from gpuadvisor._atomic import NotARegularFile, write_text_atomic

    folder = tmp_path / "out"
    folder.mkdir()
    fifo = folder / "late-fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotARegularFile):
        write_text_atomic(fifo, "x")
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and [p.name for p in folder.iterdir()] == ["late-fifo"]
    write_text_atomic(folder / "plain.txt", "y")
    assert (folder / "plain.txt").read_text() == "y"


def test_issue39_04_the_output_folder_is_checked_before_the_analysis(tmp_path: Path) -> None:
    """An output under a file, or in a folder that does not exist, is exit 2 before the analysis (it
    was exit 74 after it)."""
    run = received(tmp_path)
    (tmp_path / "afile").write_text("x")
    r = ga("analyze", str(run), "-o", str(tmp_path / "afile" / "out.txt"))
    assert r.exit_code == 2 and "is a file, not a folder" in r.output, r.output
    assert "analyzed" not in r.output
    r = ga("analyze", str(run), "-o", str(tmp_path / "new" / "deeper" / "out.txt"))
    assert r.exit_code == 2 and "does not exist" in r.output, r.output


# ------------------------------------------------------------------ 5. verify never overwrites what the user keeps


def _sub(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuadvisor", *args], cwd=cwd, capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip


def _hashes(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()
    }


@pytest.mark.slow  # slow: a real `gpuadvisor profile` and four trial processes (~60 s on 2 cores)
def test_issue39_05_verify_trials_never_overwrite_the_users_checkpoint(tmp_path: Path) -> None:
    """5. "A script that saves `ckpt.pt` every 5 steps: after `verify --only larger_batch`, ckpt.pt holds
    a 5-step model trained with a 4x batch instead of the real run's step-510 checkpoint; no warning."
    The trials run in a scratch copy of the working directory, said before the first trial; the
    project's files are byte for byte what the real run left; --allow-writes is the opt-in."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(SCRIPTS / "checkpoints.py", project / "train.py")
    fast = ("--skip-steps", "2", "--warmup-steps", "1", "--active-steps", "3", "--no-analyze", "-q")
    r = _sub("profile", "-o", "RUN", *fast, "train.py", "--steps", "60", cwd=project)
    assert r.returncode == 0, r.stderr
    kept = _hashes(project)
    assert {"ckpt.pt", "train.log"} <= set(kept)
    trials = ("--only", "dataloader_workers", "--trials", "1", "--warmup-steps", "2", "--steps", "5")
    r = _sub("verify", "RUN", *trials, cwd=project)
    assert r.returncode == 0, r.stderr
    assert _hashes(project) == kept
    said = r.stderr.index("the trials run in a scratch copy of")
    assert said < r.stderr.index("trial 1/2"), r.stderr
    doc = json.loads((project / "RUN" / "verify.json").read_text())
    assert doc["workplace"]["scratch_copy"] is True and doc["baseline"]["status"] == "ok"
    # the opt-in: the trials run in the project itself, and say so
    r = _sub("verify", "RUN", *trials, "--allow-writes", "-o", str(tmp_path / "v.json"), cwd=project)
    assert r.returncode == 0 and "--allow-writes: the trials run in" in r.stderr, r.stderr
    assert _hashes(project)["ckpt.pt"] != kept["ckpt.pt"]


# ------------------------------------------------------------------ 7. workflow commands, terminal, Markdown


def _commands(text: str) -> list[str]:
    """The lines GitHub Actions would run as workflow commands."""
    return [ln for ln in text.splitlines() if ln.lstrip().startswith("::") or "##[" in ln]


def test_issue39_07_a_file_name_cannot_emit_a_workflow_command(tmp_path: Path) -> None:
    """7. "`--format github` prints the trace path raw in its summary line: a file named
    `x<LF>::error title=INJECTED::...<LF>.json.gz` (git allows it; a pull request can add it) emits a
    live workflow command." Nor in the text or Markdown output, nor in an error line."""
    run = received(tmp_path)
    hostile = tmp_path / "x\n::error title=INJECTED::pwned\n##[error]legacy.json.gz"
    shutil.copy(run / "trace" / "rank0.json.gz", hostile)
    github = ga("analyze", str(hostile), "--format", "github")
    assert github.exit_code == 0, github.output
    ours = [ln for ln in _commands(github.stdout) if ln.startswith(("::error title=gpuadvisor", "::warning title=gpuadvisor", "::notice title=gpuadvisor"))]  # fmt: skip
    assert _commands(github.stdout) == ours and ours, github.stdout
    assert "INJECTED" in github.stdout.splitlines()[-1]  # the path is still shown, as data
    for fmt in ("text", "markdown"):
        r = ga("analyze", str(hostile), "--format", fmt)
        assert r.exit_code == 0 and not _commands(r.stdout), (fmt, r.stdout)
    bad = tmp_path / "y\n::add-mask::secret\n.txt"
    bad.write_text("not a trace")
    r = ga("analyze", str(bad))
    assert r.exit_code == 2 and not _commands(r.stderr) and not _commands(r.stdout), r.stderr


def test_issue39_07_markdown_mentions_nobody_and_links_nowhere(tmp_path: Path) -> None:
    """Strings from a received run in the Markdown summary (a PR comment): no @mention, no link."""
    run = received(tmp_path)
    point_sites_at(run, "@octocat/https://evil.example/www.evil.example/train.py")
    r = ga("analyze", str(run), "--format", "markdown")
    assert r.exit_code == 0, r.output
    assert "@octocat" not in r.stdout and "https://evil" not in r.stdout and "www.evil" not in r.stdout
    assert "octocat" in r.stdout  # shown, as text


# ------------------------------------------------------------------ 8. credentials


SECRET = "Zq9SECRETvalue42"
# The forms of issue 39 item 8 (19 of them leaked), and the earlier ones: argv as a script gets it.
CREDENTIAL_FORMS: dict[str, list[str]] = {
    "option-space": ["--api-key", SECRET],
    "option-equals": [f"--password={SECRET}"],
    "env-assign": [f"HF_TOKEN={SECRET}"],
    "camel-case": ["--apiKey", SECRET],
    "short-p": ["-p", SECRET],
    "short-p-equals": [f"-p={SECRET}"],
    "glued-p": [f"-p{SECRET}"],
    "value-starting-with-dash": ["--password", f"-{SECRET}"],
    "apitoken": ["--apitoken", SECRET],
    "accesstoken": ["--accesstoken", SECRET],
    "clientsecret": ["--clientsecret", SECRET],
    "passw": ["--passw", SECRET],
    "short-P": ["-P", SECRET],
    "redis-empty-user": [f"redis://:{SECRET}@cache:6379/0"],
    "url-password-with-at": [f"https://me:pa@{SECRET}@host/db"],
    "url-password-with-slash": [f"postgres://me:{SECRET}/x@db.example:5432/app"],
    "query-api-key": [f"https://api.example/v1?api_key={SECRET}&x=1"],
    "query-token": [f"--url=https://api.example/v1?token={SECRET}"],
    "json-argument": ["--config", f'{{"lr": 0.1, "api_key": "{SECRET}"}}'],
    "json-password": [f'{{"password":"{SECRET}"}}'],
    "colon-separator": [f"--hf-token:{SECRET}"],
    "authorization-token": ["-H", f"Authorization: token {SECRET}"],
    "authorization-basic": [f"Authorization: Basic {SECRET}"],
    "header-api-key": ["-H", f"X-Api-Key: {SECRET}"],
    "github-oauth": [f"gho_{SECRET}abcdefghij"],
    "stripe-restricted": [f"rk_live_{SECRET}abcdef"],
    "google-api-key": [f"AIza{SECRET}abcdefghijklmnopqrstu"],
    "slack-webhook": [f"https://hooks.slack.com/services/T000/B000/{SECRET}"],
    "private-key": ["--pem", f"-----BEGIN RSA PRIVATE KEY-----{SECRET}"],
}
NOT_CREDENTIALS = [["--tokenizer", "gpt2"], ["--max-tokens", "512"], ["--passes", "3"], ["--bypass", "1"],
                   ["--keyframes", "4"], ["--lr", "3e-4"], ["--url", "https://example.com/a@v2"], ["--device", "cuda:0"]]  # fmt: skip


@pytest.mark.parametrize("argv", list(CREDENTIAL_FORMS.values()), ids=list(CREDENTIAL_FORMS))
def test_issue39_08_every_credential_form_on_the_command_line_is_masked(argv: list[str]) -> None:
    """8. "argv: 19 of 28 common forms leak into manifest.json and report.html (glued `-pSECRET`, a value
    starting with `-`, `--apitoken`/`--accesstoken`/`--clientsecret`/`--passw`, `-P X`, `redis://:pw@h`,
    passwords containing `@` or `/`, `?api_key=`/`?token=`, JSON arguments, `--hf-token:V`,
    `Authorization: token X`, `gho_`/`rk_live_`/`AIza`/Slack-webhook tokens)"."""
    from gpuadvisor.redact import redact_argv

    out, changed = redact_argv(["train.py", *argv])
    assert SECRET not in " ".join(out) and changed, out


@pytest.mark.parametrize("argv", NOT_CREDENTIALS, ids=[a[0] for a in NOT_CREDENTIALS])
def test_issue39_08_arguments_that_are_no_credential_are_kept(argv: list[str]) -> None:
    from gpuadvisor.redact import redact_argv

    assert redact_argv(argv) == (argv, ())


SOURCE_LINES = [
    (f'token = "{SECRET}"', "token = ***"),
    (f"hf_token = os.environ.get('HF', '{SECRET}')", "hf_token = ***"),
    (f'DB = "postgresql://app:{SECRET}@db/x"', 'DB = "postgresql://app:***@db/x"'),
    (f"password: str = '{SECRET}'", None),
    (f'client = Client(api_key="{SECRET}")', 'client = Client(api_key="***")'),
    (f"headers = {{'Authorization': 'Bearer {SECRET}'}}", None),
    (f"SECRET_KEY={SECRET}", "SECRET_KEY=***"),
]
CODE_KEPT = ["for key, value in d.items():", "key = jax.random.PRNGKey(0)", "if token == '<eos>':", "max_tokens = 512",
             "tokenizer = AutoTokenizer.from_pretrained('gpt2')", "x = batch['input_ids']"]  # fmt: skip


@pytest.mark.parametrize(("line", "want"), SOURCE_LINES)
def test_issue39_08_credentials_in_recorded_source_lines_are_masked(line: str, want: str | None) -> None:
    """8. "Source snippets recorded around call sites copy credentials on nearby lines (`token =
    "hf_..."`, a postgres URL with a password)": the recorded lines pass the same module."""
    from gpuadvisor.redact import redact_text

    out, changed = redact_text(line)
    assert SECRET not in out and changed and (want is None or out == want), out


@pytest.mark.parametrize("line", CODE_KEPT)
def test_issue39_08_ordinary_source_lines_are_kept(line: str) -> None:
    from gpuadvisor.redact import redact_text

    assert redact_text(line) == (line, False)


@pytest.mark.slow  # slow: the quick tier keeps one probe of this item (the analysis of a real recording takes 1-5 s)
def test_issue39_08_a_received_run_puts_no_recorded_credential_into_its_outputs(tmp_path: Path) -> None:
    """A run recorded before the capture masked its snippets (or elsewhere): the loader masks its
    recorded lines, so findings.json and report.html carry none."""
    run = received(tmp_path)

    def change(doc: dict[str, Any]) -> None:
        for row in _records(doc):
            row["code"] = f'loader = DataLoader(ds, token="{SECRET}")'
            row["snippet"] = {
                "first_line": row["line"] - 1,
                "lines": [f"hub_token = '{SECRET}'", row["code"], "x = 1"],
            }

    edit(run, "environment.json", change)
    edit(run, "callsites.json", change)
    assert ga("report", str(run)).exit_code == 0
    doc = json_out(run)
    assert SECRET not in json.dumps(doc) and SECRET not in (run / "report.html").read_text(encoding="utf-8")
    assert "hub_token = ***" in (run / "report.html").read_text(encoding="utf-8")


@pytest.mark.slow  # slow: a real `gpuadvisor profile` (~15 s)
def test_issue39_08_profile_writes_no_credential_anywhere(tmp_path: Path) -> None:
    """The command line (every form above) and the lines around the recorded call sites: in no file of
    the run directory; the script itself gets its real arguments."""
    argv = [a for form in CREDENTIAL_FORMS.values() for a in form]
    marker = tmp_path / "seen.json"
    r = subprocess.run(
        [sys.executable, "-m", "gpuadvisor", "profile", "-o", str(tmp_path / "RUN"), "--skip-steps", "2",
         "--warmup-steps", "1", "--active-steps", "3", "-q", str(SCRIPTS / "holds_secrets.py"), *argv],
        capture_output=True, text=True, timeout=300, env={**os.environ, "SECRETS_MARKER": str(marker)},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    seen = json.loads(marker.read_text())
    assert seen["argv"][1:] == argv and seen["env"] is False  # the real command line, and no trace of ours
    written = {p.name: p.read_bytes() for p in (tmp_path / "RUN").rglob("*") if p.is_file()}
    assert {"manifest.json", "environment.json", "findings.json", "report.html"} <= set(written)
    for name, data in written.items():
        if name.endswith(".gz"):
            data = gzip.decompress(data)
        for secret in (
            SECRET,
            "SnippetPassw0rd",
            "ZZsnippetSECRET",
            "SnippetApiKeyValue123",
            "SnippetTypedPassword",
        ):
            assert secret.encode() not in data, (name, secret)
    env = json.loads(written["environment.json"])
    snippet = "\n".join(line for d in env["dataloaders"] for line in d["snippet"]["lines"])
    assert "hub_token = ***" in snippet and "postgresql://trainer:***@db.internal" in snippet, snippet


@pytest.mark.slow  # slow: torchrun on the CPU (~20 s)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="torchrun + gloo on Linux")
def test_issue39_08_a_killed_parent_leaves_no_credential_in_the_child_config(tmp_path: Path) -> None:
    """8. "A multi-rank run whose parent is SIGKILLed leaves `.child_config.json` with the unmasked
    command line in the run dir": the file holds the masked command line; the ranks get the real one
    through their environment, which they take out before the script runs."""
    run = tmp_path / "RUN"
    marker = tmp_path / "seen.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuadvisor", "profile", "--nproc-per-node", "1", "-o", str(run), "-q",
         str(SCRIPTS / "holds_secrets.py"), "--api-key", SECRET, "--hold", "120"],
        env={**os.environ, "SECRETS_MARKER": str(marker)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), proc.stderr.read().decode() if proc.stderr else ""
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    seen = json.loads(marker.read_text())
    assert seen["argv"][-3:] == ["--api-key", SECRET, "--hold"][-3:] or SECRET in seen["argv"]
    assert seen["env"] is False
    left = (run / ".child_config.json").read_text()
    assert SECRET not in left and "***" in left


# ------------------------------------------------------------------ 10. smaller holes of a received run


@pytest.mark.slow  # slow: the quick tier keeps one probe of this item (the analysis of a real recording takes 1-5 s)
def test_issue39_10_a_pyproject_shipped_in_the_run_dir_imports_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10. "`cd RUN && gpuadvisor analyze .` silently imports rules named by a pyproject.toml shipped in
    the run dir": the file is passed over, and said so; only the user's own project config counts."""
    run = received(tmp_path)
    marker = tmp_path / "IMPORTED"
    (run / "evil").mkdir()
    (run / "evil" / "planted_rule.py").write_text(f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    (run / "pyproject.toml").write_text('[tool.gpuadvisor]\nrules-dirs = ["evil"]\nfail-on = "low"\n')
    monkeypatch.chdir(run)
    r = ga("analyze", ".")
    assert r.exit_code == 0, r.output  # the shipped fail-on = "low" is not applied either
    assert not marker.exists()
    assert f"not using {run / 'pyproject.toml'}: it lies in what is analyzed" in r.stderr, r.stderr
    # the user's own project config (above the folder analyzed, outside it) still counts, and says what it loads
    project = tmp_path / "received"
    (project / "mine").mkdir()
    (project / "mine" / "own_rule.py").write_text("# the user's own rules folder: no rule in it\n")
    (project / "pyproject.toml").write_text('[tool.gpuadvisor]\nrules-dirs = ["mine"]\n')
    monkeypatch.chdir(project)
    r = ga("analyze", "RUN")
    assert r.exit_code == 0 and f"loading rules from {project / 'mine'}" in r.stderr, r.output


@pytest.mark.slow  # slow: a real `gpuadvisor profile` (~15 s)
def test_issue39_10_a_gpuadvisor_py_beside_the_script_never_replaces_the_child(tmp_path: Path) -> None:
    """10. "a `gpuadvisor.py` in the script's folder replaces the capture child and the findings blame
    the OOM killer": our processes start without the working directory first on sys.path."""
    entry = Path(sys.executable).parent / "gpuadvisor"  # the console script, as a user runs it
    if not entry.is_file():
        pytest.skip(f"no console script at {entry}")
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(SCRIPTS / "checkpoints.py", project / "train.py")
    (project / "gpuadvisor.py").write_text("raise SystemExit('the user own gpuadvisor.py ran')\n")
    r = subprocess.run(
        [sys.executable, str(entry), "profile", "-o", "RUN", "--skip-steps", "2", "--warmup-steps", "1",
         "--active-steps", "3", "-q", "--no-analyze", "train.py", "--steps", "20"],
        cwd=project, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0 and "own gpuadvisor.py ran" not in r.stderr, r.stderr
    doc = json.loads((project / "RUN" / "manifest.json").read_text())
    assert (
        doc["exit_reason"] in ("completed", "stopped_after_window") and (project / "RUN" / "trace").is_dir()
    )


def test_issue39_10_force_never_deletes_a_projects_own_files(tmp_path: Path) -> None:
    """10. "`--force` into a project folder deletes the user's own manifest.json/report.html after
    calling the folder 'a previous run'": a folder whose manifest.json gpuadvisor did not write is
    not a run, and is refused, --force or not."""
    from gpuadvisor.capture.outdir import prepare_out_dir, release_out_dir
    from gpuadvisor.errors import UsageError

    project = tmp_path / "webapp"
    project.mkdir()
    (project / "manifest.json").write_text('{"name": "My PWA", "start_url": "/"}')
    (project / "report.html").write_text("<p>my quarterly report</p>")
    (project / "gpuadvisor.log").write_text("my own log")
    before = _hashes(project)
    for force in (False, True):
        with pytest.raises(UsageError, match="holds no gpuadvisor run"):
            prepare_out_dir(project, force)
        release_out_dir(project)
        assert _hashes(project) == before
    # a previous run of ours is still overwritten with --force (and only its files)
    run = received(tmp_path)
    (run / "notes.txt").write_text("mine")
    prepare_out_dir(run, True)
    release_out_dir(run)
    assert not (run / "manifest.json").exists() and (run / "notes.txt").read_text() == "mine"


@pytest.mark.slow  # slow: a real `gpuadvisor profile` (~15 s)
def test_issue39_10_a_run_directory_named_with_a_newline_keeps_its_trace(tmp_path: Path) -> None:
    """10. "a run dir name with a newline loses the trace": Kineto's export dropped the newline when it
    renamed its temporary file; the export now reaches the folder through a descriptor."""
    out = tmp_path / "run\nname"
    r = subprocess.run(
        [sys.executable, "-m", "gpuadvisor", "profile", "-o", str(out), "--skip-steps", "2", "--warmup-steps", "1",
         "--active-steps", "3", "-q", "--no-analyze", str(SCRIPTS / "checkpoints.py"), "--steps", "20"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (out / "trace" / "rank0.json.gz").is_file(), r.stderr
    assert "trace_not_exported" not in json.loads((out / "manifest.json").read_text())["degraded"]
    assert json_out(out)["metrics"]["steps_analyzed"] >= 1


def test_issue39_01_a_folder_of_traces_links_to_nothing_outside_it(tmp_path: Path) -> None:
    """A folder of traces is read as a run directory is: a `.json` link out of it is not one of its
    traces (here the only one: the folder has none)."""
    run = received(tmp_path)
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "rank0.json.gz").symlink_to(run / "trace" / "rank0.json.gz")
    r = ga("analyze", str(folder))
    assert r.exit_code == 2 and "no run directory (manifest.json) and no .json/.json.gz traces" in r.output, r.output
    shutil.copy(run / "trace" / "rank0.json.gz", folder / "rank1.json.gz")
    assert ga("analyze", str(folder)).exit_code == 0


@pytest.mark.parametrize("peak", [10**18, 10**30])
def test_issue39_09_a_peak_beyond_the_gpu_is_no_share_of_it(tmp_path: Path, peak: int) -> None:
    """9. '"666178667165831004160% of the GPU" printed for a peak of 1e30': a peak of memory above the
    GPU's memory (10**18 is within the byte range, 10**30 beyond it) is left out with a note; the
    metrics hold no share of the GPU above 100%."""
    from gpuadvisor.analysis import analyze

    run = received(tmp_path)
    edit(run, "environment.json", lambda e: e["memory"].update(peak_reserved_bytes=peak, peak_allocated_bytes=peak))
    result = analyze(run)
    assert result.metrics is not None
    fraction = result.metrics.get("peak_memory_fraction")
    assert fraction is None or 0 <= fraction <= 1, fraction
    assert any(n.startswith("environment.json: ") and "peak_reserved_bytes" in n for n in result.notes), result.notes
    r = ga("report", str(run), "-o", str(tmp_path / "r.html"))
    assert r.exit_code == 0, r.output
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert str(peak // 85017493504 * 100) not in html
