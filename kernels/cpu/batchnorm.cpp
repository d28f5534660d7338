// CPU batch normalisation: one task per channel (the statistics of a channel are a strided walk
// over its outer * inner values). Sums run in 16 float lanes over blocks of 256 values, each
// block added in double (parallel.h), and the variance and the gradient's products are taken
// about the mean, so that no large sums cancel; the per-element maps are float. x, y, dy and dx
// are float32, or bfloat16 bits read into float and rounded once when stored (storage.h).
#include "trident/kernels/cpu/batchnorm.h"

#include <algorithm>
#include <cmath>

#include "trident/kernels/cpu/parallel.h"

namespace trident::cpu {
namespace {

// Runs f(o, run) over channel c's runs of `inner` contiguous values.
template <class F>
void for_runs(const BatchNormShape& s, int64_t c, const F& f) {
  for (int64_t o = 0; o < s.outer; ++o) f(o, (o * s.channels + c) * s.inner);
}

// The fused ReLU as UnaryOp::relu computes it: a NaN is kept.
inline float relu_kept_nan(float v) { return v < 0.0f ? 0.0f : v; }

// The normalisation of channel c as y = x * a + b in float: a = invstd * gamma, b = beta - mean *
// a (gamma, beta null: 1, 0). The forward's, and the backward's fused-ReLU mask.
struct Affine {
  float a, b;
};
inline Affine affine_of(double mean, double invstd, const float* gamma, const float* beta,
                        int64_t c) {
  const double a = invstd * (gamma ? double(gamma[c]) : 1.0);
  return {float(a), float((beta ? double(beta[c]) : 0.0) - mean * a)};
}

int64_t channel_grain(const BatchNormShape& s) {
  return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(s.outer * s.inner, 1));
}

// residual (batchnorm_add_forward), unless null: added before the ReLU.
template <class X>
void forward(const BatchNormShape& s, bool training, const X* x, const float* gamma,
             const float* beta, float* running_mean, float* running_var, X* y, float* save_mean,
             float* save_invstd, const X* residual) {
  const double n = double(s.outer * s.inner);
  parallel_ranges(s.channels, channel_grain(s), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double mean, invstd;
      if (training) {
        double sum = 0.0;
        for_runs(s, c, [&](int64_t, int64_t at) { sum += sum_values(x + at, s.inner); });
        mean = sum / n;
        // About the float mean; its rounding r adds n r^2, subtracted again.
        const float mean_f = float(mean);
        double squares = 0.0;
        for_runs(s, c, [&](int64_t, int64_t at) {
          squares += sum_squares_about(x + at, s.inner, mean_f);
        });
        const double r = double(mean_f) - mean;
        const double var = std::max(0.0, squares / n - r * r);
        invstd = 1.0 / std::sqrt(var + double(s.eps));
        save_mean[c] = float(mean);
        save_invstd[c] = float(invstd);
        const double m = double(s.momentum);
        running_mean[c] = float((1.0 - m) * running_mean[c] + m * mean);
        running_var[c] = float((1.0 - m) * running_var[c] + m * var * n / (n - 1.0));
      } else {
        mean = running_mean[c];
        invstd = 1.0 / std::sqrt(double(running_var[c]) + double(s.eps));
      }
      const Affine f = affine_of(mean, invstd, gamma, beta, c);
      const float af = f.a, bf = f.b;  // (structured bindings cannot be captured in C++17)
      for_runs(s, c, [&](int64_t, int64_t at) {
        if (residual && s.relu)
          for (int64_t i = 0; i < s.inner; ++i)
            store_value(y, at + i,
                        relu_kept_nan(load_value(x, at + i) * af + bf +
                                      load_value(residual, at + i)));
        else if (residual)
          for (int64_t i = 0; i < s.inner; ++i)
            store_value(y, at + i, load_value(x, at + i) * af + bf + load_value(residual, at + i));
        else if (s.relu)
          for (int64_t i = 0; i < s.inner; ++i)
            store_value(y, at + i, relu_kept_nan(load_value(x, at + i) * af + bf));
        else
          for (int64_t i = 0; i < s.inner; ++i)
            store_value(y, at + i, load_value(x, at + i) * af + bf);
      });
    }
  });
}

// s.relu: the gradient is dy where the forward's output was positive, recomputed from x as the
// forward computed it (x * a + b, from the saved float statistics where the forward had the
// double ones: the two may differ only where the output is within a rounding of 0).
template <class X>
void backward(const BatchNormShape& s, const X* x, const X* dy, const float* gamma,
              const float* save_mean, const float* save_invstd, X* dx, float* dgamma,
              float* dbeta, const float* beta) {
  const double n = double(s.outer * s.inner);
  parallel_ranges(s.channels, channel_grain(s), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double invstd = save_invstd[c];
      // The products are taken about the saved (float) mean, as the reference does.
      const float mean_f = save_mean[c];
      const Affine f = affine_of(mean_f, invstd, gamma, beta, c);
      const float af = f.a, bf = f.b;
      double sum_dy = 0.0, sum_dy_centered = 0.0;
      for_runs(s, c, [&](int64_t, int64_t at) {
        if (s.relu)
          sum_masked_products_about(dy + at, x + at, af, bf, s.inner, mean_f, sum_dy,
                                    sum_dy_centered);
        else
          sum_products_about(dy + at, x + at, s.inner, mean_f, sum_dy, sum_dy_centered);
      });
      const double sum_dy_xhat = sum_dy_centered * invstd;
      if (dgamma) dgamma[c] = float(sum_dy_xhat);
      if (dbeta) dbeta[c] = float(sum_dy);
      // dx = k * (dy - mean_dy - xhat * mean_dy_xhat), k = gamma * invstd, as
      // dx = k * dy - (k * mean_dy + (x - mean) * k * invstd * mean_dy_xhat) in float.
      const double k = (gamma ? double(gamma[c]) : 1.0) * invstd;
      const double mean_dy = sum_dy / n, mean_dy_xhat = sum_dy_xhat / n;
      const float kf = float(k), offset = float(k * mean_dy),
                  slope = float(k * invstd * mean_dy_xhat);
      for_runs(s, c, [&](int64_t, int64_t at) {
        if (s.relu) {  // dy loaded unconditionally, so that the loop vectorises
          for (int64_t i = 0; i < s.inner; ++i) {
            const float g = load_value(dy, at + i), xv = load_value(x, at + i);
            store_value(dx, at + i,
                        kf * (xv * af + bf > 0.0f ? g : 0.0f) - (offset + (xv - mean_f) * slope));
          }
        } else {
          for (int64_t i = 0; i < s.inner; ++i)
            store_value(dx, at + i,
                        kf * load_value(dy, at + i) -
                            (offset + (load_value(x, at + i) - mean_f) * slope));
        }
      });
    }
  });
}

}  // namespace

void batchnorm_forward(const BatchNormShape& s, bool training, const float* x, const float* gamma,
                       const float* beta, float* running_mean, float* running_var, float* y,
                       float* save_mean, float* save_invstd, const float* residual) {
  forward(s, training, x, gamma, beta, running_mean, running_var, y, save_mean, save_invstd,
          residual);
}
void batchnorm_forward(const BatchNormShape& s, bool training, const uint16_t* x,
                       const float* gamma, const float* beta, float* running_mean,
                       float* running_var, uint16_t* y, float* save_mean, float* save_invstd,
                       const uint16_t* residual) {
  forward(s, training, x, gamma, beta, running_mean, running_var, y, save_mean, save_invstd,
          residual);
}

void batchnorm_backward(const BatchNormShape& s, const float* x, const float* dy,
                        const float* gamma, const float* save_mean, const float* save_invstd,
                        float* dx, float* dgamma, float* dbeta, const float* beta) {
  backward(s, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta, beta);
}
void batchnorm_backward(const BatchNormShape& s, const uint16_t* x, const uint16_t* dy,
                        const float* gamma, const float* save_mean, const float* save_invstd,
                        uint16_t* dx, float* dgamma, float* dbeta, const float* beta) {
  backward(s, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta, beta);
}

}  // namespace trident::cpu
