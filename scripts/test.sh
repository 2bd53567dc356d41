#!/usr/bin/env bash
# The README's test command: sets up .venv (gpuadvisor + test tools) on a fresh machine, then runs the tests.
#   bash scripts/test.sh            all tests (GPU-marked tests skip themselves without a GPU)
#   bash scripts/test.sh -m gpu     only the GPU tests (on a GPU machine)
# Browser tests need Chromium: installed with apt-get when running as root, else skipped with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian chromium for the browser tests..." >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "chromium could not be installed: browser tests will be skipped" >&2
fi
python -m pytest -q "$@"
