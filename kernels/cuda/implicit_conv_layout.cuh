// The implicit-GEMM convolution's layout passes (for kernels/cuda/implicit_conv.cu): NCHW ->
// NHWC transposes of activations and kernels, and the data gradient's flipped phase kernels.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda::layout {

constexpr int kThreads = 256;
template <typename S>
constexpr int kVec = 16 / int(sizeof(S));  // elements per 16-byte vector
template <typename S>
using Vec = Pack<S, kVec<S>>;

// v, rounded to TF32 where `tf32` (float32 only): the operands of TF32 products are rounded once,
// here, so that the warpgroup kernels (which read them from shared memory and would truncate)
// and the mma.sync ones (which round again, to the same) multiply the same values.
template <typename S>
__device__ __forceinline__ S stored(S v, bool tf32) {
  if constexpr (std::is_same_v<S, float>) return tf32 ? round_to_tf32(v) : v;
  return v;
}

// The data gradient of a convolution with stride S along an axis of kernel extent K is a sum of
// S stride-1 products over dy, one per phase q < S of dx's positions (kernels/cuda/
// implicit_conv.cu): phase q takes the taps r = q, q + S, ... < K (phase_taps of them; none where
// q >= K), flipped. Along both axes, phases (qy, qx) in row-major order; phase_taps_before:
// the taps of the phases before q.
__host__ __device__ inline int phase_taps(int k, int stride, int q) {
  return q < k ? (k - q + stride - 1) / stride : 0;
}
__host__ __device__ inline int phase_taps_before(int k, int stride, int q) {
  int taps = 0;
  for (int a = 0; a < q; ++a) taps += phase_taps(k, stride, a);
  return taps;
}
// Where phase (qy, qx)'s kernel starts in w_flip: its taps times C times OC elements in.
__host__ __device__ inline int64_t phase_offset(int kh, int kw, int sy, int sx, int qy, int qx,
                                                int64_t c_total, int64_t oc_total) {
  const int taps = phase_taps_before(kh, sy, qy) * kw +
                   phase_taps(kh, sy, qy) * phase_taps_before(kw, sx, qx);
  return int64_t(taps) * c_total * oc_total;
}

// w[oc, c, r, s] to the forward's w_t[oc, r, s, c] (unless w_t is null) and to the data
// gradient's phase kernels in w_flip: phase (qy, qx)'s [c, ty', tx', oc] at phase_offset, ty' =
// Ty - 1 - r / SY (Ty its taps). With stride 1 that is one phase, w_flip[c, tap, oc] = w[oc, c,
// taps - 1 - tap]. One pass for both. The forward's arrangement rides on the launch that
// transposes x (see transpose_sample_kernel): as a launch of its own it cost about 3 us a
// convolution (ResNet, H100, ncu), for a few hundred thousand values.
template <typename S>
struct WeightArrangement {
  const S* w = nullptr;  // null: nothing to arrange
  S* w_t = nullptr;
  S* w_flip = nullptr;
  int oc_total = 0, c_total = 0, kh = 1, kw = 1, sy = 1, sx = 1;
  int blocks = 0;  // blocks of kThreads it takes
  bool tf32 = false;  // round to TF32 (stored)
};

// Elements first, first + step, ... of the arrangement.
template <typename S>
__device__ void arrange_weights(const WeightArrangement<S>& a, int first, int step) {
  const int taps = a.kh * a.kw, total = a.oc_total * a.c_total * taps;
  for (int i = first; i < total; i += step) {
    const int tap = i % taps, rest = i / taps, c = rest % a.c_total, oc = rest / a.c_total;
    const int r = tap / a.kw, s = tap - r * a.kw;
    const S v = stored(a.w[i], a.tf32);
    if (a.w_t) a.w_t[(oc * taps + tap) * a.c_total + c] = v;
    const int qy = r % a.sy, qx = s % a.sx;
    const int ty = phase_taps(a.kh, a.sy, qy), tx = phase_taps(a.kw, a.sx, qx);
    const int fy = ty - 1 - r / a.sy, fx = tx - 1 - s / a.sx;
    a.w_flip[phase_offset(a.kh, a.kw, a.sy, a.sx, qy, qx, a.c_total, a.oc_total) +
             ((int64_t(c) * ty + fy) * tx + fx) * a.oc_total + oc] = v;
  }
}

template <typename S>
__global__ void __launch_bounds__(kThreads) arrange_weights_kernel(WeightArrangement<S> a) {
  wait_for_prior_grids();
  arrange_weights(a, int(blockIdx.x) * kThreads + int(threadIdx.x), int(gridDim.x) * kThreads);
}

// dst[b, j, i] = src[b, i, j] for src [batches, rows, cols] (32 x 32 tiles through shared memory).
template <typename S>
__global__ void transpose_kernel(const S* __restrict__ src, S* __restrict__ dst, int rows,
                                 int cols, bool tf32) {
  wait_for_prior_grids();
  __shared__ S tile[32][33];
  const int64_t batch = blockIdx.z;
  const S* in = src + batch * rows * cols;
  S* out = dst + batch * rows * cols;
  const int i0 = blockIdx.y * 32, j0 = blockIdx.x * 32;
  for (int di = threadIdx.y; di < 32; di += 8) {
    const int i = i0 + di, j = j0 + threadIdx.x;
    if (i < rows && j < cols) tile[di][threadIdx.x] = in[int64_t(i) * cols + j];
  }
  __syncthreads();
  for (int dj = threadIdx.y; dj < 32; dj += 8) {
    const int j = j0 + dj, i = i0 + threadIdx.x;
    if (i < rows && j < cols) out[int64_t(j) * rows + i] = stored(tile[threadIdx.x][dj], tf32);
  }
}

// The same for a whole [rows, cols] matrix per block (rows a multiple of the vector width, the
// matrix at most kSampleTransposeBytes): 16-byte loads into shared memory, 16-byte stores out.
// The launch's first `arrange.blocks` blocks arrange weights instead (first: they are quick, and
// leave their SMs to the transposes).
constexpr int kSampleTransposeBytes = 96 * 1024;
template <typename S>
__global__ void __launch_bounds__(kThreads)
    transpose_sample_kernel(const S* __restrict__ src, S* __restrict__ dst, int rows, int cols,
                            WeightArrangement<S> arrange, bool tf32) {
  wait_for_prior_grids();
  if (int(blockIdx.x) < arrange.blocks) {
    arrange_weights(arrange, int(blockIdx.x) * kThreads + int(threadIdx.x),
                    arrange.blocks * kThreads);
    return;
  }
  extern __shared__ __align__(16) char smem[];
  S* tile = reinterpret_cast<S*>(smem);
  constexpr int V = kVec<S>;
  const int total = rows * cols, vectors = total / V, row_vectors = rows / V;
  const int64_t base = int64_t(int(blockIdx.x) - arrange.blocks) * total;
  for (int v = threadIdx.x; v < vectors; v += kThreads)
    reinterpret_cast<Vec<S>*>(tile)[v] = reinterpret_cast<const Vec<S>*>(src + base)[v];
  __syncthreads();
  for (int v = threadIdx.x; v < vectors; v += kThreads) {
    const int j = v / row_vectors, i0 = (v - j * row_vectors) * V;
    Vec<S> out;
#pragma unroll
    for (int e = 0; e < V; ++e) out.v[e] = stored(tile[(i0 + e) * cols + j], tf32);
    reinterpret_cast<Vec<S>*>(dst + base)[v] = out;
  }
}

// The same in tiles of kTileRows rows by kTileCols columns, for rows a multiple of kTileRows and
// cols of kVec: a row's piece of the tile is one run of 16-byte vectors, and so is a column's
// (kTileRows values: 64 or 128 bytes) in dst; the blocks are many and small (8 or 16 KB of shared
// memory), so that an SM keeps several tiles' loads in flight where one block a sample held one.
// ResNet-9 bf16 on an H200, one binary, alternating: 5.14 -> 4.85 ms a step (ncu had its 32x32
// and 16x16 transposes at 1.4-1.8 TB/s on the per-sample and 32 x 32 kernels); the built-in
// ResNet bf16 0.963 -> 0.959, tf32 1.754 -> 1.736.
// Shared memory holds the tile row by row, each row's 16-byte chunks permuted (chunk k of row r
// at k ^ ((r / kVec) % 8)): the stores read, for one element offset e, rows g kVec + e of
// several groups g at the same column chunk, and the permutation puts the groups on different
// banks, as it does the loads' chunks of one row.
constexpr int kTileCols = 128;
template <typename S, int kTileRows>
__global__ void __launch_bounds__(kThreads)
    transpose_tiles_kernel(const S* __restrict__ src, S* __restrict__ dst, int rows, int cols,
                           int col_tiles, int row_tiles, WeightArrangement<S> arrange, bool tf32) {
  wait_for_prior_grids();
  if (int(blockIdx.x) < arrange.blocks) {
    arrange_weights(arrange, int(blockIdx.x) * kThreads + int(threadIdx.x),
                    arrange.blocks * kThreads);
    return;
  }
  constexpr int V = kVec<S>;
  constexpr int kChunks = kTileCols / V;  // 16-byte chunks of a tile row
  constexpr int kGroups = kTileRows / V;  // 16-byte vectors of a tile column
  __shared__ Vec<S> tile[kTileRows * kChunks];
  const int task = int(blockIdx.x) - arrange.blocks;
  const int col_tile = task % col_tiles, rest = task / col_tiles;
  const int row_tile = rest % row_tiles, batch = rest / row_tiles;
  const int r0 = row_tile * kTileRows, c0 = col_tile * kTileCols;
  const int64_t base = int64_t(batch) * rows * cols;
  const Vec<S>* in = reinterpret_cast<const Vec<S>*>(src + base);
  for (int i = threadIdx.x; i < kTileRows * kChunks; i += kThreads) {
    const int r = i / kChunks, k = i - r * kChunks, c = c0 + k * V;
    if (c < cols)
      tile[r * kChunks + (k ^ ((r / V) % 8))] = in[(int64_t(r0 + r) * cols + c) / V];
  }
  __syncthreads();
  const S* t = reinterpret_cast<const S*>(tile);
  Vec<S>* out = reinterpret_cast<Vec<S>*>(dst + base);
  for (int i = threadIdx.x; i < kTileCols * kGroups; i += kThreads) {
    const int cc = i / kGroups, g = i - cc * kGroups, c = c0 + cc;
    if (c >= cols) continue;
    const int chunk = (cc / V) ^ (g % 8), within = cc % V;
    Vec<S> v;
#pragma unroll
    for (int e = 0; e < V; ++e)
      v.v[e] = stored(t[((g * V + e) * kChunks + chunk) * V + within], tf32);
    out[(int64_t(c) * rows + r0 + g * V) / V] = v;
  }
}

// dst[b] = src[b]^T for src [batches, rows, cols], rounded to TF32 where `tf32`; and, where
// arrange.w is set, the weight arrangement (in the same launch unless the 32 x 32 kernel takes the
// shape). Tiles where cols come in 16-byte vectors and rows in 128- or 64-byte columns; else whole
// samples (e.g. 14x14 and 7x7 planes: 196 and 49 positions), else 32 x 32 tiles.
template <typename S>
inline void transpose(const KernelContext& ctx, const void* src, void* dst, int64_t batches,
                      int64_t rows, int64_t cols, bool tf32, WeightArrangement<S> arrange = {}) {
  if (!arrange.w) arrange.blocks = 0;
  const int64_t bytes = rows * cols * int64_t(sizeof(S));
  const bool aligned = pack_aligned(src, 16) && pack_aligned(dst, 16) && cols % kVec<S> == 0;
  auto tiles = [&](auto tile_rows) {
    constexpr int R = decltype(tile_rows)::value;
    const int64_t col_tiles = (cols + kTileCols - 1) / kTileCols, row_tiles = rows / R;
    launch(ctx, transpose_tiles_kernel<S, R>,
           unsigned(batches * row_tiles * col_tiles + arrange.blocks), kThreads, 0,
           static_cast<const S*>(src), static_cast<S*>(dst), int(rows), int(cols),
           int(col_tiles), int(row_tiles), arrange, tf32);
  };
  if (aligned && rows % (128 / int64_t(sizeof(S))) == 0)
    return tiles(std::integral_constant<int, 128 / int(sizeof(S))>());
  if (aligned && rows % (64 / int64_t(sizeof(S))) == 0)
    return tiles(std::integral_constant<int, 64 / int(sizeof(S))>());
  if (rows % kVec<S> == 0 && bytes <= kSampleTransposeBytes && pack_aligned(src, 16) &&
      pack_aligned(dst, 16)) {
    allow_dynamic_shared_memory<transpose_sample_kernel<S>>(kSampleTransposeBytes);
    launch(ctx, transpose_sample_kernel<S>, unsigned(batches + arrange.blocks), kThreads,
           size_t(bytes), static_cast<const S*>(src), static_cast<S*>(dst), int(rows), int(cols),
           arrange, tf32);
    return;
  }
  const dim3 grid(unsigned((cols + 31) / 32), unsigned((rows + 31) / 32), unsigned(batches));
  launch(ctx, transpose_kernel<S>, grid, dim3(32, 8), 0, static_cast<const S*>(src),
         static_cast<S*>(dst), int(rows), int(cols), tf32);
  if (arrange.blocks > 0)
    launch(ctx, arrange_weights_kernel<S>, unsigned(arrange.blocks), kThreads, 0, arrange);
}

}  // namespace trident::cuda::layout
