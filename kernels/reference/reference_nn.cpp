// Reference pooling (max and average, any window, stride and padding) and batch normalisation,
// as direct loops over the definitions, sums in double.
#include <cmath>
#include <vector>

#include "trident/kernels/reference/reference_ops.h"

namespace trident::reference {
namespace {

// Calls visit(plane, o, h, w) for every valid input position (h, w) of output o's window.
template <typename Visit>
void for_each_window(const Pool2dShape& s, Visit visit) {
  const int64_t OH = s.out_height(), OW = s.out_width();
  for (int64_t plane = 0; plane < s.batch * s.channels; ++plane)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t kh = 0; kh < s.kernel_h; ++kh)
          for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
            const int64_t h = oh * s.stride_h - s.pad_h + kh, w = ow * s.stride_w - s.pad_w + kw;
            if (h < 0 || h >= s.height || w < 0 || w >= s.width) continue;
            visit(plane, oh * OW + ow, h, w);
          }
}

}  // namespace

void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, int32_t* argmax) {
  const int64_t outputs = s.out_height() * s.out_width(), plane_size = s.height * s.width;
  std::vector<int64_t> best(static_cast<size_t>(s.batch * s.channels * outputs), -1);
  for_each_window(s, [&](int64_t plane, int64_t o, int64_t h, int64_t w) {
    int64_t& b = best[size_t(plane * outputs + o)];
    const float* xp = x + plane * plane_size;
    // Row-major window order: strictly greater replaces (the first maximum wins), NaN always.
    if (b < 0 || xp[h * s.width + w] > xp[b] || std::isnan(xp[h * s.width + w]))
      b = h * s.width + w;
  });
  for (int64_t plane = 0; plane < s.batch * s.channels; ++plane)
    for (int64_t o = 0; o < outputs; ++o) {
      const int64_t b = best[size_t(plane * outputs + o)];
      const float v = x[plane * plane_size + b];
      const bool zeroed = s.relu && !(v > 0.0f);  // the fused ReLU
      y[plane * outputs + o] = zeroed ? 0.0f : v;
      argmax[plane * outputs + o] = zeroed ? -1 : static_cast<int32_t>(b);
    }
}

void maxpool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax, float* dx) {
  const int64_t OH = s.out_height(), OW = s.out_width(), plane_size = s.height * s.width;
  std::vector<double> acc(static_cast<size_t>(s.batch * s.channels * plane_size), 0.0);
  for (int64_t plane = 0; plane < s.batch * s.channels; ++plane)
    for (int64_t o = 0; o < OH * OW; ++o)
      if (argmax[plane * OH * OW + o] >= 0)
        acc[plane * plane_size + argmax[plane * OH * OW + o]] += dy[plane * OH * OW + o];
  for (size_t i = 0; i < acc.size(); ++i) dx[i] = static_cast<float>(acc[i]);
}

void avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) {
  const int64_t outputs = s.out_height() * s.out_width(), plane_size = s.height * s.width;
  std::vector<double> acc(static_cast<size_t>(s.batch * s.channels * outputs), 0.0);
  for_each_window(s, [&](int64_t plane, int64_t o, int64_t h, int64_t w) {
    acc[size_t(plane * outputs + o)] += x[plane * plane_size + h * s.width + w];
  });
  const double divisor = double(s.kernel_h * s.kernel_w);
  for (size_t i = 0; i < acc.size(); ++i) y[i] = static_cast<float>(acc[i] / divisor);
}

void avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) {
  const int64_t outputs = s.out_height() * s.out_width(), plane_size = s.height * s.width;
  std::vector<double> acc(static_cast<size_t>(s.batch * s.channels * plane_size), 0.0);
  const double divisor = double(s.kernel_h * s.kernel_w);
  for_each_window(s, [&](int64_t plane, int64_t o, int64_t h, int64_t w) {
    acc[size_t(plane * plane_size + h * s.width + w)] += dy[plane * outputs + o] / divisor;
  });
  for (size_t i = 0; i < acc.size(); ++i) dx[i] = static_cast<float>(acc[i]);
}

void batchnorm_forward(const BatchNormShape& s, bool training, const float* x, const float* gamma,
                       const float* beta, float* running_mean, float* running_var, float* y,
                       float* save_mean, float* save_invstd) {
  const double n = double(s.outer * s.inner);
  for (int64_t c = 0; c < s.channels; ++c) {
    auto at = [&](int64_t o, int64_t i) { return (o * s.channels + c) * s.inner + i; };
    double mean, invstd;
    if (training) {
      double sum = 0.0;
      for (int64_t o = 0; o < s.outer; ++o)
        for (int64_t i = 0; i < s.inner; ++i) sum += x[at(o, i)];
      mean = sum / n;
      double squares = 0.0;
      for (int64_t o = 0; o < s.outer; ++o)
        for (int64_t i = 0; i < s.inner; ++i) squares += (x[at(o, i)] - mean) * (x[at(o, i)] - mean);
      const double var = squares / n;
      invstd = 1.0 / std::sqrt(var + double(s.eps));
      save_mean[c] = static_cast<float>(mean);
      save_invstd[c] = static_cast<float>(invstd);
      const double m = s.momentum;
      running_mean[c] = static_cast<float>((1.0 - m) * running_mean[c] + m * mean);
      running_var[c] = static_cast<float>((1.0 - m) * running_var[c] + m * var * n / (n - 1.0));
    } else {
      mean = running_mean[c];
      invstd = 1.0 / std::sqrt(double(running_var[c]) + double(s.eps));
    }
    const double g = gamma ? double(gamma[c]) : 1.0, b = beta ? double(beta[c]) : 0.0;
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t i = 0; i < s.inner; ++i) {
        const double v = (x[at(o, i)] - mean) * invstd * g + b;
        y[at(o, i)] = static_cast<float>(s.relu && v < 0.0 ? 0.0 : v);  // NaN kept
      }
  }
}

void batchnorm_backward(const BatchNormShape& s, const float* x, const float* dy,
                        const float* gamma, const float* save_mean, const float* save_invstd,
                        float* dx, float* dgamma, float* dbeta, const float* beta) {
  const double n = double(s.outer * s.inner);
  for (int64_t c = 0; c < s.channels; ++c) {
    auto at = [&](int64_t o, int64_t i) { return (o * s.channels + c) * s.inner + i; };
    const double mean = save_mean[c], invstd = save_invstd[c];
    const double g = gamma ? double(gamma[c]) : 1.0, b = beta ? double(beta[c]) : 0.0;
    // The gradient after the fused ReLU: dy where the forward's output was positive.
    auto grad = [&](int64_t at) {
      return !s.relu || (x[at] - mean) * invstd * g + b > 0.0 ? double(dy[at]) : 0.0;
    };
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t i = 0; i < s.inner; ++i) {
        sum_dy += grad(at(o, i));
        sum_dy_xhat += grad(at(o, i)) * (x[at(o, i)] - mean) * invstd;
      }
    if (dgamma) dgamma[c] = static_cast<float>(sum_dy_xhat);
    if (dbeta) dbeta[c] = static_cast<float>(sum_dy);
    const double k = (gamma ? double(gamma[c]) : 1.0) * invstd;
    std::vector<double> out(static_cast<size_t>(s.outer * s.inner));
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t i = 0; i < s.inner; ++i) {
        const double xhat = (x[at(o, i)] - mean) * invstd;
        out[size_t(o * s.inner + i)] = k * (grad(at(o, i)) - sum_dy / n - xhat * sum_dy_xhat / n);
      }
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t i = 0; i < s.inner; ++i) dx[at(o, i)] = static_cast<float>(out[size_t(o * s.inner + i)]);
  }
}

}  // namespace trident::reference
