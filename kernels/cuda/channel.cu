// CUDA channel ops: the affine map as one elementwise pass (channel of element i by two fixed
// divisions), the sums through the per-channel reduction engine (channel_reduce.cuh).
#include "trident/kernels/cuda/channel.h"
#include "trident/kernels/cuda/channel_reduce.cuh"
#include "trident/kernels/cuda/float_types.cuh"

namespace trident::cuda {
namespace {

template <typename S, typename I>
__global__ void channel_affine_kernel(const S* x, const float* scale, const float* shift, S* y,
                                      I total, I channels, Divider<I> by_inner,
                                      Divider<I> by_channels) {
  wait_for_prior_grids();
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I q = by_inner.div(i);
    const I c = q - by_channels.div(q) * channels;
    y[i] = from_float<S>(to_float(x[i]) * (scale ? scale[c] : 1.f) + (shift ? shift[c] : 0.f));
  }
}

// out[c] = beta * out[c] + sum of x (or of x * y) over channel c.
template <typename S, typename I, bool kProduct>
struct ChannelSumOp {
  static constexpr int kWords = 1;
  static constexpr bool kApply = false;
  static constexpr int kCoefWords = 0;
  const S* x;
  const S* y;
  float* out;
  float beta;

  using Local = float;
  __device__ Local zero(I) const { return 0.f; }
  struct Value {
    float x, y;
  };
  __device__ Value load(I at) const { return {to_float(x[at]), kProduct ? to_float(y[at]) : 0.f}; }
  __device__ void add(Local& sum, const Value& v) const { sum += kProduct ? v.x * v.y : v.x; }
  __device__ void to_acc(const Local& sum, double* acc) const { acc[0] = sum; }
  __device__ static void merge(double* a, const double* b) { a[0] += b[0]; }
  __device__ void finish(I c, const double* acc, float*) const {
    out[c] = beta == 0.f ? float(acc[0]) : float(double(beta) * double(out[c]) + acc[0]);
  }
  __device__ void apply(I, const float*) const {}
};

template <typename I>
void sums_as(const KernelContext& ctx, DType type, const void* x, const void* y, float* out,
             int64_t outer, int64_t channels, int64_t inner, float beta) {
  with_float_type(type, [&](auto tag) {
    using S = decltype(tag);
    const S *xs = static_cast<const S*>(x), *ys = static_cast<const S*>(y);
    if (y)
      run_channel_reduce<I>(ctx, outer, channels, inner,
                            ChannelSumOp<S, I, true>{xs, ys, out, beta});
    else
      run_channel_reduce<I>(ctx, outer, channels, inner,
                            ChannelSumOp<S, I, false>{xs, ys, out, beta});
  });
}

}  // namespace

void launch_channel_affine(const KernelContext& ctx, DType type, const void* x,
                           const float* scale, const float* shift, void* y, int64_t outer,
                           int64_t channels, int64_t inner) {
  const int64_t total = outer * channels * inner;
  if (total <= 0) return;
  with_float_type(type, [&](auto tag) {
    using S = decltype(tag);
    const S* xs = static_cast<const S*>(x);
    S* ys = static_cast<S*>(y);
    if (fits_int32(total))
      launch(ctx, channel_affine_kernel<S, int32_t>, grid_for(total), kBlockThreads, 0, xs, scale,
             shift, ys, int32_t(total), int32_t(channels), Divider<int32_t>(inner),
             Divider<int32_t>(channels));
    else
      launch(ctx, channel_affine_kernel<S, int64_t>, grid_for(total), kBlockThreads, 0, xs, scale,
             shift, ys, total, channels, Divider<int64_t>(inner), Divider<int64_t>(channels));
  });
}

void launch_channel_sums(const KernelContext& ctx, DType type, const void* x, const void* y,
                         float* out, int64_t outer, int64_t channels, int64_t inner, float beta) {
  if (channels <= 0) return;
  if (fits_int32(outer * channels * inner) && fits_int32(channels))
    sums_as<int32_t>(ctx, type, x, y, out, outer, channels, inner, beta);
  else
    sums_as<int64_t>(ctx, type, x, y, out, outer, channels, inner, beta);
}

}  // namespace trident::cuda
