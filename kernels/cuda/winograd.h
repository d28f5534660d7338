// CUDA float32 convolution by Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray, 2015;
// kernels/cpu/winograd.h has the algebra): a 3x3 kernel at stride 1 gives each 2x2 block of
// outputs from a 4x4 block of inputs with 16 multiplications instead of 36, so the products
// shrink 2.25x; the transforms around them are additions. backends/cuda/ops_conv2d_winograd.cpp
// drives these pieces:
//   forward and data gradient (a convolution of dy with the flipped kernel, padding 2 - P):
//     U = the kernel's transform (launch_winograd_kernel), then launch_winograd_conv, which
//     transforms the input, multiplies and transforms back inside one kernel;
//   weight gradient (F(3x3, 2x2) on the same 4x4 input blocks: dw = G^T [sum over tiles
//     (A e A^T) . (B^T d B)] G for dy's 2x2 block e and x's 4x4 block d): V = B^T d B and E =
//     A e A^T go through global memory, Mw = E V^T is a strided batch of cuBLAS GEMMs, one per
//     group of samples and coefficient (K = a group's tiles), and launch_winograd_weight_gradient
//     sums the groups and transforms back.
// A weight-gradient array of `ch` channels is Z[g][xi][ch][column]: per group g of samples
// (their tiles side by side, `columns` of them with zero padding), per coefficient xi of 16, a
// [ch, columns] matrix (one product over all tiles would have K = 50,176 and a 32x32 output at
// 28x28 x 32 channels; groups give a batch of hundreds that fills the GPU).
#pragma once
#include <algorithm>
#include <cstdint>

#include "trident/core/op_types.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// A convolution (3x3, stride 1, padding 0-2) as the weight gradient's tiles see it.
struct WinogradTiles {
  // Tile columns a group aims at: the products then reduce over ~1,500 tiles each, in a batch
  // of hundreds (groups * 16) that fills the GPU.
  static constexpr int64_t kTargetColumns = 1536;

  int64_t batch, C, OC, H, W, OH, OW, ph, pw;
  int64_t TH, TW, tiles;  // a sample's blocks of 2x2 outputs: TH x TW
  int64_t group, groups;  // samples a group (the last group may have fewer), groups
  int64_t columns;        // a group's tile columns: group * tiles, rounded up to a multiple of 4

  explicit WinogradTiles(const Conv2dShape& s)
      : batch(s.batch), C(s.in_channels), OC(s.out_channels), H(s.height), W(s.width),
        OH(s.out_height()), OW(s.out_width()), ph(s.pad_h), pw(s.pad_w), TH((OH + 1) / 2),
        TW((OW + 1) / 2), tiles(TH * TW) {
    const int64_t n = std::max<int64_t>(batch, 1);
    const int64_t wanted = std::max<int64_t>(1, (n * tiles + kTargetColumns - 1) / kTargetColumns);
    group = (n + std::min(wanted, n) - 1) / std::min(wanted, n);  // even groups
    groups = (n + group - 1) / group;
    columns = (group * tiles + 3) / 4 * 4;
  }
  // Elements of a weight-gradient array of `channels` channels, and of Mw.
  int64_t domain_elements(int64_t channels) const { return groups * 16 * channels * columns; }
  int64_t weight_elements() const { return groups * 16 * OC * C; }
};

// U[xi][c][o] = (G k G^T)[xi] for the kernel k of output channel o and input channel c: w[o,
// c] (w [OC, C, 3, 3]), or, when flipped (for a data gradient: its output channels are the
// forward's input ones, channels = the forward's OC), w[c, o] turned by 180 degrees.
void launch_winograd_kernel(const KernelContext& ctx, int64_t channels, int64_t out_channels,
                            const float* w, bool flipped, float* U);
// y [N, OC, OH, OW] = conv(x [N, C, H, W], the kernel whose transform is U) (+ bias[o] unless
// null) for s (3x3, stride 1, padding 0-2; s.dtype and s.allow_tf32 are not read).
void launch_winograd_conv(const KernelContext& ctx, const Conv2dShape& s, const float* x,
                          const float* U, const float* bias, float* y);
// V = B^T d B of every tile's 4x4 input block d of x [batch, C, H, W] (zero outside the image,
// and for the padding columns and samples past the batch).
void launch_winograd_input(const KernelContext& ctx, const WinogradTiles& t, const float* x,
                           float* V);
// E = A e A^T of each tile's 2x2 block e of dy [batch, OC, OH, OW] (zero past the edge): the
// weight gradient's transform of dy, OC channels.
void launch_winograd_gradient(const KernelContext& ctx, const WinogradTiles& t, const float* dy,
                              float* E);
// dw [OC, C, 3, 3] = G^T m G, m the sum over the groups of Mw[g][xi][o][i] (fixed order).
void launch_winograd_weight_gradient(const KernelContext& ctx, const WinogradTiles& t,
                                     const float* Mw, float* dw);

}  // namespace trident::cuda
