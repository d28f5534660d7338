// Shared helpers of the 16-bit conformance suite (conformance_dtypes*.cpp): the devices that
// hold each type, inputs rounded on the host, fenced 16-bit buffers, and the error bound of a
// 16-bit op, derived below, checked element by element.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "trident/core/half.h"
#include "tests/conformance.h"
#include "tests/half_reference_device.h"

namespace trident::testing {

// ---- tolerances ------------------------------------------------------------------------------
//
// Derived, not fitted. Every 16-bit operand is drawn, rounded on the host to the type
// (core/half.h) and given to the device in that type and to the float64 reference as the same
// values in float32: the inputs are exact in both, and only the device's arithmetic differs.
//
//  - It computes in float32. A reduction of K terms (a dot product, a channel, a window) errs by
//    at most (K-1) u32 S, S the sum of the terms' absolute values, in any summation order
//    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 4.2). S is computed by
//    running the reference op on absolute values (|alpha||A||B| + |beta||C| + |bias| for GEMM).
//    A product of two 16-bit values is exact in float32 (at most 2 x 11 significant bits).
//    c counts float32 roundings per term; K includes the op's few elementwise roundings
//    (alpha, beta, a bias, a division). c = 2 for GEMM and convolution admits accumulators that
//    truncate instead of rounding (some tensor cores do).
//  - It rounds every 16-bit value it stores once, to nearest even: <= u16 |y| + eta16, where
//    eta16 is half the smallest subnormal, the absolute error below the normal range.
//  - A path may store r intermediates in 16-bit, each adding u16 S + eta16: the contract allows
//    it, because core's default compositions do it on a backend that computes the family
//    natively (the fused GEMM epilogue rounds C, then C + bias, before the activation; the
//    default convolution rounds y before the bias and the input-gradient columns before col2im
//    sums them; the default training head rounds y and dlogp before the softmax backward).
//  - The reference's float32 result is within u32 |y| of the exact value.
// So, per element:   |dev - ref| <= e + f (u16 (|ref| + e) + eta16),
//                    e = r (u16 S + eta16) + c K u32 S + u32 |ref|,
// f = 1 when the output is 16-bit and 0 when it is float32; u16 = unit_roundoff(type)
// (2^-11 for f16, 2^-8 for bf16), u32 = 2^-24. An activation after the reduction multiplies e by
// its Lipschitz constant (GELU's 1.13 bounds them all) and adds its own float32 evaluation
// (16 u32 (|x| + |y|): a few ulps of the libm functions, as in the float32 suite).
//
// The rules of the ops (output f: 16-bit unless the column says f32; S per element):
//   op                              r                         c   K                    S
//   convert, fill, im2col, gather_rows, max-pool forward, count_correct: bit-exact
//   gemm, C 16-bit                  bias? + activation?       2   k + 4                |a||A||B| + |b||C| + |bias|
//   gemm, C f32                     0                         2   k + 4                same
//   axpby                           0                         1   3                    |a||x| + |b||y|
//   scale, dropout                  0                         1   2                    |y|
//   unary forward                   0                         *   1                    |x| + |y|
//   unary backward                  0                         *   1                    |dy| (1 + |x| + |y|)
//       (* 0 for identity and relu, 1 for leaky_relu, 16 for tanh, sigmoid, gelu)
//   channel_affine                  0                         1   2                    |x||scale| + |shift|
//   channel_sums (f32 out)          0                         1   outer*inner + 2      sums of |x|(|y|) + |beta||out|
//   conv2d forward y                bias?                     2   C*KH*KW + 2          conv(|x|,|w|) + |b|
//   conv2d backward dx              1 (columns)               2   OC*KH*KW + KH*KW     conv backward of |w|, |dy|
//   conv2d backward dw, db (f32)    0                         2   N*OH*OW + 1          sums of |dy||x|, |dy|
//   col2im                          0                         1   KH*KW                col2im(|col|)
//   max-pool backward               0                         1   windows per pixel    backward of |dy|
//   avg-pool forward / backward     0                         1   window (+1)          pooling of |x| / |dy|
//   batchnorm (see conformance_dtypes_nn.cpp: S from the statistics, c 1-2, K outer*inner)
//   log_softmax forward             0                         2   cols + 4             |x - max| + lse + 1
//   log_softmax backward            0                         1   cols + 6             |dy| + exp(y) sum|dy|
//   log_softmax_nll dx              2 (y and dlogp)           2   cols + 6             g (p (1 + |y|) + t)
//   log_softmax_nll, nll loss (f32) 1 (y) / 0                 1   rows + cols + 6      mean sum t (|y| + 1)
//   mse_loss dx / loss (f32)        0                         1   4 / rows*cols + 3    ...
//   gather_samples                  0                         1   4                    (|x s| + |mean|) inv_std
//
// What this catches: a conversion that truncates instead of rounding to nearest errs by up to
// 2 u16 |y|, twice what an elementwise op (S = |y|) allows; reading float16 as bfloat16 errs
// by O(|y|). Both fail the suite (the report of issue 12 shows it).

struct ErrorRule {
  int intermediate = 0;  // r: 16-bit intermediates a path may store
  double c = 1.0;        // float32 roundings per term
  int64_t k = 1;         // terms of the longest reduction plus the op's own roundings
};

inline double eta16(DType t) {
  return t == DType::f16 ? std::ldexp(1.0, -25) : t == DType::bf16 ? std::ldexp(1.0, -134)
                                                                   : std::ldexp(1.0, -150);
}

// The bound of every element: want is the reference's output, s the per-element S, out the
// output's type (16-bit: rounded at the end) and compute the op's 16-bit type (its u16).
inline std::vector<double> error_bounds(DType compute, DType out, const ErrorRule& rule,
                                        const std::vector<float>& want,
                                        const std::vector<double>& s) {
  const double u16 = unit_roundoff(compute), u32 = unit_roundoff(DType::f32), eta = eta16(compute);
  std::vector<double> bound(want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double ref = std::isfinite(want[i]) ? std::abs(double(want[i])) : 0.0;
    const double e = rule.intermediate * (u16 * s[i] + eta) + rule.c * double(rule.k) * u32 * s[i] +
                     u32 * ref;
    bound[i] = is_half(out) ? e + u16 * (ref + e) + eta : e;
  }
  return bound;
}

// S of an elementwise op whose only magnitude is its output.
inline std::vector<double> magnitudes(const std::vector<float>& v) {
  std::vector<double> s(v.size());
  for (size_t i = 0; i < v.size(); ++i) s[i] = std::abs(double(v[i]));
  return s;
}

inline std::vector<float> absolute(const std::vector<float>& v) {
  std::vector<float> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::abs(v[i]);
  return a;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

struct BoundedComparison {
  bool ok = true;
  size_t count = 0, failures = 0, worst = 0;
  double worst_got = 0.0, worst_want = 0.0, worst_bound = 0.0, worst_ratio = 0.0;
  std::string summary() const {
    std::ostringstream o;
    o << failures << " of " << count << " elements outside their bound; largest error / bound "
      << worst_ratio << " at [" << worst << "]: got " << worst_got << ", want " << worst_want
      << ", bound " << worst_bound;
    return o.str();
  }
};

// got[i] within bound[i] of want[i]; NaN matches NaN, an infinity only itself.
inline BoundedComparison compare_bounded(const std::vector<float>& got,
                                         const std::vector<float>& want,
                                         const std::vector<double>& bound) {
  BoundedComparison c;
  c.count = want.size();
  if (got.size() != want.size() || bound.size() != want.size()) {
    c.ok = false;
    c.failures = want.size();
    return c;
  }
  c.worst_ratio = -1.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    double err;
    if (std::isnan(w) || std::isnan(g))
      err = std::isnan(w) && std::isnan(g) ? 0.0 : INFINITY;
    else if (std::isinf(w) || std::isinf(g))
      err = g == w ? 0.0 : INFINITY;
    else
      err = std::abs(g - w);
    const double ratio = err == 0.0 ? 0.0 : bound[i] > 0.0 ? err / bound[i] : INFINITY;
    if (ratio > 1.0) ++c.failures;
    if (ratio > c.worst_ratio) {
      c.worst_ratio = ratio;
      c.worst = i;
      c.worst_got = g;
      c.worst_want = w;
      c.worst_bound = bound[i];
    }
  }
  c.ok = c.failures == 0;
  return c;
}

// ---- devices ---------------------------------------------------------------------------------

inline const std::vector<DType>& half_types() {
  static const std::vector<DType> types = {DType::f16, DType::bf16};
  return types;
}

// The test double that computes 16-bit families natively (tests/half_reference_device.h).
inline HalfReferenceDevice& half_reference_device() {
  static HalfReferenceDevice device;
  return device;
}

// The devices under test that hold `dtype`, plus the native 16-bit test double (unless
// TRIDENT_TEST_BACKENDS narrows the run to real backends). A device without the type is
// skipped with a WARN, once per device and type.
inline std::vector<Device*> devices_holding(DType dtype) {
  static std::set<std::string> warned;
  std::vector<Device*> out;
  for (Device* d : devices_under_test()) {
    if (d->supports(dtype)) {
      out.push_back(d);
    } else if (warned.insert(d->info().id() + dtype_name(dtype)).second) {
      WARN("SKIPPED " << d->info().id() << " for " << dtype_name(dtype) << ": the device does "
           "not hold the type (Device::supports)");
    }
  }
  if (!std::getenv("TRIDENT_TEST_BACKENDS")) out.push_back(&half_reference_device());
  return out;
}

// Runs the block for each 16-bit type on each device holding it, each in its own section.
#define FOR_EACH_HALF_DEVICE(dtype_var, device_var)                                        \
  for (const ::trident::DType dtype_var : ::trident::testing::half_types())               \
    for (::trident::Device* device_var : ::trident::testing::devices_holding(dtype_var))   \
      DYNAMIC_SECTION(::trident::dtype_name(dtype_var) << " on " << device_var->info().id())

// ---- values ----------------------------------------------------------------------------------

// The values as the 16-bit type holds them (rounded to nearest even, widened back).
inline std::vector<float> rounded(DType dtype, std::vector<float> values) {
  if (is_half(dtype))
    for (float& v : values) v = half_bits_to_float(dtype, float_to_half_bits(dtype, v));
  return values;
}

inline std::vector<float> random_rounded(DType dtype, size_t count, uint32_t seed, float lo = -1.0f,
                                         float hi = 1.0f) {
  return rounded(dtype, random_floats(count, seed, lo, hi));
}

// `count` elements of `dtype` placed `offset` elements into an allocation whose head and tail
// hold a sentinel (an odd offset puts 16-bit data off 4-byte alignment, where vector loads of
// pairs break); tensor() views the values, values() reads them widened to float.
class FencedBuffer {
 public:
  static constexpr size_t kTail = 5;
  FencedBuffer(Device& device, DType dtype, const std::vector<float>& values, size_t offset)
      : dtype_(dtype), offset_(offset), count_(values.size()) {
    std::vector<float> all(offset_ + count_ + kTail, kSentinel);
    std::copy(values.begin(), values.end(), all.begin() + std::ptrdiff_t(offset_));
    whole_ = Tensor::from_host(device, {int64_t(all.size())}, all, dtype);
  }
  Tensor tensor() const { return whole_.view(int64_t(offset_), {int64_t(count_)}); }
  Tensor tensor(const Shape& shape) const { return whole_.view(int64_t(offset_), shape); }
  std::vector<float> values() const {
    const std::vector<float> all = whole_.to_host();
    return {all.begin() + std::ptrdiff_t(offset_), all.begin() + std::ptrdiff_t(offset_ + count_)};
  }
  size_t guard_damage() const {
    const std::vector<float> all = whole_.to_host();
    const float sentinel = rounded(dtype_, {kSentinel})[0];
    size_t damaged = 0;
    for (size_t i = 0; i < all.size(); ++i)
      if ((i < offset_ || i >= offset_ + count_) && all[i] != sentinel) ++damaged;
    return damaged;
  }

 private:
  static constexpr float kSentinel = -12345.0f;
  DType dtype_;
  size_t offset_, count_;
  Tensor whole_;
};

inline std::vector<float> nans(size_t count) {
  return std::vector<float>(count, std::numeric_limits<float>::quiet_NaN());
}

}  // namespace trident::testing

// CHECKs every element of got against want within its bound; on failure prints the count and
// the element nearest to (or furthest past) its bound.
#define TRIDENT_CHECK_BOUNDED(got, want, bounds)                                         \
  do {                                                                                  \
    const ::trident::testing::BoundedComparison trident_cmp_ =                          \
        ::trident::testing::compare_bounded((got), (want), (bounds));                   \
    INFO(#got " vs " #want ": " << trident_cmp_.summary());                             \
    CHECK(trident_cmp_.ok);                                                             \
  } while (false)
