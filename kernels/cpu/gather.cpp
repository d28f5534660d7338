// CPU batch gathers: one memcpy (or one transformed copy) per row, rows split over the arena.
// Samples are written as float32 or bfloat16 (rounded once, storage.h).
#include "trident/kernels/cpu/gather.h"

#include <cstring>
#include <string>

#include "trident/core/error.h"
#include "trident/core/philox.h"
#include "trident/kernels/cpu/parallel.h"

namespace trident::cpu {
namespace {

// The batch's slice of the table, every index checked before anything is copied.
const int32_t* batch_indices(const char* op, const int32_t* table, int64_t table_size,
                             int64_t rows, uint32_t position, int64_t src_rows) {
  if ((int64_t(position) + 1) * rows > table_size)
    throw ShapeError(std::string(op) + ": batch position " + std::to_string(position) +
                     " runs past the end of the " + std::to_string(table_size) +
                     "-entry index table");
  const int32_t* indices = table + int64_t(position) * rows;
  for (int64_t i = 0; i < rows; ++i)
    if (indices[i] < 0 || indices[i] >= src_rows)
      throw ShapeError(std::string(op) + ": index table entry " + std::to_string(indices[i]) +
                       " at batch position " + std::to_string(position) + " is outside the " +
                       std::to_string(src_rows) + " rows of the source");
  return indices;
}

// One channel plane of a sample without crop or flip: a straight, vectorisable map.
template <class S, class X>
void normalise_plane(const S* src, int64_t n, float scale, float mean, float inv_std, X* out) {
  for (int64_t k = 0; k < n; ++k) store_value(out, k, (float(src[k]) * scale - mean) * inv_std);
}

template <class X>
void gather_samples_as(const void* src, bool src_is_u8, int64_t src_rows, int64_t channels,
                       int64_t height, int64_t width, const int32_t* table, int64_t table_size,
                       int64_t rows, uint32_t position, uint32_t step,
                       const SampleTransformHost& t, X* dst) {
  const int32_t* indices =
      batch_indices("gather_samples", table, table_size, rows, position, src_rows);
  const int64_t plane = height * width, sample = channels * plane;
  const uint32_t span = uint32_t(2 * t.crop_padding + 1);
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(sample, 1));
  parallel_ranges(rows, grain, [=](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      // The sample's draws: crop offsets in [0, 2 * padding] and the flip bit (SampleTransform).
      int64_t shift_h = 0, shift_w = 0;
      bool flip = false;
      if (t.crop_padding > 0 || t.horizontal_flip) {
        const uint64_t g = uint64_t(t.sample_offset + i);
        const Philox4 r = philox4x32_10(uint32_t(g), uint32_t(g >> 32), t.stream, step,
                                        uint32_t(t.seed), uint32_t(t.seed >> 32));
        shift_h = int64_t((uint64_t(r.v[0]) * span) >> 32) - t.crop_padding;
        shift_w = int64_t((uint64_t(r.v[1]) * span) >> 32) - t.crop_padding;
        flip = t.horizontal_flip && (r.v[2] >> 31) != 0;
      }
      const int64_t index = indices[i];
      X* out = dst + i * sample;
      for (int64_t c = 0; c < channels; ++c) {
        const float mean = t.mean ? t.mean[c] : 0.0f, inv_std = t.inv_std ? t.inv_std[c] : 1.0f;
        const int64_t base = index * sample + c * plane;
        if (shift_h == 0 && shift_w == 0 && !flip) {  // the same map as below, without bounds
          if (src_is_u8)
            normalise_plane(static_cast<const uint8_t*>(src) + base, plane, t.scale, mean,
                            inv_std, out + c * plane);
          else
            normalise_plane(static_cast<const float*>(src) + base, plane, t.scale, mean,
                            inv_std, out + c * plane);
          continue;
        }
        for (int64_t h = 0; h < height; ++h) {
          const int64_t sh = h + shift_h;
          for (int64_t w = 0; w < width; ++w) {
            const int64_t sw = (flip ? width - 1 - w : w) + shift_w;
            float raw = 0.0f;
            if (sh >= 0 && sh < height && sw >= 0 && sw < width) {
              const int64_t at = base + sh * width + sw;
              raw = src_is_u8 ? float(static_cast<const uint8_t*>(src)[at])
                              : static_cast<const float*>(src)[at];
            }
            store_value(out, c * plane + h * width + w, (raw * t.scale - mean) * inv_std);
          }
        }
      }
    }
  });
}

}  // namespace

void gather_rows(const void* src, int64_t src_rows, size_t row_bytes, const int32_t* table,
                 int64_t table_size, int64_t rows, uint32_t position, void* dst) {
  const int32_t* indices = batch_indices("gather_rows", table, table_size, rows, position, src_rows);
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / int64_t(row_bytes + 1));
  parallel_ranges(rows, grain, [=](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i)
      std::memcpy(static_cast<char*>(dst) + size_t(i) * row_bytes,
                  static_cast<const char*>(src) + size_t(indices[i]) * row_bytes, row_bytes);
  });
}

void gather_samples(const void* src, bool src_is_u8, int64_t src_rows, int64_t channels,
                    int64_t height, int64_t width, const int32_t* table, int64_t table_size,
                    int64_t rows, uint32_t position, uint32_t step,
                    const SampleTransformHost& t, float* dst) {
  gather_samples_as(src, src_is_u8, src_rows, channels, height, width, table, table_size, rows,
                    position, step, t, dst);
}

void gather_samples(const void* src, bool src_is_u8, int64_t src_rows, int64_t channels,
                    int64_t height, int64_t width, const int32_t* table, int64_t table_size,
                    int64_t rows, uint32_t position, uint32_t step,
                    const SampleTransformHost& t, uint16_t* dst) {
  gather_samples_as(src, src_is_u8, src_rows, channels, height, width, table, table_size, rows,
                    position, step, t, dst);
}

void advance_step(uint32_t* step_state) {
  step_state[0] += 1;
  step_state[1] += 1;
}

}  // namespace trident::cpu
