// Reference NCHW convolution, forward and backward, as the direct seven-loop definition (no
// im2col, no GEMM), so that it checks the backends' lowering independently. Sums in double.
#include <vector>

#include "trident/kernels/reference/reference_ops.h"

namespace trident::reference {
namespace {

// Calls visit(n, oc, oh, ow, ic, kh, kw, x_index) for every (output, tap) pair whose input
// position lies inside the image (zero padding contributes nothing).
template <typename Visit>
void for_each_tap(const Conv2dShape& s, Visit visit) {
  const int64_t OH = s.out_height(), OW = s.out_width();
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t oc = 0; oc < s.out_channels; ++oc)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          for (int64_t ic = 0; ic < s.in_channels; ++ic)
            for (int64_t kh = 0; kh < s.kernel_h; ++kh)
              for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
                const int64_t ih = oh * s.stride_h - s.pad_h + kh;
                const int64_t iw = ow * s.stride_w - s.pad_w + kw;
                if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
                const int64_t x_index = ((n * s.in_channels + ic) * s.height + ih) * s.width + iw;
                visit(n, oc, oh, ow, ic, kh, kw, x_index);
              }
}

int64_t y_index(const Conv2dShape& s, int64_t n, int64_t oc, int64_t oh, int64_t ow) {
  return ((n * s.out_channels + oc) * s.out_height() + oh) * s.out_width() + ow;
}

int64_t w_index(const Conv2dShape& s, int64_t oc, int64_t ic, int64_t kh, int64_t kw) {
  return ((oc * s.in_channels + ic) * s.kernel_h + kh) * s.kernel_w + kw;
}

}  // namespace

void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                    float* y) {
  // y is [N, OC, OH, OW]; start every output at its bias, then add every tap.
  const int64_t y_count = s.batch * s.out_channels * s.out_height() * s.out_width();
  const int64_t plane = s.out_height() * s.out_width();
  std::vector<double> acc(static_cast<size_t>(y_count));
  for (int64_t i = 0; i < y_count; ++i) acc[i] = b ? b[(i / plane) % s.out_channels] : 0.0;
  for_each_tap(s, [&](int64_t n, int64_t oc, int64_t oh, int64_t ow, int64_t ic, int64_t kh,
                      int64_t kw, int64_t xi) {
    acc[y_index(s, n, oc, oh, ow)] += double(x[xi]) * w[w_index(s, oc, ic, kh, kw)];
  });
  for (int64_t i = 0; i < y_count; ++i) y[i] = static_cast<float>(acc[i]);
}

void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* db) {
  const int64_t x_count = s.batch * s.in_channels * s.height * s.width;
  const int64_t w_count = s.out_channels * s.in_channels * s.kernel_h * s.kernel_w;
  const int64_t plane = s.out_height() * s.out_width();
  std::vector<double> dx_acc(static_cast<size_t>(x_count), 0.0);
  std::vector<double> dw_acc(static_cast<size_t>(w_count), 0.0);
  std::vector<double> db_acc(static_cast<size_t>(s.out_channels), 0.0);
  for (int64_t i = 0; i < s.batch * s.out_channels * plane; ++i)
    db_acc[(i / plane) % s.out_channels] += dy[i];
  for_each_tap(s, [&](int64_t n, int64_t oc, int64_t oh, int64_t ow, int64_t ic, int64_t kh,
                      int64_t kw, int64_t xi) {
    const double g = dy[y_index(s, n, oc, oh, ow)];
    const int64_t wi = w_index(s, oc, ic, kh, kw);
    dw_acc[wi] += g * x[xi];
    dx_acc[xi] += g * w[wi];
  });
  for (int64_t i = 0; i < w_count; ++i) dw[i] = static_cast<float>(dw_acc[i]);
  if (db)
    for (int64_t i = 0; i < s.out_channels; ++i) db[i] = static_cast<float>(db_acc[i]);
  if (dx)
    for (int64_t i = 0; i < x_count; ++i) dx[i] = static_cast<float>(dx_acc[i]);
}

// col[(c, kh, kw), (oh, ow)] = x[c, oh*SH - PH + kh, ow*SW - PW + kw], zero outside.
void im2col(const Conv2dShape& s, const float* x, float* col) {
  const int64_t OH = s.out_height(), OW = s.out_width();
  for (int64_t c = 0; c < s.in_channels; ++c)
    for (int64_t kh = 0; kh < s.kernel_h; ++kh)
      for (int64_t kw = 0; kw < s.kernel_w; ++kw)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t ih = oh * s.stride_h - s.pad_h + kh, iw = ow * s.stride_w - s.pad_w + kw;
            const bool inside = ih >= 0 && ih < s.height && iw >= 0 && iw < s.width;
            col[(((c * s.kernel_h + kh) * s.kernel_w + kw) * OH + oh) * OW + ow] =
                inside ? x[(c * s.height + ih) * s.width + iw] : 0.0f;
          }
}

void col2im(const Conv2dShape& s, const float* col, float* dx) {
  const int64_t OH = s.out_height(), OW = s.out_width();
  std::vector<double> acc(static_cast<size_t>(s.in_channels * s.height * s.width), 0.0);
  for (int64_t c = 0; c < s.in_channels; ++c)
    for (int64_t kh = 0; kh < s.kernel_h; ++kh)
      for (int64_t kw = 0; kw < s.kernel_w; ++kw)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t ih = oh * s.stride_h - s.pad_h + kh, iw = ow * s.stride_w - s.pad_w + kw;
            if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
            acc[size_t((c * s.height + ih) * s.width + iw)] +=
                col[(((c * s.kernel_h + kh) * s.kernel_w + kw) * OH + oh) * OW + ow];
          }
  for (size_t i = 0; i < acc.size(); ++i) dx[i] = static_cast<float>(acc[i]);
}

}  // namespace trident::reference
