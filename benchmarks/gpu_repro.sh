#!/usr/bin/env bash
# The language-model rows of the reproduction tables at the papers' settings, on one GPU, many
# rows at once (one process each, one CPU thread each), within one lease:
#   rnnlens repro TABLE --budget full --rows "=ROW" --device cuda --time-limit SECONDS
# A run its time limit stops before its last epoch is recorded as "time-limited" (the epochs it
# finished named; never counted as reproduced). Each process writes its own records folder,
# repro-gpu/recN; they come back in one archive, $OUT/records.tar.gz. To fold them into
# results/ where they are committed from: copy each repro-gpu/rec*/runs/* into results/runs/,
# then run per table the same command with every row's --rows (printed at the end): it reuses
# the records, trains nothing, and writes the table's rows.
# Usage, from the repository root on a machine with a GPU:
#   OUT=/tmp/gpu-out bash benchmarks/gpu_repro.sh [SECONDS] [DATA_DIR] [ROWS_FILE]
# Set RNNLENS_COMMIT to the commit of the tree sent there when its .git may not match it: the
# records keep it (rnnlens.repro.records.commit).
# SECONDS: each run's time limit (default 420); DATA_DIR: the datasets (default ../shared/data);
# ROWS_FILE: lines "TABLE<TAB>ROW LABEL[<TAB>SEED]", # for a comment (benchmarks/cuda/rows-lm-full.txt
# lists the rows still without a full-budget result; default: the list below; a SEED runs that seed
# alone, --seed SEED, so a row's seeds can run side by side). JOBS: rows at once (default 4;
# the rest wait for a free slot). On an H100, sixteen PTB rows at once kept the GPU busy and ran
# only about 2.5x faster in all than one at a time, four at once about 2x
# (benchmarks/cuda/lm-pace.txt). TINY=1 runs each row on a tiny slice on the CPU instead (a dry
# run of this script).
set -u
OUT=${OUT:-/tmp/gpu-out}
LIMIT=${1:-420}
DATA=${2:-../shared/data}
ROWS=${3:-}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 RNNLENS_CPP=0 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
work=$(mktemp -d)
start=$(date +%s)
if [ -z "$ROWS" ]; then
  ROWS="$work/rows.txt"
  printf '%s\t%s\n' \
    ngrams-table5 "GRU (PTB)" ngrams-table5 "MVMA-G (PTB)" ngrams-table5 "MVM-G (PTB)" \
    ngrams-table5 "LSTM (PTB)" ngrams-table5 "MVMA-L (PTB)" ngrams-table5 "MVM-L (PTB)" \
    ngrams-table5 "MVMA-ME (PTB)" \
    rational-table3 "RRNN(B), 2 layers" rational-table3 "RRNN(B)m+, 2 layers" \
    rational-table3 "RRNN(C), 2 layers" rational-table3 "RRNN(F), 2 layers" \
    rmn-table2 "RM(+tM-g) (PTB)" rmn-table2 "LSTM, 3 layers (PTB)" rmn-table2 "LSTM, 1 layer (PTB)" \
    seqlevel-table3 "GRU Approx (PTB)" seqlevel-table3 "LSTM Approx (PTB)" > "$ROWS"
fi
if [ "${TINY:-0}" = 1 ]; then mode=(--tiny --device cpu); else mode=(--device cuda); fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
  nproc; } > "$OUT/env.txt" 2>&1
i=0
pids=()
while IFS=$'\t' read -r table row seed; do
  [ -z "$table" ] && continue
  case "$table" in \#*) continue ;; esac
  seedarg=()
  [ -n "${seed:-}" ] && seedarg=(--seed "$seed")
  mkdir -p "$work/logs"
  while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-4}" ]; do sleep 2; done
  timeout $((LIMIT + 100)) python3 -m rnnlens repro "$table" --budget full --rows "=$row" "${seedarg[@]}" "${mode[@]}" \
    --threads 1 --time-limit "$LIMIT" --data-dir "$DATA" --out "repro-gpu/o$i" --results "repro-gpu/rec$i" \
    --quiet > "$work/logs/$i.txt" 2>&1 &
  pids+=($!)
  echo "$i	$table	$row	${seed:-0}" >> "$work/logs/rows.txt"
  i=$((i + 1))
done < "$ROWS"
echo "started $i rows, time limit $LIMIT s each"
# every minute: the GPU's use and each run's epochs so far
tick=0
while [ -n "$(jobs -rp)" ]; do
  sleep 5
  tick=$((tick + 1))
  [ $((tick % 12)) = 0 ] || continue
  { echo "== $(( $(date +%s) - start )) s"
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null
    for m in repro-gpu/o*/runs/*.partial/metrics.jsonl; do
      [ -f "$m" ] && echo "$m: $(grep -c '"epoch"' "$m") epochs, last: $(tail -1 "$m" | cut -c1-160)"
    done; } >> "$work/logs/progress.txt" 2>&1
done
ok=0
for k in "${!pids[@]}"; do wait "${pids[$k]}" && ok=$((ok + 1)); done
echo "$ok of $i rows finished in $(( $(date +%s) - start )) s"
tar czf "$OUT/records.tar.gz" repro-gpu/rec*
tar czf "$OUT/logs.tar.gz" -C "$work" logs
for f in "$work"/logs/[0-9]*.txt; do
  n=$(basename "$f" .txt)
  row=$(grep -P "^$n\t" "$work/logs/rows.txt" | cut -f3)
  seed=$(grep -P "^$n\t" "$work/logs/rows.txt" | cut -f4)
  echo "-- $row (seed $seed): $(grep -F "| $row |" "$f" | head -1) $(grep -iE "error|Traceback" "$f" | tail -2)"
done
echo "to fold the records in, per table:"
for table in $(cut -f2 "$work/logs/rows.txt" | sort -u); do
  seeds=$(grep -P "\t$table\t" "$work/logs/rows.txt" | cut -f4 | sort -n | tail -1)
  seeds=$([ "$seeds" -gt 0 ] && echo " --seeds $((seeds + 1))")
  printf 'rnnlens repro %s --budget full%s %s --threads 1 --time-limit %s --data-dir %s --out repro-gpu/tables --quiet' \
    "$table" "$seeds" "${mode[*]}" "$LIMIT" "$DATA"
  grep -P "\t$table\t" "$work/logs/rows.txt" | cut -f3 | sort -u | while read -r row; do printf ' --rows "=%s"' "$row"; done
  echo
done
