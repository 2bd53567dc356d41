#!/usr/bin/env bash
# CI job 1 (and tests/ci/test_wheel.py): what `pip install gpuadvisor` gives a user who has no torch.
#
#   bash scripts/check_wheel.sh [WORKDIR]      (default build/wheel-check; emptied first)
#
# 1. builds the wheel from a copy of the checkout's files (tracked and untracked, not ignored), so
#    nothing stale from an earlier build gets in;
# 2. checks that the wheel holds every file of gpuadvisor/ and every rule of rules/ (as
#    gpuadvisor/builtin_rules/), the templates, the schema and py.typed;
# 3. installs it into a fresh, isolated venv WITHOUT torch and runs, from outside the checkout:
#    `rules`, `analyze` and `report` on a sample run and on a raw Kineto trace, `diff`, the Python API,
#    and `profile`, which must say in one line that it needs torch (exit 2).
# Every step prints what it does; the transcript is also written to WORKDIR/check.log, whose last line
# is "check_wheel: OK" only when everything passed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
WORK=${1:-$ROOT/build/wheel-check}
rm -rf "$WORK"
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
exec > >(tee "$WORK/check.log") 2>&1

step() { echo "== $*"; }
fail() { echo "check_wheel: FAILED: $*"; exit 1; }

step "copying the checkout's files to $WORK/src"
mkdir -p "$WORK/src"
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  # files that exist (a deleted but still tracked file is not copied)
  (cd "$ROOT" && git ls-files -z -co --exclude-standard | xargs -0 -I{} sh -c '[ -e "$1" ] && printf "%s\0" "$1"' _ {} \
    | tar --null -T - -cf -) | tar -C "$WORK/src" -xf -
else
  (cd "$ROOT" && tar --exclude=.venv --exclude=build --exclude=.git -cf - .) | tar -C "$WORK/src" -xf -
fi

step "building the wheel (pip wheel --no-deps)"
"$PY" -m pip wheel --disable-pip-version-check --no-deps -w "$WORK/dist" "$WORK/src"
WHEEL=$(ls "$WORK"/dist/gpuadvisor-*.whl)
echo "wheel: $(basename "$WHEEL")"

step "checking the wheel's contents against the source tree"
"$PY" - "$WHEEL" "$WORK/src" <<'PY'
import sys
import zipfile
from pathlib import Path

wheel, src = Path(sys.argv[1]), Path(sys.argv[2])
names = set(zipfile.ZipFile(wheel).namelist())
expected = {
    p.relative_to(src).as_posix()
    for p in (src / "gpuadvisor").rglob("*")
    if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
}
rules = sorted((src / "rules").glob("*.py"))
expected |= {f"gpuadvisor/builtin_rules/{p.name}" for p in rules}
missing = sorted(expected - names)
if missing:
    sys.exit(f"check_wheel: FAILED: the wheel lacks {len(missing)} file(s): {', '.join(missing[:20])}")
for must in ("gpuadvisor/py.typed", "gpuadvisor/schemas/findings.schema.json", "gpuadvisor/templates/report.html.j2"):
    assert must in names, must
builtin = [n for n in names if n.startswith("gpuadvisor/builtin_rules/GA")]
print(f"wheel files: {len(names)}; every file of gpuadvisor/ is in it; built-in rules: {len(builtin)}")
PY

step "a fresh venv without torch; pip install the wheel"
"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install --disable-pip-version-check --progress-bar off "$WHEEL"
# shellcheck disable=SC2016
"$VPY" -c 'import importlib.util as u, sys; sys.exit(1 if u.find_spec("torch") or u.find_spec("pynvml") else 0)' \
  || fail "torch or pynvml is installed in the fresh venv: the wheel must not pull them"
echo "torch: not installed (nor nvidia-ml-py)"

GA="$WORK/venv/bin/gpuadvisor"
RUN="$ROOT/sample_runs/transfer_bound-planted"
TRACE="$ROOT/sample_runs/sync_bound-planted/trace/rank0.json.gz"
cd "$WORK"   # outside the checkout: nothing can be imported from the source tree

step "gpuadvisor rules"
"$GA" rules > rules.txt
n_rules=$(grep -c '^GA[0-9]' rules.txt || true)
[ "$n_rules" -ge 20 ] || fail "gpuadvisor rules listed $n_rules rules"
echo "rules: $n_rules listed"
"$GA" rules GA201 | grep -q "How to fix" || fail "gpuadvisor rules GA201 has no documentation"

step "gpuadvisor analyze $RUN (a run directory)"
if "$GA" analyze "$RUN" --fail-on high > analyze-run.txt; then status=0; else status=$?; fi
[ "$status" = 1 ] || fail "analyze --fail-on high exited $status on a planted run, expected 1"
grep -q "GA102 exposed-host-copies" analyze-run.txt || fail "analyze did not report GA102 on transfer_bound"
echo "analyze run: GA102 exposed-host-copies found; --fail-on high exits 1"

step "gpuadvisor analyze $TRACE --format json (a raw Kineto trace)"
"$GA" analyze "$TRACE" --format json -o analyze-trace.json
"$VPY" - <<'PY'
import json
data = json.load(open("analyze-trace.json"))
assert data["source"]["kind"] == "trace", data["source"]
rules = [f["rule"] for f in data["findings"]]
assert "GA201" in rules, rules
print(f"analyze trace: {len(rules)} findings, GA201 among them")
PY

step "gpuadvisor report (run directory and raw trace)"
"$GA" report "$RUN" -o report-run.html
"$GA" report "$TRACE" -o report-trace.html
for f in report-run.html report-trace.html; do
  size=$(wc -c < "$f")
  [ "$size" -gt 1000000 ] || fail "$f is only $size bytes (plotly.js not inlined?)"
  grep -q 'id="gpuadvisor-data"' "$f" || fail "$f has no embedded result"
done
echo "report: report-run.html and report-trace.html written"

step "gpuadvisor diff"
"$GA" diff "$ROOT/sample_runs/sync_bound-planted" "$ROOT/sample_runs/sync_bound-fixed" > diff.txt
grep -q "resolved" diff.txt || fail "diff printed no finding changes"
echo "diff: ok"

step "the Python API"
"$VPY" - "$RUN" <<'PY'
import sys

import gpuadvisor

result = gpuadvisor.analyze(sys.argv[1])
assert result.findings and result.exit_code("high") == 1
assert "torch" not in sys.modules, "the analysis imported torch"
print(f"api: gpuadvisor.analyze -> {len(result.findings)} findings, torch never imported")
PY

step "gpuadvisor profile without torch"
echo "print('hello')" > script.py
if "$GA" profile script.py > profile.out 2> profile.err; then fail "profile ran without torch"; else status=$?; fi
[ "$status" = 2 ] || fail "profile without torch exited $status, expected 2"
[ "$(wc -l < profile.err)" = 1 ] || fail "profile without torch printed more than one line: $(cat profile.err)"
grep -q "gpuadvisor\[profile\]" profile.err || fail "profile's message does not say how to install torch"
echo "profile: $(cat profile.err)"
echo "check_wheel: OK"
