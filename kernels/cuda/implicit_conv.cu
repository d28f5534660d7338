// Implicit-GEMM convolution on tensor cores (kernels/cuda/implicit_conv.h): the launches, the
// workspace and the data gradient's phases; the product kernels themselves, and how they tile
// the products, are in kernels/cuda/implicit_conv_kernels.cuh.
#include "trident/kernels/cuda/implicit_conv.h"

#include <algorithm>
#include <climits>
#include <type_traits>

#include "trident/kernels/cuda/conv2d.h"
#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/halo_conv.h"
#include "trident/kernels/cuda/implicit_conv_kernels.cuh"
#include "trident/kernels/cuda/implicit_conv_layout.cuh"
#include "trident/kernels/cuda/implicit_conv_mma.cuh"
#include "trident/kernels/cuda/launch.cuh"
#include "trident/kernels/cuda/wgmma_conv.h"

namespace trident::cuda {
namespace {

using namespace implicit_gemm;  // the kernels and their constants
using layout::transpose;

// Whether math M multiplies TF32: its operands are then rounded once, by the layout passes
// (layout::stored).
template <typename M>
constexpr bool kTf32 = std::is_same_v<M, Tf32>;

// Launches kKernel with its dynamic shared memory.
template <auto kKernel, typename... Args>
void launch_with_smem(const KernelContext& ctx, int bytes, dim3 grid, const Args&... args) {
  allow_dynamic_shared_memory<kKernel>(bytes);
  launch(ctx, kKernel, grid, kThreads, size_t(bytes), args...);
}

template <class F>
void with_block_rows(int64_t m, F&& f) {
  if (m <= 32)
    f(std::integral_constant<int, 32>());
  else if (m <= 64)
    f(std::integral_constant<int, 64>());
  else
    f(std::integral_constant<int, 128>());
}

// The products gs[0, count) (at most kMaxProducts), product z with the kernel at w_t +
// w_offsets[z] elements, in one launch: of the warpgroup kernel (wgmma_conv.h) where the device
// has it, of the halo-window kernel (halo_conv.h) for a lone 16-bit product whose rows fit a
// block, else of the tile-per-step kernel here.
template <typename M>
void gather(const KernelContext& ctx, const void* in_t, const void* w_t, const float* bias,
            void* out, const Gather* gs, const int64_t* w_offsets, int count, int64_t batch,
            int64_t m_total) {
  using S = StorageOf<M>;
  if (count == 0 || m_total == 0) return;
  GatherProducts products{};
  int64_t most = 0;
  for (int z = 0; z < count; ++z) {
    products.g[z] = gs[z];
    products.w_offset[z] = w_offsets[z];
    products.columns[z] = int(batch * gs[z].yh * gs[z].yw);
    most = std::max<int64_t>(most, products.columns[z]);
  }
  if (most == 0) return;
  const DType dtype =
      kTf32<M> ? DType::f32 : std::is_same_v<M, Bf16> ? DType::bf16 : DType::f16;
  const bool wgmma = ctx.warpgroup_mma && wgmma_gather_fits(gs, count);
  // The halo-window kernel reads a block's input once, the warpgroup kernel once a tap: the
  // halo kernel goes first where the warpgroup kernel's instructions are half idle (up to 32
  // output channels, its rows then positions by 32 channels) or its K steps span two taps (32
  // input channels). The ResNet's 28x28 32 -> 32 layers: 28.4 us on halo windows, 30.5 on
  // warpgroups (H200).
  bool halo_first = !wgmma || m_total <= 32;
  for (int z = 0; z < count; ++z) halo_first |= gs[z].xc % 64 != 0;
  if constexpr (!kTf32<M>) {
    if (halo_first && count == 1 && w_offsets[0] == 0 &&
        launch_halo_gather(ctx, dtype, in_t, w_t, bias, out, gs[0], batch, m_total))
      return;
  }
  if (wgmma) {
    launch_wgmma_gather(ctx, dtype, in_t, w_t, bias, out, products, count, most, m_total);
    return;
  }
  with_block_rows(m_total, [&](auto bm) {
    constexpr int BM = decltype(bm)::value;
    constexpr int BN = kGatherBN<BM>;
    using Mma = BlockMma<M, BM, BN, false, true, kGatherStages>;
    const dim3 grid(unsigned((most + BN - 1) / BN), unsigned((m_total + BM - 1) / BM),
                    unsigned(count));
    launch_with_smem<gather_conv_kernel<M, BM>>(
        ctx, Mma::kTileBytes, grid, static_cast<const S*>(in_t), static_cast<const S*>(w_t), bias,
        static_cast<S*>(out), products, int(m_total));
  });
}

// One product: the forward's.
template <typename M>
void gather(const KernelContext& ctx, const void* in_t, const void* w_t, const float* bias,
            void* out, const Gather& g, int64_t batch, int64_t m_total) {
  const int64_t no_offset = 0;
  gather<M>(ctx, in_t, w_t, bias, out, &g, &no_offset, 1, batch, m_total);
}

Gather forward_gather(const Conv2dShape& s) {
  Gather g{int(s.in_channels), int(s.height),       int(s.width),
           int(s.kernel_h),    int(s.kernel_w),     int(s.pad_h),
           int(s.pad_w),       int(s.out_height()), int(s.out_width())};
  g.sy = int(s.stride_h), g.sx = int(s.stride_w);
  return g;
}

// dx[n, c, iy, ix] = sum over (oc, r, s) with iy = oy * SY - PH + r (and likewise ix) of
// w[oc, c, r, s] dy[n, oc, oy, ox]: along y, the positions iy = iy0 + SY a (a < AY) of phase qy,
// iy0 = (qy - PH) mod SY, take the taps r = qy + SY t (t < Ty) with oy = by0 + a - t, by0 =
// (iy0 + PH - qy) / SY; with t' = Ty - 1 - t that is a stride-1 product over dy with padding
// Ty - 1 - by0 and the phase's flipped kernel (arrange_weights_kernel), written at stride SY from
// iy0. With stride 1, one phase: the flipped kernel over dy, padding KH - 1 - PH. Phases without
// taps (a stride over the kernel) leave zeros: dx is cleared first.
template <typename M>
void data_gradient(const KernelContext& ctx, const Conv2dShape& s, const void* dy_t,
                   const StorageOf<M>* w_flip, void* dx) {
  const int sy = int(s.stride_h), sx = int(s.stride_w), kh = int(s.kernel_h), kw = int(s.kernel_w);
  const int h = int(s.height), w = int(s.width);
  auto first = [](int q, int pad, int stride) { return ((q - pad) % stride + stride) % stride; };
  bool empty = false;  // a phase with positions but no taps
  for (int qy = 0; qy < sy; ++qy)
    for (int qx = 0; qx < sx; ++qx)
      empty |= first(qy, int(s.pad_h), sy) < h && first(qx, int(s.pad_w), sx) < w &&
               (layout::phase_taps(kh, sy, qy) == 0 || layout::phase_taps(kw, sx, qx) == 0);
  if (empty)
    cudaMemsetAsync(dx, 0, size_t(s.input_numel()) * sizeof(StorageOf<M>), ctx.stream);
  Gather gs[kMaxProducts];
  int64_t offsets[kMaxProducts];
  int count = 0;
  auto launch = [&] {
    gather<M>(ctx, dy_t, w_flip, nullptr, dx, gs, offsets, count, s.batch, s.in_channels);
    count = 0;
  };
  for (int qy = 0; qy < sy; ++qy)
    for (int qx = 0; qx < sx; ++qx) {
      const int ty = layout::phase_taps(kh, sy, qy), tx = layout::phase_taps(kw, sx, qx);
      const int iy0 = first(qy, int(s.pad_h), sy), ix0 = first(qx, int(s.pad_w), sx);
      if (ty == 0 || tx == 0 || iy0 >= h || ix0 >= w) continue;
      const int by0 = (iy0 + int(s.pad_h) - qy) / sy, bx0 = (ix0 + int(s.pad_w) - qx) / sx;
      Gather& g = gs[count];
      g = Gather{int(s.out_channels), int(s.out_height()), int(s.out_width()),
                 ty,                  tx,                  ty - 1 - by0,
                 tx - 1 - bx0,        (h - iy0 + sy - 1) / sy, (w - ix0 + sx - 1) / sx};
      g.out_h = h, g.out_w = w, g.oy0 = iy0, g.ox0 = ix0, g.osy = sy, g.osx = sx;
      offsets[count] =
          layout::phase_offset(kh, kw, sy, sx, qy, qx, s.in_channels, s.out_channels);
      if (++count == kMaxProducts) launch();
    }
  if (count > 0) launch();
}

int64_t round_bytes(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// s's weights to arrange (layout::arrange_weights) into w_t (unless null) and w_flip, for math M.
template <typename M, typename S = StorageOf<M>>
layout::WeightArrangement<S> weight_arrangement(const Conv2dShape& s, const void* w, void* w_t,
                                                void* w_flip) {
  layout::WeightArrangement<S> a;
  a.tf32 = kTf32<M>;
  a.w = static_cast<const S*>(w);
  a.w_t = static_cast<S*>(w_t);
  a.w_flip = static_cast<S*>(w_flip);
  a.oc_total = int(s.out_channels), a.c_total = int(s.in_channels);
  a.kh = int(s.kernel_h), a.kw = int(s.kernel_w), a.sy = int(s.stride_h), a.sx = int(s.stride_w);
  a.blocks = int(std::min<int64_t>((s.weight_numel() + 255) / 256, 4096));
  return a;
}

// The math tag of s (implicit_conv_fits) passed to f as a value.
template <class F>
void with_math(const Conv2dShape& s, F&& f) {
  if (s.dtype == DType::bf16)
    f(Bf16{});
  else if (s.dtype == DType::f16)
    f(F16{});
  else
    f(Tf32{});
}

// Whether the weight gradient of s goes to the warpgroup-multiply kernel.
bool wgmma_weight_gradient(bool warpgroup_mma, const Conv2dShape& s) {
  return warpgroup_mma && wgmma_wgrad_fits(s.dtype, forward_gather(s), s.out_channels);
}

}  // namespace

bool implicit_conv_available() {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, gather_conv_kernel<Bf16, 32>) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.binaryVersion >= 80;
}

bool implicit_conv_fits(const Conv2dShape& s) {
  // float32 only where TF32 is allowed: split into 3xTF32 (hi = tf32(x), lo = tf32(x - hi),
  // hi*hi + hi*lo + lo*hi) for float32 itself, these kernels made the ResNet's fp32 step 7%
  // faster (H100: 3.84 -> 3.55 ms) but its convolutions ~15x less accurate than cuBLAS's float32
  // GEMMs (max |error| / sum |x w| 1.5e-6 against ~1e-7: the tensor cores truncate as they
  // accumulate, three times as often), which took 8 ResNet steps past the float32 agreement
  // bound of tests/conformance_training.cpp.
  if (s.dtype == DType::f32 ? !s.allow_tf32 : s.dtype != DType::bf16 && s.dtype != DType::f16)
    return false;
  // Offsets in 32-bit ints; image, padding and kernel under kMaxExtent.
  return s.stride_h >= 1 && s.stride_w >= 1 && s.in_channels % 32 == 0 &&
         s.out_channels % 32 == 0 && s.in_channels > 0 && s.out_channels > 0 &&
         s.input_numel() < INT_MAX / 2 && s.output_numel() < INT_MAX / 2 &&
         s.weight_numel() < INT_MAX / 2 && s.height + 2 * s.pad_h + s.kernel_h < kMaxExtent &&
         s.width + 2 * s.pad_w + s.kernel_w < kMaxExtent;
}

ImplicitConvWorkspace implicit_conv_workspace(int sms, const Conv2dShape& s, bool warpgroup_mma) {
  ImplicitConvWorkspace ws;
  const int64_t element = int64_t(dtype_size(s.dtype));
  const int64_t bm = s.out_channels <= 32 ? 32 : s.out_channels <= 64 ? 64 : 128;
  const int64_t tiles = ((s.out_channels + bm - 1) / bm) *
                        ((s.patch_size() + kWgradBN - 1) / kWgradBN);
  const int64_t positions = s.batch * s.out_height() * s.out_width();
  // The halo-window kernel's slices where it takes the shape (halo_conv.h); else about four
  // blocks per SM (eight for the warpgroup kernel, two of whose blocks share an SM: ResNet-9 bf16
  // 5.17 -> 5.14 ms a step on an H200), each slice at least 8 steps long (the built-in ResNet's
  // 14x14 layers had 4 at eight blocks an SM: 0.981 -> 0.989 ms), partials at most 64 MB.
  const bool wgmma = wgmma_weight_gradient(warpgroup_mma, s);
  ws.splits =
      wgmma ? 0 : halo_wgrad_splits(sms, s.dtype, forward_gather(s), s.batch, s.out_channels);
  const int64_t want = ((wgmma ? 8 : 4) * int64_t(sms) + tiles - 1) / tiles;
  const int64_t step = wgmma ? kWgmmaWgradStep : kSliceRound;
  // Where slices of 8 steps leave SMs without a block, down to 2 steps, a block an SM (the
  // ResNet's 1x1 shortcut from 64 to 128 channels at 7x7: one tile, 24 slices of 8 steps 13.7 us,
  // 98 of 2 steps 8.4 us; one block an SM more: a second wave, 14.5 -> 18.9 us for 3x3 64 -> 128).
  int64_t most = std::max<int64_t>(1, positions / (8 * step));
  if (tiles * most < sms) most = std::max(most, std::min(positions / (2 * step), sms / tiles));
  const int64_t memory = std::max<int64_t>(1, (int64_t(64) << 20) / (4 * s.weight_numel()));
  if (ws.splits == 0) ws.splits = std::max<int64_t>(1, std::min({want, most, memory}));
  ws.x_t = 0;
  ws.dy_t = size_t(round_bytes(s.input_numel() * element));
  ws.w_t = ws.dy_t + size_t(round_bytes(s.output_numel() * element));
  ws.w_flip = ws.w_t + size_t(round_bytes(s.weight_numel() * element));
  ws.partials = ws.w_flip + size_t(round_bytes(s.weight_numel() * element));
  ws.bytes = ws.partials + size_t(ws.splits * s.weight_numel()) * sizeof(float);
  return ws;
}

void launch_implicit_conv_forward(const KernelContext& ctx, const Conv2dShape& s, const void* x,
                                  const void* w, const float* bias, void* y, char* workspace) {
  if (s.batch == 0) return;
  const ImplicitConvWorkspace ws = implicit_conv_workspace(ctx.sms, s, ctx.warpgroup_mma);
  with_math(s, [&](auto tag) {
    using M = decltype(tag);
    using S = StorageOf<M>;
    transpose<S>(ctx, x, workspace + ws.x_t, s.batch, s.in_channels, s.height * s.width,
                 kTf32<M>, weight_arrangement<M>(s, w, workspace + ws.w_t, workspace + ws.w_flip));
    gather<M>(ctx, workspace + ws.x_t, workspace + ws.w_t, bias, y, forward_gather(s), s.batch,
              s.out_channels);
  });
}

void launch_implicit_conv_backward(const KernelContext& ctx, const KernelContext& weight_ctx,
                                   const std::function<void()>& fork, const Conv2dShape& s,
                                   const void* x, const void* w, const void* dy, void* dx,
                                   float* dw, char* workspace, bool x_t_valid) {
  if (s.batch == 0) {
    cudaMemsetAsync(dw, 0, size_t(s.weight_numel()) * sizeof(float), ctx.stream);
    return;
  }
  const ImplicitConvWorkspace ws = implicit_conv_workspace(ctx.sms, s, ctx.warpgroup_mma);
  const int64_t ckk = s.patch_size();
  const int64_t positions = s.batch * s.out_height() * s.out_width();
  const int64_t slice = (positions + ws.splits - 1) / ws.splits;
  const int64_t slice_positions = (slice + kSliceRound - 1) / kSliceRound * kSliceRound;
  float* partials = reinterpret_cast<float*>(workspace + ws.partials);
  // 16-bit 3x3 kernels on halo windows where that kernel takes the shape (its slices sized the
  // workspace then; partials in (c, r, s) column order), else the tile-per-step kernel here
  // ((r, s, c) order).
  const bool wgmma = wgmma_weight_gradient(ctx.warpgroup_mma, s);
  const bool halo =
      !wgmma &&
      halo_wgrad_splits(ctx.sms, s.dtype, forward_gather(s), s.batch, s.out_channels) > 0;
  with_math(s, [&](auto tag) {
    using M = decltype(tag);
    using S = StorageOf<M>;
    if (!x_t_valid)
      transpose<S>(ctx, x, workspace + ws.x_t, s.batch, s.in_channels, s.height * s.width,
                   kTf32<M>);
    transpose<S>(ctx, dy, workspace + ws.dy_t, s.batch, s.out_channels,
                 s.out_height() * s.out_width(), kTf32<M>);
    if (fork) fork();
    // The weight gradient: slices of the positions into partials, summed in a fixed order.
    if (wgmma) {
      launch_wgmma_wgrad(weight_ctx, s.dtype, workspace + ws.x_t, workspace + ws.dy_t, partials,
                         forward_gather(s), s.batch, s.out_channels, ws.splits);
    } else if (halo) {
      launch_halo_wgrad(weight_ctx, s.dtype, workspace + ws.x_t, workspace + ws.dy_t, partials,
                        forward_gather(s), s.batch, s.out_channels, ws.splits);
    } else {
      with_block_rows(s.out_channels, [&](auto bm) {
        constexpr int BM = decltype(bm)::value;
        constexpr int BN = kWgradBN;
        using Mma = BlockMma<M, BM, BN, true, false, kWgradStages>;
        const dim3 grid(unsigned((ckk + BN - 1) / BN), unsigned((s.out_channels + BM - 1) / BM),
                        unsigned(ws.splits));
        launch_with_smem<wgrad_conv_kernel<M, BM>>(
            weight_ctx, Mma::kTileBytes + kWgradStages * 3 * Mma::kBK * int(sizeof(int)), grid,
            static_cast<const S*>(static_cast<const void*>(workspace + ws.x_t)),
            static_cast<const S*>(static_cast<const void*>(workspace + ws.dy_t)), partials,
            forward_gather(s), int(s.out_channels), int(positions), int(slice_positions));
      });
    }
    launch_conv_grad_reduce(weight_ctx, partials, ws.splits, s.out_channels, ckk, false, false,
                            dw, nullptr, false, halo ? 0 : s.in_channels);
    if (!dx) return;
    if (!x_t_valid) {  // else the forward left it
      const auto arrange = weight_arrangement<M>(s, w, nullptr, workspace + ws.w_flip);
      launch(ctx, layout::arrange_weights_kernel<S>, unsigned(arrange.blocks), layout::kThreads,
             0, arrange);
    }
    data_gradient<M>(ctx, s, workspace + ws.dy_t,
                     reinterpret_cast<const S*>(workspace + ws.w_flip), dx);
  });
}

}  // namespace trident::cuda
