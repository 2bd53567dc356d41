#!/usr/bin/env bash
# Issue 41's GPU measurements in one command, under 9 minutes of wall time on one H100/H200:
#
#   bash benchmarks/gpu_issue41.sh [OUT] [--tiny]
#
# OUT defaults to $OUT (the folder a lent GPU machine returns), else ./gpu-issue41-out. From the
# repository root of a checkout; wheels in .whl/ are installed first when present (/work/shared/gpu
# recipe: no package registry on the machine). Stages, each bounded so the whole fits BUDGET seconds
# (default 525; the stages after a late one shrink or are skipped, and the summary says so):
#
#   1. benchmarks/nhwc_table.py: every op family in NCHW and channels_last, fp32/bf16/fp16
#      -> OUT/nhwc_table.json (copy it to gpuadvisor/data/nhwc_table.json)
#   2. benchmarks/measure.py on issue 41's workloads: planted and each fix (controls: planted and their
#      probes), 3 interleaved repeats; big_checkpoint with longer regions (its saves come every 20
#      steps) -> OUT/measure.jsonl (both runs' records)
#   3. benchmarks/record_corpus.py --planted-only: `gpuadvisor profile` of each planted workload and
#      control, then gemm_odd_shapes (the pair for the raw trace) -> OUT/record.tar.gz (-part2... when
#      one archive would pass 40 MiB)
#   4. benchmarks/raw_trace.py: a plain torch.profiler trace (record_shapes, with_flops) of
#      gemm_odd_shapes, then one with stacks -> OUT/raw_gemm_odd_shapes.json.gz,
#      OUT/raw_gemm_odd_shapes_stack.json.gz
#   5. OUT/logs.tar.gz: every log, the environment (GPU, driver, torch) and OUT's summary.txt
#
# At most 8 files come back. WORKLOADS, PERIODIC and RECORD (comma-separated) replace the workload
# lists, PYTHON the interpreter. `--tiny` runs every stage on tiny sizes on the CPU (a test of this
# script, tests/benchmarks/test_gpu_issue41.py); its numbers mean nothing. Exit 0 when every stage
# completed, 1 when one failed or was cut by the budget (what was made is kept), 2 on bad usage.
set -u

usage() { echo "usage: $0 [OUT] [--tiny]" >&2; exit 2; }
OUTDIR=""
TINY=0
for a in "$@"; do
  case "$a" in
    --tiny) TINY=1 ;;
    -*) usage ;;
    *) [ -z "$OUTDIR" ] || usage; OUTDIR=$a ;;
  esac
done
OUTDIR=${OUTDIR:-${OUT:-gpu-issue41-out}}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
PY=${PYTHON:-python3}
BUDGET=${BUDGET:-525}
START=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-issue41.XXXXXX")
LOGS=$WORK/logs
mkdir -p "$LOGS"
trap 'rm -rf "$WORK"' EXIT

# (the environment may name subsets: the script's own test runs a few)
WORKLOADS=${WORKLOADS:-gn_unet_bf16,mse_wide_head,gpt_checkpointed,empty_cache_loop,item_blocks_prep,control_gpt_autocast_ce,control_mobilenet_cl,control_gn_decoder}
PERIODIC=${PERIODIC:-big_checkpoint}
RECORD=${RECORD:-$WORKLOADS,$PERIODIC,gemm_odd_shapes}
TINYARG=()
SECONDS_MEASURE=1.0
SECONDS_PERIODIC=5.0
NHWC=(--rounds 3 --iters 3 --warmup 3)
RAW_STEPS=40
if [ "$TINY" = 1 ]; then
  TINYARG=(--tiny)
  SECONDS_MEASURE=0.2
  SECONDS_PERIODIC=0.5
  NHWC=(--tiny --rounds 1 --iters 1 --warmup 1 --dtypes fp32)
  RAW_STEPS=20
  export CUDA_VISIBLE_DEVICES="" OMP_NUM_THREADS=1
fi

if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > "$LOGS/wheels.log" 2>&1
  export PYTHONPATH="$ROOT:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi

left() { echo $(( BUDGET - ($(date +%s) - START) )); }
FAILED=0
SUMMARY=$OUTDIR/summary.txt
: > "$SUMMARY"
note() { echo "[issue41 +$(( $(date +%s) - START ))s] $*" | tee -a "$SUMMARY" >&2; }
# stage NAME MIN_SECONDS LIMIT_SECONDS CMD...: runs CMD under `timeout` (at most LIMIT, and what the
# budget leaves), or skips it when fewer than MIN_SECONDS are left
stage() {
  local name=$1 min=$2 limit=$3; shift 3
  local rest
  rest=$(left)
  if [ "$rest" -lt "$min" ] || [ "$limit" -lt "$min" ]; then
    note "$name: skipped, $rest s left of the budget (its share: $limit s, it needs $min)"
    FAILED=1
    return 1
  fi
  [ "$limit" -gt "$rest" ] && limit=$rest
  note "$name: start (limit ${limit}s)"
  timeout --signal=TERM --kill-after=15 "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  note "$name: exit $rc"
  [ "$rc" = 0 ] || FAILED=1
  return "$rc"
}

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  echo "git: $(git rev-parse HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed files"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
  "$PY" -c 'import torch, sys, platform; print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version() if torch.cuda.is_available() else None)' 2>&1
  nproc
} > "$LOGS/env.txt"
cat "$LOGS/env.txt" >> "$SUMMARY"

# 1. the NHWC table
stage nhwc 30 90 "$PY" benchmarks/nhwc_table.py -o "$OUTDIR/nhwc_table.json" "${NHWC[@]}"

# 2. measurements: the periodic workload's regions are longer (several saves in each); the deadline
#    keeps time for the recordings
stage measure 60 $(( $(left) - 190 )) "$PY" benchmarks/measure.py --workloads "$WORKLOADS" --repeats 3 \
  --seconds "$SECONDS_MEASURE" --out "$WORK/measure" --deadline $(( $(left) - 215 )) "${TINYARG[@]}"
stage measure_periodic 40 $(( $(left) - 150 )) "$PY" benchmarks/measure.py --workloads "$PERIODIC" --repeats 3 \
  --seconds "$SECONDS_PERIODIC" --min-steps 40 --out "$WORK/measure-periodic" --run-timeout 60 "${TINYARG[@]}"
cat "$WORK"/measure/measure.jsonl "$WORK"/measure-periodic/measure.jsonl > "$OUTDIR/measure.jsonl" 2>/dev/null
cp "$WORK"/measure/measure.log "$LOGS/measure-table.log" 2>/dev/null
cp "$WORK"/measure-periodic/measure.log "$LOGS/measure-periodic-table.log" 2>/dev/null

# 3. recordings (planted only: the replay predicts from them), gemm_odd_shapes last
stage record 40 $(( $(left) - 35 )) "$PY" benchmarks/record_corpus.py "$WORK/record" --workloads "$RECORD" \
  --planted-only --tar --tar-max-mb 40 --run-timeout 90 --deadline $(( $(left) - 60 )) \
  --measurements "$OUTDIR/measure.jsonl" "${TINYARG[@]}"
cp "$WORK"/record/record*.tar.gz "$OUTDIR"/ 2>/dev/null
cp "$WORK"/record/record*.log "$LOGS"/ 2>/dev/null

# 4. plain torch.profiler traces of gemm_odd_shapes (the same script, no gpuadvisor)
stage raw_trace 20 40 "$PY" benchmarks/raw_trace.py -o "$OUTDIR/raw_gemm_odd_shapes.json.gz" --skip 10 --warmup 2 \
  --active 5 benchmarks/workloads/gemm_odd_shapes.py --steps "$RAW_STEPS" "${TINYARG[@]}"
stage raw_trace_stack 25 40 "$PY" benchmarks/raw_trace.py -o "$OUTDIR/raw_gemm_odd_shapes_stack.json.gz" --skip 10 \
  --warmup 2 --active 5 --with-stack benchmarks/workloads/gemm_odd_shapes.py --steps "$RAW_STEPS" "${TINYARG[@]}"

# 5. logs
note "done in $(( $(date +%s) - START )) s; files: $(cd "$OUTDIR" && ls | tr '\n' ' ')"
cp "$SUMMARY" "$LOGS"/
tar -C "$WORK" -czf "$OUTDIR/logs.tar.gz" logs
rm -f "$SUMMARY"
exit "$FAILED"
