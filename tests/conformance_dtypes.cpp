// 16-bit conformance, conversions and the linear / elementwise ops: convert (bit for bit, every
// pattern), gemm, axpby, scale, fill, every unary op, dropout, channel_affine and channel_sums
// in float16 and bfloat16 on every device that holds the type, against the float64 reference
// within the derived bounds of tests/dtype_check.h; and the front's refusals of mixed types and
// of types a device does not hold.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "trident/kernels/reference/reference_ops.h"
#include "tests/dtype_check.h"
#include "tests/reference_device.h"

using namespace trident;
using namespace trident::testing;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<UnaryOp> all_unary_ops() {
  return {
#define TRIDENT_TEST_UNARY(name, module) UnaryOp::name,
      TRIDENT_UNARY_OPS(TRIDENT_TEST_UNARY)
#undef TRIDENT_TEST_UNARY
  };
}

// Raw 16-bit patterns to and from the device.
Tensor upload_bits(Device& d, DType t, const std::vector<uint16_t>& bits) {
  Tensor out = Tensor::empty(d, {int64_t(bits.size())}, t);
  out.copy_from_host(bits.data(), bits.size() * 2);
  return out;
}
std::vector<uint16_t> download_bits(const Tensor& t) {
  std::vector<uint16_t> bits(size_t(t.numel()));
  t.to_host(bits.data(), bits.size() * 2);
  return bits;
}
std::vector<uint32_t> download_f32_bits(const Tensor& t) {
  std::vector<uint32_t> bits(size_t(t.numel()));
  t.to_host(bits.data(), bits.size() * 4);
  return bits;
}

// Equal bits, except that NaN only has to stay NaN (payloads are the backend's).
size_t half_mismatches(DType t, const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool nan = std::isnan(half_bits_to_float(t, want[i]));
    if (nan ? !std::isnan(half_bits_to_float(t, got[i])) : got[i] != want[i]) {
      if (bad < 3) {
        INFO(dtype_name(t) << " element " << i << ": got 0x" << std::hex << got[i] << ", want 0x"
                           << want[i]);
        CHECK(false);
      }
      ++bad;
    }
  }
  return bad;
}

// Floats that exercise a float -> 16-bit rounding: ties and their neighbours at the rounding
// position of every exponent, overflow, subnormals, NaN, infinities, plus random patterns.
std::vector<float> rounding_probes(uint32_t seed) {
  std::vector<float> v = {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(),
                          65504.0f, 65519.996f, 65520.0f, -65520.0f, 1e9f, -1e30f,
                          std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(3.0f, -25),
                          std::ldexp(1.0f, -26), std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(), std::numeric_limits<float>::max()};
  std::mt19937 rng(seed);
  for (uint32_t exponent = 0; exponent < 255; ++exponent)
    for (uint32_t cut = 1; cut <= 24; ++cut) {
      const uint32_t tie = 1u << (cut - 1), mask = cut >= 23 ? 0x7fffffu : (1u << cut) - 1u;
      for (const uint32_t low : {tie, tie - 1u, tie + 1u}) {
        const uint32_t u = (rng() & 0x80000000u) | exponent << 23 | ((rng() & ~mask) | (low & mask)) & 0x7fffffu;
        float f;
        std::memcpy(&f, &u, 4);
        v.push_back(f);
      }
    }
  for (int i = 0; i < 20000; ++i) {
    const uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  return v;
}

}  // namespace

TEST_CASE("conformance 16-bit: convert is exact: every pattern widens and rounds back, floats "
          "round to nearest even (ties, overflow, subnormals, NaN), bytes convert exactly",
          "[conformance][dtypes][convert]") {
  FOR_EACH_HALF_DEVICE(t, device) {
    std::vector<uint16_t> patterns(65536);
    for (uint32_t i = 0; i < 65536; ++i) patterns[i] = uint16_t(i);
    // Widening, from a view at an odd element offset (2-byte but not 4-byte aligned).
    std::vector<uint16_t> padded(patterns.size() + 2, 0x1234);
    std::copy(patterns.begin(), patterns.end(), padded.begin() + 1);
    Tensor narrow = upload_bits(*device, t, padded).view(1, {65536});
    Tensor wide = Tensor::empty(*device, {65536});
    device->convert(narrow, wide);
    const std::vector<uint32_t> wide_bits = download_f32_bits(wide);
    size_t bad = 0;
    for (size_t i = 0; i < patterns.size(); ++i) {
      const float want = half_bits_to_float(t, patterns[i]);
      float got;
      std::memcpy(&got, &wide_bits[i], 4);
      if (std::isnan(want) ? !std::isnan(got) : wide_bits[i] != float_bits(want)) ++bad;
    }
    CHECK(bad == 0);
    // ... and back: every pattern rounds to itself (NaN to a NaN).
    Tensor back = Tensor::empty(*device, {65536}, t);
    device->convert(wide, back);
    CHECK(half_mismatches(t, download_bits(back), patterns) == 0);

    // Floats at every rounding position, overflow, subnormals and NaN, into an odd offset.
    const std::vector<float> probes = rounding_probes(uint32_t(t) + 40);
    std::vector<uint16_t> want(probes.size());
    for (size_t i = 0; i < probes.size(); ++i) want[i] = float_to_half_bits(t, probes[i]);
    Tensor src = upload(*device, probes);
    Tensor dst_all = Tensor::empty(*device, {int64_t(probes.size()) + 3}, t);
    device->fill(dst_all, 0.0f);
    device->convert(src, dst_all.view(3, {int64_t(probes.size())}));
    const std::vector<uint16_t> all = download_bits(dst_all);
    CHECK(half_mismatches(t, std::vector<uint16_t>(all.begin() + 3, all.end()), want) == 0);
    CHECK((all[0] | all[1] | all[2]) == 0);  // nothing written before the view

    // Between the two 16-bit types: one rounding through float32.
    const DType other = t == DType::f16 ? DType::bf16 : DType::f16;
    if (device->supports(other)) {
      Tensor converted = Tensor::empty(*device, {65536}, other);
      device->convert(upload_bits(*device, t, patterns), converted);
      std::vector<uint16_t> want_other(65536);
      for (size_t i = 0; i < 65536; ++i)
        want_other[i] = float_to_half_bits(other, half_bits_to_float(t, patterns[i]));
      CHECK(half_mismatches(other, download_bits(converted), want_other) == 0);
    }

    // Bytes: every value is exact in both types.
    std::vector<uint8_t> bytes(256 * 3 + 1);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7);
    Tensor from_bytes = Tensor::empty(*device, {int64_t(bytes.size())}, t);
    device->convert(upload(*device, bytes), from_bytes);
    const std::vector<float> byte_values = from_bytes.to_host();
    for (size_t i = 0; i < bytes.size(); ++i) REQUIRE(byte_values[i] == float(bytes[i]));
  }
}

TEST_CASE("conformance 16-bit: fill rounds the value once (to nearest even, overflow to "
          "infinity), at odd offsets", "[conformance][dtypes][fill]") {
  FOR_EACH_HALF_DEVICE(t, device) {
    for (const float value : {0.0f, 1.0f, -2.5f, 0.1f, 1.0f / 3.0f, 70000.0f, -1e30f, 3e-8f,
                              std::numeric_limits<float>::quiet_NaN()}) {
      INFO("fill " << value);
      FencedBuffer buffer(*device, t, random_rounded(t, 37, 5), 1);
      device->fill(buffer.tensor(), value);
      const float want = half_bits_to_float(t, float_to_half_bits(t, value));
      for (const float got : buffer.values())
        REQUIRE((std::isnan(want) ? std::isnan(got) : got == want));
      CHECK(buffer.guard_damage() == 0);
    }
  }
}

namespace {

struct HalfGemmCase {
  int64_t m, n, k;
  float alpha = 1.0f, beta = 0.0f;
  BiasKind bias = BiasKind::none;
  UnaryOp activation = UnaryOp::identity;
  int64_t pad = 0;        // extra stored columns of A, B and C (ld > cols)
  size_t offset = 0;      // elements before each operand in its allocation
  bool positive = false;  // inputs in [1/4, 1]: no cancellation, S = |C| (rounding shows)
};

// One GEMM with A and B of type t and C of c_type on the device, against the reference.
void check_half_gemm(Device& d, DType t, DType c_type, const HalfGemmCase& c, bool ta, bool tb,
                     uint32_t seed) {
  INFO("gemm " << dtype_name(t) << " C " << dtype_name(c_type) << " ta=" << ta << " tb=" << tb
               << " m=" << c.m << " n=" << c.n << " k=" << c.k << " alpha=" << c.alpha
               << " beta=" << c.beta << " bias=" << int(c.bias) << " activation="
               << unary_op_name(c.activation) << " pad=" << c.pad << " offset=" << c.offset
               << " positive=" << c.positive);
  const int64_t a_rows = ta ? c.k : c.m, a_cols = ta ? c.m : c.k;
  const int64_t b_rows = tb ? c.n : c.k, b_cols = tb ? c.k : c.n;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.n + c.pad;
  const float lo = c.positive ? 0.25f : -1.0f;
  const std::vector<float> a = random_rounded(t, size_t(a_rows * lda), seed, lo, 1.0f);
  const std::vector<float> b = random_rounded(t, size_t(b_rows * ldb), seed + 1, lo, 1.0f);
  const std::vector<float> bias = random_floats(size_t(c.bias == BiasKind::per_row ? c.m : c.n),
                                                seed + 2);
  const std::vector<float> c0 = c.beta == 0.0f ? nans(size_t(c.m * ldc))
                                               : random_rounded(c_type, size_t(c.m * ldc), seed + 3);
  reference::HostGemmArgs h;
  h.trans_a = ta; h.trans_b = tb; h.m = c.m; h.n = c.n; h.k = c.k;
  h.alpha = c.alpha; h.beta = c.beta;
  h.lda = lda; h.ldb = ldb; h.ldc = ldc;
  h.bias_kind = c.bias;
  std::vector<float> want = c0;
  h.a = a.data(); h.b = b.data(); h.c = want.data();
  h.bias = c.bias == BiasKind::none ? nullptr : bias.data();
  h.activation = c.activation;
  reference::gemm(h);
  // S: the same product on absolute values, before the activation.
  const std::vector<float> abs_a = absolute(a), abs_b = absolute(b), abs_bias = absolute(bias);
  std::vector<float> s = c.beta == 0.0f ? std::vector<float>(c0.size(), 0.0f) : absolute(c0);
  h.a = abs_a.data(); h.b = abs_b.data(); h.c = s.data();
  h.alpha = std::abs(c.alpha); h.beta = std::abs(c.beta);
  h.bias = c.bias == BiasKind::none ? nullptr : abs_bias.data();
  h.activation = UnaryOp::identity;
  reference::gemm(h);

  FencedBuffer da(d, t, a, c.offset), db(d, t, b, c.offset + 1), dc(d, c_type, c0, c.offset + 2);
  Tensor dbias = upload(d, bias);
  GemmArgs g;
  g.trans_a = ta; g.trans_b = tb; g.m = c.m; g.n = c.n; g.k = c.k;
  g.alpha = c.alpha; g.beta = c.beta;
  g.a = da.tensor(); g.b = db.tensor(); g.c = dc.tensor();
  g.lda = lda; g.ldb = ldb; g.ldc = ldc;
  if (c.bias != BiasKind::none) g.bias = dbias;
  g.bias_kind = c.bias;
  g.activation = c.activation;
  d.gemm(g);

  // The rule of the table: with a 16-bit C, core's default epilogue may round C before the
  // bias and again before the activation.
  const bool activation = c.activation != UnaryOp::identity;
  ErrorRule rule{0, 2.0, c.k + 4};
  if (is_half(c_type)) rule.intermediate = (c.bias != BiasKind::none) + activation;
  std::vector<double> bound;
  if (!activation) {
    bound = error_bounds(t, c_type, rule, want, to_double(s));
  } else {
    // Before the activation: e as in the table (no final rounding yet); then the activation's
    // Lipschitz constant and evaluation, and the final rounding of the 16-bit C.
    const std::vector<double> e = error_bounds(t, DType::f32, rule, want, to_double(s));
    const double u16 = unit_roundoff(t), u32 = unit_roundoff(DType::f32);
    bound.resize(e.size());
    for (size_t i = 0; i < e.size(); ++i) {
      const double ref = std::abs(double(want[i]));
      const double before = 1.13 * e[i] + 16.0 * u32 * (double(s[i]) + ref);
      bound[i] = is_half(c_type) ? before + u16 * (ref + before) + eta16(t) : before;
    }
  }
  // Rows of C past n (the stride's padding) are the reference's untouched c0: compared too.
  TRIDENT_CHECK_BOUNDED(dc.values(), want, bound);
  CHECK(dc.guard_damage() + da.guard_damage() + db.guard_damage() == 0);
}

}  // namespace

TEST_CASE("conformance 16-bit: gemm, every transpose case, C float32 and 16-bit, beta 0 and 1, "
          "bias per column and row, ReLU and GELU epilogues, strides, offsets",
          "[conformance][dtypes][gemm]") {
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1}, {7, 33, 257}, {33, 33, 33},
                                                      {65, 17, 129}, {1, 257, 7}};
  FOR_EACH_HALF_DEVICE(t, device) {
    uint32_t seed = 3100;
    for (const auto& [m, n, k] : shapes) {
      const std::vector<HalfGemmCase> cases = {
          {m, n, k},
          {m, n, k, 0.5f, 0.0f, BiasKind::per_column, UnaryOp::relu, 0, 3},
          {m, n, k, -1.5f, 1.0f, BiasKind::per_row, UnaryOp::gelu, 3, 1},
          {m, n, k, 1.0f, 1.0f, BiasKind::none, UnaryOp::relu, 5, 0},
          {m, n, k, 1.0f, 0.0f, BiasKind::none, UnaryOp::identity, 1, 1, true},
      };
      for (const HalfGemmCase& c : cases)
        for (const DType c_type : {t, DType::f32})
          for (const bool ta : {false, true})
            for (const bool tb : {false, true}) check_half_gemm(*device, t, c_type, c, ta, tb, seed += 7);
    }
    // Every activation epilogue once, with a per-column bias.
    for (const UnaryOp op : all_unary_ops())
      for (const DType c_type : {t, DType::f32}) {
        HalfGemmCase c{19, 37, 41, 1.0f, 0.0f, BiasKind::per_column, op, 2, 1};
        check_half_gemm(*device, t, c_type, c, false, true, seed += 7);
      }
  }
}

TEST_CASE("conformance 16-bit: a gemm with beta 0 into a strided 16-bit C writes the m x n "
          "matrix only: the stride's padding keeps its values, also where C is staged",
          "[conformance][dtypes][gemm][padding]") {
  // The regression of the staged path: a float32 copy of C that was not loaded (beta 0) was
  // written back whole, padding included. The first call (beta 1, so C is loaded) leaves other
  // values in the float32 scratch where the second call's C is staged.
  const int64_t m = 5, n = 6, k = 7, ldc = 9;
  FOR_EACH_HALF_DEVICE(t, device) {
    for (const bool tb : {false, true}) {
      INFO("tb=" << tb);
      const std::vector<float> a = random_rounded(t, size_t(m * k), 3700);
      const std::vector<float> b = random_rounded(t, size_t(k * n), 3701);
      GemmArgs g;
      g.trans_b = tb;
      g.m = m; g.n = n; g.k = k;
      g.a = Tensor::from_host(*device, {m, k}, a, t);
      g.b = Tensor::from_host(*device, tb ? Shape{n, k} : Shape{k, n}, b, t);
      g.ldc = ldc;
      Tensor warm = Tensor::from_host(*device, {m * ldc}, std::vector<float>(size_t(m * ldc), 7.0f), t);
      g.c = warm;
      g.beta = 1.0f;
      device->gemm(g);
      std::vector<float> c0(size_t(m * ldc));
      for (size_t i = 0; i < c0.size(); ++i) c0[i] = -3.0f - float(i % 4);
      Tensor c = Tensor::from_host(*device, {m * ldc}, c0, t);
      g.c = c;
      g.beta = 0.0f;
      device->gemm(g);
      const std::vector<float> got = c.to_host();
      size_t changed = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = n; j < ldc; ++j) changed += got[size_t(i * ldc + j)] != c0[size_t(i * ldc + j)];
      CHECK(changed == 0);
      // ... and the matrix is the product.
      std::vector<float> want(size_t(m * ldc), 0.0f);
      reference::HostGemmArgs h;
      h.trans_b = tb; h.m = m; h.n = n; h.k = k;
      h.a = a.data(); h.b = b.data(); h.c = want.data();
      h.lda = k; h.ldb = tb ? k : n; h.ldc = ldc;
      reference::gemm(h);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          CHECK(got[size_t(i * ldc + j)] == Approx(want[size_t(i * ldc + j)]).margin(k * 4.0 * unit_roundoff(t)));
    }
  }
}

// axpby with an activation (a residual block's sum and ReLU): fused (CPU, CUDA, OpenCL: the sum
// is not rounded before the activation) or composed (the default slot: one 16-bit intermediate,
// r = 1, the bound allows either); the activation's
// Lipschitz constant (GELU's 1.13 bounds them) and its own float evaluation as in the table.
TEST_CASE("conformance 16-bit: axpby with an activation", "[conformance][dtypes][axpby]") {
  FOR_EACH_HALF_DEVICE(t, device) {
    uint32_t seed = 3350;
    for (const UnaryOp op : {UnaryOp::relu, UnaryOp::tanh, UnaryOp::gelu})
      for (const int64_t n : {7, 1000, 40003})
        for (const auto& [a, b] : {std::pair<float, float>{1.0f, 1.0f}, {-1.5f, 0.0f}}) {
          INFO(unary_op_name(op) << " n=" << n << " a=" << a << " b=" << b);
          const std::vector<float> x = random_rounded(t, size_t(n), ++seed, -3.0f, 3.0f);
          const std::vector<float> y0 =
              b == 0.0f ? nans(size_t(n)) : random_rounded(t, size_t(n), ++seed, -3.0f, 3.0f);
          std::vector<float> want = y0;
          reference::axpby(x.data(), want.data(), n, a, b);
          reference::unary_forward(op, want.data(), want.data(), n, 0.0f);
          std::vector<double> s(x.size());
          for (size_t i = 0; i < s.size(); ++i)
            s[i] = std::abs(a * double(x[i])) + (b == 0.0f ? 0.0 : std::abs(b * double(y0[i])));
          std::vector<double> bound = error_bounds(t, t, {1, 1.0, 3}, want, s);
          for (size_t i = 0; i < bound.size(); ++i)
            bound[i] = 1.13 * bound[i] +
                       16 * unit_roundoff(DType::f32) * (s[i] + std::abs(double(want[i])));
          FencedBuffer dx(*device, t, x, 3), dy(*device, t, y0, 1);
          device->axpby(dx.tensor(), dy.tensor(), a, b, op);
          TRIDENT_CHECK_BOUNDED(dy.values(), want, bound);
          CHECK(dy.guard_damage() == 0);
        }
  }
}

TEST_CASE("conformance 16-bit: axpby and scale, in place, float32 into 16-bit and back, an "
          "overflow gives infinity", "[conformance][dtypes][axpby][scale]") {
  FOR_EACH_HALF_DEVICE(t, device) {
    uint32_t seed = 3300;
    for (const int64_t n : {1, 7, 33, 1000, 40003})
      for (const auto& [a, b] : {std::pair<float, float>{1.0f, 1.0f}, {0.25f, -0.5f}, {-2.0f, 0.0f}}) {
        INFO("axpby n=" << n << " a=" << a << " b=" << b);
        const std::vector<float> x = random_rounded(t, size_t(n), ++seed);
        const std::vector<float> y0 = b == 0.0f ? nans(size_t(n)) : random_rounded(t, size_t(n), ++seed);
        std::vector<float> want = y0;
        reference::axpby(x.data(), want.data(), n, a, b);
        std::vector<double> s(x.size());
        for (size_t i = 0; i < s.size(); ++i)
          s[i] = std::abs(a * double(x[i])) + (b == 0.0f ? 0.0 : std::abs(b * double(y0[i])));
        FencedBuffer dx(*device, t, x, 3), dy(*device, t, y0, 1);
        device->axpby(dx.tensor(), dy.tensor(), a, b);
        TRIDENT_CHECK_BOUNDED(dy.values(), want, error_bounds(t, t, {0, 1.0, 3}, want, s));
        CHECK(dy.guard_damage() == 0);
      }
    // scale: y = x * factor[0], the factor read on the device.
    const std::vector<float> x = random_rounded(t, 4099, ++seed, -4.0f, 4.0f);
    Tensor factor = upload(*device, std::vector<float>{0.375f});
    for (const auto& [from, to] : {std::pair<DType, DType>{t, t}, {DType::f32, t}, {t, DType::f32}}) {
      for (const float f : {0.375f, -3.0f / 7.0f, 1024.0f}) {
        INFO("scale " << dtype_name(from) << " -> " << dtype_name(to) << " by " << f);
        factor.copy_from_host(&f, 4);
        const std::vector<float> xin = from == DType::f32 ? random_floats(x.size(), ++seed, -4.0f, 4.0f) : x;
        std::vector<float> want(xin.size());
        for (size_t i = 0; i < xin.size(); ++i) want[i] = float(double(xin[i]) * f);
        FencedBuffer dx(*device, from, xin, 1), dy(*device, to, nans(xin.size()), 2);
        device->scale(dx.tensor(), factor, dy.tensor());
        TRIDENT_CHECK_BOUNDED(dy.values(), want, error_bounds(t, to, {0, 1.0, 2}, want, magnitudes(want)));
        CHECK(dy.guard_damage() == 0);
        if (from == to) {  // in place
          device->scale(dx.tensor(), factor, dx.tensor());
          TRIDENT_CHECK_BOUNDED(dx.values(), want, error_bounds(t, to, {0, 1.0, 2}, want, magnitudes(want)));
        }
      }
    }
    // fp16 loss scaling relies on an overflow becoming infinity (not the largest finite value).
    const float big = t == DType::f16 ? 60000.0f : 1e38f;
    Tensor xs = Tensor::from_host(*device, {3}, std::vector<float>{big, -big, 1.0f}, t);
    Tensor ys = Tensor::empty(*device, {3}, t);
    const float two = 4.0f;
    factor.copy_from_host(&two, 4);
    device->scale(xs, factor, ys);
    CHECK(ys.to_host() == std::vector<float>{kInf, -kInf, 4.0f});
  }
}

TEST_CASE("conformance 16-bit: every unary op forward and backward, in place, from x or y",
          "[conformance][dtypes][unary]") {
  FOR_EACH_HALF_DEVICE(t, device) {
    uint32_t seed = 3400;
    for (const UnaryOp op : all_unary_ops())
      for (const int64_t n : {7, 33, 4099}) {
        const float alpha = 0.2f;
        INFO(unary_op_name(op) << " n=" << n);
        std::vector<float> x = random_rounded(t, size_t(n), ++seed, -4.0f, 4.0f);
        for (size_t i = 0; i < x.size(); i += 5) x[i] = 0.0f;
        std::vector<float> y_want(x.size());
        reference::unary_forward(op, x.data(), y_want.data(), n, alpha);
        const bool exact = op == UnaryOp::identity || op == UnaryOp::relu;
        const double c = exact ? 0.0 : op == UnaryOp::leaky_relu ? 1.0 : 16.0;
        std::vector<double> s(x.size());
        for (size_t i = 0; i < s.size(); ++i) s[i] = std::abs(double(x[i])) + std::abs(double(y_want[i]));
        const std::vector<double> forward_bound = error_bounds(t, t, {0, c, 1}, y_want, s);

        FencedBuffer dx(*device, t, x, 1), dy(*device, t, nans(x.size()), 2);
        device->unary_forward(op, dx.tensor(), dy.tensor(), alpha);
        TRIDENT_CHECK_BOUNDED(dy.values(), y_want, forward_bound);
        CHECK(dy.guard_damage() == 0);
        FencedBuffer in_place(*device, t, x, 3);
        device->unary_forward(op, in_place.tensor(), in_place.tensor(), alpha);
        TRIDENT_CHECK_BOUNDED(in_place.values(), y_want, forward_bound);

        // Backward from the forward output as the 16-bit type holds it, given to both.
        const std::vector<float> y = rounded(t, y_want);
        const std::vector<float> grad = random_rounded(t, x.size(), ++seed);
        std::vector<float> dx_want(x.size());
        const bool from_x = unary_backward_needs_input(op, alpha);
        reference::unary_backward(op, x.data(), y.data(), grad.data(), dx_want.data(), n, alpha);
        for (size_t i = 0; i < s.size(); ++i)
          s[i] = std::abs(double(grad[i])) * (1.0 + std::abs(double(x[i])) + std::abs(double(y[i])));
        const std::vector<double> backward_bound = error_bounds(t, t, {0, c, 1}, dx_want, s);
        FencedBuffer dyin(*device, t, y, 0), dgrad(*device, t, grad, 1), dgrad_x(*device, t, nans(x.size()), 3);
        device->unary_backward(op, from_x ? dx.tensor() : Tensor(), from_x ? Tensor() : dyin.tensor(),
                               dgrad.tensor(), dgrad_x.tensor(), alpha);
        TRIDENT_CHECK_BOUNDED(dgrad_x.values(), dx_want, backward_bound);
        CHECK(dgrad_x.guard_damage() == 0);
        device->unary_backward(op, from_x ? dx.tensor() : Tensor(), from_x ? Tensor() : dyin.tensor(),
                               dgrad.tensor(), dgrad.tensor(), alpha);  // dx aliases dy
        TRIDENT_CHECK_BOUNDED(dgrad.values(), dx_want, backward_bound);
      }
  }
}

TEST_CASE("conformance 16-bit: dropout keeps the float32 mask bit for bit and scales the kept "
          "values once", "[conformance][dtypes][dropout]") {
  struct Case {
    int64_t n, group, group_offset;
    float p;
    uint64_t seed;
    uint32_t stream;
    std::vector<uint32_t> step_state;
  };
  const std::vector<Case> cases = {{257, 1, 0, 0.3f, 0x123456789ABCDEF0ull, 3, {4, 17}},
                                   {4099, 1, 11, 0.5f, 42, 1, {0, 123456}},
                                   {2 * 20 * 4 * 4, 16, 0, 0.5f, 7, 2, {9, 2}},
                                   {3 * 7 * 5 * 5, 25, 13, 0.25f, 0xFFFFFFFF00000001ull, 9, {1, 4294967295u}}};
  FOR_EACH_HALF_DEVICE(t, device) {
    uint32_t seed = 3500;
    for (const Case& c : cases) {
      INFO("dropout n=" << c.n << " group=" << c.group << " p=" << c.p);
      std::vector<float> x = random_rounded(t, size_t(c.n), ++seed, 0.5f, 1.0f);
      for (size_t i = 0; i < x.size(); i += 2) x[i] = -x[i];
      std::vector<float> want(x.size());
      reference::dropout(x.data(), want.data(), c.n, c.group, c.group_offset, c.p, c.seed,
                         c.stream, c.step_state.data());
      Tensor state = upload(*device, c.step_state);
      FencedBuffer dx(*device, t, x, 1), dy(*device, t, nans(x.size()), 2);
      device->dropout(dx.tensor(), dy.tensor(), c.group, c.group_offset, c.p, c.seed, c.stream, state);
      // The mask of the same call in float32 on this device.
      Tensor x32 = upload(*device, x), y32 = Tensor::empty(*device, {c.n});
      device->dropout(x32, y32, c.group, c.group_offset, c.p, c.seed, c.stream, state);
      const std::vector<float> got = dy.values(), got32 = y32.to_host();
      std::vector<uint8_t> keep(x.size()), keep32(x.size()), keep_want(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        keep[i] = got[i] != 0.0f;
        keep32[i] = got32[i] != 0.0f;
        keep_want[i] = reference::dropout_keeps(int64_t(i), c.group, c.group_offset, c.p, c.seed,
                                                c.stream, c.step_state.data());
      }
      TRIDENT_CHECK_EXACT(keep, keep_want);
      TRIDENT_CHECK_EXACT(keep, keep32);
      TRIDENT_CHECK_BOUNDED(got, want, error_bounds(t, t, {0, 1.0, 2}, want, magnitudes(want)));
      CHECK(dy.guard_damage() == 0);
      device->dropout(dx.tensor(), dx.tensor(), c.group, c.group_offset, c.p, c.seed, c.stream, state);
      TRIDENT_CHECK_BOUNDED(dx.values(), want, error_bounds(t, t, {0, 1.0, 2}, want, magnitudes(want)));
    }
  }
}

TEST_CASE("conformance 16-bit: channel_affine (scale, shift float32) and channel_sums (out "
          "float32, with products), in place", "[conformance][dtypes][channel]") {
  struct Case {
    int64_t outer, channels, inner;
  };
  const std::vector<Case> cases = {{1, 1, 1}, {3, 5, 7}, {64, 16, 49}, {2, 3, 785}, {1, 1, 20011}, {200, 50, 1}};
  FOR_EACH_HALF_DEVICE(t, device) {
    uint32_t seed = 3600;
    for (const Case& c : cases) {
      INFO("outer=" << c.outer << " channels=" << c.channels << " inner=" << c.inner);
      const size_t n = size_t(c.outer * c.channels * c.inner), ch = size_t(c.channels);
      const std::vector<float> x = random_rounded(t, n, ++seed, -2.0f, 2.0f);
      const std::vector<float> y = random_rounded(t, n, ++seed);
      const std::vector<float> scale = random_floats(ch, ++seed), shift = random_floats(ch, ++seed);
      std::vector<float> want(n);
      reference::channel_affine(x.data(), scale.data(), shift.data(), want.data(), c.outer,
                                c.channels, c.inner);
      std::vector<double> s(n);
      for (size_t i = 0; i < n; ++i) {
        const size_t k = (i / size_t(c.inner)) % ch;
        s[i] = std::abs(double(x[i]) * scale[k]) + std::abs(double(shift[k]));
      }
      const std::vector<double> affine_bound = error_bounds(t, t, {0, 1.0, 2}, want, s);
      FencedBuffer dx(*device, t, x, 1), dout(*device, t, nans(n), 2);
      device->channel_affine(dx.tensor(), upload(*device, scale), upload(*device, shift),
                             dout.tensor(), c.outer, c.channels, c.inner);
      TRIDENT_CHECK_BOUNDED(dout.values(), want, affine_bound);
      CHECK(dout.guard_damage() == 0);
      device->channel_affine(dx.tensor(), upload(*device, scale), upload(*device, shift),
                             dx.tensor(), c.outer, c.channels, c.inner);
      TRIDENT_CHECK_BOUNDED(dx.values(), want, affine_bound);

      for (const bool product : {false, true})
        for (const float beta : {0.0f, 0.5f}) {
          INFO("channel_sums product=" << product << " beta=" << beta);
          const std::vector<float> out0 = beta == 0.0f ? nans(ch) : random_floats(ch, ++seed);
          std::vector<float> sums = out0, abs_sums = beta == 0.0f ? std::vector<float>(ch, 0.0f) : absolute(out0);
          reference::channel_sums(x.data(), product ? y.data() : nullptr, sums.data(), c.outer,
                                  c.channels, c.inner, beta);
          const std::vector<float> ax = absolute(x), ay = absolute(y);
          reference::channel_sums(ax.data(), product ? ay.data() : nullptr, abs_sums.data(),
                                  c.outer, c.channels, c.inner, beta);
          FencedBuffer dsx(*device, t, x, 0), dsy(*device, t, y, 3);
          Tensor out = upload(*device, out0);
          device->channel_sums(dsx.tensor(), product ? dsy.tensor() : Tensor(), out, c.outer,
                               c.channels, c.inner, beta);
          TRIDENT_CHECK_BOUNDED(out.to_host(), sums,
                                error_bounds(t, DType::f32, {0, 1.0, c.outer * c.inner + 2}, sums,
                                             to_double(abs_sums)));
        }
    }
  }
}

TEST_CASE("conformance 16-bit: the front refuses mixed types and types a device does not hold, "
          "naming the tensor, the types and the device", "[conformance][dtypes][front]") {
  FOR_EACH_HALF_DEVICE(t, device) {
    const DType other = t == DType::f16 ? DType::bf16 : DType::f16;
    Tensor a = Tensor::zeros(*device, {4, 5}, t), c = Tensor::zeros(*device, {4, 6});
    GemmArgs g;
    g.m = 4; g.n = 6; g.k = 5;
    g.a = a; g.b = Tensor::zeros(*device, {5, 6}, t); g.c = c;
    device->gemm(g);  // well-formed
    if (device->supports(other)) {
      GemmArgs mixed = g;
      mixed.b = Tensor::zeros(*device, {5, 6}, other);
      CHECK_THROWS_WITH(device->gemm(mixed),
                        Catch::Contains(std::string("a is ") + dtype_name(t) + " but b is " +
                                        dtype_name(other) + ": A and B share one type"));
      GemmArgs wrong_c = g;
      wrong_c.c = Tensor::zeros(*device, {4, 6}, other);
      CHECK_THROWS_WITH(device->gemm(wrong_c), Catch::Contains("C is float32 or A's type"));
      // A convolution whose x is not the shape's type.
      Conv2dShape s;
      s.batch = 1; s.in_channels = 1; s.height = 4; s.width = 4; s.out_channels = 1;
      s.kernel_h = 3; s.kernel_w = 3; s.dtype = other;
      Tensor x = Tensor::zeros(*device, {s.input_numel()}, t);
      Tensor w = Tensor::zeros(*device, {s.weight_numel()}, other);
      Tensor y = Tensor::zeros(*device, {s.output_numel()}, other);
      Tensor ws = Tensor::empty(*device, {int64_t(std::max<size_t>(device->conv2d_workspace_bytes(s), 1))}, DType::u8);
      CHECK_THROWS_WITH(device->conv2d_forward(s, x, w, Tensor(), y, ws),
                        Catch::Contains(std::string("x is ") + dtype_name(t) + ", expected " +
                                        dtype_name(other) + " like the op's other activations"));
    }
    GemmArgs f32_b = g;  // a 16-bit A with a float32 B
    f32_b.b = Tensor::zeros(*device, {5, 6});
    CHECK_THROWS_WITH(device->gemm(f32_b), Catch::Contains("A and B share one type"));
    Pool2dShape p;
    p.batch = 1; p.channels = 1; p.height = 4; p.width = 4;
    CHECK_THROWS_WITH(device->avgpool2d_forward(p, Tensor::zeros(*device, {16}, t), Tensor::zeros(*device, {4})),
                      Catch::Contains(std::string("y is F32, expected ") + dtype_name(t)));
  }
  // A device that holds no 16-bit type: the reference device (no do_convert).
  ReferenceDevice plain;
  for (const DType t : half_types()) {
    CHECK_FALSE(plain.supports(t));
    Tensor x16 = Tensor::zeros(plain, {8}, t), x32 = Tensor::zeros(plain, {8});
    const std::string refusal = std::string(" is ") + dtype_name(t) +
                                ", which this reference device does not support (use float32)";
    CHECK_THROWS_WITH(plain.unary_forward(UnaryOp::relu, x16, x16), Catch::Contains("x" + refusal));
    CHECK_THROWS_WITH(plain.convert(x32, x16), Catch::Contains("dst" + refusal));
    CHECK_THROWS_WITH(plain.convert(x16, x32), Catch::Contains("src" + refusal));
    CHECK_THROWS_WITH(plain.fill(x16, 1.0f), Catch::Contains("dst" + refusal));
    Conv2dShape s;
    s.batch = 1; s.in_channels = 1; s.height = 4; s.width = 4; s.out_channels = 1;
    s.kernel_h = 3; s.kernel_w = 3; s.dtype = t;
    CHECK_THROWS_WITH(plain.conv2d_workspace_bytes(s),
                      Catch::Contains(std::string("dtype ") + dtype_name(t) + " is not a float type this device holds"));
  }
  // Nor does it train in float16: the loss scaler's update names the device.
  Tensor state = Tensor::from_host(plain, {2}, std::vector<float>{1024.0f, 0.0f});
  CHECK_THROWS_WITH(plain.update_loss_scale(state, Tensor::zeros(plain, {1}), {}),
                    Catch::Contains("reference:0 (reference backend) does not train in float16"));
}
