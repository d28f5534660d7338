// CUDA weight-gradient reduction of the batched convolution: column sums of dw_part viewed as
// [samples, OC * columns] in a fixed order. A block is kLanes sample lanes x (32 or more)
// columns, kLanes the smallest power of two (up to 32) that leaves each thread at most
// kSamplesPerLane samples: a lane adds its samples in order, a fixed tree joins the lanes. One
// sample (the folded weight gradient, one product) is then a plain copy, one thread a column:
// with 32 lanes always, the ResNet's 7x7 128->128 layer spent 23 us of an H100 bf16 step here.
// And the flipped kernel of a stride-1 data gradient (one thread an element).
#include "trident/kernels/cuda/conv2d.h"

#include <type_traits>

#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

constexpr int kSamplesPerLane = 8;

template <int kLanes>
constexpr int columns_per_block() {
  return kLanes >= 8 ? 32 : 256 / kLanes;
}

template <int kLanes>
__global__ void __launch_bounds__(columns_per_block<kLanes>() * kLanes)
    conv_grad_reduce_kernel(const float* dw_part, int64_t samples, int64_t columns_total,
                            int64_t columns, int64_t patch, int64_t out_channels, bool transposed,
                            int64_t tap_major_channels, float* dw, float* db, bool accumulate) {
  wait_for_prior_grids();
  constexpr int kColumns = columns_per_block<kLanes>();
  __shared__ float partial[kLanes][kColumns + 1];
  const int tx = threadIdx.x % kColumns, ty = threadIdx.x / kColumns;
  const int64_t column = int64_t(blockIdx.x) * kColumns + tx;
  float acc = 0.f;
  if (column < columns_total) {
#pragma unroll 4
    for (int64_t n = ty; n < samples; n += kLanes) acc += dw_part[n * columns_total + column];
  }
  if constexpr (kLanes > 1) {
    partial[ty][tx] = acc;
    __syncthreads();
    for (int half = kLanes / 2; half > 0; half /= 2) {
      if (ty < half) partial[ty][tx] += partial[ty + half][tx];
      __syncthreads();
    }
    acc = partial[0][tx];
  }
  if (ty != 0 || column >= columns_total) return;
  // dw_part's element `column` of a sample is (oc, k), or (k, oc) when transposed.
  const int64_t oc = transposed ? column % out_channels : column / columns;
  int64_t k = transposed ? column / out_channels : column - oc * columns;
  if (tap_major_channels > 0 && k < patch) {  // (r, s, c) to (c, r, s)
    const int64_t tap = k / tap_major_channels, c = k - tap * tap_major_channels;
    k = c * (patch / tap_major_channels) + tap;
  }
  float* out = k < patch ? dw + oc * patch + k : (db ? db + oc : nullptr);
  if (out) *out = accumulate ? *out + acc : acc;
}

template <int kLanes>
void launch_reduce(const KernelContext& ctx, const float* dw_part, int64_t samples,
                   int64_t columns_total, int64_t columns, int64_t patch, int64_t out_channels,
                   bool transposed, int64_t tap_major_channels, float* dw, float* db,
                   bool accumulate) {
  constexpr int kColumns = columns_per_block<kLanes>();
  const int64_t blocks = (columns_total + kColumns - 1) / kColumns;
  launch(ctx, conv_grad_reduce_kernel<kLanes>, unsigned(blocks), kColumns * kLanes, 0, dw_part,
         samples, columns_total, columns, patch, out_channels, transposed, tap_major_channels, dw,
         db, accumulate);
}

template <typename Element>
__global__ void conv_flip_weights_kernel(const Element* w, int64_t out_channels, int64_t channels,
                                         int64_t taps, Element* flipped) {
  wait_for_prior_grids();
  const int64_t total = out_channels * channels * taps;
  for (int64_t i = first_index<int64_t>(); i < total; i += grid_step<int64_t>()) {
    const int64_t t = i % taps, q = i / taps, oc = q % out_channels, c = q / out_channels;
    flipped[i] = w[(oc * channels + c) * taps + (taps - 1 - t)];
  }
}

}  // namespace

void launch_conv_flip_weights(const KernelContext& ctx, int element_bytes, const void* w,
                              int64_t out_channels, int64_t channels, int64_t taps,
                              void* flipped) {
  const int64_t total = out_channels * channels * taps;
  if (total <= 0) return;
  auto run = [&](auto element) {
    using E = decltype(element);
    launch(ctx, conv_flip_weights_kernel<E>, grid_for(total), kBlockThreads, 0,
           static_cast<const E*>(w), out_channels, channels, taps, static_cast<E*>(flipped));
  };
  if (element_bytes == 2)
    run(uint16_t());
  else
    run(uint32_t());
}

void launch_conv_grad_reduce(const KernelContext& ctx, const float* dw_part, int64_t samples,
                             int64_t out_channels, int64_t patch, bool bias_column,
                             bool transposed, float* dw, float* db, bool accumulate,
                             int64_t tap_major_channels) {
  const int64_t columns = patch + (bias_column ? 1 : 0);
  const int64_t columns_total = out_channels * columns;
  if (columns_total <= 0) return;
  const int64_t lanes = (samples + kSamplesPerLane - 1) / kSamplesPerLane;  // at least
  auto launch = [&](auto kind) {
    launch_reduce<decltype(kind)::value>(ctx, dw_part, samples, columns_total, columns, patch,
                                          out_channels, transposed, tap_major_channels, dw,
                                          bias_column ? db : nullptr, accumulate);
  };
  if (lanes <= 1)
    launch(std::integral_constant<int, 1>());
  else if (lanes <= 2)
    launch(std::integral_constant<int, 2>());
  else if (lanes <= 4)
    launch(std::integral_constant<int, 4>());
  else if (lanes <= 8)
    launch(std::integral_constant<int, 8>());
  else if (lanes <= 16)
    launch(std::integral_constant<int, 16>());
  else
    launch(std::integral_constant<int, 32>());
}

}  // namespace trident::cuda
