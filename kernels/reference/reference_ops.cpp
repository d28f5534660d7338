// Plain-loop reference ops: GEMM, elementwise, dropout, per-channel ops, the classification
// head, data movement and the optimizers. Sums are kept in double; each output is rounded to
// float once.
#include "trident/kernels/reference/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "trident/core/philox.h"
#include "trident/core/unary_math.h"

namespace trident::reference {

void fill(float* dst, int64_t count, float value) {
  for (int64_t i = 0; i < count; ++i) dst[i] = value;
}

void gemm(const HostGemmArgs& g) {
  // op(A)(i, p) and op(B)(p, j) read straight from the stored layouts.
  auto a_at = [&](int64_t i, int64_t p) { return g.trans_a ? g.a[p * g.lda + i] : g.a[i * g.lda + p]; };
  auto b_at = [&](int64_t p, int64_t j) { return g.trans_b ? g.b[j * g.ldb + p] : g.b[p * g.ldb + j]; };
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double dot = 0.0;
      for (int64_t p = 0; p < g.k; ++p) dot += double(a_at(i, p)) * double(b_at(p, j));
      double c = double(g.alpha) * dot;
      if (g.beta != 0.0f) c += double(g.beta) * double(g.c[i * g.ldc + j]);  // beta == 0: C unread
      if (g.bias && g.bias_kind == BiasKind::per_column) c += g.bias[j];
      if (g.bias && g.bias_kind == BiasKind::per_row) c += g.bias[i];
      c = unary_apply<double>(g.activation, c, g.activation_alpha);
      g.c[i * g.ldc + j] = static_cast<float>(c);
    }
  }
}

void axpby(const float* x, float* y, int64_t n, float a, float b) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<float>(double(a) * x[i] + (b == 0.0f ? 0.0 : double(b) * y[i]));
}

void unary_forward(UnaryOp op, const float* x, float* y, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<float>(unary_apply<double>(op, double(x[i]), double(alpha)));
}

void unary_backward(UnaryOp op, const float* x, const float* y, const float* dy, float* dx,
                    int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i)
    dx[i] = static_cast<float>(unary_derivative<double>(op, x ? double(x[i]) : 0.0,
                                                        y ? double(y[i]) : 0.0, double(dy[i]),
                                                        double(alpha)));
}

bool dropout_keeps(int64_t i, int64_t group, int64_t group_offset, float p, uint64_t seed,
                   uint32_t stream, const uint32_t* step_state) {
  const uint64_t g = static_cast<uint64_t>(group_offset + i / group);
  return philox_uniform(seed, stream, step_state[1], g) >= p;
}

void dropout(const float* x, float* y, int64_t n, int64_t group, int64_t group_offset, float p,
             uint64_t seed, uint32_t stream, const uint32_t* step_state) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = dropout_keeps(i, group, group_offset, p, seed, stream, step_state)
               ? static_cast<float>(double(x[i]) / (1.0 - double(p)))
               : 0.0f;
}

void channel_affine(const float* x, const float* scale, const float* shift, float* y,
                    int64_t outer, int64_t channels, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = (o * channels + c) * inner + i;
        y[at] = static_cast<float>(double(x[at]) * (scale ? double(scale[c]) : 1.0) +
                                   (shift ? double(shift[c]) : 0.0));
      }
}

void channel_sums(const float* x, const float* y, float* out, int64_t outer, int64_t channels,
                  int64_t inner, float beta) {
  for (int64_t c = 0; c < channels; ++c) {
    double s = 0.0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = (o * channels + c) * inner + i;
        s += double(x[at]) * (y ? double(y[at]) : 1.0);
      }
    if (beta != 0.0f) s += double(beta) * out[c];  // beta == 0: out is not read
    out[c] = static_cast<float>(s);
  }
}

void sum_rows(const float* dy, int64_t rows, int64_t cols, float* db, float beta) {
  channel_sums(dy, nullptr, db, rows, cols, 1, beta);
}

// ---- classification head ---------------------------------------------------------------------

namespace {

double target(int64_t c, int32_t label, int64_t cols, double smoothing) {
  return (c == label ? 1.0 - smoothing : 0.0) + smoothing / double(cols);
}

void add_mean(float* loss, bool accumulate, double sum, int64_t rows) {
  const double mean = rows > 0 ? sum / double(rows) : 0.0;
  loss[0] = static_cast<float>((accumulate ? double(loss[0]) : 0.0) + mean);
}

}  // namespace

void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double max = xr[0];
    for (int64_t c = 1; c < cols; ++c) max = std::max(max, double(xr[c]));
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(double(xr[c]) - max);
    const double lse = max + std::log(sum);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>(double(xr[c]) - lse);
  }
}

void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += dy[r * cols + c];
    std::vector<double> row(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c)
      row[size_t(c)] = double(dy[r * cols + c]) - std::exp(double(y[r * cols + c])) * sum;
    for (int64_t c = 0; c < cols; ++c) dx[r * cols + c] = static_cast<float>(row[size_t(c)]);
  }
}

void nll_loss_forward(const float* logp, const int32_t* labels, int64_t rows, int64_t cols,
                      float* loss, bool accumulate, float label_smoothing) {
  double sum = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      sum -= target(c, labels[r], cols, label_smoothing) * double(logp[r * cols + c]);
  add_mean(loss, accumulate, sum, rows);
}

void nll_loss_backward(const int32_t* labels, int64_t rows, int64_t cols, float scale,
                       float* dlogp, float label_smoothing) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      dlogp[r * cols + c] =
          static_cast<float>(-double(scale) * target(c, labels[r], cols, label_smoothing));
}

void log_softmax_nll(const float* x, const int32_t* labels, int64_t rows, int64_t cols,
                     float grad_scale, float label_smoothing, float* y, float* loss,
                     bool accumulate, float* dx) {
  log_softmax_forward(x, y, rows, cols);
  nll_loss_forward(y, labels, rows, cols, loss, accumulate, label_smoothing);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      dx[r * cols + c] = static_cast<float>(
          double(grad_scale) * (std::exp(double(y[r * cols + c])) -
                                target(c, labels[r], cols, label_smoothing)));
}

void mse_loss(const float* x, const int32_t* labels, int64_t rows, int64_t cols,
              float grad_scale, float* loss, bool accumulate, float* dx) {
  double sum = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double d = double(x[r * cols + c]) - (c == labels[r] ? 1.0 : 0.0);
      sum += d * d;
      if (dx) dx[r * cols + c] = static_cast<float>(2.0 * double(grad_scale) * d / double(cols));
    }
  add_mean(loss, accumulate, sum / double(cols), rows);
}

void count_correct(const float* scores, const int32_t* labels, int64_t rows, int64_t cols,
                   float* correct) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = 0;
    for (int64_t c = 1; c < cols; ++c)
      if (scores[r * cols + c] > scores[r * cols + best]) best = c;  // the first maximum
    if (best == labels[r]) ++count;
  }
  correct[0] = static_cast<float>(double(correct[0]) + double(count));
}

// ---- data and optimizers ----------------------------------------------------------------------

void gather_rows(const void* src, size_t row_bytes, const int32_t* table, int64_t rows,
                 const uint32_t* step_state, void* dst) {
  const int64_t first = int64_t(step_state[0]) * rows;
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(static_cast<char*>(dst) + i * row_bytes,
                static_cast<const char*>(src) + size_t(table[first + i]) * row_bytes, row_bytes);
}

void gather_samples(const void* src, bool src_is_u8, int64_t channels, int64_t height,
                    int64_t width, const int32_t* table, int64_t rows,
                    const uint32_t* step_state, const HostSampleTransform& t, float* dst) {
  const int64_t first = int64_t(step_state[0]) * rows;
  const int64_t sample = channels * height * width;
  for (int64_t i = 0; i < rows; ++i) {
    // Crop offsets uniform in [-padding, padding] and the flip bit, from one Philox block.
    int64_t dh = 0, dw = 0;
    bool flip = false;
    if (t.crop_padding > 0 || t.horizontal_flip) {
      const uint64_t g = uint64_t(t.sample_offset + i);
      const Philox4 r = philox4x32_10(uint32_t(g), uint32_t(g >> 32), t.stream, step_state[1],
                                      uint32_t(t.seed), uint32_t(t.seed >> 32));
      const uint64_t span = uint64_t(2 * t.crop_padding + 1);
      dh = int64_t((uint64_t(r.v[0]) * span) >> 32) - t.crop_padding;
      dw = int64_t((uint64_t(r.v[1]) * span) >> 32) - t.crop_padding;
      flip = t.horizontal_flip && (r.v[2] >> 31) != 0;
    }
    const int64_t index = table[first + i];
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t h = 0; h < height; ++h)
        for (int64_t w = 0; w < width; ++w) {
          const int64_t sh = h + dh, sw = (flip ? width - 1 - w : w) + dw;
          double raw = 0.0;
          if (sh >= 0 && sh < height && sw >= 0 && sw < width) {
            const int64_t at = index * sample + (c * height + sh) * width + sw;
            raw = src_is_u8 ? double(static_cast<const uint8_t*>(src)[at])
                            : double(static_cast<const float*>(src)[at]);
          }
          const double mean = t.mean ? double(t.mean[c]) : 0.0;
          const double inv_std = t.inv_std ? double(t.inv_std[c]) : 1.0;
          dst[i * sample + (c * height + h) * width + w] =
              static_cast<float>((raw * double(t.scale) - mean) * inv_std);
        }
  }
}

void advance_step(uint32_t* step_state) {
  step_state[0] += 1;
  step_state[1] += 1;
}

namespace {

// The step's lr, momentum / beta1 and gradient scale once the control is applied.
struct Step {
  double lr, momentum, grad_scale;
  bool skip = false;  // an overflowed loss-scaled step: nothing changes
};
Step resolve(double lr, double momentum, double grad_scale, const HostUpdateControl& c,
             const uint32_t* step_state) {
  Step s{lr, momentum, grad_scale};
  if (c.schedule) {
    const int64_t row = std::min<int64_t>(int64_t(step_state[1]), c.schedule_rows - 1);
    s.lr = c.schedule[2 * row];
    s.momentum = c.schedule[2 * row + 1];
  }
  if (c.loss_scale) {
    s.skip = !std::isfinite(c.grad_sumsq[0]);
    grad_scale /= double(c.loss_scale[0]);
    s.grad_scale = grad_scale;
  }
  if (c.grad_sumsq && c.max_norm > 0.0f) {
    const double norm = grad_scale * std::sqrt(double(c.grad_sumsq[0]));
    s.grad_scale = grad_scale * std::min(1.0, double(c.max_norm) / (norm + 1e-6));
  }
  return s;
}

}  // namespace

void sgd_update(float* params, const float* grads, float* momentum, int64_t n,
                const SgdParams& hp, const HostUpdateControl& control,
                const uint32_t* step_state) {
  const Step s = resolve(hp.lr, hp.momentum, hp.grad_scale, control, step_state);
  if (s.skip) return;
  for (int64_t i = 0; i < n; ++i) {
    double d = double(grads[i]) * s.grad_scale + double(hp.weight_decay) * params[i];
    if (s.momentum != 0.0) {
      const double buf = s.momentum * momentum[i] + d;
      momentum[i] = static_cast<float>(buf);
      d = hp.nesterov ? d + s.momentum * buf : buf;
    }
    params[i] = static_cast<float>(params[i] - s.lr * d);
  }
}

void adam_update(float* params, const float* grads, float* m, float* v, int64_t n,
                 const AdamParams& hp, const uint32_t* step_state,
                 const HostUpdateControl& control) {
  const Step s = resolve(hp.lr, hp.beta1, hp.grad_scale, control, step_state);
  if (s.skip) return;
  const double t = double(step_state[1]) + 1.0;
  const double beta1 = s.momentum, beta2 = hp.beta2;
  const double correction1 = 1.0 - std::pow(beta1, t);
  const double correction2 = 1.0 - std::pow(beta2, t);
  const double l2 = hp.decoupled_weight_decay ? 0.0 : double(hp.weight_decay);
  for (int64_t i = 0; i < n; ++i) {
    double p = params[i];
    if (hp.decoupled_weight_decay) p *= 1.0 - s.lr * double(hp.weight_decay);
    const double g = double(grads[i]) * s.grad_scale + l2 * p;
    const double mi = beta1 * m[i] + (1.0 - beta1) * g;
    const double vi = beta2 * v[i] + (1.0 - beta2) * g * g;
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
    const double step = s.lr * (mi / correction1) / (std::sqrt(vi / correction2) + hp.eps);
    params[i] = static_cast<float>(p - step);
  }
}

void update_loss_scale(float* state, float grad_sumsq, const LossScaleParams& params) {
  if (!std::isfinite(grad_sumsq)) {
    state[0] = static_cast<float>(double(state[0]) * params.backoff);
    state[1] = 0.0f;
    return;
  }
  state[1] += 1.0f;
  if (state[1] >= float(params.interval)) {
    state[0] = static_cast<float>(double(state[0]) * params.growth);
    state[1] = 0.0f;
  }
}

}  // namespace trident::reference
