// CUDA batch gathers: rows copied in the widest word their size and alignment allow; samples one
// block each, the block's Philox draws made once by thread 0 (the counters and arithmetic of
// kernels/cpu/gather.cpp, so that crops and flips are bit-identical on every backend).
#include "trident/core/philox.h"
#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/gather.h"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

// Whether batch position step_state[0] has a full batch of `rows` entries in the table.
__device__ __forceinline__ bool batch_in_table(uint32_t position, int64_t rows,
                                               int64_t table_size) {
  return (int64_t(position) + 1) * rows <= table_size;
}

// dst[r, w] for r < rows, w < words (Word-sized pieces of a row).
template <typename I, typename Word>
__global__ void gather_rows_kernel(const Word* src, int64_t src_rows, I words,
                                   Divider<I> by_words, const int32_t* table, int64_t table_size,
                                   I rows, const uint32_t* step_state, Word* dst,
                                   int32_t* error) {
  wait_for_prior_grids();
  const uint32_t position = step_state[0];
  const bool batch_ok = batch_in_table(position, rows, table_size);
  const I total = rows * words;
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I r = by_words.div(i), w = i - r * words;
    if (!batch_ok) {
      dst[i] = Word{};
      if (i == 0) raise_error(error, DeviceErrorCode::table_position, position);
      continue;
    }
    const int32_t from = table[int64_t(position) * rows + r];
    if (from < 0 || from >= src_rows) {
      dst[i] = Word{};
      if (w == 0) raise_error(error, DeviceErrorCode::gather_index, from);
      continue;
    }
    dst[i] = src[int64_t(from) * words + w];
  }
}

template <typename I>
__global__ void gather_samples_kernel(const void* src, bool src_is_u8, int64_t src_rows,
                                      I plane, I sample, I width, Divider<I> by_plane,
                                      Divider<I> by_width, const int32_t* table,
                                      int64_t table_size, int64_t rows,
                                      const uint32_t* step_state, SampleTransformArgs t,
                                      AnyFloat dst, int32_t* error) {
  wait_for_prior_grids();
  __shared__ int64_t index, shift_h, shift_w;  // index -1: the sample is written as zeros
  __shared__ bool flip;
  const uint32_t position = step_state[0], step = step_state[1];
  const bool batch_ok = batch_in_table(position, rows, table_size);
  const I height = by_width.div(plane);
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    if (threadIdx.x == 0) {
      int64_t from = -1;
      if (!batch_ok) {
        if (i == 0) raise_error(error, DeviceErrorCode::table_position, position);
      } else {
        from = table[int64_t(position) * rows + i];
        if (from < 0 || from >= src_rows) {
          raise_error(error, DeviceErrorCode::gather_index, from);
          from = -1;
        }
      }
      index = from;
      // The sample's draws: crop offsets in [-padding, padding] and the flip bit.
      int64_t dh = 0, dw = 0;
      bool mirrored = false;
      if (t.crop_padding > 0 || t.horizontal_flip) {
        const uint64_t g = uint64_t(t.sample_offset + i);
        const Philox4 r = philox4x32_10(uint32_t(g), uint32_t(g >> 32), t.stream, step,
                                        uint32_t(t.seed), uint32_t(t.seed >> 32));
        const uint32_t span = uint32_t(2 * t.crop_padding + 1);
        dh = int64_t((uint64_t(r.v[0]) * span) >> 32) - t.crop_padding;
        dw = int64_t((uint64_t(r.v[1]) * span) >> 32) - t.crop_padding;
        mirrored = t.horizontal_flip && (r.v[2] >> 31) != 0;
      }
      shift_h = dh, shift_w = dw, flip = mirrored;
    }
    __syncthreads();
    const AnyFloat out = dst.offset(i * int64_t(sample));
    for (I e = I(threadIdx.x); e < sample; e += I(blockDim.x)) {
      if (index < 0) {
        out.store(e, 0.f);
        continue;
      }
      const I c = by_plane.div(e), rest = e - c * plane;
      const I h = by_width.div(rest), w = rest - h * width;
      const int64_t sh = int64_t(h) + shift_h, sw = int64_t(flip ? width - 1 - w : w) + shift_w;
      float raw = 0.f;  // pixels from the crop's zero padding
      if (sh >= 0 && sh < height && sw >= 0 && sw < width) {
        const int64_t at = index * sample + int64_t(c) * plane + sh * width + sw;
        raw = src_is_u8 ? float(static_cast<const uint8_t*>(src)[at])
                        : static_cast<const float*>(src)[at];
      }
      const float mean = t.mean ? t.mean[c] : 0.f, inv_std = t.inv_std ? t.inv_std[c] : 1.f;
      // (raw * scale - mean) * inv_std, each step rounded as the CPU rounds it (no FMA).
      out.store(e, __fmul_rn(__fsub_rn(__fmul_rn(raw, t.scale), mean), inv_std));
    }
    __syncthreads();  // the shared draws are read before the next sample's are written
  }
}

__global__ void advance_step_kernel(uint32_t* step_state) {
  wait_for_prior_grids();
  step_state[0] += 1;
  step_state[1] += 1;
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename Word>
void gather_as(const KernelContext& ctx, const void* src, int64_t src_rows, size_t row_bytes,
               const int32_t* table, int64_t table_size, int64_t rows, const uint32_t* step_state,
               void* dst) {
  const int64_t words = int64_t(row_bytes / sizeof(Word)), total = rows * words;
  if (fits_int32(total))
    launch(ctx, gather_rows_kernel<int32_t, Word>, grid_for(total), kBlockThreads, 0,
           static_cast<const Word*>(src), src_rows, int32_t(words), Divider<int32_t>(words),
           table, table_size, int32_t(rows), step_state, static_cast<Word*>(dst), ctx.error_flag);
  else
    launch(ctx, gather_rows_kernel<int64_t, Word>, grid_for(total), kBlockThreads, 0,
           static_cast<const Word*>(src), src_rows, words, Divider<int64_t>(words), table,
           table_size, rows, step_state, static_cast<Word*>(dst), ctx.error_flag);
}

}  // namespace

void launch_gather_rows(const KernelContext& ctx, const void* src, int64_t src_rows,
                        size_t row_bytes, const int32_t* table, int64_t table_size, int64_t rows,
                        const uint32_t* step_state, void* dst) {
  if (rows <= 0 || row_bytes == 0) return;
  // The widest word that the row size and both base addresses allow (images: 16-byte words).
  if (row_bytes % 16 == 0 && aligned(src, 16) && aligned(dst, 16))
    gather_as<uint4>(ctx, src, src_rows, row_bytes, table, table_size, rows, step_state, dst);
  else if (row_bytes % 4 == 0 && aligned(src, 4) && aligned(dst, 4))
    gather_as<uint32_t>(ctx, src, src_rows, row_bytes, table, table_size, rows, step_state, dst);
  else
    gather_as<uint8_t>(ctx, src, src_rows, row_bytes, table, table_size, rows, step_state, dst);
}

void launch_gather_samples(const KernelContext& ctx, const void* src, bool src_is_u8,
                           int64_t src_rows, int64_t channels, int64_t height, int64_t width,
                           const int32_t* table, int64_t table_size, int64_t rows,
                           const uint32_t* step_state, const SampleTransformArgs& t,
                           FloatData dst) {
  const int64_t plane = height * width, sample = channels * plane;
  if (rows <= 0 || sample <= 0) return;
  const unsigned blocks = unsigned(rows < kMaxBlocks ? rows : kMaxBlocks);
  if (fits_int32(sample))
    launch(ctx, gather_samples_kernel<int32_t>, blocks, kBlockThreads, 0, src, src_is_u8,
           src_rows, int32_t(plane), int32_t(sample), int32_t(width), Divider<int32_t>(plane),
           Divider<int32_t>(width), table, table_size, rows, step_state, t, dst, ctx.error_flag);
  else
    launch(ctx, gather_samples_kernel<int64_t>, blocks, kBlockThreads, 0, src, src_is_u8,
           src_rows, plane, sample, width, Divider<int64_t>(plane), Divider<int64_t>(width),
           table, table_size, rows, step_state, t, dst, ctx.error_flag);
}

void launch_advance_step(const KernelContext& ctx, uint32_t* step_state) {
  launch(ctx, advance_step_kernel, 1, 1, 0, step_state);
}

}  // namespace trident::cuda
