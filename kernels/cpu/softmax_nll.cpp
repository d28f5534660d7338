// CPU classification head: rows split over the arena when the matrix is large; every sum in
// double so that results sit within ~1e-7 relative of a float64 reference.
#include "trident/kernels/cpu/softmax_nll.h"

#include <cmath>
#include <string>

#include "trident/core/error.h"
#include "trident/kernels/cpu/parallel.h"

namespace trident::cpu {
namespace {

int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, kElementwiseGrain / 4 / std::max<int64_t>(cols, 1));
}

void check_labels(const int32_t* labels, int64_t rows, int64_t cols, const char* op) {
  for (int64_t r = 0; r < rows; ++r)
    if (labels[r] < 0 || labels[r] >= cols)
      throw ShapeError(std::string(op) + ": label " + std::to_string(labels[r]) + " in row " +
                       std::to_string(r) + " is outside [0, " + std::to_string(cols) +
                       "); labels must be class indices of the score matrix");
}

// -sum_c t[c] logp[c] of one row.
double row_nll(const float* logp, int32_t label, int64_t cols, double smoothing) {
  double loss = -(1.0 - smoothing) * double(logp[label]);
  if (smoothing > 0.0) loss -= smoothing * sum_floats(logp, cols) / double(cols);
  return loss;
}

void add_mean(float* loss, bool accumulate, double sum, int64_t rows) {
  const double mean = rows > 0 ? sum / double(rows) : 0.0;
  loss[0] = float((accumulate ? double(loss[0]) : 0.0) + mean);
}

}  // namespace

void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t cols) {
  if (cols <= 0) return;
  parallel_ranges(rows, row_grain(cols), [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      float max = xr[0];
      for (int64_t c = 1; c < cols; ++c) max = xr[c] > max ? xr[c] : max;
      double sum = 0.0;
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - max);
      const double lse = double(max) + std::log(sum);
      for (int64_t c = 0; c < cols; ++c) yr[c] = float(double(xr[c]) - lse);
    }
  });
}

void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols) {
  parallel_ranges(rows, row_grain(cols), [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* yr = y + r * cols;
      const float* dyr = dy + r * cols;
      float* dxr = dx + r * cols;
      const double total = sum_floats(dyr, cols);  // before any write: dx may alias dy
      for (int64_t c = 0; c < cols; ++c)
        dxr[c] = float(double(dyr[c]) - double(std::exp(yr[c])) * total);
    }
  });
}

void nll_loss_forward(const float* logp, const int32_t* labels, int64_t rows, int64_t cols,
                      float* loss, bool accumulate, float smoothing) {
  check_labels(labels, rows, cols, "nll_loss_forward");
  double sum = 0.0;
  for (int64_t r = 0; r < rows; ++r) sum += row_nll(logp + r * cols, labels[r], cols, smoothing);
  add_mean(loss, accumulate, sum, rows);
}

void nll_loss_backward(const int32_t* labels, int64_t rows, int64_t cols, float scale,
                       float* dlogp, float smoothing) {
  check_labels(labels, rows, cols, "nll_loss_backward");
  const float off = -scale * (smoothing / float(cols));
  const float on = off - scale * (1.0f - smoothing);
  parallel_ranges(rows, row_grain(cols), [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = dlogp + r * cols;
      for (int64_t c = 0; c < cols; ++c) row[c] = off;
      row[labels[r]] = on;
    }
  });
}

void log_softmax_nll(const float* x, const int32_t* labels, int64_t rows, int64_t cols,
                     float grad_scale, float smoothing, float* y, float* loss, bool accumulate,
                     float* dx) {
  check_labels(labels, rows, cols, "log_softmax_nll");
  log_softmax_forward(x, y, rows, cols);
  const float off = smoothing / float(cols), on = off + (1.0f - smoothing);
  parallel_ranges(rows, row_grain(cols), [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* yr = y + r * cols;
      float* dxr = dx + r * cols;
      for (int64_t c = 0; c < cols; ++c) dxr[c] = grad_scale * (std::exp(yr[c]) - off);
      dxr[labels[r]] = grad_scale * (std::exp(yr[labels[r]]) - on);
    }
  });
  double sum = 0.0;
  for (int64_t r = 0; r < rows; ++r) sum += row_nll(y + r * cols, labels[r], cols, smoothing);
  add_mean(loss, accumulate, sum, rows);
}

void mse_loss(const float* x, const int32_t* labels, int64_t rows, int64_t cols,
              float grad_scale, float* loss, bool accumulate, float* dx) {
  check_labels(labels, rows, cols, "mse_loss");
  double sum = 0.0;
  const float k = 2.0f * grad_scale / float(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const float d = xr[c] - (c == labels[r] ? 1.0f : 0.0f);
      sum += double(d) * double(d);
      if (dx) dx[r * cols + c] = k * d;
    }
  }
  add_mean(loss, accumulate, sum / double(cols), rows);
}

void count_correct(const float* scores, const int32_t* labels, int64_t rows, int64_t cols,
                   float* correct) {
  check_labels(labels, rows, cols, "count_correct");
  int64_t hits = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = scores + r * cols;
    int64_t best = 0;
    for (int64_t c = 1; c < cols; ++c)
      if (row[c] > row[best]) best = c;  // strict: the first maximal index wins
    hits += best == labels[r];
  }
  correct[0] += float(hits);
}

}  // namespace trident::cpu
