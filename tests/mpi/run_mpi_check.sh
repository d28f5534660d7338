#!/usr/bin/env bash
# Checks `mpirun -np 2 trident train` on the CPU backend against one process at the same global
# batch: the same epoch losses, test metrics and checkpoint (to rounding), output from rank 0
# only, model averaging across processes, and a failing rank ending the whole job.
#
# usage: run_mpi_check.sh TRIDENT_CLI [MPIRUN] [WORK_DIR]
# Exit status 77 (ctest's SKIP_RETURN_CODE) when no data set can be found or made.
set -euo pipefail

cli=${1:?usage: run_mpi_check.sh TRIDENT_CLI [MPIRUN] [WORK_DIR]}
mpirun=${2:-mpirun}
work=${3:-$(mktemp -d "${TMPDIR:-/tmp}/trident_mpi_check.XXXXXX")}
mkdir -p "$work"
launch=("$mpirun" --allow-run-as-root --oversubscribe -np 2 -x TRIDENT_BACKEND -x TRIDENT_DATA)

fail() { echo "run_mpi_check: FAIL: $*" >&2; exit 1; }

# Fashion-MNIST when installed, else a small synthetic IDX set (needs python3).
data=${TRIDENT_DATA:-/usr/share/datasets/fashion-mnist}
if [ ! -e "$data/train-images-idx3-ubyte" ] && [ ! -e "$data/train-images-idx3-ubyte.gz" ]; then
  data="$work/data"
  command -v python3 >/dev/null || { echo "run_mpi_check: no data set and no python3: skipped"; exit 77; }
  python3 - "$data" <<'EOF'
import os, random, struct, sys
out = sys.argv[1]; os.makedirs(out, exist_ok=True); rng = random.Random(7)
def write(prefix, n):
    labels = [rng.randrange(10) for _ in range(n)]
    with open(os.path.join(out, prefix + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28))
        for label in labels:  # a bright band whose row encodes the label, plus noise
            f.write(bytes(200 if (p // 28) // 3 == label else rng.randrange(60) for p in range(784)))
    with open(os.path.join(out, prefix + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(labels))
write("train", 800); write("t10k", 200)
EOF
fi
export TRIDENT_DATA="$data" TRIDENT_BACKEND=cpu
unset TRIDENT_DEVICES TRIDENT_CPU_DEVICES

common=(train --model cnn --epochs 2 --batch 100 --train-limit 800 --test-limit 200 --seed 3 --json)

# field NAME LINE: the number after "NAME": in a JSON line.
field() { sed -n "s/.*\"$1\": \([-0-9.eE+]*\).*/\1/p" <<<"$2"; }
# close A B TOL: |A - B| <= TOL * max(|B|, 1e-6).
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; s = b < 0 ? -b : b;
                                                       if (s < 1e-6) s = 1e-6; exit !(d <= t * s) }'; }

echo "== one process"
"$cli" "${common[@]}" --checkpoint "$work/one.safetensors" >"$work/one.json" 2>"$work/one.err" ||
  { cat "$work/one.err"; fail "single-process run failed"; }
echo "== two processes (mpirun -np 2)"
timeout 300 "${launch[@]}" "$cli" "${common[@]}" --checkpoint "$work/two.safetensors" \
  >"$work/two.json" 2>"$work/two.err" || { cat "$work/two.err"; fail "mpirun -np 2 run failed"; }
cat "$work/two.err"
grep -q "through mpi" "$work/two.err" || fail "the 2-process run did not use the MPI collective"
[ "$(wc -l <"$work/two.json")" -eq 2 ] || { cat "$work/two.json"; fail "expected 2 JSON lines (rank 0 only)"; }

for epoch in 1 2; do
  one=$(sed -n "${epoch}p" "$work/one.json"); two=$(sed -n "${epoch}p" "$work/two.json")
  for key in train_loss test_loss test_accuracy; do
    a=$(field "$key" "$two"); b=$(field "$key" "$one")
    [ -n "$a" ] && [ -n "$b" ] || fail "epoch $epoch: '$key' missing"
    close "$a" "$b" 1e-3 || fail "epoch $epoch: $key $a with 2 processes, $b with 1"
    echo "epoch $epoch $key: 2 processes $a, 1 process $b"
  done
done

# The 2-process checkpoint is an ordinary one: evaluated on one process it matches the 1-process one.
e1=$("$cli" eval --checkpoint "$work/one.safetensors" --test-limit 200 --json)
e2=$("$cli" eval --checkpoint "$work/two.safetensors" --test-limit 200 --json)
close "$(field test_loss "$e2")" "$(field test_loss "$e1")" 1e-3 ||
  fail "checkpoints differ: $e2 vs $e1"
echo "checkpoints agree: $(field test_loss "$e2") vs $(field test_loss "$e1")"

echo "== model averaging every 3 steps across processes"
timeout 300 "${launch[@]}" "$cli" train --model mlp --epochs 1 --batch 100 --train-limit 800 \
  --test-limit 200 --sync average:3 --json >"$work/avg.json" 2>"$work/avg.err" ||
  { cat "$work/avg.err"; fail "mpirun -np 2 with --sync average:3 failed"; }
loss=$(field train_loss "$(cat "$work/avg.json")")
awk -v l="$loss" 'BEGIN { exit !(l > 0 && l < 2.3) }' || fail "averaging run did not train (loss $loss)"
echo "averaging: train loss $loss"

echo "== a failing process ends the job"
set +e
timeout 120 "${launch[@]}" "$cli" train --model mlp --batch 101 --train-limit 800 \
  >/dev/null 2>"$work/bad.err"
status=$?
set -e
[ "$status" -ne 0 ] || fail "a batch that 2 processes cannot split was accepted"
[ "$status" -ne 124 ] || fail "the job hung after a failure instead of ending"
grep -q "multiple" "$work/bad.err" || { cat "$work/bad.err"; fail "no message naming the problem"; }

echo "run_mpi_check: OK ($work)"
