// Plain-loop reference ops: GEMM, reductions, elementwise, dropout, the classification head, data
// movement and the optimizers. Sums are kept in double; each output is rounded to float once.
#include "trident/kernels/reference/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "trident/core/philox.h"

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
      if (g.relu) c = std::max(c, 0.0);
      g.c[i * g.ldc + j] = static_cast<float>(c);
    }
  }
}

void sum_rows(const float* dy, int64_t rows, int64_t cols, float* db, float beta) {
  for (int64_t j = 0; j < cols; ++j) {
    double s = 0.0;
    for (int64_t r = 0; r < rows; ++r) s += dy[r * cols + j];
    if (beta != 0.0f) s += double(beta) * db[j];  // beta == 0: db is not read, as in GEMM
    db[j] = static_cast<float>(s);
  }
}

void axpby(const float* x, float* y, int64_t n, float a, float b) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(double(a) * x[i] + double(b) * y[i]);
}

void relu_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
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

void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, int32_t* argmax) {
  const int64_t OH = s.out_height(), OW = s.out_width();
  for (int64_t plane = 0; plane < s.batch * s.channels; ++plane) {
    const float* xp = x + plane * s.height * s.width;
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t best = (oh * s.stride) * s.width + ow * s.stride;
        for (int64_t kh = 0; kh < s.kernel; ++kh)
          for (int64_t kw = 0; kw < s.kernel; ++kw) {
            const int64_t at = (oh * s.stride + kh) * s.width + ow * s.stride + kw;
            if (xp[at] > xp[best]) best = at;  // strictly greater: the first maximum wins
          }
        const bool zeroed = s.relu && !(xp[best] > 0.0f);  // the fused ReLU
        y[(plane * OH + oh) * OW + ow] = zeroed ? 0.0f : xp[best];
        argmax[(plane * OH + oh) * OW + ow] = zeroed ? -1 : static_cast<int32_t>(best);
      }
    }
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
    for (int64_t c = 0; c < cols; ++c)
      dx[r * cols + c] =
          static_cast<float>(double(dy[r * cols + c]) - std::exp(double(y[r * cols + c])) * sum);
  }
}

void nll_loss_forward(const float* logp, const int32_t* labels, int64_t rows, int64_t cols,
                      float* loss, bool accumulate) {
  double sum = 0.0;
  for (int64_t r = 0; r < rows; ++r) sum -= logp[r * cols + labels[r]];
  const double mean = rows > 0 ? sum / double(rows) : 0.0;
  loss[0] = static_cast<float>((accumulate ? double(loss[0]) : 0.0) + mean);
}

void nll_loss_backward(const int32_t* labels, int64_t rows, int64_t cols, float scale,
                       float* dlogp) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dlogp[r * cols + c] = c == labels[r] ? -scale : 0.0f;
}

void log_softmax_nll(const float* x, const int32_t* labels, int64_t rows, int64_t cols,
                     float grad_scale, float* y, float* loss, bool accumulate, float* dx) {
  log_softmax_forward(x, y, rows, cols);
  nll_loss_forward(y, labels, rows, cols, loss, accumulate);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      dx[r * cols + c] = static_cast<float>(
          double(grad_scale) * (std::exp(double(y[r * cols + c])) - (c == labels[r] ? 1.0 : 0.0)));
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

void gather_rows(const void* src, size_t row_bytes, const int32_t* table, int64_t rows,
                 const uint32_t* step_state, void* dst) {
  const int64_t first = int64_t(step_state[0]) * rows;
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(static_cast<char*>(dst) + i * row_bytes,
                static_cast<const char*>(src) + size_t(table[first + i]) * row_bytes, row_bytes);
}

void advance_step(uint32_t* step_state) {
  step_state[0] += 1;
  step_state[1] += 1;
}

void sgd_update(float* params, const float* grads, float* momentum, int64_t n,
                const SgdParams& hp) {
  for (int64_t i = 0; i < n; ++i) {
    double d = double(grads[i]) * hp.grad_scale + double(hp.weight_decay) * params[i];
    if (hp.momentum != 0.0f) {
      const double buf = double(hp.momentum) * momentum[i] + d;
      momentum[i] = static_cast<float>(buf);
      d = hp.nesterov ? d + double(hp.momentum) * buf : buf;
    }
    params[i] = static_cast<float>(params[i] - double(hp.lr) * d);
  }
}

void adam_update(float* params, const float* grads, float* m, float* v, int64_t n,
                 const AdamParams& hp, const uint32_t* step_state) {
  const double t = double(step_state[1]) + 1.0;
  const double correction1 = 1.0 - std::pow(double(hp.beta1), t);
  const double correction2 = 1.0 - std::pow(double(hp.beta2), t);
  for (int64_t i = 0; i < n; ++i) {
    const double g = double(grads[i]) * hp.grad_scale + double(hp.weight_decay) * params[i];
    const double mi = double(hp.beta1) * m[i] + (1.0 - double(hp.beta1)) * g;
    const double vi = double(hp.beta2) * v[i] + (1.0 - double(hp.beta2)) * g * g;
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
    const double step = double(hp.lr) * (mi / correction1) / (std::sqrt(vi / correction2) + hp.eps);
    params[i] = static_cast<float>(params[i] - step);
  }
}

}  // namespace trident::reference
