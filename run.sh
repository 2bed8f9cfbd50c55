#!/usr/bin/env bash
# One entry point for a fresh machine: sets up .venv (once) and runs a job.
#
#   bash run.sh demo     # install, then the demo on built-in data
#   bash run.sh test     # install with test extras, then the test suite
#   bash run.sh docs     # install with docs extras, then build the docs (warnings are errors)
#
# Torch: a CPU build of torch is installed first (TORCH_SPEC, default torch==2.13.0), so
# pip never resolves the multi-GB CUDA build on a machine without a GPU. For CUDA, install
# the CUDA torch you want into .venv first (or set TORCH_SPEC); an importable torch is kept.
set -euo pipefail
cd "$(dirname "$0")"
job="${1:-demo}"
shift || true
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"

case "$job" in
  demo) extras="[plot]" ;;
  test) extras="[test]" ;;
  docs) extras="[docs,test]" ;;
  *) echo "usage: bash run.sh {demo|test|docs} [args...]" >&2; exit 2 ;;
esac

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
py="$VENV/bin/python"
stamp="$VENV/.locus-installed$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  if ! "$py" -c "import torch" 2>/dev/null; then
    "$py" -m pip install --disable-pip-version-check -q "$TORCH_SPEC"
  fi
  "$py" -m pip install --disable-pip-version-check -q -e ".$extras"
  touch "$stamp"
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
case "$job" in
  demo) exec "$py" -m locus_sklearn demo "$@" ;;
  test) exec "$py" -m pytest -q "$@" ;;
  docs) exec "$VENV/bin/sphinx-build" -W --keep-going -b html docs docs/_build/html "$@" ;;
esac
