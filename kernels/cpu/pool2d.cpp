// CPU max pooling: one task per run of (sample, channel) planes.
#include "trident/kernels/cpu/pool2d.h"

#include <cmath>
#include <cstring>
#include <string>

#include "trident/core/error.h"
#include "trident/kernels/cpu/parallel.h"

namespace trident::cpu {
namespace {

int64_t plane_grain(int64_t plane_elements) {
  return std::max<int64_t>(1, kElementwiseGrain / 2 / std::max<int64_t>(plane_elements, 1));
}

}  // namespace

// The seed CNN's 2x2 window with stride 2, branch-free: the general loop's data-dependent
// branches cost ~3 ns an element, most of the pooling time of a CNN step.
static void maxpool_2x2_plane(const float* xp, int64_t W, int64_t OH, int64_t OW, float* yp,
                              int32_t* ap, bool relu) {
  for (int64_t oh = 0; oh < OH; ++oh) {
    const float* r0 = xp + 2 * oh * W;
    const float* r1 = r0 + W;
    const int32_t base = int32_t(2 * oh * W);
    for (int64_t ow = 0; ow < OW; ++ow) {
      // Candidates in row-major window order; a later one wins only if greater, or NaN.
      float best = r0[2 * ow];
      int32_t at = base + int32_t(2 * ow);
      const float b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
      const bool take_b = b > best || b != b;
      best = take_b ? b : best;
      at = take_b ? at + 1 : at;
      const bool take_c = c > best || c != c;
      best = take_c ? c : best;
      at = take_c ? base + int32_t(W + 2 * ow) : at;
      const bool take_d = d > best || d != d;
      best = take_d ? d : best;
      at = take_d ? base + int32_t(W + 2 * ow + 1) : at;
      const bool zeroed = relu && !(best > 0.0f);  // the fused ReLU
      yp[oh * OW + ow] = zeroed ? 0.0f : best;
      ap[oh * OW + ow] = zeroed ? -1 : at;
    }
  }
}

void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, int32_t* argmax) {
  const int64_t H = s.height, W = s.width, OH = s.out_height(), OW = s.out_width();
  const int64_t K = s.kernel, S = s.stride;
  parallel_ranges(s.batch * s.channels, plane_grain(H * W), [=](int64_t p0, int64_t p1) {
    for (int64_t plane = p0; plane < p1; ++plane) {
      const float* xp = x + plane * H * W;
      float* yp = y + plane * OH * OW;
      int32_t* ap = argmax + plane * OH * OW;
      if (K == 2 && S == 2) {
        maxpool_2x2_plane(xp, W, OH, OW, yp, ap, s.relu);
        continue;
      }
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t best = oh * S * W + ow * S;
          float best_value = xp[best];
          for (int64_t kh = 0; kh < K; ++kh) {
            const int64_t row = (oh * S + kh) * W + ow * S;
            for (int64_t kw = 0; kw < K; ++kw) {
              const float v = xp[row + kw];
              if (v > best_value || std::isnan(v)) best_value = v, best = row + kw;
            }
          }
          const bool zeroed = s.relu && !(best_value > 0.0f);  // the fused ReLU
          yp[oh * OW + ow] = zeroed ? 0.0f : best_value;
          ap[oh * OW + ow] = zeroed ? -1 : int32_t(best);
        }
      }
    }
  });
}

void maxpool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax, float* dx) {
  const int64_t HW = s.height * s.width, OHW = s.out_height() * s.out_width();
  parallel_ranges(s.batch * s.channels, plane_grain(HW), [=](int64_t p0, int64_t p1) {
    for (int64_t plane = p0; plane < p1; ++plane) {
      float* dxp = dx + plane * HW;
      const float* dyp = dy + plane * OHW;
      const int32_t* ap = argmax + plane * OHW;
      std::memset(dxp, 0, size_t(HW) * sizeof(float));
      for (int64_t i = 0; i < OHW; ++i) {
        if (ap[i] == -1) continue;  // zeroed by a fused ReLU
        if (ap[i] < 0 || ap[i] >= HW)
          throw ShapeError("maxpool2d_backward: argmax " + std::to_string(ap[i]) +
                           " is outside the " + std::to_string(s.height) + "x" +
                           std::to_string(s.width) +
                           " plane; pass the argmax buffer maxpool2d_forward wrote for this shape");
        dxp[ap[i]] += dyp[i];
      }
    }
  });
}

}  // namespace trident::cpu
