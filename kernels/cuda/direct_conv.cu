// CUDA direct convolution for few input channels (kernels/cuda/direct_conv.h says why and how).
#include "trident/kernels/cuda/direct_conv.h"

#include <climits>
#include <type_traits>

#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxPatch = 32;             // C * KH * KW
constexpr int kMaxKernelFloats = 8192;    // OC * C * KH * KW: 32 KB of shared memory

struct Geometry {
  int c, h, w, oc, kh, kw, sy, sx, ph, pw, oh, ow;
  int patch;      // C * KH * KW
  int plane_out;  // OH * OW
  int positions;  // N * OH * OW
};

Geometry geometry(const Conv2dShape& s) {
  Geometry g;
  g.c = int(s.in_channels), g.h = int(s.height), g.w = int(s.width);
  g.oc = int(s.out_channels), g.kh = int(s.kernel_h), g.kw = int(s.kernel_w);
  g.sy = int(s.stride_h), g.sx = int(s.stride_w), g.ph = int(s.pad_h), g.pw = int(s.pad_w);
  g.oh = int(s.out_height()), g.ow = int(s.out_width());
  g.patch = int(s.patch_size());
  g.plane_out = g.oh * g.ow;
  g.positions = int(s.batch) * g.plane_out;
  return g;
}

// Patch element k = (c, r, s) of every position: its offset in a sample of x relative to the
// window's corner, and its row and column in the window. In shared memory, for kPatch entries
// (zeros past the patch, whose values the threads set to 0).
struct PatchTable {
  int offset[kMaxPatch], row[kMaxPatch], col[kMaxPatch];
};

__device__ void fill_table(const Geometry& g, PatchTable& t) {
  for (int k = threadIdx.x; k < kMaxPatch; k += blockDim.x) {
    const int taps = g.kh * g.kw, c = k / taps, tap = k - c * taps, r = tap / g.kw;
    const int s = tap - r * g.kw;
    const bool ok = k < g.patch;
    t.offset[k] = ok ? (c * g.h + r) * g.w + s : 0;
    t.row[k] = ok ? r : 0;
    t.col[k] = ok ? s : 0;
  }
}

// The patch of output position `pos` (n, oy, ox): patch[k] = x[n, c, oy SY - PH + r, ox SX - PW
// + s], 0 outside the image and past the patch. Returns n and the position within the plane.
template <typename S, int kPatch>
__device__ __forceinline__ void load_patch(const S* __restrict__ x, const Geometry& g,
                                           const PatchTable& t, int pos, float (&patch)[kPatch],
                                           int& n, int& p) {
  n = pos / g.plane_out;
  p = pos - n * g.plane_out;
  const int oy = p / g.ow, ox = p - oy * g.ow;
  const int iy0 = oy * g.sy - g.ph, ix0 = ox * g.sx - g.pw;
  const S* corner = x + int64_t(n) * g.c * g.h * g.w + iy0 * g.w + ix0;
#pragma unroll
  for (int k = 0; k < kPatch; ++k) {
    const int iy = iy0 + t.row[k], ix = ix0 + t.col[k];
    const bool ok = k < g.patch && unsigned(iy) < unsigned(g.h) && unsigned(ix) < unsigned(g.w);
    patch[k] = ok ? to_float(corner[t.offset[k]]) : 0.0f;
  }
}

// y[n, oc, p] = bias[oc] + sum over k of w[oc, k] patch[k], a thread per kPositions adjacent
// output positions (1, or 2 where the planes have an even size and y is pair-aligned, so that a
// pair never straddles two samples and is stored as one pack). Two positions a thread use each
// broadcast row of the kernel twice and halve the stores: ResNet-9's first layer (3 -> 64, 3x3,
// 32x32, batch 512, bf16) took 99 us with one, 82 with two (H200, ncu).
template <typename S, int kPatch, int kPositions>
__global__ void __launch_bounds__(kThreads)
    direct_forward_kernel(const S* __restrict__ x, const S* __restrict__ w,
                          const float* __restrict__ bias, S* __restrict__ y, Geometry g) {
  wait_for_prior_grids();
  extern __shared__ float4 kernel_smem[];  // [OC][kPatch] floats, zeros past the patch
  float* kernel = reinterpret_cast<float*>(kernel_smem);
  __shared__ PatchTable table;
  for (int i = threadIdx.x; i < g.oc * kPatch; i += kThreads) {
    const int oc = i / kPatch, k = i - oc * kPatch;
    kernel[i] = k < g.patch ? to_float(w[oc * g.patch + k]) : 0.0f;
  }
  fill_table(g, table);
  __syncthreads();
  const int first = (blockIdx.x * kThreads + threadIdx.x) * kPositions;
  if (first >= g.positions) return;
  float patch[kPositions][kPatch];
  int n, p;
  load_patch<S, kPatch>(x, g, table, first, patch[0], n, p);
  if constexpr (kPositions == 2) {  // first is even and the plane's size too: the same sample
    int n1, p1;
    load_patch<S, kPatch>(x, g, table, first + 1, patch[1], n1, p1);
  }
  S* out = y + int64_t(n) * g.oc * g.plane_out + p;
  for (int oc = 0; oc < g.oc; ++oc) {
    const float4* row = reinterpret_cast<const float4*>(kernel + oc * kPatch);
    float acc[kPositions];
#pragma unroll
    for (int j = 0; j < kPositions; ++j) acc[j] = bias ? bias[oc] : 0.0f;
#pragma unroll
    for (int q = 0; q < kPatch / 4; ++q) {
      const float4 v = row[q];  // the same address in every lane: a broadcast
#pragma unroll
      for (int j = 0; j < kPositions; ++j)
        acc[j] += v.x * patch[j][4 * q] + v.y * patch[j][4 * q + 1] +
                  v.z * patch[j][4 * q + 2] + v.w * patch[j][4 * q + 3];
    }
    store_pack<kPositions>(out, int64_t(oc) * g.plane_out, acc);
  }
}

// The patch size rounded up to the kernel's register array: 4, 12, 16, 28 or 32 (multiples of 4,
// for the kernel's float4 rows in shared memory; 28 for the common 3x3 over 3 colour channels).
int padded_patch(int patch) {
  return patch <= 4 ? 4 : patch <= 12 ? 12 : patch <= 16 ? 16 : patch <= 28 ? 28 : 32;
}

// padded_patch(patch) passed to f as a constant.
template <class F>
void with_patch(int patch, F&& f) {
  switch (padded_patch(patch)) {
    case 4:
      return f(std::integral_constant<int, 4>());
    case 12:
      return f(std::integral_constant<int, 12>());
    case 16:
      return f(std::integral_constant<int, 16>());
    case 28:
      return f(std::integral_constant<int, 28>());
    default:
      return f(std::integral_constant<int, 32>());
  }
}

}  // namespace

bool direct_conv_fits(const Conv2dShape& s) {
  const int64_t patch = s.patch_size();
  return s.in_channels >= 1 && s.in_channels <= 4 && patch <= kMaxPatch && s.out_channels >= 1 &&
         s.out_channels * padded_patch(int(patch)) <= kMaxKernelFloats && s.stride_h >= 1 &&
         s.stride_w >= 1 && s.out_height() >= 1 && s.out_width() >= 1 &&
         s.input_numel() < INT_MAX / 2 && s.output_numel() < INT_MAX / 2 &&
         s.height + 2 * s.pad_h < INT_MAX / 4 && s.width + 2 * s.pad_w < INT_MAX / 4;
}

void launch_direct_conv_forward(const KernelContext& ctx, const Conv2dShape& s, const void* x,
                                const void* w, const float* bias, void* y) {
  const Geometry g = geometry(s);
  if (g.positions == 0) return;
  with_float_type(s.dtype, [&](auto tag) {
    using S = decltype(tag);
    with_patch(g.patch, [&](auto patch) {
      constexpr int kPatch = decltype(patch)::value;
      const int bytes = g.oc * kPatch * int(sizeof(float));
      auto run = [&](auto positions) {
        constexpr int kPositions = decltype(positions)::value;
        constexpr auto kernel = direct_forward_kernel<S, kPatch, kPositions>;
        allow_dynamic_shared_memory<kernel>(bytes);
        const int64_t threads = (g.positions + kPositions - 1) / kPositions;
        launch(ctx, kernel, unsigned((threads + kThreads - 1) / kThreads), kThreads,
               size_t(bytes), static_cast<const S*>(x), static_cast<const S*>(w), bias,
               static_cast<S*>(y), g);
      };
      if (g.plane_out % 2 == 0 && pack_aligned(y, 2 * sizeof(S)))
        run(std::integral_constant<int, 2>());
      else
        run(std::integral_constant<int, 1>());
    });
  });
}

}  // namespace trident::cuda
