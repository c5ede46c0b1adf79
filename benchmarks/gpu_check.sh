#!/usr/bin/env bash
# The GPU checks of one short lease, in order of what matters, each stage time-boxed so that
# the reports of the stages that ran are always written:
#   1. the CUDA tests: every cell on the GPU against the CPU (values and gradients, CUDA graphs
#      on), the graphed scans against their eager loops, the Triton scans compiled for the GPU,
#      every cell under bf16 autocast against float64;
#   2. the benchmark suite on CUDA (speed, batch 64 x 1024 x 1024, URN, LM step, memory);
#   3. the matrix-affine cells with CUDA graphs off (what the graphs buy), and the Triton scan
#      against the chunked scan.
# Usage, from the repository root on a machine with a GPU:
#   OUT=/tmp/gpu-out bash benchmarks/gpu_check.sh [SECONDS]      (default 540)
# It reads rnnlens from the checkout (PYTHONPATH), so nothing needs installing where torch,
# triton, pytest and pytest-xdist are there; the C++ kernels (CPU only) stay unbuilt.
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
LIMIT=${1:-540}
start=$(date +%s)
left() { echo $((LIMIT - ($(date +%s) - start))); }
export PYTHONUNBUFFERED=1 RNNLENS_CPP=0 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
log="$OUT/log.txt"

{ nvidia-smi --query-gpu=name,memory.total,driver_version,utilization.gpu --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
  uptime; } 2>&1 | tee "$OUT/env.txt"

echo "== tests ($(left) s left)" | tee -a "$log"
timeout 170 python3 -m pytest -v -n 8 --timeout 100 -p no:cacheprovider -o addopts="" \
  tests/ops/test_cuda_graphs.py tests/ops/test_triton_scan.py \
  tests/ops/test_precision.py tests/cells/test_cells.py tests/cells/test_memory.py tests/heads/test_crf.py \
  tests/ops/test_elementwise.py tests/ops/test_expm.py -k "cuda or graph or triton or graphed" \
  > "$OUT/tests.txt" 2>&1
echo "tests rc=$?" | tee -a "$log"
tail -15 "$OUT/tests.txt"

suite=$(( $(left) - 150 ))
echo "== suite (time limit $suite s)" | tee -a "$log"
timeout $((suite + 120)) python3 -m benchmarks --device cuda --time-limit "$suite" \
  --cells elman gru lstm mvma-g mvma-l gru-approx lstm-approx rrnn-b rrnn-c rrnn-f \
  --parts speed long urn lm memory --out "$OUT/RESULTS-cuda.md" >> "$log" 2>&1
echo "suite rc=$?" | tee -a "$log"

if [ "$(left)" -gt 60 ]; then
  echo "== graphs off ($(left) s left)" | tee -a "$log"
  RNNLENS_CUDA_GRAPHS=0 timeout $(( $(left) - 30 )) python3 -m benchmarks.cells --device cuda --repeats 20 \
    --warmup 3 --cells mvma-g mvma-l gru-approx lstm-approx --out "$OUT/RESULTS-cells-nographs.md" >> "$log" 2>&1
  echo "graphs off rc=$?" | tee -a "$log"
fi
if [ "$(left)" -gt 25 ]; then
  echo "== triton scan ($(left) s left)" | tee -a "$log"
  timeout $(( $(left) - 5 )) python3 -m benchmarks.scan_triton --skip-loop --repeats 20 --out "$OUT/RESULTS-scan-triton.md" >> "$log" 2>&1
  echo "scan rc=$?" | tee -a "$log"
fi
grep -A60 "^## Targets" "$OUT/RESULTS-cuda.md" 2>/dev/null | head -45
echo "done in $(( $(date +%s) - start )) s"
