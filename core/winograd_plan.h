// What the GPU backends' Winograd F(2x2, 3x3) convolutions share (kernels/cuda/winograd.h,
// kernels/opencl/winograd.cl): which float32 convolutions they take, and how the weight
// gradient splits the tiles among blocks (work-groups) for its partial sums.
#pragma once
#include <algorithm>
#include <cstdint>

#include "trident/core/op_types.h"

namespace trident {

// A 3x3 kernel at stride 1 with padding 0-2 and 16 or more channels each way (below that the
// products are too thin to gain), whose data gradient (a stride-1 convolution of dy with padding
// 2 - P) fits as well and where dy's zero border adds at most a quarter to its work (4 H W <=
// 5 OH OW). The dtype is the caller's to check.
inline bool winograd_tiles_fit(const Conv2dShape& s) {
  auto fits = [](const Conv2dShape& c) {
    return c.kernel_h == 3 && c.kernel_w == 3 && c.stride_h == 1 && c.stride_w == 1 &&
           c.pad_h >= 0 && c.pad_h <= 2 && c.pad_w >= 0 && c.pad_w <= 2 && c.in_channels >= 16 &&
           c.out_channels >= 16;
  };
  return s.batch > 0 && fits(s) && fits(input_gradient_shape(s)) &&
         4 * s.height * s.width <= 5 * s.out_height() * s.out_width();
}

// The weight gradient's split of the batch's tiles (2x2 output blocks, ceil(OH / 2) x ceil(OW /
// 2) a sample): `count` slices of `tiles_per_slice` (whole passes of `pass_tiles`; the last
// slice may have fewer), each a grid of blocks of 32 output x 32 input channels, about
// kTargetBlocks blocks in all (two an SM on a 132-SM GPU). Independent of the device, so that
// the workspace and the order of the sums are too.
struct WinogradSlices {
  static constexpr int64_t kTargetBlocks = 264;
  static constexpr int64_t kChannelsPerBlock = 32;
  int64_t count = 1, tiles_per_slice = 1;
  WinogradSlices(const Conv2dShape& s, int64_t pass_tiles) {
    const int64_t tiles = s.batch * ((s.out_height() + 1) / 2) * ((s.out_width() + 1) / 2);
    const int64_t blocks_per_slice =
        ((s.out_channels + kChannelsPerBlock - 1) / kChannelsPerBlock) *
        ((s.in_channels + kChannelsPerBlock - 1) / kChannelsPerBlock);
    const int64_t passes = std::max<int64_t>(1, (tiles + pass_tiles - 1) / pass_tiles);
    const int64_t wanted = std::clamp<int64_t>(
        (kTargetBlocks + blocks_per_slice - 1) / blocks_per_slice, 1, passes);
    tiles_per_slice = (passes + wanted - 1) / wanted * pass_tiles;
    count = std::max<int64_t>(1, (tiles + tiles_per_slice - 1) / tiles_per_slice);
  }
  // partial's floats: [count][16][OC][C]
  int64_t partial_elements(const Conv2dShape& s) const {
    return count * 16 * s.out_channels * s.in_channels;
  }
};

}  // namespace trident
