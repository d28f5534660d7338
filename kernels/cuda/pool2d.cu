// CUDA pooling: one thread per output in the forward passes (for global average pooling a thread
// a small plane staged in shared memory, or a warp a larger plane); the backward passes gather
// per input pixel over the windows that cover it (no atomics, deterministic, and the same order
// of additions as the CPU's scatter). Max pooling whose windows tile the plane (the usual 2x2 / 2)
// has kernels of its own: a thread per window both ways, in pairs of values where the windows are
// 2 wide.
#include <algorithm>

#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/launch.cuh"
#include "trident/kernels/cuda/pool2d.h"

namespace trident::cuda {
namespace {

template <typename I>
struct PoolDims {
  I h, w, kh, kw, sh, sw, ph, pw, oh, ow;
  Divider<I> by_w, by_h, by_ow, by_oh, by_sh, by_sw;
  bool relu;
};

template <typename I>
PoolDims<I> pool_dims(const Pool2dShape& s) {
  PoolDims<I> d;
  d.h = I(s.height), d.w = I(s.width), d.kh = I(s.kernel_h), d.kw = I(s.kernel_w);
  d.sh = I(s.stride_h), d.sw = I(s.stride_w), d.ph = I(s.pad_h), d.pw = I(s.pad_w);
  d.oh = I(s.out_height()), d.ow = I(s.out_width());
  d.by_w = Divider<I>(s.width), d.by_h = Divider<I>(s.height);
  d.by_ow = Divider<I>(s.out_width()), d.by_oh = Divider<I>(s.out_height());
  d.by_sh = Divider<I>(s.stride_h), d.by_sw = Divider<I>(s.stride_w);
  d.relu = s.relu;
  return d;
}

// The outputs whose windows cover input coordinate `at` along one axis: window o covers
// [o * stride - pad, o * stride - pad + kernel).
template <typename I>
struct Covering {
  I first, last;
};
template <typename I>
__device__ __forceinline__ Covering<I> covering(I at, I kernel, I pad, I outputs,
                                                const Divider<I>& by_stride) {
  const I shifted = at + pad;
  const I first = shifted >= kernel ? by_stride.div(shifted - kernel) + 1 : I(0);
  return {first, min(by_stride.div(shifted), outputs - 1)};
}

template <typename S, typename I>
__global__ void maxpool2d_forward_kernel(PoolDims<I> d, I total, const S* x, S* y,
                                         int32_t* argmax) {
  wait_for_prior_grids();
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I t = d.by_ow.div(i), ow = i - t * d.ow;
    const I plane = d.by_oh.div(t), oh = t - plane * d.oh;
    const S* xp = x + int64_t(plane) * d.h * d.w;
    const I h0 = oh * d.sh - d.ph, w0 = ow * d.sw - d.pw;
    const I h_lo = max(h0, I(0)), h_hi = min(h0 + d.kh, d.h);
    const I w_lo = max(w0, I(0)), w_hi = min(w0 + d.kw, d.w);
    I best = h_lo * d.w + w_lo;
    float best_value = to_float(xp[best]);
    for (I h = h_lo; h < h_hi; ++h)
      for (I w = w_lo; w < w_hi; ++w) {
        const float v = to_float(xp[h * d.w + w]);
        if (v > best_value || isnan(v)) best_value = v, best = h * d.w + w;  // the CPU's rule
      }
    const bool zeroed = d.relu && !(best_value > 0.f);  // the fused ReLU
    y[i] = from_float<S>(zeroed ? 0.f : best_value);  // exact: best_value is an S
    argmax[i] = zeroed ? -1 : static_cast<int32_t>(best);
  }
}

// dx[plane, h, w] = sum of dy over the covering windows (increasing output order) whose argmax
// is this pixel.
template <typename S, typename I>
__global__ void maxpool2d_backward_kernel(PoolDims<I> d, I total, const S* dy,
                                          const int32_t* argmax, S* dx) {
  wait_for_prior_grids();
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I t = d.by_w.div(i), w = i - t * d.w;
    const I plane = d.by_h.div(t), h = t - plane * d.h;
    const Covering<I> rows = covering(h, d.kh, d.ph, d.oh, d.by_sh);
    const Covering<I> cols = covering(w, d.kw, d.pw, d.ow, d.by_sw);
    const int32_t here = static_cast<int32_t>(h * d.w + w);
    const int64_t base = int64_t(plane) * d.oh * d.ow;
    float sum = 0.f;
    for (I oh = rows.first; oh <= rows.last; ++oh)
      for (I ow = cols.first; ow <= cols.last; ++ow) {
        const int64_t o = base + oh * d.ow + ow;
        if (argmax[o] == here) sum += to_float(dy[o]);
      }
    dx[i] = from_float<S>(sum);
  }
}

// Windows that tile the plane exactly (Pool2dShape::tiles_plane): a thread per window, which it
// alone reads (forward) and writes (backward), so the backward writes every value of the window,
// the argmax's gradient and zeros. K: the window's extent when 2 in both directions (each row of it
// one pair: the caller checked the alignment), else 0 (d's). The results are the generic kernels'
// bit for bit: the same order of comparisons, and 0 + dy as their sums have it (+0 for a -0
// gradient). The generic kernels spent their time on index arithmetic: bench/bench_models.h's
// ResNet-9 (batch 512, H200) took 0.64 ms a step in its pooling layers' backward and 0.20 forward
// with them, and its bf16 step went from 6.99 to 6.48 ms with these (fp32 25.24 -> 24.83, the seed
// CNN's bf16 0.146 -> 0.140).
template <int K, typename I>
struct TiledWindow {
  I kh, kw, plane, top, left;  // the window's rows [top, top + kh), columns [left, left + kw)
  __device__ TiledWindow(const PoolDims<I>& d, I i) {
    kh = K ? I(K) : d.kh, kw = K ? I(K) : d.kw;
    const I t = d.by_ow.div(i), ow = i - t * d.ow;
    plane = d.by_oh.div(t);
    top = (t - plane * d.oh) * kh, left = ow * kw;
  }
};

template <int K, typename S, typename I>
__global__ void maxpool2d_tiled_forward_kernel(PoolDims<I> d, I total, const S* x, S* y,
                                               int32_t* argmax) {
  wait_for_prior_grids();
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const TiledWindow<K, I> win(d, i);
    const S* xp = x + int64_t(win.plane) * d.h * d.w;
    I best = win.top * d.w + win.left;
    float best_value = to_float(xp[best]);
    auto consider = [&](float v, I at) {
      if (v > best_value || isnan(v)) best_value = v, best = at;  // the CPU's rule
    };
    if constexpr (K == 2) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const I at = (win.top + I(r)) * d.w + win.left;
        float v[2];
        load_pack<2>(xp, at, v);
        consider(v[0], at);
        consider(v[1], at + 1);
      }
    } else {
      for (I h = win.top; h < win.top + win.kh; ++h)
        for (I w = win.left; w < win.left + win.kw; ++w)
          consider(to_float(xp[h * d.w + w]), h * d.w + w);
    }
    const bool zeroed = d.relu && !(best_value > 0.f);  // the fused ReLU
    y[i] = from_float<S>(zeroed ? 0.f : best_value);
    argmax[i] = zeroed ? -1 : static_cast<int32_t>(best);
  }
}

// K == 2: a thread per window, writing its two rows as pairs. Otherwise a thread per input value
// (windows of other sizes): a thread per window wrote its KH x KW values one by one, each warp's
// store scattered over 32 windows (ResNet-9's final 4x4 pooling of 512 x 512 planes: 43.5 us,
// H200 bf16, ncu), where adjacent values' threads store side by side and the few threads of a
// window read its argmax and gradient from the same cache line.
template <int K, typename S, typename I>
__global__ void maxpool2d_tiled_backward_kernel(PoolDims<I> d, I total, const S* dy,
                                                const int32_t* argmax, S* dx) {
  wait_for_prior_grids();
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    if constexpr (K == 2) {
      const TiledWindow<K, I> win(d, i);
      const int32_t best = argmax[i];
      const float gradient = __fadd_rn(0.f, to_float(dy[i]));
      S* dxp = dx + int64_t(win.plane) * d.h * d.w;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const I at = (win.top + I(r)) * d.w + win.left;
        const float v[2] = {best == int32_t(at) ? gradient : 0.f,
                            best == int32_t(at + 1) ? gradient : 0.f};
        store_pack<2>(dxp, at, v);
      }
    } else {  // i is an input value: its window o, whose argmax it may be
      const I t = d.by_w.div(i), w = i - t * d.w;
      const I plane = d.by_h.div(t), h = t - plane * d.h;
      const int64_t o = (int64_t(plane) * d.oh + d.by_sh.div(h)) * d.ow + d.by_sw.div(w);
      const float gradient = to_float(dy[o]);  // loaded with argmax, not after it
      const bool best = argmax[o] == int32_t(h * d.w + w);
      dx[i] = from_float<S>(best ? __fadd_rn(0.f, gradient) : 0.f);
    }
  }
}

template <typename S, typename I>
__global__ void avgpool2d_forward_kernel(PoolDims<I> d, I total, const S* x, S* y) {
  wait_for_prior_grids();
  const float divisor = float(d.kh * d.kw);
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I t = d.by_ow.div(i), ow = i - t * d.ow;
    const I plane = d.by_oh.div(t), oh = t - plane * d.oh;
    const S* xp = x + int64_t(plane) * d.h * d.w;
    const I h0 = oh * d.sh - d.ph, w0 = ow * d.sw - d.pw;
    const I h_hi = min(h0 + d.kh, d.h), w_hi = min(w0 + d.kw, d.w);
    float sum = 0.f;
    for (I h = max(h0, I(0)); h < h_hi; ++h)
      for (I w = max(w0, I(0)); w < w_hi; ++w) sum += to_float(xp[h * d.w + w]);
    y[i] = from_float<S>(sum / divisor);
  }
}

// dx[plane, h, w] = sum over the covering windows of dy * (1 / (KH * KW)), each product rounded
// before the add, in increasing output order: the CPU's result bit for bit.
template <typename S, typename I>
__global__ void avgpool2d_backward_kernel(PoolDims<I> d, I total, const S* dy, S* dx,
                                          float inverse) {
  wait_for_prior_grids();
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I t = d.by_w.div(i), w = i - t * d.w;
    const I plane = d.by_h.div(t), h = t - plane * d.h;
    const Covering<I> rows = covering(h, d.kh, d.ph, d.oh, d.by_sh);
    const Covering<I> cols = covering(w, d.kw, d.pw, d.ow, d.by_sw);
    const S* dyp = dy + int64_t(plane) * d.oh * d.ow;
    float sum = 0.f;
    for (I oh = rows.first; oh <= rows.last; ++oh)
      for (I ow = cols.first; ow <= cols.last; ++ow)
        sum = __fadd_rn(sum, __fmul_rn(to_float(dyp[oh * d.ow + ow]), inverse));
    dx[i] = from_float<S>(sum);
  }
}

// Global average pooling (the window is the whole unpadded plane): a warp per plane.
template <typename S>
__global__ void global_avgpool_forward_kernel(const S* x, int64_t planes, int64_t plane_size,
                                              float divisor, S* y) {
  wait_for_prior_grids();
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t plane = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; plane < planes;
       plane += warps) {
    const S* xp = x + plane * plane_size;
    float sum = 0.f;
    for (int64_t j = lane; j < plane_size; j += 32) sum += to_float(xp[j]);
    sum = warp_sum(sum);
    if (lane == 0) y[plane] = from_float<S>(sum / divisor);
  }
}

// Small planes (kStagedPlanes of them within kStagedBytes): a block of kStagedPlanes threads
// copies its planes, one contiguous run, into shared memory (16 bytes a thread where x allows it),
// then thread t sums plane t in order. A warp a plane read the ResNet's 7x7 planes (49 values)
// two 2-byte values a lane and spent a 5-step shuffle tree on each: 7.1 us for 3.2 MB (H200).
constexpr int kStagedPlanes = 128;
constexpr int64_t kStagedBytes = 32 * 1024;

template <typename S>
__global__ void __launch_bounds__(kStagedPlanes)
    global_avgpool_staged_kernel(const S* x, int64_t planes, int plane_size, float divisor,
                                 bool aligned, S* y) {
  wait_for_prior_grids();
  extern __shared__ uint4 staged_chunks[];
  S* staged = reinterpret_cast<S*>(staged_chunks);
  const int64_t first = int64_t(blockIdx.x) * kStagedPlanes;
  const int count = int(planes - first < kStagedPlanes ? planes - first : kStagedPlanes);
  const int values = count * plane_size;
  const S* run = x + first * plane_size;  // 16-byte aligned where x is (128 planes a block)
  int copied = 0;
  if (aligned) {
    constexpr int kPerChunk = int(sizeof(uint4) / sizeof(S));
    const int chunks = values / kPerChunk;
    const uint4* from = reinterpret_cast<const uint4*>(run);
    for (int i = threadIdx.x; i < chunks; i += kStagedPlanes) staged_chunks[i] = from[i];
    copied = chunks * kPerChunk;
  }
  for (int i = copied + threadIdx.x; i < values; i += kStagedPlanes) staged[i] = run[i];
  __syncthreads();
  if (int(threadIdx.x) >= count) return;
  const S* plane = staged + threadIdx.x * plane_size;
  float sum = 0.f;
  for (int j = 0; j < plane_size; ++j) sum += to_float(plane[j]);
  y[first + threadIdx.x] = from_float<S>(sum / divisor);
}

// dx[i] = dy[plane of i] / plane_size, V adjacent values a thread (one pack: total a multiple of
// V, dx aligned). A thread a value, its plane from a division, took 6.6 us for the ResNet's
// 3.2 MB of 7x7 planes (H200).
template <typename S, typename I, int V>
__global__ void global_avgpool_backward_kernel(const S* dy, I units, I plane_size,
                                               Divider<I> by_plane_size, float inverse, S* dx) {
  wait_for_prior_grids();
  for (I k = first_index<I>(); k < units; k += grid_step<I>()) {
    const I at = k * I(V);
    I plane = by_plane_size.div(at), next = (plane + 1) * plane_size;
    float g = __fmul_rn(to_float(dy[plane]), inverse);
    float out[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      if (at + I(e) == next) {  // the pack runs into the next plane (or more, for tiny planes)
        ++plane, next += plane_size;
        g = __fmul_rn(to_float(dy[plane]), inverse);
      }
      out[e] = g;
    }
    store_pack<V>(dx, at, out);
  }
}

bool global_window(const Pool2dShape& s) {
  return s.kernel_h == s.height && s.kernel_w == s.width && s.pad_h == 0 && s.pad_w == 0;
}

// 1 / (KH * KW) rounded once, as the CPU computes it.
float inverse_window(const Pool2dShape& s) {
  return float(1.0 / double(s.kernel_h * s.kernel_w));
}

// The tiled kernels' K for `s`, where `data` is the tensor they access in pairs: 2 for 2x2
// windows on pair-aligned data, else 0.
template <typename S>
int tile_pairs(const Pool2dShape& s, const void* data) {
  return s.kernel_h == 2 && s.kernel_w == 2 && pack_aligned(data, 2 * sizeof(S)) ? 2 : 0;
}

// kernel<2> or kernel<0> as `pairs` says, over `total` threads (int32 or int64 indices as fits).
#define TRIDENT_POOL_TILED(kernel, pairs, total, ...)                                           \
  do {                                                                                          \
    if (fits(s) && (pairs) == 2)                                                                \
      launch(ctx, kernel<2, S, int32_t>, grid_for(total), kBlockThreads, 0,                     \
             pool_dims<int32_t>(s), int32_t(total), __VA_ARGS__);                               \
    else if (fits(s))                                                                           \
      launch(ctx, kernel<0, S, int32_t>, grid_for(total), kBlockThreads, 0,                     \
             pool_dims<int32_t>(s), int32_t(total), __VA_ARGS__);                               \
    else                                                                                        \
      launch(ctx, kernel<0, S, int64_t>, grid_for(total), kBlockThreads, 0,                     \
             pool_dims<int64_t>(s), int64_t(total), __VA_ARGS__);                               \
  } while (0)

// Whether the int32 kernels hold every index, and every coordinate sum (h + pad, o * stride).
bool fits(const Pool2dShape& s) {
  return fits_int32(std::max(s.input_numel(), s.output_numel())) &&
         fits_int32(s.height + s.width + 2 * (s.pad_h + s.pad_w) + s.kernel_h + s.kernel_w +
                    s.stride_h + s.stride_w);
}

}  // namespace

// The launch in braces with S the storage type of `type` (variadic: the launches hold commas).
#define TRIDENT_POOL_TYPED(type, ...)  \
  with_float_type(type, [&](auto tag) { \
    using S = decltype(tag);            \
    __VA_ARGS__                         \
  })

void launch_maxpool2d_forward(const KernelContext& ctx, DType type, const Pool2dShape& s,
                              const void* x, void* y, int32_t* argmax) {
  const int64_t total = s.output_numel();
  if (total <= 0) return;
  TRIDENT_POOL_TYPED(type, {
    const S* xs = static_cast<const S*>(x);
    S* ys = static_cast<S*>(y);
    if (s.tiles_plane())
      TRIDENT_POOL_TILED(maxpool2d_tiled_forward_kernel, tile_pairs<S>(s, xs), total, xs, ys,
                         argmax);
    else if (fits(s))
      launch(ctx, maxpool2d_forward_kernel<S, int32_t>, grid_for(total), kBlockThreads, 0,
             pool_dims<int32_t>(s), int32_t(total), xs, ys, argmax);
    else
      launch(ctx, maxpool2d_forward_kernel<S, int64_t>, grid_for(total), kBlockThreads, 0,
             pool_dims<int64_t>(s), total, xs, ys, argmax);
  });
}

void launch_maxpool2d_backward(const KernelContext& ctx, DType type, const Pool2dShape& s,
                               const void* dy, const int32_t* argmax, void* dx) {
  const int64_t total = s.input_numel();
  if (total <= 0) return;
  TRIDENT_POOL_TYPED(type, {
    const S* dys = static_cast<const S*>(dy);
    S* dxs = static_cast<S*>(dx);
    if (s.tiles_plane() && tile_pairs<S>(s, dxs) == 2)  // a thread per window
      TRIDENT_POOL_TILED(maxpool2d_tiled_backward_kernel, 2, s.output_numel(), dys, argmax, dxs);
    else if (s.tiles_plane())  // a thread per input value
      TRIDENT_POOL_TILED(maxpool2d_tiled_backward_kernel, 0, total, dys, argmax, dxs);
    else if (fits(s))
      launch(ctx, maxpool2d_backward_kernel<S, int32_t>, grid_for(total), kBlockThreads, 0,
             pool_dims<int32_t>(s), int32_t(total), dys, argmax, dxs);
    else
      launch(ctx, maxpool2d_backward_kernel<S, int64_t>, grid_for(total), kBlockThreads, 0,
             pool_dims<int64_t>(s), total, dys, argmax, dxs);
  });
}

void launch_avgpool2d_forward(const KernelContext& ctx, DType type, const Pool2dShape& s,
                              const void* x, void* y) {
  const int64_t total = s.output_numel();
  if (total <= 0) return;
  TRIDENT_POOL_TYPED(type, {
    const S* xs = static_cast<const S*>(x);
    S* ys = static_cast<S*>(y);
    const int64_t planes = s.batch * s.channels, plane_size = s.height * s.width;
    const int64_t staged_bytes = kStagedPlanes * plane_size * int64_t(sizeof(S));
    if (global_window(s) && staged_bytes <= kStagedBytes) {
      launch(ctx, global_avgpool_staged_kernel<S>,
             unsigned((planes + kStagedPlanes - 1) / kStagedPlanes), kStagedPlanes,
             size_t(staged_bytes), xs, planes, int(plane_size), float(s.kernel_h * s.kernel_w),
             pack_aligned(xs, 16), ys);
    } else if (global_window(s)) {
      launch(ctx, global_avgpool_forward_kernel<S>, grid_for(planes * 32), kBlockThreads, 0, xs,
             planes, plane_size, float(s.kernel_h * s.kernel_w), ys);
    } else if (fits(s)) {
      launch(ctx, avgpool2d_forward_kernel<S, int32_t>, grid_for(total), kBlockThreads, 0,
             pool_dims<int32_t>(s), int32_t(total), xs, ys);
    } else {
      launch(ctx, avgpool2d_forward_kernel<S, int64_t>, grid_for(total), kBlockThreads, 0,
             pool_dims<int64_t>(s), total, xs, ys);
    }
  });
}

void launch_avgpool2d_backward(const KernelContext& ctx, DType type, const Pool2dShape& s,
                               const void* dy, void* dx) {
  const int64_t total = s.input_numel();
  if (total <= 0) return;
  const float inverse = inverse_window(s);
  const int64_t plane_size = s.height * s.width;
  TRIDENT_POOL_TYPED(type, {
    const S* dys = static_cast<const S*>(dy);
    S* dxs = static_cast<S*>(dx);
    const unsigned grid = grid_for(total);
    if (global_window(s)) {
      int pack = 16 / int(sizeof(S));
      while (pack > 1 && (total % pack != 0 || !pack_aligned(dxs, size_t(pack) * sizeof(S))))
        pack /= 2;
      with_pack_width<int(sizeof(S))>(pack, [&](auto width) {
        constexpr int V = decltype(width)::value;
        auto run = [&](auto index) {
          using I = decltype(index);
          launch(ctx, global_avgpool_backward_kernel<S, I, V>, grid_for(total / V),
                 kBlockThreads, 0, dys, I(total / V), I(plane_size), Divider<I>(plane_size),
                 inverse, dxs);
        };
        if (fits(s))
          run(int32_t());
        else
          run(int64_t());
      });
    } else if (fits(s))
      launch(ctx, avgpool2d_backward_kernel<S, int32_t>, grid, kBlockThreads, 0,
             pool_dims<int32_t>(s), int32_t(total), dys, dxs, inverse);
    else
      launch(ctx, avgpool2d_backward_kernel<S, int64_t>, grid, kBlockThreads, 0,
             pool_dims<int64_t>(s), total, dys, dxs, inverse);
  });
}

#undef TRIDENT_POOL_TYPED
#undef TRIDENT_POOL_TILED

}  // namespace trident::cuda
