// Shared helpers of the CPU kernels: range splitting over the caller's oneTBB arena, and float
// sums accurate to about 1e-7 relative (float lanes per block, blocks added in double).
#pragma once
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <cstdint>

#include "trident/core/thread_annotations.h"

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

// Sum of n floats: 16 float lanes over blocks of 256 (vectorisable), each block added in double.
inline double sum_floats(const float* x, int64_t n) {
  constexpr int kLanes = 16;
  constexpr int64_t kBlock = 256;
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    const int64_t body = len / kLanes * kLanes;
    float lanes[kLanes] = {};
    for (int64_t i = 0; i < body; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lanes[l] += x[b + i + l];
    for (int64_t i = body; i < len; ++i) total += x[b + i];
    double block = 0.0;
    for (int l = 0; l < kLanes; ++l) block += lanes[l];
    total += block;
  }
  return total;
}

// Sum of (x_i - shift)^2 over n floats, blocked like sum_floats (float lanes, double blocks).
inline double sum_squares_about(const float* x, int64_t n, float shift) {
  constexpr int kLanes = 16;
  constexpr int64_t kBlock = 256;
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    const int64_t body = len / kLanes * kLanes;
    float lanes[kLanes] = {};
    for (int64_t i = 0; i < body; i += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const float d = x[b + i + l] - shift;
        lanes[l] += d * d;
      }
    for (int64_t i = body; i < len; ++i) {
      const double d = double(x[b + i]) - double(shift);
      total += d * d;
    }
    double block = 0.0;
    for (int l = 0; l < kLanes; ++l) block += lanes[l];
    total += block;
  }
  return total;
}

// sum g_i and sum g_i * (x_i - shift) over n, blocked like sum_floats.
inline void sum_products_about(const float* g, const float* x, int64_t n, float shift,
                               double& sum_g, double& sum_gx) {
  constexpr int kLanes = 16;
  constexpr int64_t kBlock = 256;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    const int64_t body = len / kLanes * kLanes;
    float lanes_g[kLanes] = {}, lanes_gx[kLanes] = {};
    for (int64_t i = 0; i < body; i += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        lanes_g[l] += g[b + i + l];
        lanes_gx[l] += g[b + i + l] * (x[b + i + l] - shift);
      }
    for (int64_t i = body; i < len; ++i) {
      sum_g += g[b + i];
      sum_gx += double(g[b + i]) * (double(x[b + i]) - double(shift));
    }
    double block_g = 0.0, block_gx = 0.0;
    for (int l = 0; l < kLanes; ++l) block_g += lanes_g[l], block_gx += lanes_gx[l];
    sum_g += block_g;
    sum_gx += block_gx;
  }
}

// Elements per task for memory-bound loops: ~128 KiB of floats, several microseconds of work.
constexpr int64_t kElementwiseGrain = 32768;

}  // namespace trident::cpu
