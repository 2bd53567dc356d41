"""The reports of real runs that the layout tests render and docs/ shows (issue 42): a planted problem, a
control, the DDP job (all three REAL recordings in sample_runs/, NVIDIA H200) and a CPU-only run, which
is recorded here on this machine's CPU (`gpuadvisor profile benchmarks/workloads/sync_bound.py --tiny
--steps 60`: a real capture, no GPU).

`python -m tests.report.real_reports OUT_DIR` writes the four reports there and, with `--screenshots
DOCS_DIR`, the PNGs of docs/ (headless Chromium at 1400 px; `REPORTS` names each file).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from gpuadvisor.analysis import analyze
from gpuadvisor.render.html import write_report
from tests.report import browser_check

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_runs"
CPU_ONLY = "cpu-only"
# report name -> (sample run or CPU_ONLY, the screenshot in docs/, its height in px)
REPORTS: dict[str, tuple[str, str, int]] = {
    "planted": ("sync_bound-planted", "report-screenshot.png", 2600),
    "control": ("control_convnet-planted", "report-screenshot-control.png", 2000),
    "ddp": ("ddp_straggler-planted", "report-screenshot-ddp.png", 2600),
    "cpu": (CPU_ONLY, "report-screenshot-cpu-only.png", 2000),
}
CPU_ONLY_COMMAND = ("benchmarks/workloads/sync_bound.py", "--tiny", "--steps", "60")


def record_cpu_run(out: Path) -> Path:
    """Record the CPU-only run under `out` (a real `gpuadvisor profile` of a tiny CPU training loop)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuadvisor",
            "profile",
            "-q",
            "--no-analyze",
            "--force",
            "-o",
            str(out),
            *CPU_ONLY_COMMAND,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"recording the CPU-only run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return out


def write_real_report(name: str, out_dir: Path) -> Path:
    """The report of `REPORTS[name]` as `out_dir/NAME.html` (the CPU-only run recorded first)."""
    source = REPORTS[name][0]
    # a sample run by its path from the current folder (the repository root): the report's header then
    # reads "sample_runs/NAME", not a path of this machine
    run = (
        record_cpu_run(out_dir / "cpu-run") if source == CPU_ONLY else Path(os.path.relpath(SAMPLES / source))
    )
    return write_report(analyze(run), out_dir / f"{name}.html", generated_at="2026-01-01T00:00:00+00:00")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out", type=Path)
    parser.add_argument("--screenshots", type=Path, default=None, help="write docs/'s PNGs into this folder")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (_source, png, height) in REPORTS.items():
        report = write_real_report(name, args.out)
        print(report)
        if args.screenshots is not None:
            status = browser_check.check(report, screenshot=args.screenshots / png, height=height)
            if not browser_check.ok(status):
                print(f"{report}: did not render cleanly: {status}", file=sys.stderr)
                return 1
            print(args.screenshots / png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
