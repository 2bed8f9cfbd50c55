#!/usr/bin/env bash
# One entry point for a fresh machine: sets up .venv (once) and runs a job.
#
#   bash run.sh demo     # install, then the demo on built-in data
#   bash run.sh test     # install with test extras, then the test suite
#   bash run.sh docs     # install with docs extras, then build the docs (warnings are errors)
#
# Torch: torch is installed first (TORCH_SPEC, default torch==2.13.0), before the package
# can ask for an unpinned one. Where pip finds a CPU wheel of that pin (this project's
# machines and CI keep one), that is the CPU build; PyPI's Linux wheel of torch is the
# multi-GB CUDA build, so elsewhere set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# (passed to pip as --index-url for the torch step only). For CUDA, install the CUDA
# torch you want into .venv first (or set TORCH_SPEC); an importable torch is kept.
#
# Setup, tests and docs run in this repository (a relative VENV is in it too); the
# demo runs in the folder run.sh was called from, so that its relative paths
# (--evals my.csv, --output, the default locus_demo_output) are the caller's.
set -euo pipefail
caller="$PWD"
cd "$(dirname "$0")"
job="${1:-demo}"
shift || true
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
TORCH_INDEX_URL="${TORCH_INDEX_URL:-}"

case "$job" in
  demo) extras="[plot]" ;;
  test) extras="[test]" ;;
  docs) extras="[docs,test]" ;;
  *) echo "usage: bash run.sh {demo|test|docs} [args...]" >&2; exit 2 ;;
esac

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
VENV="$(CDPATH= cd -- "$VENV" && pwd)"  # absolute: the demo runs in the caller's folder
py="$VENV/bin/python"
stamp="$VENV/.locus-installed$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  if ! "$py" -c "import torch" 2>/dev/null; then
    if [ -n "$TORCH_INDEX_URL" ]; then
      "$py" -m pip install --disable-pip-version-check -q --index-url "$TORCH_INDEX_URL" "$TORCH_SPEC"
    else
      "$py" -m pip install --disable-pip-version-check -q "$TORCH_SPEC"
    fi
  fi
  "$py" -m pip install --disable-pip-version-check -q -e ".$extras"
  touch "$stamp"
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
case "$job" in
  demo) cd "$caller" && exec "$py" -m locus_sklearn demo "$@" ;;
  test) exec "$py" -m pytest -q "$@" ;;
  docs) exec "$VENV/bin/sphinx-build" -W --keep-going -b html docs docs/_build/html "$@" ;;
esac
