#!/usr/bin/env bash
# One prepared run on a machine with a CUDA GPU, each step bounded in time:
#  1. cuda_check.py: the CUDA transform, predict and fit paths against the CPU's;
#  2. core_speed.py --device cuda --fit: the speed table on the GPU;
#  3. the estimator, network, readout and persistence tests with the GPU as
#     every estimator's default device (device=None picks CUDA when present).
# Results go to $OUT (default benchmarks/results): cuda_check.json,
# core_speed_cuda.json, their logs and junit_cuda.xml.
#
# Usage: bash benchmarks/cuda_check.sh   (from the repository root, with
# locus_sklearn importable: installed, or the root on PYTHONPATH)
set -u
OUT=$(realpath -m "${OUT:-benchmarks/results}")
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv \
    | tee "$OUT/gpu.txt"
"$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
    | tee -a "$OUT/gpu.txt"
(cd benchmarks && timeout 180 "$PYTHON" cuda_check.py --out "$OUT") 2>&1 \
    | tee "$OUT/cuda_check.log"
(cd benchmarks && timeout 200 "$PYTHON" core_speed.py --device cuda --fit --out "$OUT") 2>&1 \
    | tee "$OUT/core_speed_cuda.log"
timeout 120 "$PYTHON" -m pytest -q -p no:cacheprovider -n 8 --junitxml "$OUT/junit_cuda.xml" \
    tests/test_router.py tests/test_embedder.py tests/test_readout.py \
    tests/test_refinement.py tests/test_persistence.py tests/test_training.py \
    tests/test_nn.py tests/test_dropout.py tests/test_shrinkage.py 2>&1 \
    | tail -60 | tee "$OUT/pytest_cuda.log"
