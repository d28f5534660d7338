// CUDA conversions between the float types (and from bytes), the device-side scale, and 16-bit
// fills: 8 elements a thread (one 16-byte access of the 16-bit side) where aligned.
#include "trident/kernels/cuda/convert.h"
#include "trident/kernels/cuda/map.cuh"

namespace trident::cuda {
namespace {

constexpr int kConvertPack = 8;

// y = x (kScale: times factor[0]). A float32 copy through here never multiplies: a NaN's payload
// survives as core/half.h keeps it.
template <typename Src, typename Dst, bool kScale>
struct ConvertOp {
  const Src* x;
  Dst* y;
  const float* factor;
  template <int V>
  __device__ __forceinline__ void at(int64_t i) const {
    float v[V];
    load_pack<V>(x, i, v);
    if constexpr (kScale) {
      const float f = __ldg(factor);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] *= f;
    }
    store_pack<V>(y, i, v);
  }
};

template <typename Src, typename Dst, bool kScale>
void convert_as(const KernelContext& ctx, const void* x, void* y, const float* factor,
                int64_t n) {
  const bool packed = pack_aligned(x, sizeof(Src) * kConvertPack) &&
                      pack_aligned(y, sizeof(Dst) * kConvertPack);
  launch_map<kConvertPack>(
      ctx, ConvertOp<Src, Dst, kScale>{static_cast<const Src*>(x), static_cast<Dst*>(y), factor},
      n, packed);
}

template <bool kScale>
void dispatch(const KernelContext& ctx, const void* x, DType x_type, void* y, DType y_type,
              const float* factor, int64_t n) {
  with_float_type(y_type, [&](auto dst) {
    using Dst = decltype(dst);
    if (x_type == DType::u8)
      convert_as<uint8_t, Dst, kScale>(ctx, x, y, factor, n);
    else
      with_float_type(x_type, [&](auto src) {
        convert_as<decltype(src), Dst, kScale>(ctx, x, y, factor, n);
      });
  });
}

__global__ void fill_u16_kernel(uint16_t* dst, int64_t n, uint16_t bits) {
  wait_for_prior_grids();
  for (int64_t i = first_index<int64_t>(); i < n; i += grid_step<int64_t>()) dst[i] = bits;
}

}  // namespace

void launch_convert(const KernelContext& ctx, const void* src, DType src_type, void* dst,
                    DType dst_type, int64_t n) {
  dispatch<false>(ctx, src, src_type, dst, dst_type, nullptr, n);
}

void launch_scale(const KernelContext& ctx, const void* x, DType x_type, const float* factor,
                  void* y, DType y_type, int64_t n) {
  dispatch<true>(ctx, x, x_type, y, y_type, factor, n);
}

void launch_fill_half(const KernelContext& ctx, void* dst, DType type, int64_t n, float value) {
  if (n <= 0) return;
  launch(ctx, fill_u16_kernel, grid_for(n), kBlockThreads, 0, static_cast<uint16_t*>(dst), n,
         float_to_half_bits(type, value));
}

}  // namespace trident::cuda
