// Shared helpers of the CPU kernels: range splitting over the caller's oneTBB arena, and float
// sums accurate to about 1e-7 relative (float lanes per block, blocks added in double).
#pragma once
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "trident/core/thread_annotations.h"
#include "trident/kernels/cpu/storage.h"

namespace trident::cpu {

// Runs body(begin, end) over [0, n) in pieces of about `grain` items; serial when n <= grain, so
// small tensors never pay for a task spawn (a few microseconds).
template <class Body>
void parallel_ranges(int64_t n, int64_t grain, const Body& body) {
  if (n <= 0) return;
  if (n <= grain) return body(int64_t(0), n);
  TsanForkJoin edges;
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, n, grain),
      edges.around([&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); }));
}

// Splits [0, n) into `parts` contiguous pieces, piece t to one task: body(t, begin, end). The
// split depends only on n and parts, so per-piece partial results combine deterministically.
template <class Body>
void parallel_pieces(int parts, int64_t n, const Body& body) {
  parts = int(std::max<int64_t>(1, std::min<int64_t>(parts, n)));
  auto piece = [&](int t) { body(t, n * t / parts, n * (t + 1) / parts); };
  if (parts == 1) return piece(0);
  TsanForkJoin edges;
  tbb::parallel_for(tbb::blocked_range<int>(0, parts, 1),
                    edges.around([&](const tbb::blocked_range<int>& r) {
                      for (int t = r.begin(); t != r.end(); ++t) piece(t);
                    }),
                    tbb::simple_partitioner());
}

// N sums over i < n of the terms term(i, t) writes into t[0..N): 16 float lanes over blocks of
// 256 (vectorisable), each block added in double to total; the tail of a block past its last
// whole 16 is evaluated and added in double. term is generic in t's element type (float in the
// lanes, double in the tail).
template <int N, class Term>
void blocked_sums(int64_t n, const Term& term, double (&total)[N]) {
  constexpr int kLanes = 16;
  constexpr int64_t kBlock = 256;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    const int64_t body = len / kLanes * kLanes;
    float lanes[N][kLanes] = {};
    for (int64_t i = 0; i < body; i += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        float t[N];
        term(b + i + l, t);
        for (int k = 0; k < N; ++k) lanes[k][l] += t[k];
      }
    for (int64_t i = body; i < len; ++i) {
      double t[N];
      term(b + i, t);
      for (int k = 0; k < N; ++k) total[k] += t[k];
    }
    for (int k = 0; k < N; ++k) {
      double block = 0.0;
      for (int l = 0; l < kLanes; ++l) block += lanes[k][l];
      total[k] += block;
    }
  }
}

// Sum of n values (float32, or bfloat16 bit patterns: storage.h).
template <class X>
double sum_values(const X* x, int64_t n) {
  double total[1] = {0.0};
  blocked_sums(n, [x](int64_t i, auto& t) { t[0] = load_value(x, i); }, total);
  return total[0];
}
inline double sum_floats(const float* x, int64_t n) { return sum_values(x, n); }

// Sum of (x_i - shift)^2 over n values.
template <class X>
double sum_squares_about(const X* x, int64_t n, float shift) {
  double total[1] = {0.0};
  blocked_sums(n, [x, shift](int64_t i, auto& t) {
    using T = std::remove_reference_t<decltype(t[0])>;
    const T d = T(load_value(x, i)) - T(shift);
    t[0] = d * d;
  }, total);
  return total[0];
}

// sum_g += sum g_i and sum_gx += sum g_i * (x_i - shift) over n.
template <class X>
void sum_products_about(const X* g, const X* x, int64_t n, float shift, double& sum_g,
                        double& sum_gx) {
  double total[2] = {sum_g, sum_gx};
  blocked_sums(n, [g, x, shift](int64_t i, auto& t) {
    using T = std::remove_reference_t<decltype(t[0])>;
    const float gi = load_value(g, i);
    t[0] = gi;
    t[1] = T(gi) * (T(load_value(x, i)) - T(shift));
  }, total);
  sum_g = total[0];
  sum_gx = total[1];
}

// The same with g_i taken as 0 where x_i * a + b <= 0 (a fused ReLU's output, recomputed from
// its input, masks its gradient).
template <class X>
void sum_masked_products_about(const X* g, const X* x, float a, float b, int64_t n, float shift,
                               double& sum_g, double& sum_gx) {
  double total[2] = {sum_g, sum_gx};
  blocked_sums(n, [g, x, a, b, shift](int64_t i, auto& t) {
    using T = std::remove_reference_t<decltype(t[0])>;
    // Loaded unconditionally: a conditional load keeps the loop from vectorising.
    const float gv = load_value(g, i);
    const float gi = load_value(x, i) * a + b > 0.0f ? gv : 0.0f;
    t[0] = gi;
    t[1] = T(gi) * (T(load_value(x, i)) - T(shift));
  }, total);
  sum_g = total[0];
  sum_gx = total[1];
}

// Elements per task for memory-bound loops: ~128 KiB of floats, several microseconds of work.
constexpr int64_t kElementwiseGrain = 32768;

}  // namespace trident::cpu
