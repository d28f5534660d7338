#!/usr/bin/env bash
# CPU bfloat16 in one run on this machine: Trident's bf16 GEMMs on each of its paths (AMX tiles,
# AVX-512 BF16 dot products, float32 staging: TRIDENT_CPU_AMX / TRIDENT_CPU_BF16_DOT) against its
# own sgemm and torch.matmul in float32 and bfloat16 (oneDNN), then MODELS (default the 4096-wide
# MLP, the ResNet, the seed CNN and MLP) trained in fp32 and bf16 by both (Trident also with its
# bf16 GEMMs and convolutions staged through float32; PyTorch eager and channels-last). Prints
# one JSON line per measurement to stdout (or OUT=FILE) and a table.
# Usage: bench/cpu_bf16.sh [BUILD_DIR] (default build; the bench binary is BUILD_DIR/bench/trident_bench)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${OUT:-/dev/stdout}
python=${PYTHON:-/usr/bin/python3}
sizes=${SIZES:-512,1024,2048}
models=${MODELS:-mlp-big,resnet,cnn,mlp}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
tag() { sed "s/^{/{\"path\": \"$1\", /"; }
bench() { "$build/bench/trident_bench" --device cpu:0 "$@" 2>/dev/null | grep '^{'; }
status=0
{
  bench --gemm --gemm-types fp32,bf16 --gemm-sizes "$sizes" | tag best || status=1
  TRIDENT_CPU_AMX=0 bench --gemm --gemm-types bf16 --gemm-sizes "$sizes" | tag avx512-bf16 || status=1
  TRIDENT_CPU_BF16_DOT=0 bench --gemm --gemm-types bf16 --gemm-sizes "$sizes" | tag staged-fp32 || status=1
  OMP_WAIT_POLICY=PASSIVE "$python" bench/torch_reference.py --device cpu --no-train \
    --gemm-sizes "$sizes" --gemm-precisions fp32,bf16 2>/dev/null | grep '^{' | tag torch || status=1
  bench --models "$models" --precision fp32,bf16 --no-gemm --steps 6 --epochs 3 | tag best || status=1
  TRIDENT_CPU_AMX=0 TRIDENT_CPU_BF16_DOT=0 bench --models "$models" --precision bf16 --no-gemm \
    --steps 6 --epochs 3 | tag staged-fp32 || status=1
  OMP_WAIT_POLICY=PASSIVE "$python" bench/torch_reference.py --device cpu --models "$models" \
    --no-gemm --precisions fp32,bf16 --modes eager,channels_last --steps 6 --epochs 3 2>/dev/null \
    | grep '^{' | tag torch || status=1
} > "$tmp"
cat "$tmp" > "$out"
"$python" - "$tmp" <<'PY' >&2
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'impl':8} {'path':12} {'bench':6} {'model':8} {'mode':13} {'precision':9} {'n':>5} {'ms':>9} {'GFLOP/s':>8}")
for r in rows:
    prec = r.get("precision") or r.get("dtype") or ""
    if r.get("ms_per_step") is None:  # a skipped or failed row (PyTorch says why)
        print(f"{r.get('impl', ''):8} {r['path']:12} {r['bench']:6} {r.get('model') or '':8} "
              f"{r.get('mode') or '':13} {prec:9} skipped: {r.get('skipped') or r.get('error') or '?'}")
        continue
    print(f"{r.get('impl', ''):8} {r['path']:12} {r['bench']:6} {r.get('model') or '':8} {r.get('mode') or '':13} "
          f"{prec:9} {r.get('size') or r.get('batch') or 0:>5} {r['ms_per_step']:9.3f} {r.get('gflops') or 0:8.1f}")
PY
exit $status
