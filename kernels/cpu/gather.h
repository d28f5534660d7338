// CPU batch gathers by index table (raw rows, and image samples with normalisation and
// augmentation), and the per-step counters they read.
#pragma once
#include <cstddef>
#include <cstdint>

#include "trident/core/op_types.h"

namespace trident::cpu {

// dst[i, :] = src[table[position * rows + i], :] for i < rows, rows of row_bytes bytes. Throws
// ShapeError when the batch runs past the table (table_size entries) or an index is outside
// [0, src_rows), before copying anything.
void gather_rows(const void* src, int64_t src_rows, size_t row_bytes, const int32_t* table,
                 int64_t table_size, int64_t rows, uint32_t position, void* dst);

// The host view of SampleTransform: normalisation arrays as pointers (null: none).
struct SampleTransformHost {
  float scale = 1.0f;
  const float* mean = nullptr;
  const float* inv_std = nullptr;
  int64_t crop_padding = 0;
  bool horizontal_flip = false;
  uint64_t seed = 0;
  uint32_t stream = 0;
  int64_t sample_offset = 0;
};
// dst[i] (f32 [C, H, W]) = transform(src[table[position * rows + i]]) for i < rows, src samples
// u8 (src_is_u8) or f32; `step` is the optimizer step (the augmentation draws' counter).
void gather_samples(const void* src, bool src_is_u8, int64_t src_rows, int64_t channels,
                    int64_t height, int64_t width, const int32_t* table, int64_t table_size,
                    int64_t rows, uint32_t position, uint32_t step,
                    const SampleTransformHost& t, float* dst);
// The same into bfloat16 bits (the float value rounded once).
void gather_samples(const void* src, bool src_is_u8, int64_t src_rows, int64_t channels,
                    int64_t height, int64_t width, const int32_t* table, int64_t table_size,
                    int64_t rows, uint32_t position, uint32_t step,
                    const SampleTransformHost& t, uint16_t* dst);
// step_state[0] += 1, step_state[1] += 1.
void advance_step(uint32_t* step_state);

}  // namespace trident::cpu
