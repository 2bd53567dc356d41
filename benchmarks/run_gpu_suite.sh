#!/usr/bin/env bash
# Run every benchmark workload, planted and fixed, on the GPU machine.
#
#   benchmarks/run_gpu_suite.sh OUTDIR [--raw] [--gpuadvisor]
#
# For each workload and variant: (1) a plain run whose BENCH line goes to OUTDIR/bench.jsonl;
# (2) with --raw, a torch.profiler trace via benchmarks/raw_trace.py into
#     OUTDIR/traces/<workload>-<variant>.json.gz;
# (3) with --gpuadvisor, `python3 -m gpuadvisor profile` into OUTDIR/runs/<workload>-<variant>.
# Runs are sequential (one GPU). Logs: OUTDIR/logs/; per-run exit status and wall time: OUTDIR/runs.tsv.
# Environment: PYTHON (default python3), WORKLOADS (space-separated subset), RUN_TIMEOUT (s, default 180),
# EXTRA_ARGS (appended to every workload's arguments), STEPS (overrides every plain run's --steps);
# `EXTRA_ARGS=--tiny STEPS=30` smoke-tests the suite on a CPU.
# Exit status: 0 when every run exited 0, else 1 (the suite always runs to the end); 2 on bad usage.
set -u

usage() { echo "usage: $0 OUTDIR [--raw] [--gpuadvisor]" >&2; exit 2; }
[ $# -ge 1 ] || usage
OUT=$1; shift
RAW=0; GA=0
for a in "$@"; do
  case "$a" in
    --raw) RAW=1 ;;
    --gpuadvisor) GA=1 ;;
    *) usage ;;
  esac
done

HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
TO=${RUN_TIMEOUT:-180}
read -r -a EXTRA <<< "${EXTRA_ARGS:-}"
STEPS_ALL=${STEPS:-}
unset STEPS
WORKLOADS=${WORKLOADS:-"transfer_bound sync_bound dataloader_bound small_batch launch_bound low_occupancy fp32_transformer control_transformer control_convnet"}

# Steps for the plain runs: 10 warm-up steps + a measured region of a few seconds each (estimates
# for an H100), so the whole suite stays within ~8 minutes. Raw/gpuadvisor runs stop after their window.
declare -A STEPS=(
  [transfer_bound]=250 [sync_bound]=500 [dataloader_bound]=40 [small_batch]=1500 [launch_bound]=150
  [low_occupancy]=120 [fp32_transformer]=40 [control_transformer]=100 [control_convnet]=200
)
# Profiler window size per workload: launch_bound has thousands of tiny kernels per step, so its trace
# keeps fewer active steps to stay near 2 MB gzip.
declare -A ACTIVE=( [launch_bound]=4 )

mkdir -p "$OUT/logs" "$OUT/traces" "$OUT/runs"
: > "$OUT/bench.jsonl"
printf "workload\tvariant\tmode\trc\twall_s\n" > "$OUT/runs.tsv"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
  "$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} > "$OUT/env.txt"
cat "$OUT/env.txt"

FAILED=0
run_one() {  # workload variant mode logfile cmd...
  local w=$1 v=$2 mode=$3 log=$4; shift 4
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout --signal=INT --kill-after=20 "$TO" "$@" > "$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local wall; wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
  printf "%s\t%s\t%s\t%s\t%s\n" "$w" "$v" "$mode" "$rc" "$wall" >> "$OUT/runs.tsv"
  printf "%-20s %-8s %-11s rc=%-3s %6ss\n" "$w" "$v" "$mode" "$rc" "$wall"
  if [ "$rc" -ne 0 ]; then FAILED=1; tail -n 5 "$log" | sed 's/^/    | /'; fi
  return 0
}

for w in $WORKLOADS; do
  script="$HERE/workloads/$w.py"
  [ -f "$script" ] || { echo "unknown workload: $w" >&2; FAILED=1; continue; }
  steps=${STEPS_ALL:-${STEPS[$w]:-100}}
  active=${ACTIVE[$w]:-10}
  window_steps=$(( 10 + 2 + active + 5 ))
  for v in planted fixed; do
    flag=(); [ "$v" = fixed ] && flag=(--fixed)
    log="$OUT/logs/$w-$v-plain.log"
    run_one "$w" "$v" plain "$log" "$PY" "$script" --steps "$steps" "${flag[@]}" "${EXTRA[@]}"
    grep -h '^BENCH ' "$log" | tail -n 1 | sed 's/^BENCH //' >> "$OUT/bench.jsonl"
    if [ "$RAW" = 1 ]; then
      run_one "$w" "$v" raw "$OUT/logs/$w-$v-raw.log" "$PY" "$HERE/raw_trace.py" \
        -o "$OUT/traces/$w-$v.json.gz" --skip 10 --warmup 2 --active "$active" \
        "$script" --steps "$window_steps" "${flag[@]}" "${EXTRA[@]}"
    fi
    if [ "$GA" = 1 ]; then
      run_one "$w" "$v" gpuadvisor "$OUT/logs/$w-$v-gpuadvisor.log" "$PY" -m gpuadvisor profile \
        -o "$OUT/runs/$w-$v" --force "$script" --steps "$steps" "${flag[@]}" "${EXTRA[@]}"
    fi
  done
done

"$PY" - "$OUT/bench.jsonl" <<'PYEOF'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if line:
        r = json.loads(line)
        rows.setdefault(r["workload"], {})[r["variant"]] = r
print()
print(f"{'workload':<20} {'planted samples/s':>18} {'fixed samples/s':>16} {'speed-up':>9} {'planted ms':>11} {'fixed ms':>9}")
for w in sorted(rows):
    p, f = rows[w].get("planted"), rows[w].get("fixed")
    ps = p["samples_per_s"] if p else None
    fs = f["samples_per_s"] if f else None
    sp = f"{fs / ps:.2f}x" if ps and fs else "n/a"
    def fmt(x, spec):
        return format(x, spec) if x is not None else format("n/a", spec[0] + spec[1:].rstrip("f").split(".")[0])
    print(f"{w:<20} {fmt(ps, '>18.1f')} {fmt(fs, '>16.1f')} {sp:>9} "
          f"{fmt(p and p['step_ms_median'], '>11.2f')} {fmt(f and f['step_ms_median'], '>9.2f')}")
PYEOF
du -sh "$OUT/traces" 2>/dev/null || true
exit "$FAILED"
