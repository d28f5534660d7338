// CUDA batch gathers driven by the on-device step state: raw rows of any dtype, and image samples
// with normalisation and Philox crop / flip (the draws of kernels/cpu/gather.cpp bit for bit);
// and the step counter itself. A batch position past the table, or a table entry outside the
// source's rows, writes zeros for the row and raises the error flag.
#pragma once
#include <cstddef>
#include <cstdint>

#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// dst[i, :] = src[table[step_state[0] * rows + i], :] for i < rows, rows of row_bytes bytes.
void launch_gather_rows(const KernelContext& ctx, const void* src, int64_t src_rows,
                        size_t row_bytes, const int32_t* table, int64_t table_size, int64_t rows,
                        const uint32_t* step_state, void* dst);

// SampleTransform with device pointers (mean / inv_std null: no normalisation).
struct SampleTransformArgs {
  float scale = 1.0f;
  const float* mean = nullptr;
  const float* inv_std = nullptr;
  int64_t crop_padding = 0;
  bool horizontal_flip = false;
  uint64_t seed = 0;
  uint32_t stream = 0;
  int64_t sample_offset = 0;
};
// dst[i] ([C, H, W] of any float type, computed in float32 and rounded once) =
// transform(src[table[step_state[0] * rows + i]]) for i < rows; src is [src_rows, C, H, W] of u8
// (src_is_u8) or f32; the draws use step_state[1].
void launch_gather_samples(const KernelContext& ctx, const void* src, bool src_is_u8,
                           int64_t src_rows, int64_t channels, int64_t height, int64_t width,
                           const int32_t* table, int64_t table_size, int64_t rows,
                           const uint32_t* step_state, const SampleTransformArgs& t,
                           FloatData dst);
// step_state[0] += 1, step_state[1] += 1.
void launch_advance_step(const KernelContext& ctx, uint32_t* step_state);

}  // namespace trident::cuda
