#!/usr/bin/env bash
# `gpuadvisor profile --explore` on the GPU: each workload profiled, then every applicable lever measured
# and the best combination grown (docs/verify.md, "Explore"). One command, results under OUT:
#
#   bash tests/verify/gpu_explore.sh OUT [WORKLOAD...]
#
# WORKLOAD: names under benchmarks/workloads (default: resnet50_fp32_nchw epoch_restart_workers).
# BUDGET (default 600 s) is the explore budget of each workload; a profile takes a minute more. The
# device runs a command for at most 10 minutes: start this in the background (nohup ... &) and read
# OUT/<name>.log, OUT/explore-table.md when it is done. Writes OUT/<name>/ (the run directory with
# verify.json), OUT/<name>.log (everything printed) and OUT/explore-table.md (the docs table's rows).
set -u
OUT_DIR=${1:?give OUT as the first argument}
shift || true
WORKLOADS=("$@")
[ ${#WORKLOADS[@]} -eq 0 ] && WORKLOADS=(resnet50_fp32_nchw epoch_restart_workers)
BUDGET=${BUDGET:-600}
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT_DIR"
cd "$HERE" || exit 1
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" \
  | tee "$OUT_DIR/device.txt"
for name in "${WORKLOADS[@]}"; do
  t0=$(date +%s)
  "$PY" -m gpuadvisor profile -o "$OUT_DIR/$name" --force --explore --verify-budget "$BUDGET" \
    "benchmarks/workloads/$name.py" >"$OUT_DIR/$name.log" 2>&1
  echo "profile --explore rc=$? in $(( $(date +%s) - t0 ))s" >>"$OUT_DIR/$name.log"
  grep -E "best measured configuration|no best configuration|search stopped|rc=" "$OUT_DIR/$name.log"
done
"$PY" - "$OUT_DIR" "${WORKLOADS[@]}" <<'PYEOF'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
gpu = (out / "device.txt").read_text().strip().split(" cuda True ")[-1]
lines = ["| workload | GPU | best measured configuration (levers) | measured gain | hand fix |", "|---|---|---|---|---|"]
for name in sys.argv[2:]:
    path = out / name / "verify.json"
    if not path.is_file():
        lines.append(f"| `{name}` | {gpu} | verify.json missing | | |")
        continue
    doc = json.loads(path.read_text())
    best = (doc.get("explore") or {}).get("best")
    batch = (doc.get("explore") or {}).get("batch")
    if batch:
        gain = f"{batch['speedup']:.2f}x in samples/s ({batch['low']:.2f}-{batch['high']:.2f}, {batch['trials']} trials)"
        lines.append(f"| `{name}` | {gpu} | a larger batch: {batch['label']} | {gain} | |")
    if best:
        gain = f"{best['speedup']:.2f}x ({best['low']:.2f}-{best['high']:.2f}, {best['trials']} trials)"
        lines.append(f"| `{name}` | {gpu} | {' + '.join(best['labels'])} | {gain} | |")
    else:
        lines.append(f"| `{name}` | {gpu} | none: {(doc.get('explore') or {}).get('stopped')} | | |")
(out / "explore-table.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
