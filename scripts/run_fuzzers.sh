#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) and runs each for a bounded
# time from the seed corpora in the repository; fails on any crash, leak, timeout or out-of-memory.
#
#   scripts/run_fuzzers.sh [SECONDS_PER_TARGET (60)] [TARGET...]
#
# Environment: FUZZ_BUILD_DIR (build-fuzz), CC/CXX (clang/clang++), FUZZ_JOBS (targets run at once, 1).
# Each target's final statistics (executions, coverage) are printed and kept in
# $FUZZ_BUILD_DIR/fuzz-logs/<target>.log; inputs that failed are left in $FUZZ_BUILD_DIR/fuzz-artifacts.
set -euo pipefail

seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(idx safetensors cli_options npy npz image)
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${FUZZ_JOBS:-1}
cc=${CC:-clang}
cxx=${CXX:-clang++}

if ! command -v "$cxx" > /dev/null; then
  echo "run_fuzzers: $cxx not found (Debian: apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi

mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DTRIDENT_BUILD_FUZZERS=ON -DTRIDENT_BUILD_TESTS=OFF -DTRIDENT_BUILD_BENCH=OFF \
  -DTRIDENT_WITH_CUDA=OFF -DTRIDENT_WITH_OPENCL=OFF -DTRIDENT_WITH_MPI=OFF > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 2; }
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/fuzz_}"

mkdir -p "$build/fuzz-logs" "$build/fuzz-artifacts"
run_one() {
  local target=$1 corpus="$build/fuzz-corpus/$1"
  mkdir -p "$corpus"
  # The repository's seeds are read, never written: new inputs go to the build directory.
  "$build/tests/fuzz/fuzz_$target" "$corpus" "$root/tests/fuzz/corpus/$target" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-artifacts/$target-" > "$build/fuzz-logs/$target.log" 2>&1
}

status=0
pids=()
names=()
for target in "${targets[@]}"; do
  run_one "$target" &
  pids+=($!)
  names+=("$target")
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || { echo "FAIL: fuzz_${names[0]} (see $build/fuzz-logs/${names[0]}.log)"; status=1; }
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "FAIL: fuzz_${names[$i]} (see $build/fuzz-logs/${names[$i]}.log)"; status=1; }
done

for target in "${targets[@]}"; do
  log="$build/fuzz-logs/$target.log"
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1 || true)
  cov=$(grep -Eo 'DONE +cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 |
        grep -Eo 'cov: [0-9]+ ft: [0-9]+' || true)
  echo "fuzz_$target: ${runs:-?} executions in ${seconds}s, ${cov:-cov: ?} (edges, features)"
  if grep -q 'ERROR: \|SUMMARY: \|==ERROR\|Test unit written' "$log"; then
    grep -m5 'ERROR\|SUMMARY\|invariant failed' "$log" >&2
    status=1
  fi
done
exit $status
