"""Record every workload of the corpus with `gpuadvisor profile`, planted and with all fixes applied.

    python3 benchmarks/record_corpus.py OUT [--shard I/N] [--workloads A,B] [--tar] [--tiny]
                                        [--run-timeout S] [--deadline S] [--measurements JSONL ...]

For each workload of benchmarks/catalog.py (controls: planted only) it runs, from the repository root,

    python3 -m gpuadvisor profile --no-analyze -o RUNS/<workload>-<variant> --force <catalog profile args>
        benchmarks/workloads/<workload>.py --steps <catalog steps> [--fixed]

with the catalog's small capture window (10 skipped steps, 2 warm-up, 5 recorded; 3 for launch-heavy
workloads), so that each run directory stays around 500 KB, under a per-run time limit. After each run
it writes RUNS/<workload>-<variant>/README.md from the run's environment.json and manifest.json (GPU,
driver, CUDA/cuDNN, torch/Python, time, the exact command, the planted problems and fixes, the
workload's docstring, and the measured samples/s when `--measurements` names measure.py JSONL files).

`--planted-only` records the planted variant alone. RUNS is OUT/runs, or with `--tar` a temporary folder
packed at the end into OUT/record[-sIofN].tar.gz
(and -part2, -part3... when one archive would pass `--tar-max-mb`, default 15: machines that return
few files of bounded size). Progress and failed runs' output go to stderr and OUT/record[-sIofN].log.
`--readmes-only` records nothing: it rewrites the README.md of the run directories already in
OUT/runs (e.g. unpacked from the tarballs) with the `--measurements` taken since.
Exit status: 0 when every recording completed, 1 when some failed or were skipped by the deadline,
2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from catalog import Variant, Workload, by_name, shard  # noqa: E402
from measure import parse_shard, run_with_limit, stop_children_on_sigterm  # noqa: E402


def profile_command(w: Workload, v: Variant, run_dir: str, python: str, tiny: bool) -> list[str]:
    return [python, "-m", "gpuadvisor", "profile", "--no-analyze", "-o", run_dir, "--force",
            *w.record.profile_args, w.script, "--steps", str(w.record.steps), *v.args, *(["--tiny"] if tiny else [])]


def workload_docstring(w: Workload) -> str:
    import ast

    doc = ast.get_docstring(ast.parse((ROOT / w.script).read_text()))
    return doc or ""


def load_measurements(paths: Sequence[Path]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for path in paths:
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("record") == "variant":
                out[(rec["workload"], rec["variant"])] = rec
    return out


def measured_line(w: Workload, measurements: dict[tuple[str, str], dict[str, Any]]) -> str | None:
    planted = measurements.get((w.name, "planted"))
    if planted is None or "samples_per_s_median" not in planted:
        return None
    parts = [f"planted {planted['samples_per_s_median']:,.0f} (spread {100 * planted['spread']:.1f}%)"]
    for v in w.variants()[1:]:
        m = measurements.get((w.name, v.name))
        if m and "speedup_median" in m:
            parts.append(f"{v.name} {m['samples_per_s_median']:,.0f} ({m['speedup_median']:.2f}x, "
                         f"band {m['speedup_min']:.2f}-{m['speedup_max']:.2f})")
    n = planted.get("n_ok", 0)
    return "; ".join(parts) + f" (median of {n} interleaved repeats, benchmarks/measure.py)"


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def run_readme(run_dir: Path, w: Workload, v: Variant, command: Sequence[str],
               measurements: dict[tuple[str, str], dict[str, Any]]) -> str:
    """README.md of one recording, from its own environment.json and manifest.json."""
    env, manifest = _json(run_dir / "environment.json"), _json(run_dir / "manifest.json")
    gpus = env.get("gpus") or []
    gpu = (f"{gpus[0].get('name')} ({gpus[0].get('sm_count')} SMs)" if gpus else "none (CPU run)")
    if w.control:
        planted = "none (well-tuned control)"
    else:
        planted = "; ".join(f"{p.category} (`--fix {p.fix}`, remedy `{p.remedy}`)" for p in w.problems)
    applied = "none (the script as written)" if not v.fixes else ", ".join(f"`--fix {f}`" for f in v.fixes)
    shown = list(command)
    shown[0] = "python3"
    shown[shown.index("-o") + 1] = f"runs/{run_dir.name}"
    rows = [
        ("GPU", gpu),
        ("driver", str(env.get("driver") or "n/a")),
        ("CUDA runtime / cuDNN", f"{env.get('cuda_runtime') or 'n/a'} / {env.get('cudnn') or 'n/a'}"),
        ("torch / Python", f"{env.get('torch') or 'n/a'} / {env.get('python') or 'n/a'}"),
        ("recorded", str(manifest.get("started_at", "n/a"))),
        ("exit", f"{manifest.get('exit_reason', 'n/a')} (status {manifest.get('exit_status', 'n/a')}), "
                 f"steps by {manifest.get('step_detection', 'n/a')}"),
        ("command (repo root)", f"`{' '.join(shown)}`"),
        ("workload", f"`{w.script}` (family {w.family.value}, split {w.split.value})"),
        ("planted", planted),
        ("fixes applied", applied),
    ]
    measured = measured_line(w, measurements)
    if measured:
        rows.append(("measured samples/s (plain `python3`, same machine)", measured))
    table = "\n".join(f"| {k} | {val} |" for k, val in rows)
    return (f"# {run_dir.name}\n\nA real recording made with `gpuadvisor profile` (not synthetic).\n\n"
            f"| | |\n|---|---|\n{table}\n\nWhat the workload plants and what each `--fix` changes "
            f"(from its docstring):\n\n{workload_docstring(w)}\n\nFiles: as recorded by `gpuadvisor profile "
            f"--no-analyze`. `findings.json` and `report.html` are derived: `gpuadvisor analyze {run_dir.name}` / "
            f"`gpuadvisor report {run_dir.name}` regenerate them.\n")


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def record_one(w: Workload, v: Variant, runs: Path, opts: argparse.Namespace, log: Any,
               deadline_at: float | None, measurements: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    run_dir = runs / f"{w.name}-{v.name}"
    cmd = profile_command(w, v, str(run_dir), opts.python, opts.tiny)
    timeout = opts.run_timeout
    if deadline_at is not None:
        timeout = min(timeout, deadline_at - time.monotonic())
    result: dict[str, Any] = {"workload": w.name, "variant": v.name, "run_dir": run_dir.name}
    if timeout < min(w.record.est_run_s, 30.0):
        result.update(ok=False, error="skipped: deadline", wall_s=0.0)
        return result
    t0 = time.monotonic()
    rc, output, errors = run_with_limit(cmd, timeout, grace=20.0)
    output += errors
    error = f"run exceeded {timeout:.0f} s" if rc is None else None if rc == 0 else f"exit status {rc}"
    result.update(ok=error is None, error=error, wall_s=round(time.monotonic() - t0, 1))
    if run_dir.is_dir():
        (run_dir / "README.md").write_text(run_readme(run_dir, w, v, cmd, measurements))
        result["bytes"] = dir_size(run_dir)
        manifest = _json(run_dir / "manifest.json")
        result["capture_state"] = (manifest.get("capture") or {}).get("state")
        if error is None and result["capture_state"] != "complete":
            result.update(ok=False, error=f"capture {result['capture_state']}")
    elif error is None:
        result.update(ok=False, error="no run directory written")
    log.write(f"===== {' '.join(cmd)}\n{json.dumps(result, sort_keys=True)}\n")
    if not result["ok"]:
        log.write("\n".join(output.splitlines()[-60:]) + "\n")
    log.flush()
    return result


def pack(runs: Path, out: Path, stem: str, max_bytes: int) -> list[Path]:
    """Tar.gz the run directories into as few archives as keep each under `max_bytes` (run directories
    hold gzip traces, so their size on disk is close to their compressed size)."""
    parts: list[list[Path]] = [[]]
    size = 0
    for run in sorted(p for p in runs.iterdir() if p.is_dir()):
        n = dir_size(run)
        if parts[-1] and size + n > max_bytes:
            parts.append([])
            size = 0
        parts[-1].append(run)
        size += n
    paths = []
    for k, members in enumerate(parts, start=1):
        path = out / (f"{stem}.tar.gz" if k == 1 else f"{stem}-part{k}.tar.gz")
        with tarfile.open(path, "w:gz") as tar:
            for run in members:
                tar.add(run, arcname=f"runs/{run.name}")
        paths.append(path)
    return paths


def rewrite_readmes(runs: Path, workloads: Sequence[Workload], python: str,
                    measurements: dict[tuple[str, str], dict[str, Any]]) -> int:
    """README.md of every recorded run directory in `runs`, again (after measuring)."""
    done = 0
    for w in workloads:
        for v in w.recorded_variants():
            run_dir = runs / f"{w.name}-{v.name}"
            if run_dir.is_dir():
                cmd = profile_command(w, v, str(run_dir), python, tiny=False)
                (run_dir / "README.md").write_text(run_readme(run_dir, w, v, cmd, measurements))
                done += 1
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--shard", type=parse_shard, default=None, metavar="I/N")
    parser.add_argument("--workloads", default="", help="comma-separated subset (default: the whole catalog)")
    parser.add_argument("--tar", action="store_true", help="pack the run directories into OUT/record*.tar.gz")
    parser.add_argument("--tar-max-mb", type=float, default=15.0, help="largest archive (MiB) before a new part")
    parser.add_argument("--readmes-only", action="store_true",
                        help="record nothing; rewrite the READMEs of the run directories in OUT/runs")
    parser.add_argument("--tiny", action="store_true", help="pass --tiny to every workload (CPU smoke test)")
    parser.add_argument("--run-timeout", type=float, default=150.0, help="seconds per recording (default 150)")
    parser.add_argument("--deadline", type=float, default=None, help="seconds after which no recording starts")
    parser.add_argument("--measurements", type=Path, nargs="*", default=[],
                        help="measure.py JSONL files: samples/s for the READMEs")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--planted-only", action="store_true",
                        help="record the planted variant only (the replay predicts from it; the fixed one is a check)")
    opts = parser.parse_args(argv)
    try:
        workloads = by_name([n for n in opts.workloads.split(",") if n] or None)
    except KeyError as exc:
        parser.error(str(exc.args[0]))
    if opts.shard is not None:
        cost = {w.name: w.record.est_run_s * len(w.recorded_variants()) for w in workloads}
        workloads = shard(workloads, opts.shard[0], opts.shard[1], cost)
    measurements = load_measurements([p for p in opts.measurements if p.is_file()])
    if opts.readmes_only:
        n = rewrite_readmes(opts.out / "runs", workloads, "python3", measurements)
        print(f"rewrote {n} READMEs in {opts.out / 'runs'}", file=sys.stderr)
        return 0 if n else 1
    suffix = "" if opts.shard is None else f"-s{opts.shard[0]}of{opts.shard[1]}"
    stop_children_on_sigterm()
    opts.out.mkdir(parents=True, exist_ok=True)
    deadline_at = time.monotonic() + opts.deadline if opts.deadline is not None else None
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="record-corpus-") if opts.tar else None
    runs = Path(tmp, "runs") if tmp else opts.out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    results = []
    with (opts.out / f"record{suffix}.log").open("w") as log:
        for w in workloads:
            for v in w.recorded_variants()[: 1 if opts.planted_only else None]:
                res = record_one(w, v, runs, opts, log, deadline_at, measurements)
                results.append(res)
                size = f"{res['bytes'] / 1024:.0f} KB" if "bytes" in res else "-"
                status = "ok" if res["ok"] else f"FAILED: {res['error']}"
                line = f"[record{suffix} +{time.monotonic() - t0:4.0f}s] {res['run_dir']:<34} {status} {size} ({res['wall_s']}s)"
                print(line, file=sys.stderr, flush=True)
                log.write(line + "\n")
        log.write(json.dumps({"results": results}, sort_keys=True) + "\n")
    if tmp is not None:
        for path in pack(runs, opts.out, f"record{suffix}", int(opts.tar_max_mb * 2**20)):
            print(f"{path} {path.stat().st_size / 2**20:.1f} MiB", file=sys.stderr)
        shutil.rmtree(tmp)
    failed = [r for r in results if not r["ok"]]
    print(f"{len(results) - len(failed)} of {len(results)} recordings complete", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
