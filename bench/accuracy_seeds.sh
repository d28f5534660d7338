#!/usr/bin/env bash
# The ResNet's 12-epoch recipe from several seeds on each backend and precision, and PyTorch's run
# of the same recipe from as many seeds (bench/torch_resnet_accuracy.py), on this machine's GPU:
# one run from one seed differs from another by a few tenths of a point, so the 93.0% target is
# judged on the mean. Writes $OUT/accuracy_seeds.jsonl (one line a run); bench/accuracy_summary.py
# prints the table and plots it. Usage: bench/accuracy_seeds.sh [TRIDENT_CLI]
# Environment: SEEDS (default 1,2,3,4,5), RUNS (default "cuda:fp32 cuda:bf16 opencl:fp32"),
# TORCH_PRECISIONS (default fp32; empty: no PyTorch runs), OUT (default out). A run that fails
# (non-zero exit, no result line) is named on stderr and makes the exit status 1.
set -uo pipefail
cli=${1:-build/trident}
OUT=${OUT:-out}
SEEDS=${SEEDS:-1,2,3,4,5}
RUNS=${RUNS:-cuda:fp32 cuda:bf16 opencl:fp32}
mkdir -p "$OUT"
result="$OUT/accuracy_seeds.jsonl"
here=$(cd "$(dirname "$0")" && pwd)
failed=0
for run in $RUNS; do
  backend=${run%%:*} precision=${run#*:}
  for seed in ${SEEDS//,/ }; do
    line=$(TRIDENT_BACKEND=$backend "$cli" train --model resnet --precision "$precision" --seed "$seed" \
             --json 2> "$OUT/accuracy_${backend}_${precision}_$seed.err" | tail -n 1)
    status=$?  # the CLI's (pipefail): a run that stopped early has printed earlier epochs' lines
    if [ "$status" -ne 0 ] || [ -z "$line" ]; then
      echo "accuracy_seeds: $backend $precision seed $seed failed (exit status $status):" >&2
      tail -n 3 "$OUT/accuracy_${backend}_${precision}_$seed.err" >&2
      failed=$((failed + 1))
      continue
    fi
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d.update(framework="trident", backend=sys.argv[2], precision=sys.argv[3], seed=int(sys.argv[4])); print(json.dumps(d))' \
      "$line" "$backend" "$precision" "$seed" | tee -a "$result"
  done
done
if [ -n "${TORCH_PRECISIONS-fp32}" ]; then
  python3 "$here/torch_resnet_accuracy.py" --seeds "$SEEDS" --precisions "${TORCH_PRECISIONS-fp32}" \
    | tee -a "$result" || failed=$((failed + 1))
fi
if [ "$failed" -gt 0 ]; then
  echo "accuracy_seeds: $failed run(s) failed; $result holds the others" >&2
  exit 1
fi
