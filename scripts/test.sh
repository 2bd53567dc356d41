#!/usr/bin/env bash
# The README's test command: sets up .venv (gpuadvisor[profile,test]) on a fresh machine, then runs pytest.
#   bash scripts/test.sh                 every test (CI runs this; GPU-marked tests skip without a GPU)
#   bash scripts/test.sh -m "not slow" -n 2   the quick tier, in two processes (pytest-xdist; meant to take
#                                             under 2 minutes on 2 idle cores)
#   bash scripts/test.sh -m gpu          only the GPU tests (on a GPU machine)
# Browser tests need Chromium: installed with apt-get when running as root, else skipped with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh profile,test
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "== installing Debian's chromium for the browser tests (apt-get)" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "chromium could not be installed: browser tests will be skipped" >&2
fi
echo "== python -m pytest $*"
python -m pytest -q "$@"
