// CPU channel ops: the affine map split over rows of `inner` elements; the sums split over
// channels when they are many, else over the outer dimension with per-piece partials.
#include "trident/kernels/cpu/channel.h"

#include <tbb/task_arena.h>

#include <vector>

#include "trident/kernels/cpu/parallel.h"

namespace trident::cpu {
namespace {

// acc[c - c0] += sum over o in [o0, o1) and the inner run of x (* y), channels [c0, c1).
void accumulate(const float* x, const float* y, int64_t channels, int64_t inner, int64_t o0,
                int64_t o1, int64_t c0, int64_t c1, double* acc) {
  for (int64_t o = o0; o < o1; ++o) {
    const int64_t base = o * channels * inner;
    if (inner == 1) {  // rows of a matrix: channels are columns, contiguous
      const float* xr = x + base;
      if (y) {
        const float* yr = y + base;
        for (int64_t c = c0; c < c1; ++c) acc[c - c0] += double(xr[c]) * double(yr[c]);
      } else {
        for (int64_t c = c0; c < c1; ++c) acc[c - c0] += xr[c];
      }
      continue;
    }
    for (int64_t c = c0; c < c1; ++c) {
      const float* xr = x + base + c * inner;
      if (y) {
        const float* yr = y + base + c * inner;
        double run = 0.0;
        for (int64_t i = 0; i < inner; ++i) run += double(xr[i]) * double(yr[i]);
        acc[c - c0] += run;
      } else {
        acc[c - c0] += sum_floats(xr, inner);
      }
    }
  }
}

void store(const double* acc, int64_t count, float* out, float beta) {
  for (int64_t c = 0; c < count; ++c)
    out[c] = beta == 0.f ? float(acc[c]) : float(double(beta) * out[c] + acc[c]);
}

}  // namespace

void channel_affine(const float* x, const float* scale, const float* shift, float* y,
                    int64_t outer, int64_t channels, int64_t inner) {
  const int64_t rows = outer * channels;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1));
  parallel_ranges(rows, grain, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r % channels;
      const float a = scale ? scale[c] : 1.0f, b = shift ? shift[c] : 0.0f;
      const float* xr = x + r * inner;
      float* yr = y + r * inner;
      for (int64_t i = 0; i < inner; ++i) yr[i] = xr[i] * a + b;
    }
  });
}

void channel_sums(const float* x, const float* y, float* out, int64_t outer, int64_t channels,
                  int64_t inner, float beta) {
  constexpr int64_t kChannelBlock = 256;  // 2 KiB of double accumulators stay in L1
  const int64_t work = outer * channels * inner;
  const int threads = tbb::this_task_arena::max_concurrency();
  const int64_t blocks = (channels + kChannelBlock - 1) / kChannelBlock;
  auto channel_blocks = [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = b * kChannelBlock, c1 = std::min(channels, c0 + kChannelBlock);
      double acc[kChannelBlock] = {};
      accumulate(x, y, channels, inner, 0, outer, c0, c1, acc);
      store(acc, c1 - c0, out + c0, beta);
    }
  };
  if (work < kElementwiseGrain || threads == 1) return channel_blocks(0, blocks);
  if (blocks >= threads) return parallel_ranges(blocks, 1, channel_blocks);
  if (outer < 2 * threads && channels >= threads) {  // few rows: one task per channel
    return parallel_ranges(channels, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double acc = 0.0;
        accumulate(x, y, channels, inner, 0, outer, c, c + 1, &acc);
        store(&acc, 1, out + c, beta);
      }
    });
  }
  // Few channels, many rows (or one long run): pieces of the outer dimension, or of the inner
  // run when there is a single row, each summing into its own partial.
  const int pieces = threads;
  std::vector<double> partial(size_t(pieces) * size_t(channels), 0.0);
  if (outer == 1) {
    parallel_pieces(pieces, inner, [&](int t, int64_t i0, int64_t i1) {
      for (int64_t c = 0; c < channels; ++c) {
        const float* xr = x + c * inner + i0;
        const float* yr = y ? y + c * inner + i0 : nullptr;
        double run = 0.0;
        if (yr)
          for (int64_t i = 0; i < i1 - i0; ++i) run += double(xr[i]) * double(yr[i]);
        else
          run = sum_floats(xr, i1 - i0);
        partial[size_t(t) * channels + c] = run;
      }
    });
  } else {
    parallel_pieces(pieces, outer, [&](int t, int64_t o0, int64_t o1) {
      accumulate(x, y, channels, inner, o0, o1, 0, channels, partial.data() + size_t(t) * channels);
    });
  }
  for (int t = 1; t < pieces; ++t)
    for (int64_t c = 0; c < channels; ++c) partial[c] += partial[size_t(t) * channels + c];
  store(partial.data(), channels, out, beta);
}

}  // namespace trident::cpu
