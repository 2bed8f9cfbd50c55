#!/usr/bin/env bash
# One prepared run on a machine with a CUDA GPU, each step bounded in time:
#  1. cuda_check.py: the CUDA transform, predict and fit paths against the CPU's;
#  2. core_speed.py --device cuda --fit: the speed table on the GPU;
#  3. the test suite with the GPU as every estimator's default device
#     (device=None picks CUDA when present).
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
(cd benchmarks && timeout 150 "$PYTHON" cuda_check.py --out "$OUT") 2>&1 \
    | tee "$OUT/cuda_check.log"
(cd benchmarks && timeout 200 "$PYTHON" core_speed.py --device cuda --fit --batch-sweep \
    --out "$OUT") 2>&1 | tee "$OUT/core_speed_cuda.log"
# Every test file but those that need the packaged sentence encoder, a web
# server's packages, two training processes or the CPU's recorded reference
# outputs; -v writes each result as it comes, so a run stopped at its limit
# still says what passed.
timeout 150 "$PYTHON" -m pytest -v -p no:cacheprovider -n 12 --junitxml "$OUT/junit_cuda.xml" \
    tests --ignore tests/test_encoders.py --ignore tests/test_length_batches.py \
    --ignore tests/test_serve.py --ignore tests/test_cli.py --ignore tests/test_benchmarks.py \
    --ignore tests/test_reference.py --ignore tests/test_distributed.py --timeout 90 \
    > "$OUT/pytest_cuda.log" 2>&1
grep -E "FAILED|ERROR|passed|failed" "$OUT/pytest_cuda.log" | tail -40
