#!/usr/bin/env bash
# Crash safety of `trident train --checkpoint`: SIGKILL a short training run at staggered moments,
# half of the trials inside a checkpoint write (TRIDENT_TEST_PAUSE_IN_CHECKPOINT_WRITE holds the
# writer with its temporary half written), then check that
#   - the checkpoint is absent or loadable (`trident eval` accepts it),
#   - the next start removes the temporaries the killed write left, and no temporary survives,
#   - the resumed (or restarted) run ends with a checkpoint bit-identical to an uninterrupted run's
#     and the same `trident eval --json` output.
#
#   run_crash_check.sh TRIDENT_BINARY WORK_DIR [TRIALS (24)]
# Exit 0: all trials passed; 1: a trial failed; 77: skipped (no data set and no python3 to make one).
set -uo pipefail

trident=$1
work=$2
trials=${3:-24}
rm -rf "$work"
mkdir -p "$work"

data=${TRIDENT_DATA:-/usr/share/datasets/fashion-mnist}
if [ ! -d "$data" ]; then
  # A synthetic MNIST-format directory (random pixels, labels i % 10) when the data set is absent.
  data="$work/data"
  mkdir -p "$data"
  command -v python3 > /dev/null || { echo "SKIP: no data set at $data and no python3"; exit 77; }
  python3 - "$data" <<'PY' || exit 77
import random, struct, sys
random.seed(5)
for prefix, n in (("train", 2000), ("t10k", 500)):
    with open(f"{sys.argv[1]}/{prefix}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(random.randrange(256) for _ in range(n * 784)))
    with open(f"{sys.argv[1]}/{prefix}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
PY
fi

export TRIDENT_BACKEND=cpu
args=(--model mlp --batch 100 --train-limit 2000 --test-limit 500 --epochs 4 --seed 3 --devices cpu:0 --data "$data")
eval_args=(--test-limit 500 --devices cpu:0 --data "$data" --json)
failures=0
fail() { echo "FAIL trial $1: $2"; failures=$((failures + 1)); }
temporaries() { find "$1" -maxdepth 1 -name '.ck.safetensors.*.tmp' | wc -l; }

# The uninterrupted run everything is compared with.
start=$(date +%s%N)
"$trident" train "${args[@]}" --checkpoint "$work/reference.safetensors" 2> "$work/reference.log" ||
  { echo "FAIL: the reference run failed"; cat "$work/reference.log"; exit 1; }
run_ms=$(( ($(date +%s%N) - start) / 1000000 ))
reference_eval=$("$trident" eval --checkpoint "$work/reference.safetensors" "${eval_args[@]}")
echo "reference run: ${run_ms} ms; $reference_eval"

killed_in_write=0 stale_seen=0 absent=0 loadable=0
for trial in $(seq 1 "$trials"); do
  dir="$work/trial$trial"
  mkdir -p "$dir"
  ck="$dir/ck.safetensors"
  if [ $((trial % 2)) -eq 0 ]; then
    # Inside the write of epoch k (1..4): wait for the k-th temporary to appear, then kill.
    k=$(( (trial / 2 - 1) % 4 + 1 ))
    TRIDENT_TEST_PAUSE_IN_CHECKPOINT_WRITE=0.6 "$trident" train "${args[@]}" --checkpoint "$ck" 2> "$dir/killed.log" &
    pid=$!
    seen=0 present=0
    for _ in $(seq 1 3000); do
      now=$(temporaries "$dir")
      if [ "$now" -gt 0 ] && [ "$present" -eq 0 ]; then seen=$((seen + 1)); fi
      present=$now
      [ "$seen" -ge "$k" ] && break
      kill -0 "$pid" 2> /dev/null || break
      sleep 0.01
    done
    kill -9 "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
    [ "$seen" -ge "$k" ] && killed_in_write=$((killed_in_write + 1)) || fail "$trial" "never reached the write of epoch $k"
    moment="in the checkpoint write of epoch $k"
  else
    # At a staggered moment of the run: 0 .. 1.2 x its length.
    delay_ms=$(( run_ms * 12 * (trial - 1) / (10 * trials) ))
    "$trident" train "${args[@]}" --checkpoint "$ck" 2> "$dir/killed.log" &
    pid=$!
    sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
    kill -9 "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
    moment="after ${delay_ms} ms"
  fi
  left=$(temporaries "$dir")
  stale_seen=$((stale_seen + left))

  resume=()
  if [ -e "$ck" ]; then
    if "$trident" eval --checkpoint "$ck" "${eval_args[@]}" > /dev/null 2> "$dir/eval.log"; then
      loadable=$((loadable + 1))
    else
      fail "$trial" "killed $moment: the checkpoint does not load: $(tail -1 "$dir/eval.log")"
      continue
    fi
    resume=(--resume)
  else
    absent=$((absent + 1))
  fi
  if ! "$trident" train "${args[@]}" --checkpoint "$ck" "${resume[@]}" 2> "$dir/resumed.log"; then
    fail "$trial" "killed $moment: the next run failed: $(tail -1 "$dir/resumed.log")"
    continue
  fi
  [ "$(temporaries "$dir")" -eq 0 ] || fail "$trial" "killed $moment: temporaries survived the next run"
  if [ "$left" -gt 0 ] && ! grep -q "removed $left temporary file" "$dir/resumed.log"; then
    fail "$trial" "killed $moment: the next run did not report removing $left temporaries"
  fi
  cmp -s "$ck" "$work/reference.safetensors" || fail "$trial" "killed $moment: the final checkpoint differs from the uninterrupted run's"
  [ "$("$trident" eval --checkpoint "$ck" "${eval_args[@]}")" = "$reference_eval" ] ||
    fail "$trial" "killed $moment: eval --json differs from the uninterrupted run's"
  echo "trial $trial: killed $moment; checkpoint $([ ${#resume[@]} -gt 0 ] && echo loadable || echo absent), $left temporaries left, resumed run bit-identical"
done

echo "crash check: $trials trials ($killed_in_write killed inside a checkpoint write), checkpoint absent $absent / loadable $loadable," \
     "$stale_seen temporaries left by kills and removed by the next start, $failures failures"
[ "$failures" -eq 0 ]
