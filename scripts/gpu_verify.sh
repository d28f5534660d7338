#!/usr/bin/env bash
# Verification on a GPU machine, stage by stage, from prebuilt binaries in BIN (default carry/bin)
# with oneTBB/CLBlast in carry/lib and Fashion-MNIST in carry/data when the machine lacks them.
# Logs go to $OUT (or ./out). Usage: scripts/gpu_verify.sh STAGE...
#   devices | tests | sanitize | train-cuda | train-opencl | bench | opencl-tune | multi
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-carry/bin}
OUT=${OUT:-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# cuBLAS, cuBLASLt and NCCL may live outside /usr/local/cuda (e.g. in PyTorch's pip folders).
for lib in libcublasLt.so.13 libcudart.so.13 libnccl.so.2; do
  [ -e "/usr/local/cuda/lib64/$lib" ] && continue
  dir=$(find / -xdev -name "$lib" 2>/dev/null | head -n 1 | xargs -r dirname)
  [ -n "$dir" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"
done
[ -d carry/data ] && export TRIDENT_DATA="$PWD/carry/data"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
# NVIDIA's OpenCL driver is installed but not registered on these machines.
if [ -e /usr/lib/libnvidia-opencl.so.1 ] && [ -d /etc/OpenCL/vendors ]; then
  echo /usr/lib/libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
fi

train() {  # train NAME BACKEND-ENV MODEL EPOCHS [extra args]
  local name=$1 backend=$2 model=$3 epochs=$4; shift 4
  echo "== train $name"
  TRIDENT_BACKEND=$backend "$BIN/trident" train --model "$model" --epochs "$epochs" --json "$@" \
    > "$OUT/train_$name.jsonl" 2> "$OUT/train_$name.err"
  echo "rc $?"; tail -n 1 "$OUT/train_$name.jsonl"; tail -n 3 "$OUT/train_$name.err"
}

# compute-sanitizer TOOL over the whole suite on the CUDA device (TRIDENT_TEST_BACKENDS=cuda: every
# test, the conformance cases on cuda:0): each test case in its own process, JOBS at a time (the
# whole suite in one process took over an hour; 16-bit ResNet cases under racecheck take minutes
# each and ten at once ran the host out of memory), the GPU-heavy ones first; then the test that
# compares the driver's free memory with its baseline alone (the others would move that baseline).
# memcheck also checks for leaks. No case starts after TOTAL_SECONDS; one still running then is
# stopped. NAMES=FILE runs those test names only (one a line, as --list-test-names-only prints).
# The logs: $OUT/sanitize_TOOL.log, one line a case in $OUT/sanitize_TOOL_cases.tsv (exit status,
# seconds, name; status 124 = stopped unfinished) and the unfinished names in
# $OUT/sanitize_TOOL_unfinished.txt, ready for NAMES= in the next call. SAN_DIR (default
# /tmp/trident_san_TOOL) holds the per-case logs while it runs, and TRIDENT_SAN_GPUS (default: all
# that nvidia-smi lists) how many GPUs the slots spread over: two runs at once, e.g. the memory
# test alone on one GPU beside the rest on another, each take their own SAN_DIR and
# CUDA_VISIBLE_DEVICES with TRIDENT_SAN_GPUS=1.
sanitize_one() {  # sanitize_one TOOL DEADLINE NAME (run by xargs)
  local tool=$1 deadline=$2 name=$3 extra=() dir=${SAN_DIR:-/tmp/trident_san_$1} start=$SECONDS
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  local left=$((deadline - $(date +%s)))
  local key; key=$(printf '%s' "$name" | md5sum | cut -c1-12)
  if [ "$left" -le 5 ]; then printf '124\t0\t%s\n' "$name" > "$dir/$key.tsv"; return 0; fi
  printf '%s\n' "$name" | sed 's/\([],[*~"\\]\)/\\\1/g' > "$dir/$key.spec"  # Catch's spec characters
  # With several GPUs each job slot keeps to one (xargs numbers the slots).
  local gpu=()
  [ "${TRIDENT_SAN_GPUS:-1}" -gt 1 ] && gpu=(CUDA_VISIBLE_DEVICES=$((${TRIDENT_SAN_SLOT:-0} % TRIDENT_SAN_GPUS)))
  env "${gpu[@]}" TRIDENT_TEST_BACKENDS=cuda timeout "$left" compute-sanitizer --tool "$tool" "${extra[@]}" \
    --error-exitcode 9 --print-limit 20 "$BIN/trident_tests" -w NoTests -f "$dir/$key.spec" > "$dir/$key.log" 2>&1
  local rc=$?
  # A case that passed without one CUDA call (host code only) has nothing to check: the sanitizer
  # says so and exits 255. Count it as passed.
  if [ "$rc" -eq 255 ] && grep -q "terminated before first instrumented API call" "$dir/$key.log" &&
     grep -qE "^All tests passed|^test cases: [0-9]+ \| [0-9]+ passed$" "$dir/$key.log"; then
    rc=0; echo "(no CUDA call: host code only)" >> "$dir/$key.log"
  fi
  echo "exit status $rc ($((SECONDS - start)) s): $name" >> "$dir/$key.log"
  printf '%s\t%s\t%s\n' "$rc" "$((SECONDS - start))" "$name" > "$dir/$key.tsv"
}
export -f sanitize_one
export BIN
sanitize() {
  local tool=$1 dir=${SAN_DIR:-/tmp/trident_san_$1} alone='cuda: 1000 allocations*'
  local deadline=$(( $(date +%s) + ${TOTAL_SECONDS:-3000} ))
  rm -rf "$dir"; mkdir -p "$dir"
  if [ -n "${NAMES:-}" ]; then grep -v '^$' "$NAMES"; else
    "$BIN/trident_tests" --list-test-names-only | grep -v '^$'; fi > "$dir/all"
  # GPU-heavy cases first (16-bit, ResNet, capture, NCCL), so that none starts late.
  { grep -iE 'resnet|bf16|fp16|half|captur|nccl|cuda' "$dir/all"
    grep -viE 'resnet|bf16|fp16|half|captur|nccl|cuda' "$dir/all"; } | grep -v "^${alone%\*}" > "$dir/queue"
  export TRIDENT_SAN_GPUS; TRIDENT_SAN_GPUS=${TRIDENT_SAN_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
  echo "== compute-sanitizer $tool: $(wc -l < "$dir/queue") test cases, ${JOBS:-8} at a time on $TRIDENT_SAN_GPUS GPU(s)"
  tr '\n' '\0' < "$dir/queue" | xargs -0 -P "${JOBS:-8}" --process-slot-var=TRIDENT_SAN_SLOT -I{} bash -c 'sanitize_one "$@"' _ "$tool" "$deadline" {}
  local alone_name; alone_name=$(grep "^${alone%\*}" "$dir/all" | head -n 1)
  [ -n "$alone_name" ] && sanitize_one "$tool" "$deadline" "$alone_name"
  cat "$dir"/*.log > "$OUT/sanitize_$tool.log"
  cat "$dir"/*.tsv | sort -t$'\t' -k2,2nr > "$OUT/sanitize_${tool}_cases.tsv"
  awk -F'\t' '$1 == 124 || $1 == 137 {print $3}' "$OUT/sanitize_${tool}_cases.tsv" > "$OUT/sanitize_${tool}_unfinished.txt"
  echo "cases by exit status (0 passed, 9 sanitizer errors or killed, 124 unfinished):"
  cut -f1 "$OUT/sanitize_${tool}_cases.tsv" | sort | uniq -c
  grep -hE "ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize_$tool.log" | sort | uniq -c
  echo "slowest: $(head -n 3 "$OUT/sanitize_${tool}_cases.tsv" | cut -f2,3 | tr '\t\n' ' ;')"
}

for stage in "$@"; do
  echo "===== $stage ($(date -u +%T))"
  case $stage in
    devices) nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; "$BIN/trident" devices ;;
    tests) "$BIN/trident_tests" 2>&1 | tee "$OUT/tests.log" | grep -E "FAILED|passed|failed|SKIP|skipp|WARN" | head -60 ;;
    sanitize) for tool in ${TOOLS:-memcheck initcheck synccheck racecheck}; do sanitize $tool; done ;;
    train-cuda) train cuda_mlp cuda mlp 25; train cuda_cnn cuda cnn 25 ;;
    train-opencl) train opencl_mlp opencl mlp 25; train opencl_cnn opencl cnn 25 ;;
    bench)
      # The OpenCL device that is a GPU (PoCL's CPU device may come first).
      ocl=$("$BIN/trident" devices | awk '/^  opencl:[0-9]+/{id=$1} /type gpu/{if (id) {print id; exit}}')
      python3 bench/run_bench.py --bench "$BIN/trident_bench" --device "cuda:0${ocl:+,$ocl}" \
             --results-dir "$OUT" 2>&1 | tail -n 40 ;;
    opencl-tune)
      # Where the OpenCL step time goes (per-kernel GPU time, launch gaps), and the seed models'
      # GEMM shapes on CUDA and on OpenCL by tile and split-K (forced through the environment).
      ocl=$("$BIN/trident" devices | awk '/^  opencl:[0-9]+/{id=$1} /type gpu/{if (id) {print id; exit}}')
      for model in mlp cnn; do
        TRIDENT_OPENCL_PROFILE=1 "$BIN/trident_bench" --device "$ocl" --models $model --no-gemm 2>&1 \
          | grep -v '^{' | head -n 30
      done
      shapes=${SHAPES:-200x512x784nt,200x10x512nt,10x512x200tn,512x784x200tn,20x12800x250nn,250x12800x20tn,200x50x320nt,512x10x4096nt}
      gemm() { "$BIN/trident_bench" --no-train --gemm-ms 100 --gemm-shapes "$shapes" "$@" 2>/dev/null \
                 | sed -E 's/.*"model": "sgemm ([^"]*)".*"ms_per_step": ([0-9.]+).*/\1 \2/' | tr '\n' ' '; echo; }
      echo "cuda: $(gemm --device cuda:0)"
      echo "opencl auto: $(gemm --device "$ocl")"
      echo "opencl clblast: $(TRIDENT_OPENCL_OWN_GEMM=never gemm --device "$ocl")"
      for split in 1 2 4 8; do
        for tile in 32 64 128; do
          echo "opencl split $split tile $tile: $(TRIDENT_OPENCL_OWN_GEMM=always TRIDENT_OPENCL_SPLIT_K=$split \
                 TRIDENT_OPENCL_GEMM_TILE=$tile gemm --device "$ocl")"
        done
      done ;;
    multi)
      # Data parallelism on this machine's GPUs. Every step runs under `timeout` (a hang is a
      # failure, not a stuck job); what ran, its exit status and time, and the loss comparisons
      # go to $OUT/multi_summary.txt. 2-GPU runs (one process, and mpirun -np 2) must reach the
      # 1-GPU losses at the same global batch. With one GPU, what can be checked is checked: two
      # ranks sharing it must end promptly with NCCL's error, not hang.
      summary="$OUT/multi_summary.txt"
      : > "$summary"
      record() { echo "$*" | tee -a "$summary"; }
      run_step() {  # run_step NAME SECONDS COMMAND...
        local name=$1 limit=$2; shift 2
        local start=$SECONDS rc=0
        record "== $name: $*"
        timeout --kill-after=10 "$limit" "$@" > "$OUT/multi_$name.log" 2>&1 || rc=$?
        record "   rc $rc after $((SECONDS - start)) s$([ "$rc" -eq 124 ] && echo ' (TIMED OUT)')"
        tail -n 3 "$OUT/multi_$name.log"
        return 0
      }
      # compare NAME_A NAME_B BOUND: the last epoch's losses of two runs (JSON lines in their
      # logs) must agree within BOUND (relative). The 2-GPU runs sum two halves' gradients where
      # one GPU sums the whole batch: the MLP stays within 1e-6, but the CNN's ReLUs and max-pools
      # turn that rounding into different choices, and 2 epochs carry it to ~3e-3 (measured on
      # 2x H200: 2.7e-3; the two 2-GPU runs agree with each other exactly).
      compare() {
        local a b bound=$3
        a=$(grep '^{' "$OUT/multi_$1.log" | tail -n 1)
        b=$(grep '^{' "$OUT/multi_$2.log" | tail -n 1)
        if [ -z "$a" ] || [ -z "$b" ]; then
          record "   compare $1 / $2: FAIL (no result from one of them)"
          return 0
        fi
        python3 - "$1" "$a" "$2" "$b" "$bound" <<'PY' | tee -a "$summary"
import json, sys
na, a, nb, b = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
bound = float(sys.argv[5])
worst = max(abs(a[k] - b[k]) / max(abs(b[k]), 1e-6) for k in ("train_loss", "test_loss"))
print("   compare %s / %s: train loss %.6f / %.6f, test loss %.6f / %.6f, relative %.2e: %s"
      % (na, nb, a["train_loss"], b["train_loss"], a["test_loss"], b["test_loss"], worst,
         "PASS" if worst <= bound else "FAIL (more than %g)" % bound))
PY
      }
      gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
      record "multi: $gpus GPU(s), $(date -u +%FT%TZ)"
      launch=(mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE -x TRIDENT_DATA
              -x LD_LIBRARY_PATH -x TRIDENT_BACKEND -x TRIDENT_COLLECTIVE_TIMEOUT_S)
      export TRIDENT_BACKEND=cuda TRIDENT_COLLECTIVE_TIMEOUT_S=120
      dp=("$BIN/trident" train --epochs 2 --json)
      run_step tests 1200 "$BIN/trident_tests" "[data-parallel]"
      run_step dp1_mlp 600 "${dp[@]}" --model mlp --devices cuda:0
      run_step dp1_cnn 600 "${dp[@]}" --model cnn --devices cuda:0
      if [ "$gpus" -ge 2 ]; then
        run_step dp2_mlp 600 "${dp[@]}" --model mlp --devices cuda:0,cuda:1
        run_step dp2_cnn 600 "${dp[@]}" --model cnn --devices cuda:0,cuda:1
        # One process per GPU; no list: each rank opens and trains on GPU local_rank alone.
        run_step mpirun_mlp 600 "${launch[@]}" "${dp[@]}" --model mlp
        run_step mpirun_cnn 600 "${launch[@]}" "${dp[@]}" --model cnn
        compare dp2_mlp dp1_mlp 1e-5; compare dp2_cnn dp1_cnn 1e-2
        compare mpirun_mlp dp1_mlp 1e-5; compare mpirun_cnn dp1_cnn 1e-2
        compare mpirun_cnn dp2_cnn 1e-6  # one process or two: the same sums
        [ "${SCALING:-1}" = 1 ] &&  # SCALING=0: not the weak-scaling bench
          run_step scaling 1200 python3 bench/run_bench.py --bench "$BIN/trident_bench" --scaling \
            --devices cuda:all --results-dir "$OUT"
      else
        record "   one GPU: the 2-GPU runs (one process; mpirun -np 2) and the scaling bench" \
               "were not run"
        # Both ranks on cuda:0: NCCL refuses a communicator with a GPU twice; the job must end
        # at once with that error (the error path aborts), within the timeout.
        run_step mpirun_shared_gpu 300 "${launch[@]}" "${dp[@]}" --model mlp --devices cuda:0
        grep -qiE "nccl|duplicate" "$OUT/multi_mpirun_shared_gpu.log" &&
          record "   mpirun_shared_gpu: ended with an NCCL error, as it must" ||
          record "   mpirun_shared_gpu: no NCCL error in its log (see multi_mpirun_shared_gpu.log)"
      fi ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
