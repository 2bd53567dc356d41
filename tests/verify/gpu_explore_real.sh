#!/usr/bin/env bash
# `gpuadvisor profile --explore` on real training scripts nobody here wrote (issue 40), each with the
# default budget (sized by its first baseline trial), and each one's hand fix measured on the same host
# in the same session, by the same trials (settled mean, interleaved with the plain command):
#
#   bash tests/verify/gpu_explore_real.sh OUT timm=/path/to/pytorch-image-models/train.py \
#        hf=/path/to/run_clm.py nanogpt=/path/to/nanoGPT/train.py
#
# Each NAME=SCRIPT runs in the script's own folder (nanoGPT reads data/ and configurator.py from there)
# with the arguments of NAME_ARGS, and its hand fix appends NAME_FIX to them:
#   timm:    TIMM_ARGS (default: --data-dir "$TIMM_DATA" --model resnet50 -b 128 --epochs 1; TIMM_DATA is
#            a JPEG ImageFolder with a train/ split), TIMM_FIX (default: --amp --amp-dtype bfloat16
#            --channels-last -j 12)
#   hf:      HF_ARGS (required: a Trainer script at FP32 defaults, e.g. run_clm.py with a local GPT-2 small
#            config and tokenizer and a local text file; nothing can be downloaded on the device),
#            HF_FIX (default: --bf16)
#   nanogpt: NANOGPT_ARGS (default: none: as shipped, compile and bf16 on; data/ prepared), NANOGPT_FIX
#            (default: none: the check is that explore reports no lever faster that is not)
# TRIALS (default 3) trials a side for the hand fix; explore uses its own default (3). NAME_EXPLORE adds
# options to NAME's `profile --explore` (e.g. NANOGPT_EXPLORE="--verify-budget 300" where the default
# budget does not fit the device time; the summary shows the budget each search ran under).
#
# The device runs a command for at most 10 minutes and explore's default budget is longer: start this in
# the background (nohup bash tests/verify/gpu_explore_real.sh OUT ... > /tmp/gpu-explore-real.out 2>&1 &)
# and poll OUT/summary.md (written last) and OUT/NAME.log. Run directories go to RUNS (default: a temporary folder), not OUT: OUT gets at most 8
# files: summary.md (the device, one row per script, the done-when checks), handfix.json, and per
# script NAME.log (everything profile --explore printed) and NAME.verify.json.
set -u
OUT_DIR=${1:?give OUT as the first argument}
shift || true
[ $# -gt 0 ] || { echo "give NAME=SCRIPT arguments (timm=..., hf=..., nanogpt=...)" >&2; exit 2; }
TRIALS=${TRIALS:-3}
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-$(mktemp -d /tmp/gpu-explore-real.XXXXXX)}
mkdir -p "$OUT_DIR" "$RUNS"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"
DEVICE=$("$PY" -c "import torch, os; print('torch', torch.__version__, '|', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA', '|', len(os.sched_getaffinity(0)), 'CPUs')")
COMMIT=$(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo unknown)
NAMES=()
for spec in "$@"; do
  name=${spec%%=*}
  script=$(cd "$(dirname "${spec#*=}")" && pwd)/$(basename "${spec#*=}")
  upper=$(echo "$name" | tr '[:lower:]' '[:upper:]')
  case $name in
    timm) default_args="--data-dir ${TIMM_DATA:-DATA} --model resnet50 -b 128 --epochs 1"
          default_fix="--amp --amp-dtype bfloat16 --channels-last -j 12" ;;
    hf) default_args=""; default_fix="--bf16" ;;
    *) default_args=""; default_fix="" ;;
  esac
  args_var="${upper}_ARGS"; fix_var="${upper}_FIX"
  explore_var="${upper}_EXPLORE"
  args=${!args_var-$default_args}
  fix=${!fix_var-$default_fix}
  explore=${!explore_var-}
  NAMES+=("$name")
  echo "$name|$script|$args|$fix" >>"$RUNS/specs.txt"
  t0=$(date +%s)
  # the script's own folder: relative paths in it (data/, configurator.py) resolve as they do there
  (cd "$(dirname "$script")" && eval "\"$PY\" -m gpuadvisor profile -o \"$RUNS/$name\" --force --explore $explore \"$script\" $args") \
    >"$OUT_DIR/$name.log" 2>&1
  echo "profile --explore rc=$? in $(( $(date +%s) - t0 ))s" >>"$OUT_DIR/$name.log"
  cp "$RUNS/$name/verify.json" "$OUT_DIR/$name.verify.json" 2>/dev/null || echo "no verify.json" >>"$OUT_DIR/$name.log"
  grep -E "the script's own switches|best measured configuration|best so far|no best configuration|search stopped|rc=" "$OUT_DIR/$name.log"
done
# the hand fixes: trial children of the plain command and of the command with the fix, interleaved
"$PY" - "$RUNS" "$OUT_DIR" "$TRIALS" "$DEVICE" "$COMMIT" <<'PYEOF'
import json, shlex, subprocess, sys
from pathlib import Path

from gpuadvisor.verify.measure import across_trials
from gpuadvisor.verify.stats import compare
from gpuadvisor.verify.trial import TrialConfig

runs, out, trials, device, commit = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
specs = [line.rstrip("\n").split("|", 3) for line in (runs / "specs.txt").read_text().splitlines()]


def trial(name: str, script: str, argv: list[str], tag: str) -> dict:
    result = runs / f"{name}-{tag}.result.json"
    cfg = TrialConfig(target={"kind": "script", "path_or_name": script, "argv": argv}, result=str(result))
    path = runs / f"{name}-{tag}.config.json"
    path.write_text(json.dumps(cfg.to_json()))
    with open(runs / f"{name}-{tag}.log", "wb") as log:
        subprocess.run([sys.executable, "-m", "gpuadvisor.verify.trial", str(path)], cwd=str(Path(script).parent),
                       stdout=log, stderr=subprocess.STDOUT, timeout=900, check=False)
    return json.loads(result.read_text()) if result.is_file() else {"status": "failed", "reason": "no result"}


handfix: dict = {}
for name, script, args, fix in specs:
    plain, fixed = shlex.split(args), shlex.split(args) + shlex.split(fix)
    if not fix.strip():
        handfix[name] = {"fix": None}
        continue
    base, mine = [], []
    for i in range(trials):
        base.append(trial(name, script, plain, f"plain{i}"))
        mine.append(trial(name, script, fixed, f"fix{i}"))
    b = [r["step_time_ms"] for r in base if r.get("status") == "ok"]
    m = [r["step_time_ms"] for r in mine if r.get("status") == "ok"]
    entry = {"fix": fix, "plain_ms": b, "fix_ms": m, "plain": across_trials(base), "fixed": across_trials(mine),
             "failed": [r.get("reason") for r in base + mine if r.get("status") != "ok"]}
    if b and m:
        c = compare(b, m, higher_is_better=False)
        entry.update(speedup=round(c.speedup, 3), low=round(c.low, 3), high=round(c.high, 3), verdict=c.verdict.value)
    handfix[name] = entry
(out / "handfix.json").write_text(json.dumps(handfix, indent=1, sort_keys=True))

rows = [f"device: {device}; gpuadvisor commit {commit}; hand fix: {trials} trials a side, interleaved", "",
        "| script | best measured configuration | measured gain | switches used | hand fix (same host) | stopped | trials, budget |",
        "|---|---|---|---|---|---|---|"]
checks = []
for name, script, args, fix in specs:
    path = out / f"{name}.verify.json"
    doc = json.loads(path.read_text()) if path.is_file() else {}
    ex = doc.get("explore") or {}
    best, hf = ex.get("best"), handfix.get(name, {})
    gain = f"{best['speedup']:.2f}x ({best['low']:.2f}-{best['high']:.2f}, {best['trials']} trials)" if best else "-"
    hand = (f"{hf['speedup']:.2f}x ({hf['low']:.2f}-{hf['high']:.2f}) `{fix}`" if hf.get("speedup") else
            "-" if not fix.strip() else f"failed: {hf.get('failed')}")
    switches = ", ".join(" ".join(s["args"]) for s in ex.get("switches") or []) or "-"
    budget = (doc.get("settings") or {}).get("budget_s")
    rows.append(f"| {name} | {' + '.join(best['labels']) if best else 'none'} | {gain} | {switches} | {hand} | "
                f"{ex.get('stopped')} | {ex.get('trials_run')}, {budget} s |")
    if name == "timm" and best and hf.get("speedup"):
        ok = best["speedup"] >= 1.6 or best["speedup"] >= 0.9 * hf["speedup"]
        checks.append(f"timm: best {best['speedup']:.2f}x, hand fix {hf['speedup']:.2f}x: {'PASS' if ok else 'FAIL'} (>= 1.6x or within 10% of the hand fix)")
    if name == "hf":
        found = bool(best) and any(r in ("bf16_autocast",) for r in best.get("levers", []))
        checks.append(f"hf: bf16 in the best configuration: {'PASS' if found else 'FAIL'}")
    if name == "nanogpt":
        faster = [t["lever"] for t in doc.get("trials", []) if t.get("verdict") == "faster"]
        checks.append(f"nanogpt: levers reported faster alone: {faster or 'none'}; best: {gain} "
                      "(check by hand that any gain reported is real: compile and bf16 are on as shipped)")
(out / "summary.md").write_text("\n".join(rows + [""] + checks) + "\n")
print("\n".join(rows + [""] + checks))
PYEOF
