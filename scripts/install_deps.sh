#!/usr/bin/env bash
# Installs the Debian packages Trident builds, tests and trains with, if any is missing.
# The CUDA Toolkit is not a Debian package here: it is used when found at /usr/local/cuda.
set -euo pipefail
# python3-torch (PyTorch 1.13, CPU): tests/torch_crosscheck.py moves weights between Trident and
# PyTorch both ways (about 50 MB to download, 600 MB installed with its dependencies, 2.5 minutes).
packages=(cmake ninja-build g++ make libtbb-dev zlib1g-dev libpng-dev catch2
          ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libclblast-dev clinfo
          libopenmpi-dev openmpi-bin dataset-fashion-mnist python3-torch)
# --bench: also what bench/run_bench.py compares against and plots with: PyTorch on OpenBLAS
# (without libopenblas0-pthread Debian's PyTorch falls back to the reference BLAS) and matplotlib.
# --fuzz: clang and its libFuzzer runtime, for scripts/run_fuzzers.sh (CI runs it).
for option in "$@"; do
  case $option in
    --bench) packages+=(libopenblas0-pthread python3-matplotlib) ;;
    --fuzz) packages+=(clang libclang-rt-dev) ;;
    *) echo "install_deps: unknown option '$option' (--bench, --fuzz)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
