#!/usr/bin/env bash
# The CI run (called by .ci/run and `make ci`; developers can run it too): builds with -Werror and
# runs the whole suite in the default configuration; builds the configurations that drop a backend
# (OpenCL off with CUDA built without NCCL; CUDA and MPI off) and runs a quick subset of each; then
# runs the whole suite under AddressSanitizer + UBSan (preset asan-ubsan) on the CPU and PoCL.
# Prints how long each part took. Build trees: build/ci-* and build/asan-ubsan (a developer's
# build/ keeps its own settings).
#
# Usage: scripts/ci.sh [STEP...]   steps: default no-opencl no-cuda-mpi asan-ubsan (all by default)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(default no-opencl no-cuda-mpi asan-ubsan)
jobs=${JOBS:-$(nproc)}
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
common=(-DTRIDENT_WERROR=ON)
if [ "${CI_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null 2>&1; then  # CI_CCACHE=0: without
  # Paths relative to the checkout in the cache key: the trees share what they compile alike.
  export CCACHE_BASEDIR=$PWD
  common+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

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
  cmake -S . -B "$dir" "${generator[@]}" "${common[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
  cmake --build "$dir" -j "$jobs"
}
quick_subset() {  # DIR CATCH_TAGS: those test cases, the layering check and the consumer project
  "$1/tests/trident_tests" "$2"
  (cd "$1" && ctest -R 'layering|consumer' --output-on-failure)
}
whole_suite() { (cd "$1" && ctest --output-on-failure --timeout 3000); }
asan_build() {
  cmake --preset asan-ubsan "${common[@]}"
  cmake --build --preset asan-ubsan -j "$jobs"
}

for step in "${steps[@]}"; do
  case $step in
    default)  # what `make test` builds and runs, with warnings as errors
      timed "default: build" configure_and_build build/ci-default
      timed "default: ctest" whole_suite build/ci-default
      # As `make test` does: say which compiled-in backends found no device (their cases skipped).
      build/ci-default/trident devices | grep -E '^[a-z]+: 0 devices' | sed 's/^/skipped backend: /' || true
      ;;
    no-opencl)  # OpenCL off; CUDA (where the toolkit is) built without NCCL
      timed "no-opencl, no NCCL: build" configure_and_build build/ci-no-opencl \
        -DTRIDENT_WITH_OPENCL=OFF -DTRIDENT_WITH_NCCL=OFF -DTRIDENT_BUILD_BENCH=OFF
      timed "no-opencl, no NCCL: subset" quick_subset build/ci-no-opencl \
        '[build],[log],[registry],[cuda]'
      ;;
    no-cuda-mpi)  # the CPU and OpenCL only
      timed "no-cuda-mpi: build" configure_and_build build/ci-no-cuda-mpi \
        -DTRIDENT_WITH_CUDA=OFF -DTRIDENT_WITH_MPI=OFF -DTRIDENT_BUILD_BENCH=OFF
      timed "no-cuda-mpi: subset" quick_subset build/ci-no-cuda-mpi \
        '[build],[log],[registry],[data-parallel]'
      ;;
    asan-ubsan)  # the whole suite under ASan + UBSan on the CPU and PoCL (the preset has no CUDA)
      timed "asan-ubsan: build" asan_build
      timed "asan-ubsan: ctest" ctest --preset asan-ubsan
      ;;
    *)
      echo "ci.sh: unknown step '$step' (steps: default no-opencl no-cuda-mpi asan-ubsan)" >&2
      exit 2
      ;;
  esac
done

echo "=== ci: wall-clock time of each part ($jobs jobs)"
printf '%s\n' "${timings[@]}"
printf '%-36s %5d s\n' "total" "$SECONDS"
