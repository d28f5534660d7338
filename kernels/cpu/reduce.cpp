// CPU column sums in double: split over columns when they are many, else over rows with
// per-piece partials combined in a fixed order (deterministic for a given thread count).
#include "trident/kernels/cpu/reduce.h"

#include <tbb/task_arena.h>

#include <vector>

#include "trident/kernels/cpu/parallel.h"

namespace trident::cpu {
namespace {

// acc[c] += dy[r, c0 + c] for r in [r0, r1), c < width.
void accumulate(const float* dy, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t width,
                double* acc) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = dy + r * cols + c0;
    for (int64_t c = 0; c < width; ++c) acc[c] += row[c];
  }
}

void store(const double* acc, int64_t width, float* db, float beta) {
  for (int64_t c = 0; c < width; ++c)
    db[c] = beta == 0.f ? float(acc[c]) : float(double(beta) * db[c] + acc[c]);
}

}  // namespace

void sum_rows(const float* dy, int64_t rows, int64_t cols, float* db, float beta) {
  if (cols <= 0) return;
  constexpr int64_t kColumnBlock = 256;  // 2 KiB of double accumulators stay in L1
  const int64_t work = rows * cols;
  const int threads = tbb::this_task_arena::max_concurrency();
  const int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
  auto column_blocks = [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = b * kColumnBlock, width = std::min(kColumnBlock, cols - c0);
      double acc[kColumnBlock] = {};
      accumulate(dy, cols, 0, rows, c0, width, acc);
      store(acc, width, db + c0, beta);
    }
  };
  if (work < kElementwiseGrain || threads == 1) return column_blocks(0, blocks);
  // Enough column blocks for every thread: each task reads its own stripe of all rows.
  if (blocks >= threads) return parallel_ranges(blocks, 1, column_blocks);
  // Few columns, many rows: each piece sums its rows into its own partial.
  const int pieces = int(std::min<int64_t>(threads, rows));
  std::vector<double> partial(size_t(pieces) * size_t(cols), 0.0);
  parallel_pieces(pieces, rows, [&](int t, int64_t r0, int64_t r1) {
    accumulate(dy, cols, r0, r1, 0, cols, partial.data() + size_t(t) * cols);
  });
  for (int t = 1; t < pieces; ++t)
    for (int64_t c = 0; c < cols; ++c) partial[c] += partial[size_t(t) * cols + c];
  store(partial.data(), cols, db, beta);
}

}  // namespace trident::cpu
