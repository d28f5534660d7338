// CUDA batch normalisation through the per-channel reduction engine (channel_reduce.cuh): each
// pass is one reduction over the channel followed by an elementwise pass that uses its result
// (fused into the same launch when a block owns a whole channel). Training statistics come from
// sums shifted by a value near the channel's mean (no E[x^2] - E[x]^2 cancellation; see
// BatchNormStatsOp), merged in double.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "trident/kernels/cuda/batchnorm.h"
#include "trident/kernels/cuda/channel_reduce.cuh"
#include "trident/kernels/cuda/float_types.cuh"

namespace trident::cuda {
namespace {

// Sum of a[0..V) as a tree (V a power of two): log2(V) dependent adds, not V.
template <int V>
__device__ __forceinline__ float tree_sum(float (&a)[V]) {
  static_assert((V & (V - 1)) == 0, "a power of two");
#pragma unroll
  for (int width = V; width > 1; width /= 2)
#pragma unroll
    for (int e = 0; e < width / 2; ++e) a[e] = a[2 * e] + a[2 * e + 1];
  return a[0];
}

// Training forward: statistics of channel c, then y = (x - mean) * (invstd * gamma) + beta.
// Shifted sums: the threads of channel c sum d = x - K and d^2 in float, K (the shift) the mean of
// the channel's first few values, the same in every block; the merges add (n, sum d, sum d^2) in
// double; mean = K + sum d / n and the squared deviations sum d^2 - (sum d)^2 / n. The subtraction
// loses little while K lies within a few standard deviations of the mean (the relative error of
// the squared deviations grows as 1 + ((K - mean) / sd)^2, from a thread's float sums of at most
// 128 values), and no step divides: Welford's updates (a division a group of values, each group
// waiting on the one before) had ResNet-9's statistics read at 1.5 TB/s where the gradient's
// plain sums read 3 TB/s (H200, ncu), and its double merges (a division each) were most of the
// small layers' instructions.
template <typename S, typename I>
struct BatchNormStatsOp {
  static constexpr int kWords = 4;  // count, sum of d, sum of d^2, and the shift K
  static constexpr bool kApply = true;
  static constexpr int kCoefWords = 3;  // mean, scale, shift
  static constexpr int kShiftValues = 8;
  const S* x;
  const float* gamma;
  const float* beta;
  float* running_mean;
  float* running_var;
  S* y;
  float* save_mean;
  float* save_invstd;
  double count;  // values per channel (outer * inner), more than 1
  double eps, momentum;
  bool relu;  // y = max(normalised, 0)
  // The shift's values: x[c * inner + e * shift_step] for e < shift_values (the first values of
  // the channel's first plane, or of its first samples where planes are shorter than 8).
  I inner, shift_step;
  int shift_values;
  const S* residual;  // batchnorm_add_forward: y = normalised + residual (then the ReLU); or null

  struct Local {
    float n, shift, sum, squares;
  };
  // Read before any block stores y (which may be x): only at the start of the reduction.
  __device__ Local zero(I c) const {
    float k = 0.f;
#pragma unroll
    for (int e = 0; e < kShiftValues; ++e)
      if (e < shift_values) k += to_float(x[c * inner + I(e) * shift_step]);
    return {0.f, k / float(shift_values), 0.f, 0.f};
  }
  using Value = float;
  __device__ Value load(I at) const { return to_float(x[at]); }
  static constexpr int kPackElementBytes = sizeof(S);
  bool packs_aligned(int bytes) const {
    return pack_aligned(x, size_t(bytes)) && pack_aligned(y, size_t(bytes)) &&
           (!residual || pack_aligned(residual, size_t(bytes)));
  }
  template <int V>
  __device__ void load_packed(I at, Value (&v)[V]) const {
    load_pack<V>(x, at, v);
  }
  __device__ void add(Local& l, float v) const {
    const float d = v - l.shift;
    l.n += 1.f;
    l.sum += d;
    l.squares = fmaf(d, d, l.squares);
  }
  template <int V>
  __device__ void add_group(Local& l, const float (&v)[V]) const {
    float d[V], d2[V];
#pragma unroll
    for (int e = 0; e < V; ++e) d[e] = v[e] - l.shift, d2[e] = d[e] * d[e];
    l.n += float(V);
    l.sum += tree_sum<V>(d);
    l.squares += tree_sum<V>(d2);
  }
  __device__ void to_acc(const Local& l, double* acc) const {
    acc[0] = l.n, acc[1] = l.sum, acc[2] = l.squares, acc[3] = l.shift;
  }
  // Every accumulator of a channel has the same shift; all zeros (no values) takes b's.
  __device__ static void merge(double* a, const double* b) {
    if (a[0] == 0.0) a[3] = b[3];
    a[0] += b[0], a[1] += b[1], a[2] += b[2];
  }
  // The batch mean and biased variance from the merged sums.
  __device__ void statistics(const double* acc, double& mean, double& var) const {
    const double mean_d = acc[1] / count;
    mean = acc[3] + mean_d;
    var = fmax(acc[2] - acc[1] * mean_d, 0.0) / count;
  }
  // The channel's parameters, loaded before the reduction by the thread that finishes it (see
  // channel_reduce_apply_kernel); the running statistics only where it writes them.
  struct Params {
    float gamma, beta, running_mean, running_var;
  };
  __device__ Params params(I c, bool finishing) const {
    return {gamma ? gamma[c] : 1.f, beta ? beta[c] : 0.f, finishing ? running_mean[c] : 0.f,
            finishing ? running_var[c] : 0.f};
  }
  __device__ void coefficients(const double* acc, const Params& p, float* coef) const {
    double mean, var;
    statistics(acc, mean, var);
    coef[0] = float(mean);
    coef[1] = float(double(p.gamma) / sqrt(var + eps));
    coef[2] = p.beta;
  }
  __device__ void finish(I c, const double* acc, const Params& p, float* coef) const {
    coefficients(acc, p, coef);
    double mean, var;
    statistics(acc, mean, var);
    save_mean[c] = float(mean);
    save_invstd[c] = float(1.0 / sqrt(var + eps));
    running_mean[c] = float((1.0 - momentum) * double(p.running_mean) + momentum * mean);
    running_var[c] = float((1.0 - momentum) * double(p.running_var) +
                           momentum * var * count / (count - 1.0));
  }
  // finish loads every parameter before it stores anything: a load after a store that may alias
  // it waits for it, and each round trip here holds the whole block.
  __device__ void finish(I c, const double* acc, float* coef) const {
    finish(c, acc, params(c, true), coef);
  }
  // The second pass reads the residual too, beside x (channel_reduce_steps.cuh's load_values).
  struct ApplyValue {
    float x, residual;
  };
  template <int V>
  __device__ void load_apply(I at, ApplyValue (&v)[V]) const {
    float xs[V], rs[V];
    load_pack<V>(x, at, xs);
    if (residual) {
      load_pack<V>(residual, at, rs);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) rs[e] = 0.f;
    }
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = {xs[e], rs[e]};
  }
  __device__ float normalise(const ApplyValue& v, const float* coef) const {
    float out = (v.x - coef[0]) * coef[1] + coef[2];
    if (residual) out += v.residual;  // not + 0 without one: -0 would become +0
    return relu && out < 0.f ? 0.f : out;  // a NaN stays NaN, as UnaryOp::relu keeps it
  }
  template <int V>
  __device__ void store_values(I at, const ApplyValue (&v)[V], const float* coef) const {
    float out[V];
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = normalise(v[e], coef);
    if constexpr (V > 1)
      store_pack<V>(y, at, out);
    else
      y[at] = from_float<S>(out[0]);
  }
};

static_assert(adds_groups<BatchNormStatsOp<Bf16, int32_t>>::value, "statistics add groups");

// Backward: sum(dy) and sum(dy * (x - mean)) of channel c, then
// dx = k * (dy - mean(dy) - (x - mean) * invstd * mean(dy * xhat)), k = gamma * invstd.
// kRelu: dy is first taken through the fused ReLU: 0 where the forward's output, recomputed
// from x as the forward computed it ((x - mean) * k + beta), is not > 0. Reading the output
// instead cost a third more traffic (the ResNet's 28x28 layer: 25 against 19 us, H200, ncu).
template <typename S, typename I, bool kRelu>
struct BatchNormGradOp {
  static constexpr int kWords = 2;
  static constexpr bool kApply = true;
  // mean, k, mean(dy), invstd * mean(dy * xhat), and for kRelu beta (k is the mask's scale too)
  static constexpr int kCoefWords = kRelu ? 5 : 4;
  const S* x;
  const S* dy;
  const float* gamma;
  const float* save_mean;
  const float* save_invstd;
  S* dx;
  float* dgamma;
  float* dbeta;
  double count;
  const float* beta;  // read only when kRelu (null: 0)

  // k as coefficients_of rounds it: from the saved float invstd, where the forward had the
  // double, so the mask may differ from the forward's where its output is within a rounding
  // of 0 (where the gradient of the ReLU is moot).
  __device__ static float scale_of(double invstd, float g) { return float(double(g) * invstd); }
  __device__ float grad(float d, float x_value, float mean, float scale, float shift) const {
    return !kRelu || (x_value - mean) * scale + shift > 0.f ? d : 0.f;
  }

  struct Local {
    float sum_dy, sum_dy_centred, mean, scale, shift;
  };
  __device__ Local zero(I c) const {
    if constexpr (kRelu)
      return {0.f, 0.f, save_mean[c], scale_of(save_invstd[c], gamma ? gamma[c] : 1.f),
              beta ? beta[c] : 0.f};
    else
      return {0.f, 0.f, save_mean[c], 0.f, 0.f};
  }
  struct Value {
    float dy, x;
  };
  __device__ Value load(I at) const { return {to_float(dy[at]), to_float(x[at])}; }
  static constexpr int kPackElementBytes = sizeof(S);
  bool packs_aligned(int bytes) const {
    return pack_aligned(x, size_t(bytes)) && pack_aligned(dy, size_t(bytes)) &&
           (!dx || pack_aligned(dx, size_t(bytes)));
  }
  template <int V>
  __device__ void load_packed(I at, Value (&v)[V]) const {
    float d[V], xs[V];
    load_pack<V>(dy, at, d);
    load_pack<V>(x, at, xs);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = {d[e], xs[e]};
  }
  __device__ void add(Local& l, const Value& v) const {
    const float d = grad(v.dy, v.x, l.mean, l.scale, l.shift);
    l.sum_dy += d;
    l.sum_dy_centred += d * (v.x - l.mean);
  }
  __device__ void to_acc(const Local& l, double* acc) const {
    acc[0] = l.sum_dy, acc[1] = l.sum_dy_centred;
  }
  __device__ static void merge(double* a, const double* b) { a[0] += b[0], a[1] += b[1]; }
  // The channel's parameters (see BatchNormStatsOp::params).
  struct Params {
    float invstd, mean, gamma, shift;
  };
  __device__ Params params(I c, bool) const {
    return {save_invstd[c], save_mean[c], gamma ? gamma[c] : 1.f, kRelu && beta ? beta[c] : 0.f};
  }
  __device__ void finish(I c, const double* acc, const Params& p, float* coef) const {
    if (dgamma) dgamma[c] = float(acc[1] * double(p.invstd));
    if (dbeta) dbeta[c] = float(acc[0]);
    coefficients(acc, p, coef);
  }
  // Every parameter is loaded before anything is stored (as in BatchNormStatsOp).
  __device__ void finish(I c, const double* acc, float* coef) const {
    finish(c, acc, params(c, true), coef);
  }
  __device__ void coefficients(const double* acc, const Params& p, float* coef) const {
    const double invstd = p.invstd;
    const double sum_dy = acc[0], sum_dy_xhat = acc[1] * invstd;
    const double n = count > 0.0 ? count : 1.0;
    coef[0] = p.mean;
    coef[1] = scale_of(invstd, p.gamma);
    coef[2] = float(sum_dy / n);
    coef[3] = float(invstd * sum_dy_xhat / n);
    if constexpr (kRelu) coef[kCoefWords - 1] = p.shift;
  }
  template <int V>
  __device__ void store_values(I at, const Value (&v)[V], const float* coef) const {
    float d[V];
#pragma unroll
    for (int e = 0; e < V; ++e)
      d[e] = coef[1] * (grad(v[e].dy, v[e].x, coef[0], coef[1], coef[kCoefWords - 1]) -
                        coef[2] - (v[e].x - coef[0]) * coef[3]);
    if constexpr (V > 1)
      store_pack<V>(dx, at, d);
    else
      dx[at] = from_float<S>(d[0]);
  }
};

// Evaluation: y = (x - running_mean) * gamma / sqrt(running_var + eps) + beta.
template <typename S, typename I>
__global__ void batchnorm_eval_kernel(const S* x, const float* gamma, const float* beta,
                                      const float* running_mean, const float* running_var,
                                      S* y, I total, I channels, Divider<I> by_inner,
                                      Divider<I> by_channels, float eps, bool relu,
                                      const S* residual) {
  wait_for_prior_grids();
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I q = by_inner.div(i);
    const I c = q - by_channels.div(q) * channels;
    const float scale = (gamma ? gamma[c] : 1.f) / sqrtf(running_var[c] + eps);
    float out = (to_float(x[i]) - running_mean[c]) * scale + (beta ? beta[c] : 0.f);
    if (residual) out += to_float(residual[i]);
    y[i] = from_float<S>(relu && out < 0.f ? 0.f : out);
  }
}

template <typename S, typename I>
void forward_as(const KernelContext& ctx, const BatchNormShape& s, bool training, const S* x,
                const float* gamma, const float* beta, float* running_mean, float* running_var,
                S* y, float* save_mean, float* save_invstd, const S* residual) {
  if (training) {
    constexpr int kShift = BatchNormStatsOp<S, I>::kShiftValues;
    const bool in_plane = s.inner >= kShift || s.outer == 1;
    const BatchNormStatsOp<S, I> op{x,
                                    gamma,
                                    beta,
                                    running_mean,
                                    running_var,
                                    y,
                                    save_mean,
                                    save_invstd,
                                    double(s.outer * s.inner),
                                    double(s.eps),
                                    double(s.momentum),
                                    s.relu,
                                    I(s.inner),
                                    in_plane ? I(1) : I(s.channels * s.inner),
                                    int(std::min<int64_t>(kShift, in_plane ? s.inner : s.outer)),
                                    residual};
    run_channel_reduce<I>(ctx, s.outer, s.channels, s.inner, op);
    return;
  }
  const int64_t total = s.numel();
  launch(ctx, batchnorm_eval_kernel<S, I>, grid_for(total), kBlockThreads, 0, x, gamma, beta,
         running_mean, running_var, y, I(total), I(s.channels), Divider<I>(s.inner),
         Divider<I>(s.channels), s.eps, s.relu, residual);
}

}  // namespace

void launch_batchnorm_forward(const KernelContext& ctx, DType type, const BatchNormShape& s,
                              bool training, const void* x, const float* gamma,
                              const float* beta, float* running_mean, float* running_var,
                              void* y, float* save_mean, float* save_invstd,
                              const void* residual) {
  if (s.numel() <= 0) return;
  with_float_type(type, [&](auto tag) {
    using S = decltype(tag);
    const S* xs = static_cast<const S*>(x);
    const S* rs = static_cast<const S*>(residual);
    S* ys = static_cast<S*>(y);
    if (fits_int32(s.numel()))
      forward_as<S, int32_t>(ctx, s, training, xs, gamma, beta, running_mean, running_var, ys,
                             save_mean, save_invstd, rs);
    else
      forward_as<S, int64_t>(ctx, s, training, xs, gamma, beta, running_mean, running_var, ys,
                             save_mean, save_invstd, rs);
  });
}

void launch_batchnorm_backward(const KernelContext& ctx, DType type, const BatchNormShape& s,
                               const void* x, const void* dy, const float* gamma,
                               const float* save_mean, const float* save_invstd, void* dx,
                               float* dgamma, float* dbeta, const float* beta) {
  const double count = double(s.outer * s.inner);
  with_float_type(type, [&](auto tag) {
    using S = decltype(tag);
    const S *xs = static_cast<const S*>(x), *dys = static_cast<const S*>(dy);
    S* dxs = static_cast<S*>(dx);
    auto run = [&](auto index, auto relu) {
      using I = decltype(index);
      run_channel_reduce<I>(ctx, s.outer, s.channels, s.inner,
                            BatchNormGradOp<S, I, decltype(relu)::value>{
                                xs, dys, gamma, save_mean, save_invstd, dxs, dgamma, dbeta,
                                count, beta});
    };
    const bool narrow = fits_int32(s.numel()) && fits_int32(s.channels);
    if (narrow && s.relu)
      run(int32_t(), std::true_type());
    else if (narrow)
      run(int32_t(), std::false_type());
    else if (s.relu)
      run(int64_t(), std::true_type());
    else
      run(int64_t(), std::false_type());
  });
}

}  // namespace trident::cuda
