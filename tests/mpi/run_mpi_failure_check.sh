#!/usr/bin/env bash
# Checks how `mpirun -np 2 trident train` on the CPU backend (or TRIDENT_MPI_BACKEND=cuda: one GPU
# per rank, NCCL) ends when something goes wrong: a
# rank that fails mid-run, a rank stopped with SIGSTOP, a rank killed, processes started with
# different settings, and a launcher whose processes cannot join (Slurm variables without srun).
# Every case must end the whole job promptly, non-zero, with a message naming the problem.
#
# usage: run_mpi_failure_check.sh TRIDENT_CLI [MPIRUN] [WORK_DIR]
# Exit status 77 (ctest's SKIP_RETURN_CODE) when no data set can be found or made.
set -euo pipefail

cli=${1:?usage: run_mpi_failure_check.sh TRIDENT_CLI [MPIRUN] [WORK_DIR]}
mpirun=${2:-mpirun}
work=${3:-$(mktemp -d "${TMPDIR:-/tmp}/trident_mpi_failure.XXXXXX")}
mkdir -p "$work"
mpi_options=(--allow-run-as-root --oversubscribe -x TRIDENT_BACKEND -x TRIDENT_DATA
             -x TRIDENT_COLLECTIVE_TIMEOUT_S)
timeout_s=5  # TRIDENT_COLLECTIVE_TIMEOUT_S for these runs

fail() { echo "run_mpi_failure_check: FAIL: $*" >&2; exit 1; }

data=${TRIDENT_DATA:-/usr/share/datasets/fashion-mnist}
if [ ! -e "$data/train-images-idx3-ubyte" ] && [ ! -e "$data/train-images-idx3-ubyte.gz" ]; then
  echo "run_mpi_failure_check: no data set at $data: skipped"; exit 77
fi
export TRIDENT_DATA="$data" TRIDENT_BACKEND=${TRIDENT_MPI_BACKEND:-cpu}
export TRIDENT_COLLECTIVE_TIMEOUT_S=$timeout_s
unset TRIDENT_DEVICES TRIDENT_CPU_DEVICES TRIDENT_TEST_FAIL_AT_STEP

quick=(train --model mlp --batch 100 --train-limit 800 --test-limit 200)
long=(train --model mlp --batch 100 --train-limit 800 --test-limit 200 --epochs 100000)

# expect_failure NAME SECONDS PATTERN... -- COMMAND...: COMMAND must end non-zero within SECONDS
# and its output must contain every PATTERN (grep -E).
expect_failure() {
  local name=$1 limit=$2; shift 2
  local patterns=()
  while [ "$1" != "--" ]; do patterns+=("$1"); shift; done
  shift
  local start=$SECONDS status=0
  timeout --kill-after=5 "$limit" "$@" >"$work/$name.out" 2>&1 || status=$?
  local took=$((SECONDS - start))
  [ "$status" -ne 0 ] || { cat "$work/$name.out"; fail "$name: the job succeeded"; }
  [ "$status" -ne 124 ] && [ "$status" -ne 137 ] ||
    { tail -n 20 "$work/$name.out"; fail "$name: still running after ${limit} s (hung)"; }
  for p in "${patterns[@]}"; do
    grep -qE -- "$p" "$work/$name.out" || { cat "$work/$name.out"; fail "$name: no '$p' in the output"; }
  done
  echo "$name: exit $status after ${took} s"
}

echo "== a rank that fails mid-run ends the job"
expect_failure fail_mid_run 60 "process 1 of 2" "failing at step 5 as TRIDENT_TEST_FAIL_AT_STEP" -- \
  "$mpirun" "${mpi_options[@]}" -np 1 "$cli" "${long[@]}" : \
  -np 1 env TRIDENT_TEST_FAIL_AT_STEP=5 "$cli" "${long[@]}"

# stall_rank SIGNAL NAME: starts a long job, sends SIGNAL to rank 1 once training runs, and
# expects the job to end within the timeout plus slack for start-up and MPI_Abort.
stall_rank() {
  local signal=$1 name=$2; shift 2
  local start=$SECONDS
  "$mpirun" "${mpi_options[@]}" -np 2 "$cli" "${long[@]}" >"$work/$name.out" 2>&1 &
  local job=$!
  local rank1=""
  for _ in $(seq 1 300); do  # find rank 1 among mpirun's children, once it trains
    for pid in $(pgrep -P "$job" || true); do
      if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1; then
        rank1=$pid
      fi
    done
    [ -n "$rank1" ] && grep -q "^training" "$work/$name.out" && break
    sleep 0.1
  done
  [ -n "$rank1" ] || { kill -9 "$job" 2>/dev/null; cat "$work/$name.out"; fail "$name: rank 1 not found"; }
  sleep 2  # well into training
  kill "-$signal" "$rank1"
  local stopped=$SECONDS status=0 limit=$((timeout_s + 40))
  while kill -0 "$job" 2>/dev/null && [ $((SECONDS - stopped)) -lt "$limit" ]; do sleep 0.2; done
  if kill -0 "$job" 2>/dev/null; then
    kill -CONT "$rank1" 2>/dev/null || true
    kill -9 "$job" "$rank1" 2>/dev/null || true
    tail -n 20 "$work/$name.out"
    fail "$name: the job still ran ${limit} s after rank 1 got SIG$signal (hung)"
  fi
  wait "$job" || status=$?
  [ "$status" -ne 0 ] || { cat "$work/$name.out"; fail "$name: the job succeeded"; }
  # An epoch that spans the stall must not be reported: its losses are what an aborted sum left
  # (these epochs take well under a second; one of TRIDENT_COLLECTIVE_TIMEOUT_S or more is it).
  if grep -E "^epoch .* ([0-9]+)\.[0-9]+s " "$work/$name.out" |
     awk -v t="$timeout_s" '{ for (i = 1; i <= NF; ++i) if ($i ~ /^[0-9.]+s$/ && $i + 0 >= t) f = 1 }
                            END { exit !f }'; then
    grep -E "^epoch" "$work/$name.out" | tail -n 3
    fail "$name: an epoch spanning the stall was reported"
  fi
  for p in "$@"; do
    grep -qE -- "$p" "$work/$name.out" || { cat "$work/$name.out"; fail "$name: no '$p' in the output"; }
  done
  echo "$name: exit $status, $((SECONDS - stopped)) s after SIG$signal ($((SECONDS - start)) s in all)"
}

echo "== a stalled rank (SIGSTOP): the other gives up after TRIDENT_COLLECTIVE_TIMEOUT_S"
if [ "$TRIDENT_BACKEND" = cuda ]; then  # NCCL's watchdog names the step and what it waited for
  waited="(queued work|call into NCCL).* for (more than )?[0-9]+ s"
  step="step [0-9]+"
else
  waited="waited [0-9]+ s for the other processes"
  step="of step [0-9]+"
fi
stall_rank STOP stalled_rank "process 0 of 2" "TRIDENT_COLLECTIVE_TIMEOUT_S=$timeout_s" \
  "$waited" "$step"
echo "== a killed rank (SIGKILL) ends the job"
stall_rank KILL killed_rank "signal 9|Killed|killed"

echo "== processes started with different settings refuse to start"
expect_failure batch_differs 60 "different settings" "--batch: 100 on process 1; 200 on process 0" -- \
  "$mpirun" "${mpi_options[@]}" -np 1 "$cli" "${quick[@]}" --batch 200 : \
  -np 1 "$cli" "${quick[@]}" --batch 100
expect_failure sync_differs 60 "--sync \(0: allreduce, K: average:K\): 0 on process 0; 3 on process 1" -- \
  "$mpirun" "${mpi_options[@]}" -np 1 "$cli" "${quick[@]}" : \
  -np 1 "$cli" "${quick[@]}" --sync average:3
expect_failure bucket_differs 60 "TRIDENT_BUCKET_MB \(in bytes\): 1048576 on process 1; 16777216 on process 0" -- \
  "$mpirun" "${mpi_options[@]}" -np 1 "$cli" "${quick[@]}" : \
  -np 1 env TRIDENT_BUCKET_MB=1 "$cli" "${quick[@]}"

echo "== Slurm's variables without a matching launcher: refuse instead of training alone"
expect_failure slurm_alone 60 "Slurm's srun \(SLURM_STEP_NUM_TASKS=2\)" "MPI sees a job of 1" -- \
  env SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0 "$cli" "${quick[@]}"

echo "run_mpi_failure_check: OK ($work)"
