#!/usr/bin/env bash
# The README's main job: set up .venv on a fresh machine, then
#   bash scripts/run.sh                       profile a demo workload (GPU) or show what works without one
#   bash scripts/run.sh train.py --lr 3e-4    profile your own script (everything after it is its own)
# Runs and reports go under runs/. Installs only what profiling needs (gpuadvisor[profile]: torch, NVML).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh profile
mkdir -p runs

if [ $# -gt 0 ]; then
  exec gpuadvisor profile -o "runs/$(basename "$1" .py)-$(date +%Y%m%d-%H%M%S)" "$@"
fi

if python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "== CUDA GPU found: profiling benchmarks/workloads/sync_bound.py (a planted .item() problem)"
  gpuadvisor profile -o runs/demo-sync_bound --force benchmarks/workloads/sync_bound.py
  exit 0
fi

cat <<'TXT'
== No CUDA GPU on this machine, so nothing here can show GPU waste. Instead:
   1. the capture, end to end, on a small CPU training run (GPU and NVML rules say "not applicable");
   2. the analysis and HTML reports of the real GPU recordings in sample_runs/ (NVIDIA H200 and H100:
      each one's GPU is in its environment.json, counted below).
TXT
echo
echo "== 1. gpuadvisor profile of a CPU run (benchmarks/workloads/sync_bound.py --tiny)"
gpuadvisor profile -o runs/demo-cpu --force benchmarks/workloads/sync_bound.py --tiny --steps 60
echo
echo "== 2a. gpuadvisor analyze sample_runs/sync_bound-planted (recorded on an NVIDIA H200)"
gpuadvisor analyze sample_runs/sync_bound-planted
echo
echo "== 2b. top finding of every sample run, and its HTML report under runs/reports/"
mkdir -p runs/reports
python - <<'PY'
import json
from pathlib import Path

import gpuadvisor
from gpuadvisor.render._format import clip
from gpuadvisor.render.html import write_report

runs = sorted(p for p in Path("sample_runs").iterdir() if p.is_dir())
gpus: dict[str, int] = {}
for run in runs:
    env = json.loads((run / "environment.json").read_text(encoding="utf-8"))
    name = str((env.get("gpus") or [{}])[0].get("name") or "an unknown GPU")
    gpus[name] = gpus.get(name, 0) + 1
print(f"{len(runs)} recordings: " + ", ".join(f"{n} on {g}" for g, n in sorted(gpus.items(), key=lambda kv: -kv[1])))
print("NAME-fixed is the workload with its planted problem removed, nothing else: other findings (its own")
print("small batch, launch overhead...) can remain, and are listed as they are.")
for run in runs:
    result = gpuadvisor.analyze(run)
    top = result.findings[0] if result.findings else None
    # one plotly.js for the folder (runs/reports/plotly-*.min.js) instead of ~4.8 MB inlined in each
    where = write_report(result, Path("runs/reports") / f"{run.name}.html", shared_plotly=True)
    summary = (
        f"{top.severity.value:6} {'-' if top.impact is None else f'{100 * top.impact:5.1f}%':>6}  {top.rule} {top.title}" if top else "no finding"
    )
    print(f"{run.name:28} {clip(summary, 100)}")
print("reports: runs/reports/*.html (open one in a browser; they share runs/reports/plotly-*.min.js: keep it beside them)")
PY
