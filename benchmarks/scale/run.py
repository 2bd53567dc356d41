"""Scale benchmark: gpuadvisor analyze/report vs HTA's trace load, wall time and peak RSS.

    python benchmarks/scale/run.py [--traces benchmarks/scale/out] [--hta-python /work/hta-venv/bin/python]

Needs the traces of make_traces.py (SYNTHETIC: repeated steps of a real H200 trace). Every
measurement runs in a fresh child process; wall time is measured around it and peak RSS is the
child's ru_maxrss from os.wait4 (for the parallel multi-rank load that is the largest single process,
not the sum of the workers). Single-rank traces are measured `--repeat` times (median reported; 1 for
traces over 500 MB), the multi-rank folder `--repeat-folder` times. HTA (HolisticTraceAnalysis) runs
in its own virtual environment, whose python is given with --hta-python; without it the HTA columns
are empty and the script says so. Results: OUT/results.json and OUT/results.md (also printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HTA_SCRIPT = """
import json, sys, time
t0 = time.monotonic()
from hta.trace_analysis import TraceAnalysis
t1 = time.monotonic()
a = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.monotonic()
print("HTA_RESULT " + json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "ranks": len(a.t.traces)}))
"""


def _tree_rss_kb(pid: int) -> int:
    """Summed VmRSS of `pid` and its descendants (their /proc children lists), 0 once it is gone."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"VmRSS:"):
                        total += int(line.split()[1])
                        break
            with open(f"/proc/{p}/task/{p}/children", "rb") as fh:
                todo.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return total


def run_child(cmd: list[str], timeout: float) -> dict[str, Any]:
    """Fork/exec `cmd`, wait with os.wait4 to read exactly that child's peak RSS; meanwhile sample
    the summed RSS of the child and its descendants every 50 ms (`tree_rss_mb`: gpuadvisor reads a
    large trace with a second process, HTA may use a pool)."""
    start = time.monotonic()
    tree_peak = 0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            tree_peak = max(tree_peak, _tree_rss_kb(proc.pid))
            if time.monotonic() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                return {
                    "ok": False,
                    "error": f"timeout after {timeout:.0f} s",
                    "wall_s": None,
                    "rss_mb": None,
                }
            time.sleep(0.05)
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, etext = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    rc = proc.returncode
    res: dict[str, Any] = {
        "ok": rc in (0, 1),
        "rc": rc,
        "wall_s": round(wall, 3),
        "rss_mb": round(usage.ru_maxrss / 1024, 1),
        "tree_rss_mb": round(max(tree_peak, usage.ru_maxrss) / 1024, 1),
    }
    if not res["ok"]:
        res["error"] = (etext.strip().splitlines() or [f"exit {rc}"])[-1][:300]
    for line in text.splitlines():
        if line.startswith("HTA_RESULT "):
            res.update(
                {k: round(v, 3) if isinstance(v, float) else v for k, v in json.loads(line[11:]).items()}
            )
    return res


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if r.get("ok")]
    if not ok:
        return {**runs[-1], "runs": len(runs)}
    out: dict[str, Any] = {"ok": True, "runs": len(runs)}
    for key in ("wall_s", "rss_mb", "tree_rss_mb", "load_s", "import_s"):
        vals = [r[key] for r in ok if r.get(key) is not None]
        if vals:
            out[key] = round(statistics.median(vals), 3)
    return out


def hta_dir(target: Path, tmp: Path) -> Path:
    """HTA takes a folder: a single file is linked into its own folder."""
    if target.is_dir():
        return target
    d = tmp / target.stem
    d.mkdir(exist_ok=True)
    link = d / target.name
    if not link.exists():
        link.symlink_to(target.resolve())
    return d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=HERE / "out")
    ap.add_argument("--hta-python", default="/work/hta-venv/bin/python")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--repeat-folder", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1500.0)
    ap.add_argument("--only", default="", help="comma-separated names to run (e.g. trace_10mb.json)")
    a = ap.parse_args()

    targets = sorted(a.traces.glob("trace_*mb.json"), key=lambda p: p.stat().st_size)
    targets += sorted(p for p in a.traces.iterdir() if p.is_dir() and p.name.startswith("ranks"))
    if a.only:
        targets = [t for t in targets if t.name in a.only.split(",")]
    if not targets:
        print(f"no traces in {a.traces}: run benchmarks/scale/make_traces.py first", file=sys.stderr)
        return 2
    hta_ok = Path(a.hta_python).exists()
    if not hta_ok:
        print(
            f"HTA python {a.hta_python} not found: HTA columns stay empty. Install it with\n"
            "  python3 -m venv /work/hta-venv && /work/hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0\n"
            "and pass --hta-python /work/hta-venv/bin/python",
            file=sys.stderr,
        )
    _compile_package()
    ga = [sys.executable, "-m", "gpuadvisor"]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        for target in targets:
            files = sorted(target.glob("*.json")) if target.is_dir() else [target]
            size = sum(f.stat().st_size for f in files)
            reps = a.repeat_folder if target.is_dir() else (a.repeat if size < 500e6 else 1)
            cmds = {
                "analyze": [
                    *ga,
                    "analyze",
                    str(target),
                    "--format",
                    "json",
                    "-o",
                    os.devnull,
                    "--no-progress",
                ],
                "report": [*ga, "report", str(target), "-o", str(tmp / "x.html"), "--no-progress"],
            }
            if hta_ok:
                cmds["hta_load"] = [a.hta_python, "-c", HTA_SCRIPT, str(hta_dir(target, tmp))]
            row: dict[str, Any] = {
                "trace": target.name,
                "files": len(files),
                "bytes": size,
                "repeats": reps,
            }
            for key, cmd in cmds.items():
                runs = []
                for _ in range(reps):
                    runs.append(run_child(cmd, a.timeout))
                    print(f"{target.name} {key}: {runs[-1]}", file=sys.stderr, flush=True)
                row[key] = median_of(runs)
            h = row.get("hta_load", {})
            for key in ("analyze", "report"):
                if h.get("ok") and row[key].get("ok"):
                    row[f"{key}_vs_hta_wall"] = round(row[key]["wall_s"] / h["wall_s"], 3)
                    if h.get("load_s"):
                        row[f"{key}_vs_hta_load"] = round(row[key]["wall_s"] / h["load_s"], 3)
            rows.append(row)
    meta = {
        "machine": f"{os.cpu_count()} CPUs, {_mem_gb()} GB RAM",
        "python": sys.version.split()[0],
        "hta_python": a.hta_python if hta_ok else None,
        "hta_version": _hta_version(a.hta_python) if hta_ok else None,
        "note": "traces are SYNTHETIC (repeated steps of a real H200 trace), see make_traces.py",
    }
    result = {"meta": meta, "rows": rows}
    a.traces.mkdir(parents=True, exist_ok=True)
    (a.traces / "results.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    md = to_markdown(result)
    (a.traces / "results.md").write_text(md)
    print(md)
    return 0


def _fmt(v: Any, unit: str = "") -> str:
    return "-" if v is None else f"{v:.2f}{unit}" if isinstance(v, float) else f"{v}{unit}"


def to_markdown(result: dict[str, Any]) -> str:
    lines = [
        "| trace | size MB | runs | analyze s | analyze RSS MB (all processes) | report s | report RSS MB "
        "| HTA process s | HTA load s | HTA RSS MB | analyze/HTA process | analyze/HTA load | RSS (all)/size |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        an, rep, h = r["analyze"], r["report"], r.get("hta_load", {})
        size_mb = r["bytes"] / 1e6
        name = r["trace"] + (f" ({r['files']} ranks)" if r["files"] > 1 else "")
        tree = an.get("tree_rss_mb") or an.get("rss_mb")
        rss_ratio = tree / size_mb if tree else None
        lines.append(
            f"| {name} | {size_mb:.0f} | {r['repeats']} | {_fmt(an.get('wall_s'))} "
            f"| {_fmt(an.get('rss_mb'))} ({_fmt(tree)}) "
            f"| {_fmt(rep.get('wall_s'))} | {_fmt(rep.get('rss_mb'))} | {_fmt(h.get('wall_s'))} "
            f"| {_fmt(h.get('load_s'))} | {_fmt(h.get('rss_mb'))} | {_fmt(r.get('analyze_vs_hta_wall'))} "
            f"| {_fmt(r.get('analyze_vs_hta_load'))} | {_fmt(rss_ratio)} |"
            + ("" if an.get("ok", True) else f" analyze failed: {an.get('error')}")
            + ("" if not h or h.get("ok") else f" HTA failed: {h.get('error')}")
        )
    m = result["meta"]
    lines.append("")
    lines.append(
        f"Machine: {m['machine']}; Python {m['python']}; HTA {m['hta_version'] or 'not measured'}. {m['note']}."
    )
    return "\n".join(lines) + "\n"


def _compile_package() -> None:
    """Write the bytecode of gpuadvisor and its built-in rules, as `pip install` does for HTA's venv
    and for an installed wheel: a source checkout run with PYTHONDONTWRITEBYTECODE=1 would otherwise
    compile ~90 modules at every start (~0.25 s), a cost no installed copy has."""
    import compileall

    import gpuadvisor
    from gpuadvisor.engine import builtin_rules_dir

    for folder in (Path(gpuadvisor.__file__).resolve().parent, builtin_rules_dir()):
        compileall.compile_dir(str(folder), quiet=1)


def _mem_gb() -> int:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)
    except (ValueError, OSError):
        return 0


def _hta_version(python: str) -> str | None:
    try:
        out = subprocess.run(
            [python, "-c", "import importlib.metadata as m; print(m.version('HolisticTraceAnalysis'))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


if __name__ == "__main__":
    raise SystemExit(main())
