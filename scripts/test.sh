#!/usr/bin/env bash
# The README's test command: sets up .venv (gpuadvisor[profile,test]) on a fresh machine, then runs pytest.
#   bash scripts/test.sh                 every test (CI runs this; GPU-marked tests skip without a GPU)
#   bash scripts/test.sh -m "not slow" -n 2   the quick tier, in two processes (pytest-xdist; meant to take
#                                             under 2 minutes on 2 idle cores)
#   bash scripts/test.sh -m gpu          only the GPU tests (on a GPU machine)
# Browser tests need Chromium: installed with apt-get when running as root and the marker expression
# can select them (no -m, or one that names slow or browser tests without excluding them: every
# browser test is also slow, so the quick tier -m "not slow" installs nothing), else skipped with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh profile,test

marker=""
prev=""
for arg in "$@"; do
  if [ "$prev" = "-m" ]; then marker="$arg"; fi
  case "$arg" in -m?*) marker="${arg#-m}"; marker="${marker#=}" ;; esac
  prev="$arg"
done

browser_tests_selected() {
  [ -z "$marker" ] && return 0
  case "$marker" in *"not slow"* | *"not browser"*) return 1 ;; esac
  case "$marker" in *browser* | *slow*) return 0 ;; esac
  return 1
}

if browser_tests_selected && ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
  && command -v apt-get >/dev/null 2>&1; then
  echo "== installing Debian's chromium for the browser tests (apt-get)" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "chromium could not be installed: browser tests will be skipped" >&2
fi
# the command as it could be typed again: -m 'not slow', not -m not slow
echo "== python -m pytest $(python -c 'import shlex, sys; print(shlex.join(sys.argv[1:]))' "$@")"
python -m pytest -q "$@"
