// im2col / col2im for one sample: the valid output columns of each kernel offset are found once,
// so that inner loops are plain strided copies (contiguous when the stride is 1).
#include "trident/kernels/cpu/im2col.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

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

// The valid output range of every kernel offset along one axis, found once per call.
std::vector<ValidRange> valid_ranges(int64_t kernel, int64_t stride, int64_t pad, int64_t size,
                                     int64_t out) {
  std::vector<ValidRange> r(static_cast<size_t>(kernel));
  for (int64_t k = 0; k < kernel; ++k) r[size_t(k)] = valid_range(k, stride, pad, size, out);
  return r;
}

// Rows of a few dozen elements (7 to 28 here): fixed-size memcpy's that compile to vector moves,
// the last one overlapping the one before. A plain loop is turned into a memmove call by the
// compiler, which costs more than the copy at these lengths (perf: up to a quarter of a bf16
// CNN step).
template <class T>
inline void copy_elements(T* __restrict dst, const T* __restrict src, int64_t n) {
  const size_t bytes = size_t(n) * sizeof(T);
  auto chunks = [&](auto size_tag) {
    constexpr size_t kSize = decltype(size_tag)::value;
    size_t i = 0;
    for (; i + kSize < bytes; i += kSize)
      std::memcpy(reinterpret_cast<char*>(dst) + i, reinterpret_cast<const char*>(src) + i, kSize);
    std::memcpy(reinterpret_cast<char*>(dst) + bytes - kSize,
                reinterpret_cast<const char*>(src) + bytes - kSize, kSize);
  };
  if (bytes >= 32) return chunks(std::integral_constant<size_t, 32>());
  if (bytes >= 8) return chunks(std::integral_constant<size_t, 8>());
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];  // under 8 bytes: at most 3 elements
}

// T: float, or uint16_t for bfloat16 bit patterns (a copy moves bits; zero is 0 in both).
template <class T>
void im2col_of(const Conv2dShape& s, const T* x, T* col, int64_t ld) {
  const int64_t H = s.height, W = s.width, KH = s.kernel_h, KW = s.kernel_w;
  const int64_t SH = s.stride_h, SW = s.stride_w, PH = s.pad_h, PW = s.pad_w;
  const int64_t OH = s.out_height(), OW = s.out_width();
  const std::vector<ValidRange> row_ranges = valid_ranges(KH, SH, PH, H, OH);
  const std::vector<ValidRange> col_ranges = valid_ranges(KW, SW, PW, W, OW);
  if (ld == 0) ld = OH * OW;
  for (int64_t c = 0; c < s.in_channels; ++c) {
    const T* plane = x + c * H * W;
    for (int64_t kh = 0; kh < KH; ++kh) {
      const ValidRange rows = row_ranges[size_t(kh)];
      for (int64_t kw = 0; kw < KW; ++kw) {
        const ValidRange cols = col_ranges[size_t(kw)];
        T* out = col + ((c * KH + kh) * KW + kw) * ld;
        std::fill(out, out + rows.lo * OW, T(0));
        for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
          T* dst = out + oh * OW;
          const T* src = plane + (oh * SH - PH + kh) * W + (kw - PW);
          for (int64_t ow = 0; ow < cols.lo; ++ow) dst[ow] = T(0);
          if (SW == 1) {
            copy_elements(dst + cols.lo, src + cols.lo, cols.hi - cols.lo);
          } else {
            for (int64_t ow = cols.lo; ow < cols.hi; ++ow) dst[ow] = src[ow * SW];
          }
          for (int64_t ow = cols.hi; ow < OW; ++ow) dst[ow] = T(0);
        }
        std::fill(out + rows.hi * OW, out + OH * OW, T(0));
      }
    }
  }
}

}  // namespace

void im2col(const Conv2dShape& s, const float* x, float* col, int64_t ld) {
  im2col_of(s, x, col, ld);
}
void im2col(const Conv2dShape& s, const uint16_t* x, uint16_t* col, int64_t ld) {
  im2col_of(s, x, col, ld);
}

void col2im(const Conv2dShape& s, const float* col, float* dx, int64_t ld) {
  const int64_t H = s.height, W = s.width, KH = s.kernel_h, KW = s.kernel_w;
  const int64_t SH = s.stride_h, SW = s.stride_w, PH = s.pad_h, PW = s.pad_w;
  const int64_t OH = s.out_height(), OW = s.out_width();
  const std::vector<ValidRange> row_ranges = valid_ranges(KH, SH, PH, H, OH);
  const std::vector<ValidRange> col_ranges = valid_ranges(KW, SW, PW, W, OW);
  if (ld == 0) ld = OH * OW;
  std::memset(dx, 0, size_t(s.in_channels * H * W) * sizeof(float));
  for (int64_t c = 0; c < s.in_channels; ++c) {
    float* plane = dx + c * H * W;
    for (int64_t kh = 0; kh < KH; ++kh) {
      const ValidRange rows = row_ranges[size_t(kh)];
      for (int64_t kw = 0; kw < KW; ++kw) {
        const ValidRange cols = col_ranges[size_t(kw)];
        const float* in = col + ((c * KH + kh) * KW + kw) * ld;
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
