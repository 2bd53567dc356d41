"""Scale benchmark: gpuadvisor analyze/report vs HTA's trace load, wall time, CPU time and peak RSS.

    python benchmarks/scale/run.py [--traces benchmarks/scale/out] [--hta-python /work/hta-venv/bin/python]

Needs the traces of make_traces.py (SYNTHETIC: repeated steps of a real H200 trace, the tiny-events
trace, the bombs). Every measurement runs in a fresh child process; wall time is measured around it,
CPU time (user + system, its children included: the split read's worker, the ranks' workers) and peak
RSS (the largest single process) come from os.wait4, and the summed RSS of the child and its
descendants is sampled every 50 ms (`tree_rss_mb`). On each trace the commands run interleaved,
analyze, report, HTA, analyze, report, HTA..., so that a machine whose speed drifts (shared cores)
slows both sides alike; the ratios to HTA are taken pair by pair and their median reported. Single-rank
traces are measured `--repeat` times (1 for traces over 500 MB, except the tiny-events trace), the
multi-rank folder `--repeat-folder` times; one rank of that folder alone is measured too (the folder's
time over it: the ranks loaded in parallel processes). The bombs run once each. HTA
(HolisticTraceAnalysis) runs in its own virtual environment, whose python is given with --hta-python;
without it the HTA columns are empty and the script says so. Results: OUT/results.json and
OUT/results.md (also printed).
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
        cpu = usage.ru_utime + usage.ru_stime
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, etext = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    rc = proc.returncode
    res: dict[str, Any] = {
        "ok": rc in (0, 1),
        "rc": rc,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "rss_mb": round(usage.ru_maxrss / 1024, 1),
        "tree_rss_mb": round(max(tree_peak, usage.ru_maxrss) / 1024, 1),
    }
    if not res["ok"] or rc == 2:
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
    for key in ("wall_s", "cpu_s", "rss_mb", "tree_rss_mb", "load_s", "import_s"):
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
    targets += sorted(a.traces.glob("tiny_*_events.json"))
    targets += sorted(p for p in a.traces.iterdir() if p.is_dir() and p.name.startswith("ranks"))
    bombs = sorted((a.traces / "bombs").glob("*.json.gz")) if (a.traces / "bombs").is_dir() else []
    if a.only:
        targets = [t for t in targets if t.name in a.only.split(",")]
        bombs = [b for b in bombs if "bombs" in a.only.split(",")]
    if not targets and not bombs:
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
            rows.append(_measure_target(target, a, ga, tmp, hta_ok))
        bomb_rows = []
        for bomb in bombs:
            res = run_child([*ga, "analyze", str(bomb), "--format", "json", "-o", os.devnull, "--no-progress"], a.timeout)
            print(f"bomb {bomb.name}: {res}", file=sys.stderr, flush=True)
            bomb_rows.append({"bomb": bomb.name, **res})
    meta = {
        "machine": f"{os.cpu_count()} CPUs, {_mem_gb()} GB RAM",
        "python": sys.version.split()[0],
        "hta_python": a.hta_python if hta_ok else None,
        "hta_version": _hta_version(a.hta_python) if hta_ok else None,
        "note": "traces are SYNTHETIC (repeated steps of a real H200 trace), see make_traces.py",
    }
    result = {"meta": meta, "rows": rows, "bombs": bomb_rows}
    a.traces.mkdir(parents=True, exist_ok=True)
    (a.traces / "results.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    md = to_markdown(result)
    (a.traces / "results.md").write_text(md)
    print(md)
    return 0


def _measure_target(target: Path, a: argparse.Namespace, ga: list[str], tmp: Path, hta_ok: bool) -> dict[str, Any]:
    """One trace (or rank folder): analyze, report and HTA's load interleaved, `repeats` rounds."""
    files = sorted(target.glob("*.json")) if target.is_dir() else [target]
    size = sum(f.stat().st_size for f in files)
    tiny = target.name.startswith("tiny_")
    reps = a.repeat_folder if target.is_dir() else (a.repeat if size < 500e6 or tiny else 1)
    analyze = [*ga, "analyze", str(target), "--format", "json", "-o", os.devnull, "--no-progress"]
    cmds: dict[str, list[str]] = {"analyze": analyze}
    if not tiny:
        cmds["report"] = [*ga, "report", str(target), "-o", str(tmp / "x.html"), "--no-progress"]
    if hta_ok and not tiny:
        cmds["hta_load"] = [a.hta_python, "-c", HTA_SCRIPT, str(hta_dir(target, tmp))]
    if target.is_dir():  # one rank alone: the folder's time over it says what the parallel ranks gave
        cmds["one_rank"] = [*ga, "analyze", str(files[0]), "--format", "json", "-o", os.devnull, "--no-progress"]
    row: dict[str, Any] = {"trace": target.name, "files": len(files), "bytes": size, "repeats": reps}
    runs: dict[str, list[dict[str, Any]]] = {key: [] for key in cmds}
    for _ in range(reps):
        for key, cmd in cmds.items():
            runs[key].append(run_child(cmd, a.timeout))
            print(f"{target.name} {key}: {runs[key][-1]}", file=sys.stderr, flush=True)
    for key, rs in runs.items():
        row[key] = median_of(rs)
    for key in ("analyze", "report"):
        pairs = [
            (x, h) for x, h in zip(runs.get(key, []), runs.get("hta_load", []), strict=False) if x.get("ok") and h.get("ok")
        ]
        if pairs:
            row[f"{key}_vs_hta_wall"] = round(statistics.median(x["wall_s"] / h["wall_s"] for x, h in pairs), 3)
            loads = [(x, h) for x, h in pairs if h.get("load_s")]
            if loads:
                row[f"{key}_vs_hta_load"] = round(statistics.median(x["wall_s"] / h["load_s"] for x, h in loads), 3)
                row[f"hta_load_over_{key}"] = [round(h["load_s"] / x["wall_s"], 2) for x, h in loads]
    if "one_rank" in runs:
        pairs = [(x, o) for x, o in zip(runs["analyze"], runs["one_rank"], strict=True) if x.get("ok") and o.get("ok")]
        if pairs:
            row["ranks_over_one_rank"] = round(statistics.median(x["wall_s"] / o["wall_s"] for x, o in pairs), 3)
    return row


def _fmt(v: Any, unit: str = "") -> str:
    return "-" if v is None else f"{v:.2f}{unit}" if isinstance(v, float) else f"{v}{unit}"


def to_markdown(result: dict[str, Any]) -> str:
    lines = [
        "| trace | size MB | runs | analyze s (CPU s) | analyze RSS MB (all processes) | report s | HTA process s "
        "| HTA load s | HTA RSS MB | HTA load / analyze, each pair | analyze/HTA load (median of pairs) | RSS (all)/size |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        an, rep, h = r["analyze"], r.get("report", {}), r.get("hta_load", {})
        size_mb = r["bytes"] / 1e6
        name = r["trace"] + (f" ({r['files']} ranks)" if r["files"] > 1 else "")
        tree = an.get("tree_rss_mb") or an.get("rss_mb")
        rss_ratio = tree / size_mb if tree else None
        pairs = ", ".join(f"{v:.1f}x" for v in r.get("hta_load_over_analyze", [])) or "-"
        extra = f" one rank alone: {_fmt(r['one_rank'].get('wall_s'))} s; 8 ranks / one rank: {_fmt(r.get('ranks_over_one_rank'))}" if "one_rank" in r else ""
        lines.append(
            f"| {name} | {size_mb:.0f} | {r['repeats']} | {_fmt(an.get('wall_s'))} ({_fmt(an.get('cpu_s'))}) "
            f"| {_fmt(an.get('rss_mb'))} ({_fmt(tree)}) "
            f"| {_fmt(rep.get('wall_s'))} | {_fmt(h.get('wall_s'))} "
            f"| {_fmt(h.get('load_s'))} | {_fmt(h.get('rss_mb'))} | {pairs} "
            f"| {_fmt(r.get('analyze_vs_hta_load'))} | {_fmt(rss_ratio)} |"
            + extra
            + ("" if an.get("ok", True) else f" analyze failed: {an.get('error')}")
            + ("" if not h or h.get("ok") else f" HTA failed: {h.get('error')}")
        )
    if result.get("bombs"):
        lines += ["", "| bomb (256 MiB inflated) | exit | s | RSS MB | says |", "|---|---|---|---|---|"]
        for b in result["bombs"]:
            lines.append(
                f"| {b['bomb']} | {b.get('rc')} | {_fmt(b.get('wall_s'))} | {_fmt(b.get('rss_mb'))} | {b.get('error', '')[:90]} |"
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
