// The CPU backend's float kernels on bfloat16 storage (kernels/cpu/storage.h): each must give,
// bit for bit, what the staged path gives -- widen the inputs to float32, run the float32 kernel,
// round the outputs once -- since the device now takes these families natively in bf16 and
// the staged path is what every other backend's agreement was established against. Inputs
// include NaN, infinities, signed zeros and values that round to overflow.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "trident/core/half.h"
#include "trident/core/registry.h"
#include "trident/kernels/cpu/batchnorm.h"
#include "trident/kernels/cpu/elementwise.h"
#include "trident/kernels/cpu/gather.h"
#include "trident/kernels/cpu/pool2d.h"

namespace {

using Bits = std::vector<uint16_t>;
using Floats = std::vector<float>;

// n bfloat16 values: normals of mixed magnitude, then the special values.
Bits random_bf16(size_t n, uint32_t seed, float spread = 4.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, spread);
  Bits out(n);
  for (auto& v : out) v = trident::float_to_bf16(dist(rng));
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            -0.f,
                            0.f,
                            3.3e38f,
                            -3.3e38f};
  for (size_t i = 0; i < std::size(specials) && i < n; ++i)
    out[n - 1 - i] = trident::float_to_bf16(specials[i]);
  return out;
}

Floats widen(const Bits& b) {
  Floats f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = trident::bf16_to_float(b[i]);
  return f;
}

Bits narrow(const Floats& f) {
  Bits b(f.size());
  for (size_t i = 0; i < f.size(); ++i) b[i] = trident::float_to_bf16(f[i]);
  return b;
}

// Bitwise equality, except that any NaN matches any NaN (the staged path and the kernel both
// quieten, but the payload is not part of the contract).
bool same_bits(const Bits& a, const Bits& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool nan_a = std::isnan(trident::bf16_to_float(a[i]));
    const bool nan_b = std::isnan(trident::bf16_to_float(b[i]));
    if (nan_a != nan_b || (!nan_a && a[i] != b[i])) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("cpu bf16 storage: every unary op forward and backward equals widen, float, round",
          "[cpu][half][elementwise]") {
  const size_t n = 70001;  // several parallel pieces and a ragged tail
  const Bits x = random_bf16(n, 1), dy = random_bf16(n, 2);
  const Floats xf = widen(x), dyf = widen(dy);
  const trident::UnaryOp ops[] = {
#define TRIDENT_TEST_UNARY(name, module) trident::UnaryOp::name,
      TRIDENT_UNARY_OPS(TRIDENT_TEST_UNARY)
#undef TRIDENT_TEST_UNARY
  };
  for (trident::UnaryOp op : ops) {
    const float alpha = op == trident::UnaryOp::leaky_relu ? 0.01f : 0.f;
    INFO("op " << trident::unary_op_name(op));
    Floats yf(n);
    trident::cpu::unary_forward(op, xf.data(), yf.data(), int64_t(n), alpha);
    Bits y(n);
    trident::cpu::unary_forward(op, x.data(), y.data(), int64_t(n), alpha);
    CHECK(same_bits(y, narrow(yf)));
    // The backward reads x and the rounded y, as a bf16 network stores them.
    const Floats yr = widen(y);
    Floats dxf(n);
    trident::cpu::unary_backward(op, xf.data(), yr.data(), dyf.data(), dxf.data(), int64_t(n),
                                 alpha);
    Bits dx(n);
    trident::cpu::unary_backward(op, x.data(), y.data(), dy.data(), dx.data(), int64_t(n), alpha);
    CHECK(same_bits(dx, narrow(dxf)));
    // In place (dx aliases dy), as the layers run it.
    Bits in_place = dy;
    trident::cpu::unary_backward(op, x.data(), y.data(), in_place.data(), in_place.data(),
                                 int64_t(n), alpha);
    CHECK(same_bits(in_place, dx));
  }
}

TEST_CASE(
    "cpu bf16 storage: axpby (b = 0, 1, other), scale, fill and dropout equal widen, "
    "float, round",
    "[cpu][half][elementwise]") {
  const size_t n = 40000;
  const Bits x = random_bf16(n, 3), y0 = random_bf16(n, 4);
  for (float b : {0.f, 1.f, -0.75f}) {
    INFO("b = " << b);
    Floats yf = widen(y0);
    trident::cpu::axpby(widen(x).data(), yf.data(), int64_t(n), 1.5f, b);
    Bits y = y0;
    trident::cpu::axpby(x.data(), y.data(), int64_t(n), 1.5f, b);
    CHECK(same_bits(y, narrow(yf)));
  }
  Floats sf(n);
  trident::cpu::scale(widen(x).data(), 0.3f, sf.data(), int64_t(n));
  Bits scaled(n);
  trident::cpu::scale(x.data(), 0.3f, scaled.data(), int64_t(n));
  CHECK(same_bits(scaled, narrow(sf)));

  Bits filled(n);
  trident::cpu::fill_bf16(filled.data(), int64_t(n), 0.1f);  // not a bfloat16: rounds once
  CHECK(filled == Bits(n, trident::float_to_bf16(0.1f)));

  Floats df(n);
  trident::cpu::dropout(widen(x).data(), df.data(), int64_t(n), 7, 3, 0.4f, 42, 1, 5);
  Bits dropped(n);
  trident::cpu::dropout(x.data(), dropped.data(), int64_t(n), 7, 3, 0.4f, 42, 1, 5);
  CHECK(same_bits(dropped, narrow(df)));
  int64_t zeros = 0;
  for (uint16_t v : dropped) zeros += v == 0;
  CHECK(zeros > int64_t(n) / 4);  // the mask dropped something (p = 0.4), the same as float's
}

TEST_CASE(
    "cpu bf16 storage: batch norm forward (training, evaluation) and backward equal "
    "widen, float, round",
    "[cpu][half][batchnorm]") {
  // Channels with shifted means, so that the variance is taken about a mean far from zero.
  trident::BatchNormShape s;
  s.outer = 5, s.channels = 7, s.inner = 333;
  const size_t n = size_t(s.numel());
  Bits x = random_bf16(n, 5, 1.f), dy = random_bf16(n, 6, 1.f);
  for (size_t i = 0; i < n; ++i) {
    const int64_t c = int64_t(i) / s.inner % s.channels;
    x[i] = trident::float_to_bf16(trident::bf16_to_float(x[i]) + float(c) * 3.f);
  }
  for (size_t i = n - 7; i < n; ++i) x[i] = dy[i] = trident::float_to_bf16(0.5f);  // finite
  const Floats gamma = {1.f, 0.5f, -2.f, 1.25f, 0.f, 3.f, 1.f}, beta = {0, 1, -1, 2, 0, 0.5f, 4};
  for (bool training : {true, false})
  for (bool relu : {false, true}) {  // with the fused ReLU, the output recomputed from x masks dy
    INFO("training " << training << " relu " << relu);
    s.relu = relu;
    Floats rm_f = {0.1f, 0, 0, 0, 1, 2, 3}, rv_f = {1, 2, 0.5f, 1, 1, 4, 1};
    Floats rm_b = rm_f, rv_b = rv_f, mean_f(7), invstd_f(7), mean_b(7), invstd_b(7), yf(n);
    Bits y(n);
    trident::cpu::batchnorm_forward(s, training, widen(x).data(), gamma.data(), beta.data(),
                                    rm_f.data(), rv_f.data(), yf.data(), mean_f.data(),
                                    invstd_f.data());
    trident::cpu::batchnorm_forward(s, training, x.data(), gamma.data(), beta.data(), rm_b.data(),
                                    rv_b.data(), y.data(), mean_b.data(), invstd_b.data());
    CHECK(same_bits(y, narrow(yf)));
    CHECK(rm_b == rm_f);
    CHECK(rv_b == rv_f);
    if (!training) continue;
    CHECK(mean_b == mean_f);
    CHECK(invstd_b == invstd_f);
    Floats dxf(n), dgamma_f(7), dbeta_f(7), dgamma_b(7), dbeta_b(7);
    Bits dx(n);
    trident::cpu::batchnorm_backward(s, widen(x).data(), widen(dy).data(), gamma.data(),
                                     mean_f.data(), invstd_f.data(), dxf.data(), dgamma_f.data(),
                                     dbeta_f.data(), relu ? beta.data() : nullptr);
    trident::cpu::batchnorm_backward(s, x.data(), dy.data(), gamma.data(), mean_b.data(),
                                     invstd_b.data(), dx.data(), dgamma_b.data(), dbeta_b.data(),
                                     relu ? beta.data() : nullptr);
    CHECK(same_bits(dx, narrow(dxf)));
    CHECK(dgamma_b == dgamma_f);
    CHECK(dbeta_b == dbeta_f);
  }
}

TEST_CASE(
    "cpu bf16 storage: max and average pooling, forward and backward, equal widen, "
    "float, round (overlapping windows: dx summed in float, rounded once)",
    "[cpu][half][pool]") {
  auto shape = [](int64_t k, int64_t stride, int64_t pad, int64_t h, int64_t w, bool relu) {
    trident::Pool2dShape s;
    s.batch = 3, s.channels = 5, s.height = h, s.width = w;
    s.kernel_h = s.kernel_w = k, s.stride_h = s.stride_w = stride, s.pad_h = s.pad_w = pad;
    s.relu = relu;
    return s;
  };
  // The 2x2 fast path (with and without the fused ReLU), overlapping padded windows, global.
  for (const trident::Pool2dShape& s :
       {shape(2, 2, 0, 12, 10, false), shape(2, 2, 0, 12, 10, true), shape(3, 2, 1, 11, 9, false),
        shape(3, 1, 1, 7, 6, false), shape(7, 7, 0, 7, 7, false)}) {
    INFO("kernel " << s.kernel_h << " stride " << s.stride_h << " pad " << s.pad_h << " relu "
                   << s.relu);
    const size_t in = size_t(s.input_numel()), out = size_t(s.output_numel());
    const Bits x = random_bf16(in, 7);
    Bits dy = random_bf16(out, 8);
    dy[0] = 0x8000, dy[1] = 0x7fc1, dy[2] = 0xff80;  // -0, a NaN with a payload, -inf
    Floats yf(out), dxf(in);
    Bits y(out), dx(in);
    std::vector<int32_t> arg_f(out), arg_b(out);
    trident::cpu::maxpool2d_forward(s, widen(x).data(), yf.data(), arg_f.data());
    trident::cpu::maxpool2d_forward(s, x.data(), y.data(), arg_b.data());
    CHECK(same_bits(y, narrow(yf)));
    CHECK(arg_b == arg_f);
    trident::cpu::maxpool2d_backward(s, widen(dy).data(), arg_f.data(), dxf.data());
    trident::cpu::maxpool2d_backward(s, dy.data(), arg_b.data(), dx.data());
    CHECK(same_bits(dx, narrow(dxf)));
    if (s.relu) continue;
    trident::cpu::avgpool2d_forward(s, widen(x).data(), yf.data());
    trident::cpu::avgpool2d_forward(s, x.data(), y.data());
    CHECK(same_bits(y, narrow(yf)));
    trident::cpu::avgpool2d_backward(s, widen(dy).data(), dxf.data());
    trident::cpu::avgpool2d_backward(s, dy.data(), dx.data());
    CHECK(same_bits(dx, narrow(dxf)));
  }
}

TEST_CASE(
    "cpu bf16 storage: gather_samples into bfloat16 equals the float32 batch rounded, "
    "with and without crop and flip, from u8 and float32 samples",
    "[cpu][half][gather]") {
  const int64_t count = 9, C = 2, H = 5, W = 7, sample = C * H * W, rows = 6;
  std::vector<uint8_t> u8(size_t(count * sample));
  for (size_t i = 0; i < u8.size(); ++i) u8[i] = uint8_t(i * 37 % 256);
  const Floats f32 = widen(random_bf16(size_t(count * sample), 9));
  const std::vector<int32_t> table = {3, 0, 8, 8, 5, 1, 2, 7, 4, 6, 0, 3};
  const Floats mean = {0.25f, -0.5f}, inv_std = {3.0f, 0.7f};
  for (const bool augment : {false, true})
    for (const bool from_u8 : {true, false}) {
      INFO("augment " << augment << " u8 " << from_u8);
      trident::cpu::SampleTransformHost t;
      t.scale = from_u8 ? 1.0f / 255.0f : 1.0f;
      t.mean = mean.data(), t.inv_std = inv_std.data();
      t.crop_padding = augment ? 2 : 0, t.horizontal_flip = augment;
      t.seed = 11, t.stream = 2, t.sample_offset = 4;
      const void* src = from_u8 ? static_cast<const void*>(u8.data()) : f32.data();
      Floats want(size_t(rows * sample));
      Bits got(want.size());
      trident::cpu::gather_samples(src, from_u8, count, C, H, W, table.data(),
                                   int64_t(table.size()), rows, 1, 3, t, want.data());
      trident::cpu::gather_samples(src, from_u8, count, C, H, W, table.data(),
                                   int64_t(table.size()), rows, 1, 3, t, got.data());
      CHECK(same_bits(got, narrow(want)));
      // Without augmentation the batch is the normalised samples themselves (position 1: table
      // entries 6..11), which pins the fast path's map to the formula.
      if (!augment && from_u8)
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t k = 0; k < sample; ++k) {
            const int64_t c = k / (H * W);
            const float raw = float(u8[size_t(table[size_t(6 + i)] * sample + k)]);
            CHECK(want[size_t(i * sample + k)] ==
                  (raw * t.scale - mean[size_t(c)]) * inv_std[size_t(c)]);
          }
    }
}

TEST_CASE(
    "cpu bf16 storage: the CPU device computes elementwise, batch-norm, pooling and "
    "gather ops on bfloat16 storage (not float16) on every CPU",
    "[cpu][half]") {
  trident::Device& cpu = trident::DeviceRegistry::global().device("cpu:0");
  for (auto family : {trident::OpFamily::elementwise, trident::OpFamily::batchnorm,
                      trident::OpFamily::pool, trident::OpFamily::gather}) {
    CHECK(cpu.native(family, trident::DType::bf16));
    CHECK_FALSE(cpu.native(family, trident::DType::f16));
  }
}
