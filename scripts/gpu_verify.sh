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

for stage in "$@"; do
  echo "===== $stage ($(date -u +%T))"
  case $stage in
    devices) nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; "$BIN/trident" devices ;;
    tests) "$BIN/trident_tests" 2>&1 | tee "$OUT/tests.log" | grep -E "FAILED|passed|failed|SKIP|skipp|WARN" | head -60 ;;
    sanitize)
      for tool in memcheck racecheck initcheck; do
        echo "== compute-sanitizer $tool"
        TRIDENT_TEST_BACKENDS=cuda compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
          "$BIN/trident_tests" "[conformance]" 2>&1 | tail -n 15
      done ;;
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
      "$BIN/trident_tests" "[data-parallel]" 2>&1 | tail -n 20
      train dp1 cuda mlp 2 --devices cuda:0
      train dp2 cuda mlp 2 --devices cuda:0,cuda:1
      train dp2_cnn cuda cnn 2 --devices cuda:all
      echo "== mpirun"
      mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x TRIDENT_DATA -x LD_LIBRARY_PATH \
        "$BIN/trident" train --model mlp --epochs 2 --json 2>&1 | tail -n 4
      python3 bench/run_bench.py --bench "$BIN/trident_bench" --scaling --devices cuda:all \
        --results-dir "$OUT" 2>&1 | tail -n 30 ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
