#!/usr/bin/env bash
# Packs what a GPU machine run needs from this machine into one folder (default carry/): the
# libraries the GPU machine lacks (oneTBB, CLBlast, libpng), Fashion-MNIST, the stripped and
# xz-compressed binaries of BUILD_DIR, the bench scripts, and env.sh, which a command there
# sources first: `source carry/env.sh` (sets LD_LIBRARY_PATH and TRIDENT_DATA, registers
# NVIDIA's OpenCL driver, unpacks the binaries into $B and exports B).
# Usage: scripts/dev/make_carry.sh BUILD_DIR [DEST (a path under carry/, default carry)]
set -euo pipefail
build=${1:?usage: make_carry.sh BUILD_DIR [DEST]}
dest=${2:-carry}
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$dest/lib" "$dest/data" "$dest/bench" "$dest/tests"
for lib in libtbb.so.12 libtbbmalloc.so.2 libclblast.so.1 libpng16.so.16; do
  cp -L "/usr/lib/x86_64-linux-gnu/$lib" "$dest/lib/"
done
cp /usr/share/datasets/fashion-mnist/*.gz "$dest/data/"
cp "$repo"/bench/*.py "$dest/bench/"
cp "$repo/tests/torch_models.py" "$dest/tests/" 2>/dev/null || true
staging=$(mktemp -d)
for bin in trident tests/trident_tests bench/trident_bench; do
  [ -x "$build/$bin" ] || continue
  strip -o "$staging/$(basename "$bin")" "$build/$bin"
done
tar -C "$staging" -cJf "$dest/bin.tar.xz" .
rm -rf "$staging"
abs_build=$(cd "$build" && pwd)
cat > "$dest/env.sh" <<EOF
# Sourced on the GPU machine from the repository root (made by scripts/dev/make_carry.sh).
C=\$PWD/$dest
export LD_LIBRARY_PATH="\$C/lib:/usr/local/cuda/lib64:\${LD_LIBRARY_PATH:-}"
export TRIDENT_DATA="\$C/data" NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
if [ -e /usr/lib/libnvidia-opencl.so.1 ] && [ -d /etc/OpenCL/vendors ]; then
  echo /usr/lib/libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
fi
export B=\$C/bin
mkdir -p "\$B" && tar -C "\$B" -xJf "\$C/bin.tar.xz"
# test_reliability runs the CLI from the path it was compiled with.
mkdir -p "$abs_build" && cp "\$B/trident" "$abs_build/trident" 2>/dev/null || true
EOF
du -sh "$dest"
