#!/usr/bin/env bash
# A short GPU check of the rational cells' fused Triton pass: its CUDA tests (and the classic
# cells' cuDNN weight layout), a profile of a step (operator calls and kernel launches), and
# the rational cells with the fused pass on and off (RNNLENS_TRITON_RATIONAL=0: the PyTorch path
# with the Triton scan) at 32 x 35 x 256 and 64 x 1024 x 1024.
#   OUT=/tmp/gpu-out bash benchmarks/gpu_rational.sh
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 RNNLENS_CPP=0 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
timeout 90 python3 -m pytest -v -n 8 --timeout 60 -p no:cacheprovider -o addopts="" \
  tests/ops/test_triton_rational.py tests/cells/test_fused_classic.py -k "cuda or triton" > "$OUT/tests.txt" 2>&1
echo "tests rc=$?"; grep -E "FAILED|passed|failed" "$OUT/tests.txt" | tail -8
timeout 60 python3 -m benchmarks.profile_cell --device cuda --cells torch.nn.LSTM rrnn-b rrnn-f mvma-g --top 12 \
  > "$OUT/profile.txt" 2>&1; grep "^## " "$OUT/profile.txt"
for shape in "32 35 256" "64 1024 1024"; do
  set -- $shape
  for fused in 1 0; do
    RNNLENS_TRITON_RATIONAL=$fused timeout 60 python3 -m benchmarks.cells --device cuda --repeats 20 --warmup 3 \
      --batch $1 --length $2 --size $3 --cells rrnn-b rrnn-c rrnn-f --out "$OUT/rational-$2-fused$fused.md" > /dev/null 2>&1
    echo "length $2, fused $fused:"; grep -E "^\| (torch.nn.LSTM|rrnn)" "$OUT/rational-$2-fused$fused.md"
  done
done
