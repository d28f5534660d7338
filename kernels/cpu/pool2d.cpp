// CPU pooling: one task per run of (sample, channel) planes. x, y, dy and dx are float32, or
// bfloat16 bits (storage.h) compared and summed in float; a backward sums each plane of dx in
// float and rounds it once, as the staged float32 path does.
#include "trident/kernels/cpu/pool2d.h"

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "trident/core/error.h"
#include "trident/kernels/cpu/parallel.h"

namespace trident::cpu {
namespace {

int64_t plane_grain(int64_t plane_elements) {
  return std::max<int64_t>(1, kElementwiseGrain / 2 / std::max<int64_t>(plane_elements, 1));
}

// A plane of dx to accumulate into, zeroed: dx itself for float32, else float scratch that
// store() rounds into dx.
template <class X>
struct GradientPlane;
template <>
struct GradientPlane<float> {
  explicit GradientPlane(int64_t n) : n(n) {}
  float* zeroed(float* dxp) {
    std::memset(dxp, 0, size_t(n) * sizeof(float));
    return dxp;
  }
  void store(const float*, float*) {}
  int64_t n;
};
template <>
struct GradientPlane<uint16_t> {
  explicit GradientPlane(int64_t n) : sums(size_t(n)) {}
  float* zeroed(uint16_t*) {
    std::fill(sums.begin(), sums.end(), 0.0f);
    return sums.data();
  }
  void store(const float* acc, uint16_t* dxp) {
    for (size_t i = 0; i < sums.size(); ++i) store_value(dxp, int64_t(i), acc[i]);
  }
  std::vector<float> sums;
};

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

// [lo, hi) of the input rows (or columns) window o covers, clipped to the input.
struct Window {
  int64_t lo, hi;
};
inline Window window(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t size) {
  const int64_t start = o * stride - pad;
  return {std::max<int64_t>(start, 0), std::min<int64_t>(start + kernel, size)};
}

namespace {

template <class X>
void maxpool_forward(const Pool2dShape& s, const X* x, X* y, int32_t* argmax) {
  const int64_t H = s.height, W = s.width, OH = s.out_height(), OW = s.out_width();
  const bool fast_2x2 = s.kernel_h == 2 && s.kernel_w == 2 && s.stride_h == 2 &&
                        s.stride_w == 2 && s.pad_h == 0 && s.pad_w == 0;
  parallel_ranges(s.batch * s.channels, plane_grain(H * W), [=](int64_t p0, int64_t p1) {
    std::vector<float> widened, pooled;  // a bfloat16 plane for the float 2x2 kernel
    for (int64_t plane = p0; plane < p1; ++plane) {
      const X* xp = x + plane * H * W;
      X* yp = y + plane * OH * OW;
      int32_t* ap = argmax + plane * OH * OW;
      if (fast_2x2) {
        if constexpr (std::is_same_v<X, float>) {
          maxpool_2x2_plane(xp, W, OH, OW, yp, ap, s.relu);
        } else {  // widened first: the kernel vectorises in float (6x slower converting inside)
          widened.resize(size_t(H * W)), pooled.resize(size_t(OH * OW));
          for (int64_t i = 0; i < H * W; ++i) widened[size_t(i)] = load_value(xp, i);
          maxpool_2x2_plane(widened.data(), W, OH, OW, pooled.data(), ap, s.relu);
          for (int64_t i = 0; i < OH * OW; ++i)
            store_value(yp, i, pooled[size_t(i)]);  // exact: an input value or 0
        }
        continue;
      }
      for (int64_t oh = 0; oh < OH; ++oh) {
        const Window rows = window(oh, s.stride_h, s.pad_h, s.kernel_h, H);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const Window cols = window(ow, s.stride_w, s.pad_w, s.kernel_w, W);
          int64_t best = rows.lo * W + cols.lo;
          float best_value = load_value(xp, best);
          for (int64_t h = rows.lo; h < rows.hi; ++h)
            for (int64_t w = cols.lo; w < cols.hi; ++w) {
              const float v = load_value(xp, h * W + w);
              if (v > best_value || std::isnan(v))
                best_value = v, best = h * W + w;
            }
          const bool zeroed = s.relu && !(best_value > 0.0f);  // the fused ReLU
          store_value(yp, oh * OW + ow, zeroed ? 0.0f : best_value);
          ap[oh * OW + ow] = zeroed ? -1 : int32_t(best);
        }
      }
    }
  });
}

template <class X>
void maxpool_backward(const Pool2dShape& s, const X* dy, const int32_t* argmax, X* dx) {
  const int64_t HW = s.height * s.width, OHW = s.out_height() * s.out_width();
  // Windows that do not overlap send each input at most one gradient: bfloat16 then needs no
  // float32 plane, as 0 + dy rounds back to dy's own value (the seed CNN's 2x2 windows: the
  // plane made its bf16 pooling backward twice the float32 one).
  const bool disjoint = s.stride_h >= s.kernel_h && s.stride_w >= s.kernel_w;
  parallel_ranges(s.batch * s.channels, plane_grain(HW), [=](int64_t p0, int64_t p1) {
    GradientPlane<X> gradient(std::is_same_v<X, float> || !disjoint ? HW : 0);
    for (int64_t plane = p0; plane < p1; ++plane) {
      X* dx_plane = dx + plane * HW;
      const X* dyp = dy + plane * OHW;
      const int32_t* ap = argmax + plane * OHW;
      auto check = [&](int32_t at) {
        if (at < 0 || at >= HW)
          throw ShapeError("maxpool2d_backward: argmax " + std::to_string(at) +
                           " is outside the " + std::to_string(s.height) + "x" +
                           std::to_string(s.width) +
                           " plane; pass the argmax buffer maxpool2d_forward wrote for this shape");
      };
      if constexpr (!std::is_same_v<X, float>) {
        if (disjoint) {
          std::memset(dx_plane, 0, size_t(HW) * sizeof(X));
          for (int64_t i = 0; i < OHW; ++i) {
            if (ap[i] == -1) continue;  // zeroed by a fused ReLU
            check(ap[i]);
            store_value(dx_plane, ap[i], 0.0f + load_value(dyp, i));
          }
          continue;
        }
      }
      float* dxp = gradient.zeroed(dx_plane);
      for (int64_t i = 0; i < OHW; ++i) {
        if (ap[i] == -1) continue;  // zeroed by a fused ReLU
        check(ap[i]);
        dxp[ap[i]] += load_value(dyp, i);
      }
      gradient.store(dxp, dx_plane);
    }
  });
}

template <class X>
void avgpool_forward(const Pool2dShape& s, const X* x, X* y) {
  const int64_t H = s.height, W = s.width, OH = s.out_height(), OW = s.out_width();
  const double divisor = double(s.kernel_h * s.kernel_w);
  parallel_ranges(s.batch * s.channels, plane_grain(H * W), [=](int64_t p0, int64_t p1) {
    for (int64_t plane = p0; plane < p1; ++plane) {
      const X* xp = x + plane * H * W;
      X* yp = y + plane * OH * OW;
      if (OH == 1 && OW == 1 && s.pad_h == 0 && s.pad_w == 0 && s.kernel_h == H &&
          s.kernel_w == W) {  // global average pooling
        store_value(yp, 0, float(sum_values(xp, H * W) / divisor));
        continue;
      }
      for (int64_t oh = 0; oh < OH; ++oh) {
        const Window rows = window(oh, s.stride_h, s.pad_h, s.kernel_h, H);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const Window cols = window(ow, s.stride_w, s.pad_w, s.kernel_w, W);
          double sum = 0.0;
          for (int64_t h = rows.lo; h < rows.hi; ++h)
            for (int64_t w = cols.lo; w < cols.hi; ++w) sum += load_value(xp, h * W + w);
          store_value(yp, oh * OW + ow, float(sum / divisor));
        }
      }
    }
  });
}

template <class X>
void avgpool_backward(const Pool2dShape& s, const X* dy, X* dx) {
  const int64_t H = s.height, W = s.width, OH = s.out_height(), OW = s.out_width();
  const float inv = float(1.0 / double(s.kernel_h * s.kernel_w));
  parallel_ranges(s.batch * s.channels, plane_grain(H * W), [=](int64_t p0, int64_t p1) {
    GradientPlane<X> gradient(H * W);
    for (int64_t plane = p0; plane < p1; ++plane) {
      X* dx_plane = dx + plane * H * W;
      float* dxp = gradient.zeroed(dx_plane);
      const X* dyp = dy + plane * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const Window rows = window(oh, s.stride_h, s.pad_h, s.kernel_h, H);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const Window cols = window(ow, s.stride_w, s.pad_w, s.kernel_w, W);
          const float g = load_value(dyp, oh * OW + ow) * inv;
          for (int64_t h = rows.lo; h < rows.hi; ++h)
            for (int64_t w = cols.lo; w < cols.hi; ++w) dxp[h * W + w] += g;
        }
      }
      gradient.store(dxp, dx_plane);
    }
  });
}

}  // namespace

void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, int32_t* argmax) {
  maxpool_forward(s, x, y, argmax);
}
void maxpool2d_forward(const Pool2dShape& s, const uint16_t* x, uint16_t* y, int32_t* argmax) {
  maxpool_forward(s, x, y, argmax);
}
void maxpool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax, float* dx) {
  maxpool_backward(s, dy, argmax, dx);
}
void maxpool2d_backward(const Pool2dShape& s, const uint16_t* dy, const int32_t* argmax,
                        uint16_t* dx) {
  maxpool_backward(s, dy, argmax, dx);
}
void avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) {
  avgpool_forward(s, x, y);
}
void avgpool2d_forward(const Pool2dShape& s, const uint16_t* x, uint16_t* y) {
  avgpool_forward(s, x, y);
}
void avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) {
  avgpool_backward(s, dy, dx);
}
void avgpool2d_backward(const Pool2dShape& s, const uint16_t* dy, uint16_t* dx) {
  avgpool_backward(s, dy, dx);
}

}  // namespace trident::cpu
