// CPU float32 convolution by Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray, "Fast
// Algorithms for Convolutional Neural Networks", 2015): a 3x3 kernel at stride 1 gives each 2x2
// block of outputs from a 4x4 block of inputs with 16 multiplications instead of 36, so the
// products of a layer shrink 2.25x; the transforms around them are additions. Used by
// conv2d.cpp for the forward and the data gradient (a convolution of dy with the flipped
// kernel) where it fits, and for the weight gradient (F(3x3, 2x2), the same transforms of x).
//
// Per group of samples (T tiles: each sample's ceil(OH/2) x ceil(OW/2) output blocks):
//   U[16][OC][C] = G g G^T for each kernel g (once a call)
//   V[16][C][T]  = B^T d B for each 4x4 input block d (zero outside the image)
//   M[xi] = U[xi] V[xi] (16 GEMMs of OC x T x C)
//   y block = A^T m A + b (the 2x2 outputs of each tile, cut at the image's edge)
// The weight gradient, F(3x3, 2x2), uses the same 4x4 input blocks: per tile,
//   dw += G^T [(A e A^T) . (B^T d B)] G for dy's 2x2 block e,
// summed over the tiles as 16 GEMMs with K = the tiles, then one transform per kernel.
// The transforms' coefficients are 0, +-1 and +-1/2, so the error stays near the direct
// products' (the conformance suite's float64 comparisons); results are deterministic for a
// given number of slots.
#pragma once
#include <cstddef>
#include <cstdint>

#include "trident/core/op_types.h"

namespace trident::cpu {

// Whether conv2d_forward of s runs here: float32, a 3x3 kernel, stride 1, padding at most 2, at
// least 16 input and output channels (below that the products are too thin to gain) and 100
// output positions a sample (at 7x7 the direct product was faster).
bool winograd_fits(const Conv2dShape& s);
// Whether s's data gradient runs here: the convolution of dy with the flipped kernel (padding 2
// minus s's) fits, and dy's zero border adds at most a quarter to the work (4 H W <= 5 OH OW).
bool winograd_input_gradient_fits(const Conv2dShape& s);
// Workspace for either of the two below with up to `slots` pieces at once (0 when neither fits).
size_t winograd_workspace_bytes(const Conv2dShape& s, int slots);

// y = conv(x, w) + b (b may be null), as conv2d_forward; winograd_fits(s).
void winograd_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                      float* y, void* workspace, int slots);
// dw[OC, C, 3, 3] and db[OC] (unless null) from x and dy, as conv2d_backward's (F(3x3, 2x2):
// per tile, G^T [(A e A^T) . (B^T d B)] G for dy's 2x2 block e and x's 4x4 block d, the 16
// products summed over the tiles as GEMMs with K = the tiles); winograd_fits(s).
void winograd_weight_gradient(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                              float* db, void* workspace, int slots);
// dx[N, C, H, W] = the data gradient of s from dy[N, OC, OH, OW]; winograd_input_gradient_fits.
void winograd_input_gradient(const Conv2dShape& s, const float* w, const float* dy, float* dx,
                             void* workspace, int slots);

}  // namespace trident::cpu
