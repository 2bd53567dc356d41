#!/usr/bin/env bash
# Shared set-up, sourced by scripts/run.sh, scripts/test.sh and .ci/run:
#
#   source scripts/setup.sh EXTRAS      EXTRAS: a comma list of pyproject extras, e.g. "profile" (the
#                                       main job) or "profile,test" (the tests); "" = analysis only
#
# leaves an activated, isolated .venv (no system site-packages) with an editable install of this
# checkout and those extras. A second call with nothing changed takes about a second: the extras
# installed for the current pyproject.toml are recorded in .venv/.gpuadvisor-stamp, and pip runs only
# when pyproject.toml changed or an extra is missing (delete .venv to start over).
#
# torch (extra "profile"): a torch already in .venv is kept; otherwise $GPUADVISOR_TORCH is installed
# (default torch==2.13.0: a range would let pip pull a newer release with several GB of CUDA packages).
# On a GPU machine install your CUDA build of torch into .venv first, or set
# GPUADVISOR_SYSTEM_SITE=1 before the first call to build .venv on the system's packages.
_ga_extras=${1-}
_ga_py=${PYTHON:-python3}

_ga_fail() { echo "setup: $*" >&2; return 1; }

if ! "$_ga_py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  _ga_fail "gpuadvisor needs Python >= 3.10; $_ga_py is $("$_ga_py" -V 2>&1) (set PYTHON=python3.12)" || return
fi
if [ ! -x .venv/bin/python ]; then
  if [ "${GPUADVISOR_SYSTEM_SITE:-0}" = 1 ]; then
    echo "== creating .venv on the system's site-packages (GPUADVISOR_SYSTEM_SITE=1)"
    "$_ga_py" -m venv --system-site-packages .venv || return
  else
    echo "== creating an isolated .venv with $("$_ga_py" -V 2>&1)"
    "$_ga_py" -m venv .venv || return
  fi
fi
# shellcheck disable=SC1091
. .venv/bin/activate

_ga_hash=$(python -c 'import hashlib, sys; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest()[:16], sys.version.split()[0])' | tr ' ' '-')
_ga_missing=""
# "editable-compat": the install below is a path entry (a .pth naming this checkout), which type
# checkers follow: `mypy` on a user's file outside the checkout sees gpuadvisor's types. An older .venv
# (setuptools' default import-hook editable install, which mypy cannot see) is reinstalled once.
for _ga_extra in base editable-compat ${_ga_extras//,/ }; do
  grep -qx "$_ga_hash $_ga_extra" .venv/.gpuadvisor-stamp 2>/dev/null || _ga_missing="$_ga_missing $_ga_extra"
done
# An editable install that no longer imports (checkout moved, .venv copied) is reinstalled too.
if [ -z "$_ga_missing" ] && python -c "import gpuadvisor" 2>/dev/null; then
  echo "== .venv is up to date (gpuadvisor[${_ga_extras:-}] for this pyproject.toml); rm -rf .venv to rebuild"
else
  _ga_spec="."
  [ -n "$_ga_extras" ] && _ga_spec=".[$_ga_extras]"
  _ga_torch=()
  if [[ ",$_ga_extras," == *,profile,* || ",$_ga_extras," == *,dev,* ]] && ! python -c "import torch" 2>/dev/null; then
    _ga_torch=("${GPUADVISOR_TORCH:-torch==2.13.0}")
  fi
  echo "== installing gpuadvisor (editable) with extras [${_ga_extras:-none}] ${_ga_torch[*]} into .venv"
  echo "   (the first time takes a few minutes; pip reports each package below)"
  python -m pip install --disable-pip-version-check --progress-bar on \
    --config-settings editable_mode=compat -e "$_ga_spec" "${_ga_torch[@]}" || return
  {
    grep "^$_ga_hash " .venv/.gpuadvisor-stamp 2>/dev/null || true
    for _ga_extra in base editable-compat ${_ga_extras//,/ }; do echo "$_ga_hash $_ga_extra"; done
  } | sort -u > .venv/.gpuadvisor-stamp.new
  mv .venv/.gpuadvisor-stamp.new .venv/.gpuadvisor-stamp
fi
unset _ga_extras _ga_py _ga_hash _ga_missing _ga_extra _ga_spec _ga_torch
