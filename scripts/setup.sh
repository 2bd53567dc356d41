#!/usr/bin/env bash
# Shared set-up, sourced by scripts/test.sh, scripts/run.sh and .ci/run: a .venv with gpuadvisor installed.
# torch: keep the one installed; otherwise the CPU build pinned for this workplace (an unpinned torch
# pulls several GB of CUDA packages). On a GPU machine, install your CUDA torch first.
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv --system-site-packages .venv; fi
# shellcheck disable=SC1091
. .venv/bin/activate
python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev]"
