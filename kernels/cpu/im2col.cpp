// im2col / col2im for one sample: the valid output columns of each kernel offset are found once,
// so that inner loops are plain strided copies (contiguous when the stride is 1).
#include "trident/kernels/cpu/im2col.h"

#include <algorithm>
#include <cstring>

namespace trident::cpu {
namespace {

// Output positions o in [lo, hi) read input i = o*stride - pad + k inside [0, size).
struct ValidRange {
  int64_t lo, hi;
};

ValidRange valid_range(int64_t k, int64_t stride, int64_t pad, int64_t size, int64_t out) {
  auto ceil_div = [](int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); };
  const int64_t lo = std::clamp<int64_t>(ceil_div(pad - k, stride), 0, out);
  const int64_t hi = std::clamp<int64_t>(ceil_div(size + pad - k, stride), lo, out);
  return {lo, hi};
}

}  // namespace

void im2col(const Conv2dShape& s, const float* x, float* col) {
  const int64_t H = s.height, W = s.width, KH = s.kernel_h, KW = s.kernel_w;
  const int64_t SH = s.stride_h, SW = s.stride_w, PH = s.pad_h, PW = s.pad_w;
  const int64_t OH = s.out_height(), OW = s.out_width();
  for (int64_t c = 0; c < s.in_channels; ++c) {
    const float* plane = x + c * H * W;
    for (int64_t kh = 0; kh < KH; ++kh) {
      const ValidRange rows = valid_range(kh, SH, PH, H, OH);
      for (int64_t kw = 0; kw < KW; ++kw) {
        const ValidRange cols = valid_range(kw, SW, PW, W, OW);
        float* out = col + ((c * KH + kh) * KW + kw) * OH * OW;
        std::memset(out, 0, size_t(rows.lo * OW) * sizeof(float));
        for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
          float* dst = out + oh * OW;
          const float* src = plane + (oh * SH - PH + kh) * W + (kw - PW);
          for (int64_t ow = 0; ow < cols.lo; ++ow) dst[ow] = 0.f;
          if (SW == 1) {
            std::memcpy(dst + cols.lo, src + cols.lo, size_t(cols.hi - cols.lo) * sizeof(float));
          } else {
            for (int64_t ow = cols.lo; ow < cols.hi; ++ow) dst[ow] = src[ow * SW];
          }
          for (int64_t ow = cols.hi; ow < OW; ++ow) dst[ow] = 0.f;
        }
        std::memset(out + rows.hi * OW, 0, size_t((OH - rows.hi) * OW) * sizeof(float));
      }
    }
  }
}

void im2col_transposed(const Conv2dShape& s, const float* x, float* col_t) {
  const int64_t C = s.in_channels, H = s.height, W = s.width, KH = s.kernel_h, KW = s.kernel_w;
  const int64_t SH = s.stride_h, SW = s.stride_w, PH = s.pad_h, PW = s.pad_w;
  const int64_t OH = s.out_height(), OW = s.out_width();
  const int64_t CKK = C * KH * KW;
  // Output columns whose whole kernel row lies inside the input: a straight copy of KW floats.
  const int64_t inner_lo = valid_range(0, SW, PW, W, OW).lo;
  const int64_t inner_hi = std::max(inner_lo, valid_range(KW - 1, SW, PW, W, OW).hi);
  for (int64_t oh = 0; oh < OH; ++oh) {
    float* out_row = col_t + oh * OW * CKK;
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t kh = 0; kh < KH; ++kh) {
        const int64_t ih = oh * SH - PH + kh;
        const int64_t offset = (c * KH + kh) * KW;
        if (ih < 0 || ih >= H) {
          for (int64_t ow = 0; ow < OW; ++ow)
            std::memset(out_row + ow * CKK + offset, 0, size_t(KW) * sizeof(float));
          continue;
        }
        const float* src = x + (c * H + ih) * W - PW;
        auto edge = [&](int64_t ow) {
          float* dst = out_row + ow * CKK + offset;
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t iw = ow * SW + kw - PW;
            dst[kw] = iw >= 0 && iw < W ? src[ow * SW + kw] : 0.f;
          }
        };
        for (int64_t ow = 0; ow < inner_lo; ++ow) edge(ow);
        for (int64_t ow = inner_lo; ow < inner_hi; ++ow) {
          float* dst = out_row + ow * CKK + offset;
          const float* from = src + ow * SW;
          for (int64_t kw = 0; kw < KW; ++kw) dst[kw] = from[kw];
        }
        for (int64_t ow = inner_hi; ow < OW; ++ow) edge(ow);
      }
    }
  }
}

void col2im(const Conv2dShape& s, const float* col, float* dx) {
  const int64_t H = s.height, W = s.width, KH = s.kernel_h, KW = s.kernel_w;
  const int64_t SH = s.stride_h, SW = s.stride_w, PH = s.pad_h, PW = s.pad_w;
  const int64_t OH = s.out_height(), OW = s.out_width();
  std::memset(dx, 0, size_t(s.in_channels * H * W) * sizeof(float));
  for (int64_t c = 0; c < s.in_channels; ++c) {
    float* plane = dx + c * H * W;
    for (int64_t kh = 0; kh < KH; ++kh) {
      const ValidRange rows = valid_range(kh, SH, PH, H, OH);
      for (int64_t kw = 0; kw < KW; ++kw) {
        const ValidRange cols = valid_range(kw, SW, PW, W, OW);
        const float* in = col + ((c * KH + kh) * KW + kw) * OH * OW;
        for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
          const float* src = in + oh * OW;
          float* dst = plane + (oh * SH - PH + kh) * W + (kw - PW);
          if (SW == 1) {
            for (int64_t ow = cols.lo; ow < cols.hi; ++ow) dst[ow] += src[ow];
          } else {
            for (int64_t ow = cols.lo; ow < cols.hi; ++ow) dst[ow * SW] += src[ow];
          }
        }
      }
    }
  }
}

}  // namespace trident::cpu
