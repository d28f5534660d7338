// HalfReferenceDevice: 16-bit storage around the float64 reference loops (see the header).
#include "tests/half_reference_device.h"

#include <cstring>
#include <vector>

#include "trident/core/half.h"
#include "trident/kernels/reference/reference_ops.h"

namespace trident::testing {
namespace {

template <class T = float>
T* at(const Tensor& t) {
  if (!t.defined()) return nullptr;
  const DeviceMemory m = t.memory();
  return reinterpret_cast<T*>(static_cast<char*>(m.handle) + m.offset);
}

bool any_half(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && is_half(t->dtype())) return true;
  return false;
}

// The elements of t as float (16-bit and u8 widened exactly); empty when t is undefined.
std::vector<float> widen(const Tensor& t) {
  std::vector<float> v(t.defined() ? size_t(t.numel()) : 0);
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype()) {
      case DType::f32: v[i] = at<float>(t)[i]; break;
      case DType::u8: v[i] = float(at<uint8_t>(t)[i]); break;
      default: v[i] = half_bits_to_float(t.dtype(), at<uint16_t>(t)[i]); break;
    }
  }
  return v;
}

// Element i of t = value, rounded to nearest even when t is 16-bit.
void put(const Tensor& t, size_t i, float value) {
  if (t.dtype() == DType::f32)
    at<float>(t)[i] = value;
  else
    at<uint16_t>(t)[i] = float_to_half_bits(t.dtype(), value);
}

void store(const Tensor& t, const std::vector<float>& values) {
  for (size_t i = 0; i < values.size(); ++i) put(t, i, values[i]);
}

const float* data_or_null(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

}  // namespace

bool HalfReferenceDevice::do_native(OpFamily family, DType dtype) const {
  if (!is_half(dtype)) return false;
  switch (family) {
    case OpFamily::convert:
    case OpFamily::gemm:
    case OpFamily::elementwise:
    case OpFamily::channel:
    case OpFamily::conv2d: return true;
    default: return false;
  }
}

void HalfReferenceDevice::do_convert(const Tensor& src, const Tensor& dst) {
  store(dst, widen(src));
}

void HalfReferenceDevice::do_fill(const Tensor& dst, float value) {
  if (!is_half(dst.dtype())) return ReferenceDevice::do_fill(dst, value);
  const uint16_t bits = float_to_half_bits(dst.dtype(), value);
  for (int64_t i = 0; i < dst.numel(); ++i) at<uint16_t>(dst)[i] = bits;
}

void HalfReferenceDevice::do_update_loss_scale(const Tensor& state, const Tensor& grad_sumsq,
                                               const LossScaleParams& params) {
  reference::update_loss_scale(at(state), at(grad_sumsq)[0], params);
}

void HalfReferenceDevice::do_gemm(const GemmArgs& g) {
  if (!any_half({&g.a, &g.b, &g.c})) return ReferenceDevice::do_gemm(g);
  const std::vector<float> a = widen(g.a), b = widen(g.b);
  std::vector<float> c = widen(g.c);
  reference::HostGemmArgs h;
  h.trans_a = g.trans_a; h.trans_b = g.trans_b; h.m = g.m; h.n = g.n; h.k = g.k;
  h.alpha = g.alpha; h.beta = g.beta;
  h.a = a.data(); h.b = b.data(); h.c = c.data();
  h.lda = g.lda; h.ldb = g.ldb; h.ldc = g.ldc;
  reference::gemm(h);
  for (int64_t i = 0; i < g.m; ++i)  // only the matrix: the stride's padding stays as it was
    for (int64_t j = 0; j < g.n; ++j) put(g.c, size_t(i * g.ldc + j), c[size_t(i * g.ldc + j)]);
}

void HalfReferenceDevice::do_axpby(const Tensor& x, const Tensor& y, float a, float b) {
  if (!any_half({&x, &y})) return ReferenceDevice::do_axpby(x, y, a, b);
  const std::vector<float> xs = widen(x);
  std::vector<float> ys = widen(y);
  reference::axpby(xs.data(), ys.data(), y.numel(), a, b);
  store(y, ys);
}

void HalfReferenceDevice::do_unary_forward(UnaryOp op, const Tensor& x, const Tensor& y,
                                           float alpha) {
  if (!any_half({&x, &y})) return ReferenceDevice::do_unary_forward(op, x, y, alpha);
  const std::vector<float> xs = widen(x);
  std::vector<float> ys(xs.size());
  reference::unary_forward(op, xs.data(), ys.data(), x.numel(), alpha);
  store(y, ys);
}

void HalfReferenceDevice::do_unary_backward(UnaryOp op, const Tensor& x, const Tensor& y,
                                            const Tensor& dy, const Tensor& dx, float alpha) {
  if (!any_half({&x, &y, &dy, &dx}))
    return ReferenceDevice::do_unary_backward(op, x, y, dy, dx, alpha);
  const std::vector<float> xs = widen(x), ys = widen(y), dys = widen(dy);
  std::vector<float> dxs(dys.size());
  reference::unary_backward(op, data_or_null(xs), data_or_null(ys), dys.data(), dxs.data(),
                            dy.numel(), alpha);
  store(dx, dxs);
}

void HalfReferenceDevice::do_dropout(const Tensor& x, const Tensor& y, int64_t group,
                                     int64_t group_offset, float p, uint64_t seed,
                                     uint32_t stream, const Tensor& step_state) {
  if (!any_half({&x, &y}))
    return ReferenceDevice::do_dropout(x, y, group, group_offset, p, seed, stream, step_state);
  const std::vector<float> xs = widen(x);
  std::vector<float> ys(xs.size());
  reference::dropout(xs.data(), ys.data(), x.numel(), group, group_offset, p, seed, stream,
                     at<uint32_t>(step_state));
  store(y, ys);
}

void HalfReferenceDevice::do_channel_affine(const Tensor& x, const Tensor& scale,
                                            const Tensor& shift, const Tensor& y, int64_t outer,
                                            int64_t channels, int64_t inner) {
  if (!any_half({&x, &y}))
    return ReferenceDevice::do_channel_affine(x, scale, shift, y, outer, channels, inner);
  const std::vector<float> xs = widen(x);
  std::vector<float> ys(xs.size());
  reference::channel_affine(xs.data(), at(scale), at(shift), ys.data(), outer, channels, inner);
  store(y, ys);
}

void HalfReferenceDevice::do_channel_sums(const Tensor& x, const Tensor& y, const Tensor& out,
                                          int64_t outer, int64_t channels, int64_t inner,
                                          float beta) {
  if (!any_half({&x, &y}))
    return ReferenceDevice::do_channel_sums(x, y, out, outer, channels, inner, beta);
  const std::vector<float> xs = widen(x), ys = widen(y);
  reference::channel_sums(xs.data(), data_or_null(ys), at(out), outer, channels, inner, beta);
}

void HalfReferenceDevice::do_im2col(const Conv2dShape& s, const Tensor& x, const Tensor& col) {
  if (!any_half({&x, &col})) return ReferenceDevice::do_im2col(s, x, col);
  const std::vector<float> xs = widen(x);
  std::vector<float> cols(size_t(col.numel()));
  reference::im2col(s, xs.data(), cols.data());
  store(col, cols);
}

void HalfReferenceDevice::do_col2im(const Conv2dShape& s, const Tensor& col, const Tensor& dx) {
  if (!any_half({&col, &dx})) return ReferenceDevice::do_col2im(s, col, dx);
  const std::vector<float> cols = widen(col);
  std::vector<float> dxs(size_t(dx.numel()));
  reference::col2im(s, cols.data(), dxs.data());
  store(dx, dxs);
}

}  // namespace trident::testing
