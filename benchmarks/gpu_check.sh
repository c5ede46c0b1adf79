#!/usr/bin/env bash
# The GPU checks of one short lease, each stage time-boxed so that the reports of the stages
# that ran are always written:
#   1. the benchmark suite on CUDA (speed at 32 x 35 x 256, batch 64 x 1024 x 1024, the
#      product bounds, URN, LM step, memory), on a quiet machine, first;
#   2. with TF32=1: the long part again with cuBLAS's float32 products in TF32
#      (RNNLENS_BENCH_TF32=1), and torch.nn.LSTM with cuDNN's TF32 on and off (what its default
#      is worth);
#   3. with DATA=DIR (a folder holding ptb/ and wikitext-2/): the pace of word-level language
#      models on the GPU, one epoch on 200,000 training tokens and the dev pass, each config
#      alone, then four and eight of the 128-unit ones at once (one process each), in
#      $OUT/lm-pace.txt: what a row's full budget costs there, and how many rows to run at once;
#      five configs also with the whole step as one CUDA graph and without
#      (RNNLENS_STEP_GRAPHS=0); PACE_MANY=0 leaves out the runs of four and eight at once;
#   4. the CUDA tests: every cell on the GPU against the CPU (values and gradients, CUDA graphs
#      on), the graphed scans against their eager loops, the Triton scans and the rational
#      cells' fused Triton pass compiled for the GPU, cuDNN's weight layout, every cell under
#      bf16 autocast against float64;
#   5. with FULL=1, in the time left: the whole test suite there, one line a test
#      ($OUT/full-tests.txt; the failures it met are listed last). The tests that use captum
#      need it installed there, as every package of the test extra.
# Usage, from the repository root on a machine with a GPU:
#   OUT=/tmp/gpu-out [SUITE=0] [TF32=1] [DATA=DIR] [PACE_MANY=0] [FULL=1] bash benchmarks/gpu_check.sh [SECONDS]
# (default 540 s; SUITE=0 leaves out stage 1)
# It reads rnnlens from the checkout (PYTHONPATH), so nothing needs installing where torch,
# triton, pytest and pytest-xdist are there; the C++ kernels (CPU only) stay unbuilt (RNNLENS_CPP=0)
# but where a test turns them on.
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

if [ "${SUITE:-1}" = 1 ]; then
  suite=$(( $(left) * 45 / 100 ))
  echo "== suite (time limit $suite s)" | tee -a "$log"
  timeout $((suite + 90)) python3 -m benchmarks --device cuda --time-limit "$suite" \
    --cells elman gru lstm mvma-g mvma-l gru-approx lstm-approx rrnn-b rrnn-c rrnn-f \
    --parts speed long bounds urn lm memory --out "$OUT/RESULTS-cuda.md" >> "$log" 2>&1
  echo "suite rc=$?" | tee -a "$log"
fi

if [ "${TF32:-0}" = 1 ] && [ "$(left)" -gt 200 ]; then
  echo "== tf32 ($(left) s left)" | tee -a "$log"
  RNNLENS_BENCH_TF32=1 timeout 100 python3 -m benchmarks --device cuda --cells lstm mvma-g mvma-l rrnn-b rrnn-c rrnn-f \
    --parts long bounds --out "$OUT/RESULTS-cuda-tf32.md" >> "$log" 2>&1
  echo "tf32 rc=$?" | tee -a "$log"
  timeout 40 python3 - >> "$OUT/cudnn-tf32.txt" 2>&1 <<'EOF'
import time, torch
lstm = torch.nn.LSTM(1024, 1024, batch_first=True).cuda()
x = torch.randn(64, 1024, 1024, device="cuda", requires_grad=True)
for flag in (True, False, True, False):
    torch.backends.cudnn.allow_tf32 = flag
    ts = []
    for i in range(8):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        lstm(x)[0].sum().backward()
        torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    print(f"torch.nn.LSTM 64 x 1024 x 1024 fwd+bwd, cudnn.allow_tf32={flag}: median {sorted(ts[2:])[3] * 1e3:.1f} ms")
EOF
  cat "$OUT/cudnn-tf32.txt" | tee -a "$log"
fi

if [ -n "${DATA:-}" ] && [ "$(left)" -gt 180 ]; then
  echo "== lm pace ($(left) s left)" | tee -a "$log"
  pw=$(mktemp -d)
  pace() {  # CONFIG LABEL: one epoch of 200,000 training tokens, its seconds from metrics.jsonl
    timeout 150 python3 -m rnnlens train --config "configs/$1.json" --device cuda --threads 1 --epochs 1 \
      --max-train-examples 200000 --data-dir "$DATA" --out "$pw/$1-$2" --quiet > "$pw/$1-$2.log" 2>&1
    echo "$1 $2 rc=$? $(grep -o '"step": [0-9]*' "$pw/$1-$2/metrics.jsonl" 2>/dev/null | head -1)" \
      "$(grep -o '"seconds": [0-9.]*' "$pw/$1-$2/metrics.jsonl" 2>/dev/null | head -1)" >> "$OUT/lm-pace.txt"
  }
  for c in ptb-gru ptb-gru-variant ptb-lstm-variant; do pace "$c" alone; done
  # the whole training step as one CUDA graph (rnnlens/train/step_graph.py) against eager steps
  for c in ptb-gru ptb-gru-variant ptb-lstm-variant ptb-mvma-g ptb-rrnn-b-gated-2layer; do
    RNNLENS_STEP_GRAPHS=0 pace "$c" eager-steps; pace "$c" graphed-steps
    grep -h "could not be captured" "$pw/$c-graphed-steps.log" | head -2 >> "$OUT/lm-pace.txt"
  done
  small="ptb-gru-variant ptb-lstm-variant wikitext2-gru-variant wikitext2-lstm-variant"
  if [ "${PACE_MANY:-1}" = 1 ]; then
    for c in $small; do pace "$c" four & done; wait
    for c in $small wikitext2-gru wikitext2-lstm wikitext2-gru-approx wikitext2-lstm-approx; do pace "$c" eight & done; wait
  fi
  cat "$OUT/lm-pace.txt" | tee -a "$log"
fi

t=$(( $(left) - 15 ))
echo "== tests ($t s)" | tee -a "$log"
timeout "$t" python3 -m pytest -v -n 12 --timeout 100 -p no:cacheprovider -o addopts="" \
  tests/ops/test_cuda_graphs.py tests/ops/test_triton_rational.py tests/ops/test_triton_scan.py \
  tests/ops/test_expm_action.py tests/analysis/test_attribution.py tests/ops/test_precision.py tests/cells/test_cells.py tests/cells/test_fused_classic.py tests/cells/test_memory.py \
  tests/heads/test_crf.py tests/ops/test_elementwise.py tests/ops/test_expm.py tests/train/test_step_graphs.py \
  -k "cuda or graph or triton or graphed" > "$OUT/tests.txt" 2>&1
echo "tests rc=$?" | tee -a "$log"
grep -E "FAILED|ERROR|passed|failed" "$OUT/tests.txt" | tail -15

if [ "${FULL:-0}" = 1 ] && [ "$(left)" -gt 60 ]; then
  # every test, on the machine with the GPU: one line a test (-v), so a run its time limit
  # stops still names the failures it met; two threads a worker, as on a 2-core machine
  t=$(( $(left) - 10 ))
  echo "== whole test suite ($t s)" | tee -a "$log"
  OMP_NUM_THREADS=2 timeout "$t" python3 -m pytest -v -n 14 --timeout 200 -p no:cacheprovider -o addopts="-rfE" \
    tests > "$OUT/full-tests.txt" 2>&1
  echo "whole suite rc=$? ($(grep -c " PASSED" "$OUT/full-tests.txt") passed)" | tee -a "$log"
  grep -E "^(FAILED|ERROR) |\] (FAILED|ERROR) " "$OUT/full-tests.txt" | sort -u | head -40
fi
grep -A70 "^## Targets" "$OUT/RESULTS-cuda.md" 2>/dev/null | head -50
echo "done in $(( $(date +%s) - start )) s"
