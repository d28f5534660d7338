// Halo-window products of a stride-1 implicit-GEMM convolution for 16-bit operands
// (kernels/cuda/implicit_conv.h says what the products are): the gathered product (forward, or
// the data gradient as a forward over dy with the flipped kernel), and the weight gradient of a
// 3x3 kernel (halo_wgrad.cu says how).
//
// implicit_conv.cu's gather kernel copies a [positions x 32 channels] tile of the patch matrix
// from L2 for every tap: a 3x3 kernel reads each input value nine times, and ncu put its 28x28
// forward at 57% of L2 throughput and 6% of DRAM's (H100). Here a block takes `rows` whole
// output rows of one image and copies their input window once: the rows plus KH - 1 halo rows,
// the width plus KW - 1 columns. Tap (r, s) of output position (oy, ox) is window position
// (oy + r, ox + s), so each tap's B operand is the window read at a shift: ldmatrix takes one row
// address per lane, and each lane adds the tap's shift to its positions' window offsets. The
// kernel's rows for the block's BM output channels are copied alongside. Output is NCHW + bias,
// rounded once, as the gather kernel's. ResNet bf16 step on an H100: 1.30 -> 1.23 ms (ncu, same
// call: the 28x28 products 44-45 -> 29-30 us, the 14x14 ones 32-33 -> 29).
#pragma once
#include <cstdint>

#include "trident/core/dtype.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// in[N, XH, XW, XC] (NHWC) through a KH x KW window, stride SY x SX, padding PH / PW: output
// position (oy, ox) at tap (r, s) reads in[n, oy * SY - PH + r, ox * SX - PW + s, :]; YH x YW
// outputs per sample. They are written to a plane of out_h x out_w (0: YH x YW) at (oy0 + oy *
// osy, ox0 + ox * osx): a strided convolution's data gradient writes each phase of dx's
// positions this way (implicit_conv.cu).
struct ConvGather {
  int xc, xh, xw, kh, kw, ph, pw, yh, yw;
  int sy = 1, sx = 1;
  int out_h = 0, out_w = 0, oy0 = 0, ox0 = 0, osy = 1, osx = 1;
  __host__ __device__ int plane_h() const { return out_h > 0 ? out_h : yh; }
  __host__ __device__ int plane_w() const { return out_w > 0 ? out_w : yw; }
  // Stride 1 and outputs written as a plain YH x YW plane: what the halo kernels take.
  bool unit_stride() const {
    return sy == 1 && sx == 1 && plane_h() == yh && plane_w() == yw && oy0 == 0 && ox0 == 0 &&
           osy == 1 && osx == 1;
  }
};

// The halo kernels' tiles: `rows` whole output rows of one image, at most max_positions
// positions each, the fewest per image (`groups`) with the rows spread evenly over them; `tiles`
// = batch * groups. False where g is not unit_stride(), one row is wider than max_positions
// or the tiles pass an int.
struct RowTiles {
  int rows = 0, groups = 0, tiles = 0;
};
inline bool row_tiles(const ConvGather& g, int64_t batch, int max_positions, RowTiles& t) {
  if (!g.unit_stride() || g.yh <= 0 || g.yw <= 0 || g.yw > max_positions || batch <= 0)
    return false;
  t.groups = (g.yh * g.yw + max_positions - 1) / max_positions;
  for (;; ++t.groups) {
    t.rows = (g.yh + t.groups - 1) / t.groups;
    if (t.rows * g.yw <= max_positions) break;
  }
  t.groups = (g.yh + t.rows - 1) / t.rows;
  if (batch * t.groups >= int64_t(1) << 31) return false;
  t.tiles = int(batch * t.groups);
  return true;
}

// out[N, M, YH, YW] = w_t[M, KH, KW, XC] applied to in (+ bias[m] when bias is not null), for
// dtype bf16 or f16. Returns false, launching nothing, where these kernels do not take the shape
// (XC not a multiple of 32, M over 64, a row wider than a block's positions, too much shared
// memory); the caller then uses the gather kernel.
bool launch_halo_gather(const KernelContext& ctx, DType dtype, const void* in_t, const void* w_t,
                        const float* bias, void* out, const ConvGather& g, int64_t batch,
                        int64_t m_total);

// The weight gradient's slices for a 3x3 kernel: dw[M, XC, 3, 3] = sum over samples and output
// positions of dy[n, m, oy, ox] in[n, oy - PH + r, ox - PW + s, c], with in as above and dy_t
// [N, YH, YW, M] (NHWC). halo_wgrad_splits: the number of float32 partials [M, XC * 9] ((c, r,
// s) order) the kernel writes, a function of the shape and the SM count only; 0 where it does
// not take the shape (dtype not bf16 or f16, not 3x3, XC or M not a multiple of 32, a row over
// 256 positions, a tile over 96 KB of shared memory). launch_halo_wgrad writes `splits` (what
// halo_wgrad_splits gave) partials from partials[0] on, for launch_conv_grad_reduce to sum.
int64_t halo_wgrad_splits(int sms, DType dtype, const ConvGather& g, int64_t batch,
                          int64_t m_total);
void launch_halo_wgrad(const KernelContext& ctx, DType dtype, const void* x_t, const void* dy_t,
                       float* partials, const ConvGather& g, int64_t batch, int64_t m_total,
                       int64_t splits);

}  // namespace trident::cuda
