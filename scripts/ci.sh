#!/usr/bin/env bash
# The CI run (called by .ci/run and `make ci`; developers can run it too). Three steps, sized for
# a cold run on the 2-core CI machine (docs/BUILD.md has the times):
#   default     -Werror build of the default configuration (every backend found) and the whole
#               suite (unit and conformance, consumer project and examples, layering, MPI, crash
#               safety, the PyTorch cross-check)
#   minimal     -Werror configure and build only, with OpenCL, NCCL and MPI off (CUDA, where the
#               toolkit is, without NCCL): the #ifdef paths of a lean build compile
#   asan-ubsan  AddressSanitizer + UBSan build of the test binary and CLI (CPU and PoCL, no CUDA;
#               -O0 -g, which GCC compiles with the sanitizers 7x faster than -O2 -g, except the
#               CPU and reference kernels at -O1: TRIDENT_SANITIZE_KERNEL_FLAGS) and the whole
#               Catch2 suite under them (ASAN_TAGS='[idx],[npy]' runs a subset instead)
# Optional, not run by default: asan-ubsan-full (preset asan-ubsan: everything at -O2 -g, every
# ctest), tsan (ThreadSanitizer on the threaded and data-parallel tests, see tsan_run below).
# Prints how long each part took.
#
# Usage: scripts/ci.sh [STEP...]   steps: default minimal cpu-only asan-ubsan fuzz asan-ubsan-full tsan
# Build trees: build/ci-default, build/ci-minimal, build/ci-asan, build/asan-ubsan (the full
# one); a developer's build/ keeps its own settings.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(default minimal cpu-only asan-ubsan fuzz)
jobs=${JOBS:-$(nproc)}
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
# No GPU runs CUDA code in CI: one architecture proves it compiles (sm_80 and sm_90 share every
# code path but one intrinsic guard) at half nvcc's time. CI_CUDA_ARCHITECTURES overrides it.
common=(-DTRIDENT_WERROR=ON)
launchers=()
if [ "${CI_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null 2>&1; then  # CI_CCACHE=0: without
  # Paths relative to the checkout in the cache key: the trees share what they compile alike.
  export CCACHE_BASEDIR=$PWD
  launchers=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cuda_arch=("-DCMAKE_CUDA_ARCHITECTURES=${CI_CUDA_ARCHITECTURES:-90}")
# The sanitizer step's Catch2 test spec: empty (the default) runs the whole suite.
ASAN_TAGS=${ASAN_TAGS:-}
# The asan-ubsan test preset's environment (CMakePresets.json), for the tagged run.
asan_env=(
  "ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1"
  "LSAN_OPTIONS=suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
  "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")

timings=()
timed() {  # timed NAME COMMAND...: runs the command, records its wall-clock time
  local name=$1 start=$SECONDS
  shift
  echo "=== ci: $name"
  "$@"
  timings+=("$(printf '%-36s %5d s' "$name" $((SECONDS - start)))")
}
configure_and_build() {  # DIR CMAKE_ARGS...
  local dir=$1
  shift
  cmake -S . -B "$dir" "${generator[@]}" "${common[@]}" "${launchers[@]}" "${cuda_arch[@]}" \
    -DCMAKE_BUILD_TYPE=Release "$@"
  cmake --build "$dir" -j "$jobs"
}
whole_suite() { (cd "$1" && ctest --output-on-failure --timeout 3000); }
asan_build() {  # the preset's tree (no CUDA, -O2 -g), everything
  cmake --preset asan-ubsan "${common[@]}" "${launchers[@]}"
  cmake --build --preset asan-ubsan -j "$jobs"
}
asan_build_tests() {  # a Debug tree with the sanitizers: the test binary and the CLI it runs
  cmake -S . -B build/ci-asan "${generator[@]}" "${common[@]}" "${launchers[@]}" \
    -DCMAKE_BUILD_TYPE=Debug -DTRIDENT_SANITIZE=address,undefined -DTRIDENT_WITH_CUDA=OFF \
    -DTRIDENT_BUILD_BENCH=OFF -DTRIDENT_SANITIZE_KERNEL_FLAGS=-O1
  cmake --build build/ci-asan -j "$jobs" --target trident_tests trident_cli
}
asan_suite() {  # the suite's own CLI tests run build/ci-asan/trident, instrumented as well
  local spec=()
  [ -n "$ASAN_TAGS" ] && spec=("$ASAN_TAGS")
  env "${asan_env[@]}" build/ci-asan/tests/trident_tests "${spec[@]}"
}
# ThreadSanitizer: Debian's oneTBB is not instrumented, so TSan cannot see the synchronisation
# inside libtbb. Trident's parallel loops annotate oneTBB's fork and join for it
# (core/thread_annotations.h), the CPU kernels are built uninstrumented (their parallel_for bodies
# are not checked), and tests/sanitizers/tsan.supp drops what remains inside oneTBB: what TSan
# checks is Trident's own threading (replicas, collectives, trainer, registry, log, allocator).
tsan_build() {
  cmake -S . -B build/ci-tsan "${generator[@]}" "${launchers[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DTRIDENT_SANITIZE=thread -DTRIDENT_WITH_CUDA=OFF \
    -DTRIDENT_WITH_OPENCL=OFF -DTRIDENT_BUILD_BENCH=OFF \
    -DTRIDENT_SANITIZE_KERNEL_FLAGS="-O2;-fno-sanitize=thread;-DTRIDENT_TSAN_ANNOTATIONS"
  cmake --build build/ci-tsan -j "$jobs" --target trident_tests trident  # (a test runs the CLI)
}
# The threaded tests, the conformance training cases on four CPU devices included.
TSAN_TAGS=${TSAN_TAGS:-'[data-parallel],[collective],[registry],[log],[allocator],[overlap],[split],[teardown],[timeout]'}
tsan_run() {
  env TRIDENT_CPU_DEVICES=4 TRIDENT_NUM_THREADS=4 \
    TSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/tsan.supp:halt_on_error=1:second_deadlock_stack=1:history_size=7:allocator_may_return_null=1" \
    timeout 3600 build/ci-tsan/tests/trident_tests "$TSAN_TAGS"
}

for step in "${steps[@]}"; do
  case $step in
    default)  # what `make test` builds and runs, with warnings as errors
      timed "default: build" configure_and_build build/ci-default
      timed "default: ctest" whole_suite build/ci-default
      # As `make test` does: say which compiled-in backends found no device (their cases skipped).
      build/ci-default/trident devices | grep -E '^[a-z]+: 0 devices' | sed 's/^/skipped backend: /' || true
      ;;
    minimal)  # OpenCL, NCCL and MPI off; CUDA (where the toolkit is) without NCCL; build only
      timed "minimal: build" configure_and_build build/ci-minimal \
        -DTRIDENT_WITH_OPENCL=OFF -DTRIDENT_WITH_NCCL=OFF -DTRIDENT_WITH_MPI=OFF \
        -DTRIDENT_BUILD_BENCH=OFF
      ;;
    cpu-only)  # no GPU backend at all (what AUTO gives without the CUDA Toolkit): build only
      timed "cpu-only: build" configure_and_build build/ci-cpu-only \
        -DTRIDENT_WITH_CUDA=OFF -DTRIDENT_WITH_OPENCL=OFF -DTRIDENT_WITH_NCCL=OFF \
        -DTRIDENT_WITH_MPI=OFF -DTRIDENT_BUILD_BENCH=OFF
      ;;
    asan-ubsan)  # the whole suite under ASan + UBSan on the CPU and PoCL
      timed "asan-ubsan: build tests" asan_build_tests
      timed "asan-ubsan: suite" asan_suite
      ;;
    fuzz)  # each libFuzzer target (clang, ASan + UBSan) for FUZZ_SECONDS from the seed corpora
      timed "fuzz: build and run" env FUZZ_BUILD_DIR="$PWD/build/ci-fuzz" \
        bash scripts/run_fuzzers.sh "${FUZZ_SECONDS:-60}"
      ;;
    tsan)  # ThreadSanitizer over the threaded tests (not in the default run: see tsan_run)
      timed "tsan: build" tsan_build
      timed "tsan: threaded tests" tsan_run
      ;;
    asan-ubsan-full)  # everything at -O2 -g under ASan + UBSan, every ctest (not in the default run)
      timed "asan-ubsan-full: build" asan_build
      timed "asan-ubsan-full: ctest" ctest --preset asan-ubsan
      ;;
    *)
      echo "ci.sh: unknown step '$step' (steps: default minimal cpu-only asan-ubsan fuzz asan-ubsan-full tsan)" >&2
      exit 2
      ;;
  esac
done

echo "=== ci: wall-clock time of each part ($jobs jobs)"
printf '%s\n' "${timings[@]}"
printf '%-36s %5d s\n' "total" "$SECONDS"
