// CUDA's native 16-bit floats (bf16, fp16) against cpu:0, which holds them but computes every
// family in float32 through staging: each op family the CUDA backend computes natively agrees
// with the CPU within a bound built from the type's unit roundoff; conversions are bit-exact
// against core/half.h; an fp16 step that overflows is skipped and halves the loss scale; captured
// bf16 and fp16 training steps replay bit for bit like eager ones; a bf16 MLP trains as the
// float32 one does; allow_tf32 takes effect per call. Without a CUDA device every case skips.
#include <catch2/catch.hpp>

#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "trident/core/half.h"
#include "trident/core/registry.h"
#include "trident/core/tensor.h"
#include "trident/models/trainer.h"
#include "trident/models/zoo.h"
#include "tests/test_data.h"

using namespace trident;

namespace {

std::vector<Device*> cuda_devices() {
  std::vector<Device*> out;
  for (const auto& backend : DeviceRegistry::global().backends())
    if (backend.name == "cuda")
      for (const auto& d : backend.devices) out.push_back(d.get());
  return out;
}

Device& cpu() { return DeviceRegistry::global().device("cpu:0"); }

std::vector<float> random_values(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

Tensor make(Device& d, DType t, size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  return Tensor::from_host(d, {int64_t(n)}, random_values(n, seed, lo, hi), t);
}

using Outputs = std::vector<std::vector<float>>;

// Every output of `op` on each CUDA device against cpu:0: |got - want| <= factor * u *
// (|want| + max|want| / 16) elementwise, u the unit roundoff of t. One rounding of the output on
// each side and float32 arithmetic in a different order give factor 2; sums that CUDA rounds
// midway (a 16-bit GEMM output, the convolution's column gradients) need more.
void agree_with_cpu(const char* what, DType t, double factor,
                    const std::function<Outputs(Device&, DType)>& op) {
  const Outputs want = op(cpu(), t);
  const double u = unit_roundoff(t);
  for (Device* d : cuda_devices()) {
    const Outputs got = op(*d, t);
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      REQUIRE(got[k].size() == want[k].size());
      double scale = 0.0;
      for (float v : want[k]) scale = std::max(scale, double(std::fabs(v)));
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < want[k].size(); ++i) {
        const double err = std::fabs(double(got[k][i]) - double(want[k][i]));
        if (!(err <= factor * u * (std::fabs(double(want[k][i])) + scale / 16))) {
          if (bad++ == 0) first = i;
        }
      }
      INFO(what << " in " << dtype_name(t) << " on " << d->info().id() << ", output " << k
                << ": " << bad << " of " << want[k].size() << " elements off; first at " << first
                << ": got " << (bad ? got[k][first] : 0.f) << ", want "
                << (bad ? want[k][first] : 0.f));
      CHECK(bad == 0);
    }
  }
}

const DType kHalves[] = {DType::bf16, DType::f16};

}  // namespace

TEST_CASE("cuda half: every family is native in bf16 and fp16", "[cuda][half]") {
  for (Device* d : cuda_devices())
    for (DType t : kHalves) {
      INFO(d->info().id() << " " << dtype_name(t));
      CHECK(d->supports(t));
      for (OpFamily f : {OpFamily::convert, OpFamily::gemm, OpFamily::elementwise,
                         OpFamily::channel, OpFamily::conv2d, OpFamily::pool,
                         OpFamily::batchnorm, OpFamily::head, OpFamily::gather})
        CHECK(d->native(f, t));
    }
}

TEST_CASE("cuda half: conversions round bit for bit as core/half.h", "[cuda][half]") {
  // Random magnitudes over the whole float range, ties, subnormals of both types, overflow to
  // infinity, signed zeros, infinities and NaNs with payloads.
  std::vector<float> values = random_values(20000, 31, -1.0f, 1.0f);
  std::mt19937 rng(32);
  for (float& v : values) v = std::ldexp(v, int(rng() % 80) - 40);
  for (uint32_t bits : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                        0x7f800001u, 0xffc12345u, 0x3f808000u, 0x3f818000u, 0x477ff000u,
                        0x477fefffu, 0x33000000u, 0x33000001u, 0x387fc000u, 0x00000001u,
                        0x807fffffu, 0x3f800000u, 0x7f7fffffu, 0x38800000u, 0x3c00a000u})
    values.push_back(bits_float(bits));
  const int64_t n = int64_t(values.size());
  std::vector<uint8_t> bytes(256);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i);
  for (Device* d : cuda_devices()) {
    INFO(d->info().id());
    const Tensor src = Tensor::from_host(*d, {n}, values);
    for (DType t : kHalves) {
      INFO(dtype_name(t));
      // float32 -> 16 bits, against the host's rounding.
      const Tensor half = Tensor::empty(*d, {n}, t);
      d->convert(src, half);
      std::vector<uint16_t> got(static_cast<size_t>(n));
      half.to_host(got.data(), got.size() * 2);
      size_t bad = 0;
      for (int64_t i = 0; i < n; ++i)
        if (got[size_t(i)] != float_to_half_bits(t, values[size_t(i)])) ++bad;
      CHECK(bad == 0);
      // 16 bits -> float32 is exact: every one of the 65536 patterns.
      std::vector<uint16_t> all(65536);
      for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
      const Tensor patterns = Tensor::empty(*d, {65536}, t);
      patterns.copy_from_host(all.data(), all.size() * 2);
      const Tensor wide = Tensor::empty(*d, {65536});
      d->convert(patterns, wide);
      std::vector<uint32_t> wide_bits(65536);
      wide.to_host(wide_bits.data(), wide_bits.size() * 4);
      bad = 0;
      for (size_t i = 0; i < all.size(); ++i)
        if (wide_bits[i] != float_bits(half_bits_to_float(t, all[i]))) ++bad;
      CHECK(bad == 0);
      // One 16-bit type into the other: through float32, rounded once.
      const DType other = t == DType::bf16 ? DType::f16 : DType::bf16;
      const Tensor crossed = Tensor::empty(*d, {65536}, other);
      d->convert(patterns, crossed);
      std::vector<uint16_t> crossed_bits(65536);
      crossed.to_host(crossed_bits.data(), crossed_bits.size() * 2);
      bad = 0;
      for (size_t i = 0; i < all.size(); ++i)
        if (crossed_bits[i] != float_to_half_bits(other, half_bits_to_float(t, all[i]))) ++bad;
      CHECK(bad == 0);
      // Bytes (images) to 16 bits are exact in both types; at an odd offset (unaligned).
      const Tensor u8 = Tensor::from_host(*d, {256}, bytes);
      const Tensor from_bytes = Tensor::zeros(*d, {257}, t);
      d->convert(u8.view(1, {255}), from_bytes.view(1, {255}));
      const std::vector<float> widened = from_bytes.to_host();
      for (size_t i = 1; i < 256; ++i) CHECK(widened[i] == float(i));
      CHECK(widened[0] == 0.0f);
    }
  }
}

TEST_CASE("cuda half: GEMMs agree with the CPU (16-bit and float32 C, fused epilogues)",
          "[cuda][half][gemm]") {
  struct Case {
    int64_t m, n, k;
    bool ta, tb, c_half;
    BiasKind bias;
    UnaryOp act;
    float beta;
  };
  const Case cases[] = {{37, 53, 70, false, false, false, BiasKind::none, UnaryOp::identity, 0.f},
                        {64, 128, 96, false, true, true, BiasKind::per_column, UnaryOp::relu, 0.f},
                        {48, 40, 130, true, false, true, BiasKind::per_row, UnaryOp::gelu, 0.f},
                        {33, 65, 17, true, true, true, BiasKind::none, UnaryOp::identity, 1.f},
                        {256, 512, 384, false, true, false, BiasKind::per_column, UnaryOp::relu,
                         0.f},
                        {20, 30, 0, false, false, true, BiasKind::per_column, UnaryOp::tanh, 0.5f}};
  for (DType t : kHalves)
    for (const Case& c : cases) {
      agree_with_cpu("gemm", t, 4.0, [&](Device& d, DType type) {
        GemmArgs g;
        g.trans_a = c.ta, g.trans_b = c.tb, g.m = c.m, g.n = c.n, g.k = c.k, g.beta = c.beta;
        g.a = make(d, type, size_t(std::max<int64_t>(c.m * c.k, 1)), 1);
        g.b = make(d, type, size_t(std::max<int64_t>(c.k * c.n, 1)), 2);
        g.c = make(d, c.c_half ? type : DType::f32, size_t(c.m * c.n), 3);
        if (c.bias != BiasKind::none) {
          g.bias_kind = c.bias;
          g.bias = make(d, DType::f32, size_t(c.bias == BiasKind::per_column ? c.n : c.m), 4);
        }
        g.activation = c.act;
        d.gemm(g);
        return Outputs{g.c.to_host()};
      });
    }
}

TEST_CASE("cuda half: elementwise ops agree with the CPU", "[cuda][half][elementwise]") {
  const size_t n = 1003;  // not a multiple of the 8-element packs
  for (DType t : kHalves) {
    for (UnaryOp op : {UnaryOp::identity, UnaryOp::relu, UnaryOp::leaky_relu, UnaryOp::tanh,
                       UnaryOp::sigmoid, UnaryOp::gelu})
      agree_with_cpu(unary_op_name(op), t, 2.0, [&](Device& d, DType type) {
        const Tensor x = make(d, type, n, 5, -3.f, 3.f), y = Tensor::empty(d, {int64_t(n)}, type);
        const Tensor dy = make(d, type, n, 6), dx = Tensor::empty(d, {int64_t(n)}, type);
        d.unary_forward(op, x, y, 0.1f);
        d.unary_backward(op, x, y, dy, dx, 0.1f);
        const Tensor odd = make(d, type, n + 1, 7, -3.f, 3.f).view(1, {int64_t(n)});  // unaligned
        d.unary_forward(op, odd, odd, 0.1f);  // in place
        return Outputs{y.to_host(), dx.to_host(), odd.to_host()};
      });
    agree_with_cpu("axpby, dropout, fill, scale", t, 2.0, [&](Device& d, DType type) {
      const Tensor x = make(d, type, n, 8), y = make(d, type, n, 9), z = make(d, type, n, 10);
      d.axpby(x, y, 0.75f, -1.25f);
      d.axpby(x, z, 2.0f, 0.0f);
      const Tensor state = Tensor::from_host(d, {2}, std::vector<int32_t>{3, 7});
      const Tensor drop = Tensor::empty(d, {int64_t(n)}, type), drop2 = Tensor::empty(d, {int64_t(n)}, type);
      d.dropout(x, drop, 1, 0, 0.3f, 42, 1, state);
      d.dropout(x, drop2, 17, 5, 0.5f, 43, 2, state);
      const Tensor filled = Tensor::empty(d, {int64_t(n)}, type);
      d.fill(filled, 0.7f);
      // The loss-scaling pair: a float32 gradient into the 16-bit type and back, in place too.
      const Tensor factor = Tensor::from_host(d, {1}, std::vector<float>{1024.0f});
      const Tensor g32 = make(d, DType::f32, n, 11, -1e-3f, 1e-3f), scaled = Tensor::empty(d, {int64_t(n)}, type);
      d.scale(g32, factor, scaled);
      const Tensor inplace = make(d, type, n, 12);
      d.scale(inplace, factor, inplace);
      return Outputs{y.to_host(),   z.to_host(),      drop.to_host(),   drop2.to_host(),
                     filled.to_host(), scaled.to_host(), inplace.to_host()};
    });
  }
}

TEST_CASE("cuda half: channel ops agree with the CPU", "[cuda][half][channel]") {
  for (DType t : kHalves)
    agree_with_cpu("channel_affine, channel_sums", t, 2.0, [&](Device& d, DType type) {
      const int64_t outer = 6, channels = 5, inner = 37, total = outer * channels * inner;
      const Tensor x = make(d, type, size_t(total), 13), y = Tensor::empty(d, {total}, type);
      const Tensor scale = make(d, DType::f32, size_t(channels), 14);
      const Tensor shift = make(d, DType::f32, size_t(channels), 15);
      d.channel_affine(x, scale, shift, y, outer, channels, inner);
      const Tensor sums = Tensor::zeros(d, {channels}), products = Tensor::zeros(d, {channels});
      d.channel_sums(x, Tensor(), sums, outer, channels, inner, 0.0f);
      d.channel_sums(x, y, products, outer, channels, inner, 0.0f);
      const Tensor columns = make(d, DType::f32, 185, 16);  // the column path, beta 0.5
      d.sum_rows(x, total / 185, 185, columns, 0.5f);
      return Outputs{y.to_host(), sums.to_host(), products.to_host(), columns.to_host()};
    });
}

TEST_CASE("cuda half: convolutions agree with the CPU", "[cuda][half][conv2d]") {
  struct Case {
    int64_t batch, c, h, w, oc, k, stride, pad;
    bool bias;
    int64_t kernel_w = 0, stride_w = 0;  // 0: as k, stride
  };
  const Case cases[] = {{5, 3, 11, 9, 8, 3, 1, 1, true},
                        // Up to 4 input channels: the direct forward (kernels/cuda/
                        // direct_conv.h), a patch of 9 (the ResNet's stem), 18 at stride 2
                        // without padding, 16 (2x2 over 4 channels), 1.
                        {6, 1, 28, 28, 32, 3, 1, 1, false},
                        {3, 2, 15, 17, 16, 3, 2, 0, true},
                        {2, 4, 9, 10, 8, 2, 1, 1, true},
                        {3, 1, 12, 13, 40, 1, 1, 0, true},
                        // ResNet-9's first layer, 3 -> 64 (a patch of 27 in 28), on even
                        // planes: two positions a thread (the 11x9 case above: one)
                        {4, 3, 10, 12, 64, 3, 1, 1, true},
                        {4, 8, 12, 12, 16, 3, 2, 1, false},
                        {3, 16, 7, 7, 24, 1, 1, 0, true},
                        {2, 6, 9, 9, 4, 1, 2, 0, false},
                        // More tiles than the halo-window kernels keep resident (kernels/cuda/
                        // halo_conv.cu): blocks walk several images, copying the next window
                        // while they multiply (32 channels: two windows a block; 64: one).
                        {600, 32, 10, 10, 32, 3, 1, 1, true},
                        {300, 64, 10, 10, 64, 3, 1, 1, false},
                        // The weight gradient's halo windows (halo_wgrad.cu): images in two
                        // tiles, the second shorter; K rounded past the rows; 64 input channels
                        // in two chunks and 96 output channels in three blocks; no padding.
                        {6, 64, 23, 17, 96, 3, 1, 1, false},
                        {4, 32, 20, 21, 64, 3, 1, 0, true},
                        // 5x5: the tile-per-step weight gradient, its (r, s, c) partials
                        // reordered by the reduction.
                        {3, 32, 12, 11, 32, 5, 1, 2, true},
                        // Strided, on the implicit kernels (kernels/cuda/implicit_conv.cu): the
                        // data gradient in stride x stride phases. Odd extents (phases of
                        // unequal length), 1x1 (phases without taps: zeros), 5x5 at stride 3,
                        // 2x2 (a last row no window covers), and strides 2 x 3 with a 3x2 kernel.
                        // On an H100 or H200 these take the warpgroup gather from 32 channels
                        // (K steps over two taps, K padded: 5x5 x 32 is 12.5 steps) and into 32
                        // (positions as the instruction's rows).
                        {5, 32, 21, 19, 64, 3, 2, 1, true},
                        {4, 64, 22, 20, 32, 1, 2, 0, false},
                        {3, 32, 32, 31, 32, 5, 3, 2, false},
                        {2, 32, 21, 21, 32, 2, 2, 0, true},
                        {3, 32, 23, 34, 64, 3, 2, 1, false, 2, 3},
                        // The warpgroup-multiply gather (kernels/cuda/sm90a/wgmma_conv.cu, H100
                        // and H200: more than 64 output channels, input channels in 64s): 192
                        // output channels (a partial second block of 128 rows) and a data
                        // gradient over 192; the data gradient's four phases at stride 2; 5x5
                        // taps; a 3x5 kernel; 48 output channels (one warpgroup, partly
                        // idle, forward and weight gradient).
                        {3, 128, 12, 10, 192, 3, 1, 1, true},
                        {2, 64, 12, 11, 48, 3, 1, 1, true},
                        {4, 128, 23, 21, 64, 3, 2, 1, false},
                        {2, 64, 13, 12, 128, 5, 1, 2, true},
                        {3, 128, 11, 14, 128, 3, 1, 1, false, 5, 1},
                        // Small planes on the warpgroup kernels (channels in 64s both ways, a
                        // patch of at most 1152: the ResNet's 7x7 layers): 7x7 128 -> 128, and
                        // 64 -> 128 at stride 2 onto 7x7; a 5x5 plane.
                        {6, 128, 7, 7, 128, 3, 1, 1, true},
                        {5, 64, 14, 13, 128, 3, 2, 1, false},
                        {4, 64, 5, 5, 64, 3, 1, 1, true},
                        // The tiled NHWC transposes (kernels/cuda/implicit_conv_layout.cuh):
                        // 288 and 480 positions (two and three tiles of 128 and a partial one),
                        // over 64-channel and 32-channel columns.
                        {2, 64, 16, 18, 64, 3, 1, 1, false},
                        {3, 32, 24, 20, 32, 3, 1, 1, true}};
  for (DType t : kHalves)
    for (const Case& c : cases)
      agree_with_cpu("conv2d", t, 8.0, [&](Device& d, DType type) {
        Conv2dShape s;
        s.batch = c.batch, s.in_channels = c.c, s.height = c.h, s.width = c.w;
        s.out_channels = c.oc, s.kernel_h = c.k, s.kernel_w = c.kernel_w ? c.kernel_w : c.k;
        s.stride_h = c.stride, s.stride_w = c.stride_w ? c.stride_w : c.stride;
        s.pad_h = s.pad_w = c.pad;
        s.dtype = type;
        const Tensor x = make(d, type, size_t(s.input_numel()), 17);
        const Tensor w = make(d, type, size_t(s.weight_numel()), 18);
        const Tensor b = c.bias ? make(d, DType::f32, size_t(s.out_channels), 19) : Tensor();
        const Tensor dy = make(d, type, size_t(s.output_numel()), 20);
        const Tensor y = Tensor::empty(d, {s.output_numel()}, type);
        const Tensor dx = Tensor::empty(d, {s.input_numel()}, type);
        const Tensor dw = Tensor::empty(d, {s.weight_numel()});
        const Tensor db = c.bias ? Tensor::empty(d, {s.out_channels}) : Tensor();
        const Tensor ws = Tensor::empty(
            d, {std::max<int64_t>(int64_t(d.conv2d_workspace_bytes(s)), 1)}, DType::u8);
        d.conv2d_forward(s, x, w, b, y, ws);
        d.conv2d_backward(s, x, w, dy, dx, dw, db, ws);
        // One sample's columns and their adjoint.
        const int64_t col_n = s.patch_size() * s.out_height() * s.out_width();
        const Tensor col = Tensor::empty(d, {col_n}, type);
        const Tensor back = Tensor::empty(d, {s.in_channels * s.height * s.width}, type);
        d.im2col(s, x.view(0, {s.in_channels, s.height, s.width}), col);
        d.col2im(s, col, back);
        Outputs out{y.to_host(), dx.to_host(), dw.to_host(), col.to_host(), back.to_host()};
        if (c.bias) out.push_back(db.to_host());
        return out;
      });
}

// The implicit convolution's forward leaves the flipped kernel in the workspace for the data
// gradient: a backward given another kernel tensor, or the same one rewritten since, must not
// take it (Device's workspace claims cover the kernel as well as x).
TEST_CASE("cuda half: a convolution's backward takes the kernel it is given",
          "[cuda][half][conv2d]") {
  for (DType t : kHalves)
    agree_with_cpu("conv2d backward, kernel changed", t, 8.0, [&](Device& d, DType type) {
      Conv2dShape s;
      s.batch = 4, s.in_channels = 32, s.height = 12, s.width = 12, s.out_channels = 32;
      s.kernel_h = s.kernel_w = 3, s.pad_h = s.pad_w = 1, s.dtype = type;
      const Tensor x = make(d, type, size_t(s.input_numel()), 41);
      const Tensor w = make(d, type, size_t(s.weight_numel()), 42);
      const Tensor other = make(d, type, size_t(s.weight_numel()), 43);
      const Tensor dy = make(d, type, size_t(s.output_numel()), 44);
      const Tensor y = Tensor::empty(d, {s.output_numel()}, type);
      const Tensor dx = Tensor::empty(d, {s.input_numel()}, type);
      const Tensor dw = Tensor::empty(d, {s.weight_numel()});
      const Tensor ws = Tensor::empty(
          d, {std::max<int64_t>(int64_t(d.conv2d_workspace_bytes(s)), 1)}, DType::u8);
      d.conv2d_forward(s, x, other, Tensor(), y, ws);
      d.conv2d_backward(s, x, w, dy, dx, dw, Tensor(), ws);  // another tensor than the forward's
      Outputs out{dx.to_host()};
      d.conv2d_forward(s, x, w, Tensor(), y, ws);
      w.copy_from(other);  // the forward's kernel, rewritten
      d.conv2d_backward(s, x, w, dy, dx, dw, Tensor(), ws);
      out.push_back(dx.to_host());
      return out;
    });
}

TEST_CASE("cuda half: pooling agrees with the CPU", "[cuda][half][pool]") {
  struct Case {
    int64_t k, stride, pad;
    bool relu, global;
  };
  const Case cases[] = {{2, 2, 0, false, false}, {3, 2, 1, true, false}, {0, 1, 0, false, true}};
  for (DType t : kHalves)
    for (const Case& c : cases)
      agree_with_cpu("pooling", t, 2.0, [&](Device& d, DType type) {
        Pool2dShape s;
        s.batch = 3, s.channels = 5, s.height = 10, s.width = 9;
        s.kernel_h = c.global ? s.height : c.k, s.kernel_w = c.global ? s.width : c.k;
        s.stride_h = s.stride_w = c.stride, s.pad_h = s.pad_w = c.pad;
        const Tensor x = make(d, type, size_t(s.input_numel()), 21);
        const Tensor dy = make(d, type, size_t(s.output_numel()), 22);
        const Tensor y = Tensor::empty(d, {s.output_numel()}, type);
        const Tensor dx = Tensor::empty(d, {s.input_numel()}, type);
        Outputs out;
        if (!c.global) {
          s.relu = c.relu;
          const Tensor argmax = Tensor::empty(d, {s.output_numel()}, DType::i32);
          d.maxpool2d_forward(s, x, y, argmax);
          d.maxpool2d_backward(s, dy, argmax, dx);
          const std::vector<int32_t> a = argmax.to_host_i32();
          out = {y.to_host(), dx.to_host(), std::vector<float>(a.begin(), a.end())};
          s.relu = false;
        }
        const Tensor ya = Tensor::empty(d, {s.output_numel()}, type);
        const Tensor dxa = Tensor::empty(d, {s.input_numel()}, type);
        d.avgpool2d_forward(s, x, ya);
        d.avgpool2d_backward(s, dy, dxa);
        out.push_back(ya.to_host());
        out.push_back(dxa.to_host());
        return out;
      });
}

TEST_CASE("cuda half: batch normalisation agrees with the CPU", "[cuda][half][batchnorm]") {
  for (DType t : kHalves)
    agree_with_cpu("batchnorm", t, 4.0, [&](Device& d, DType type) {
      BatchNormShape s;
      s.outer = 8, s.channels = 6, s.inner = 49;
      const int64_t c = s.channels;
      const Tensor x = make(d, type, size_t(s.numel()), 23, 1.f, 3.f);
      const Tensor dy = make(d, type, size_t(s.numel()), 24);
      const Tensor gamma = make(d, DType::f32, size_t(c), 25, 0.5f, 1.5f);
      const Tensor beta = make(d, DType::f32, size_t(c), 26);
      const Tensor rm = make(d, DType::f32, size_t(c), 27), rv = make(d, DType::f32, size_t(c), 28, 0.5f, 2.f);
      const Tensor sm = Tensor::empty(d, {c}), si = Tensor::empty(d, {c});
      const Tensor y = Tensor::empty(d, {s.numel()}, type), dx = Tensor::empty(d, {s.numel()}, type);
      const Tensor dg = Tensor::empty(d, {c}), dbeta = Tensor::empty(d, {c});
      const Tensor eval = Tensor::empty(d, {s.numel()}, type);
      d.batchnorm_forward(s, false, x, gamma, beta, rm, rv, eval, Tensor(), Tensor());
      d.batchnorm_forward(s, true, x, gamma, beta, rm, rv, y, sm, si);
      d.batchnorm_backward(s, x, dy, gamma, sm, si, dx, dg, dbeta);
      // The residual block's form: + dy as the residual, then the ReLU after the sum.
      BatchNormShape with_sum = s;
      with_sum.relu = true;
      const Tensor sum = Tensor::empty(d, {s.numel()}, type);
      const Tensor sum_eval = Tensor::empty(d, {s.numel()}, type);
      d.batchnorm_add_forward(with_sum, true, x, dy, gamma, beta, rm, rv, sum, sm, si);
      d.batchnorm_add_forward(with_sum, false, x, dy, gamma, beta, rm, rv, sum_eval, Tensor(),
                              Tensor());
      return Outputs{eval.to_host(), y.to_host(),  sm.to_host(),    si.to_host(),
                     rm.to_host(),   rv.to_host(), dx.to_host(),    dg.to_host(),
                     dbeta.to_host(), sum.to_host(), sum_eval.to_host()};
    });
}

TEST_CASE("cuda half: the classification head agrees with the CPU (mixed output types)",
          "[cuda][half][head]") {
  for (DType t : kHalves)
    agree_with_cpu("head", t, 2.0, [&](Device& d, DType type) {
      const int64_t rows = 67, cols = 10;
      std::vector<int32_t> labels(rows);
      for (int64_t r = 0; r < rows; ++r) labels[size_t(r)] = int32_t((r * 7) % cols);
      const Tensor lab = Tensor::from_host(d, {rows}, labels);
      const Tensor x = Tensor::from_host(d, {rows, cols}, random_values(size_t(rows * cols), 29, -4.f, 4.f), type);
      const Tensor y32 = Tensor::empty(d, {rows, cols}), dx16 = Tensor::empty(d, {rows, cols}, type);
      const Tensor y16 = Tensor::empty(d, {rows, cols}, type), dx32 = Tensor::empty(d, {rows, cols});
      const Tensor loss = Tensor::zeros(d, {1}), loss2 = Tensor::zeros(d, {1});
      d.log_softmax_nll(x, lab, 1.0f / rows, 0.1f, y32, loss, false, dx16);
      d.log_softmax_nll(x, lab, 1.0f / rows, 0.0f, y16, loss2, false, dx32);
      const Tensor lp = Tensor::empty(d, {rows, cols}, type), dlp = Tensor::empty(d, {rows, cols}, type);
      const Tensor nll = Tensor::zeros(d, {1}), back = Tensor::empty(d, {rows, cols}, type);
      d.log_softmax_forward(x, lp);
      d.nll_loss_forward(lp, lab, nll, false, 0.2f);
      d.nll_loss_backward(lab, dlp, 1.0f / rows, 0.2f);
      d.log_softmax_backward(lp, dlp, back);
      const Tensor mse = Tensor::zeros(d, {1}), dmse = Tensor::empty(d, {rows, cols}, type);
      d.mse_loss(x, lab, 1.0f / rows, mse, false, dmse);
      const Tensor correct = Tensor::zeros(d, {1});
      d.count_correct(x, lab, correct);
      return Outputs{y32.to_host(), dx16.to_host(), loss.to_host(), y16.to_host(),
                     dx32.to_host(), lp.to_host(), nll.to_host(), dlp.to_host(),
                     back.to_host(), mse.to_host(), dmse.to_host(), correct.to_host()};
    });
}

TEST_CASE("cuda half: gathered samples agree with the CPU", "[cuda][half][gather]") {
  for (DType t : kHalves)
    agree_with_cpu("gather_samples", t, 2.0, [&](Device& d, DType type) {
      std::vector<uint8_t> images(size_t(20 * 2 * 6 * 7));
      for (size_t i = 0; i < images.size(); ++i) images[i] = uint8_t((i * 53 + 7) % 256);
      const Tensor src = Tensor::from_host(d, {20, 2, 6, 7}, images);
      std::vector<int32_t> order(40);
      for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t((i * 3 + 1) % 20);
      const Tensor table = Tensor::from_host(d, {40}, order);
      const Tensor state = Tensor::from_host(d, {2}, std::vector<int32_t>{1, 5});
      SampleTransform tr;
      tr.scale = 1.0f / 255.0f;
      tr.mean = Tensor::from_host(d, {2}, std::vector<float>{0.3f, 0.6f});
      tr.inv_std = Tensor::from_host(d, {2}, std::vector<float>{2.0f, 4.0f});
      tr.crop_padding = 2, tr.horizontal_flip = true, tr.seed = 9, tr.stream = 3;
      const Tensor dst = Tensor::empty(d, {8, 2, 6, 7}, type);
      d.gather_samples(src, table, state, tr, dst);
      return Outputs{dst.to_host()};
    });
}

TEST_CASE("cuda half: an overflowed fp16 step is skipped, the scale backs off and grows back",
          "[cuda][half][optimizer]") {
  for (Device* d : cuda_devices()) {
    INFO(d->info().id());
    const int64_t n = 777;
    const std::vector<float> p0 = random_values(size_t(n), 41), g0 = random_values(size_t(n), 42);
    for (const bool adam : {false, true}) {
      INFO((adam ? "adam" : "sgd"));
      // Gradients as the loss scale left them (x 1024), one of them infinite: an overflow.
      std::vector<float> g = g0;
      for (float& v : g) v *= 1024.0f;
      g[123] = INFINITY;
      const Tensor params = Tensor::from_host(*d, {n}, p0), grads = Tensor::from_host(*d, {n}, g);
      const Tensor m = Tensor::zeros(*d, {n}), v = Tensor::zeros(*d, {n});
      const Tensor state = Tensor::from_host(*d, {2}, std::vector<float>{1024.0f, 5.0f});
      const Tensor step = Tensor::zeros(*d, {2}, DType::i32), sumsq = Tensor::zeros(*d, {1});
      UpdateControl control;
      control.grad_sumsq = sumsq;
      control.max_norm = 0.0f;  // no clipping: the sum is only the overflow check
      control.loss_scale = state.view(0, {1});
      LossScaleParams lsp;
      lsp.interval = 2;
      auto run_step = [&] {
        d->channel_sums(grads, grads, sumsq, 1, 1, n, 0.0f);
        if (adam) {
          AdamParams hp;
          d->adam_update(params, grads, m, v, hp, control, step);
        } else {
          SgdParams hp;
          hp.lr = 0.5f, hp.momentum = 0.9f;
          d->sgd_update(params, grads, m, hp, control, step);
        }
        d->update_loss_scale(state, sumsq, lsp);
        d->advance_step(step);
      };
      run_step();
      CHECK(params.to_host() == p0);  // skipped: nothing moved
      CHECK(m.to_host() == std::vector<float>(size_t(n), 0.0f));
      CHECK(state.to_host() == std::vector<float>{512.0f, 0.0f});  // backed off, count reset
      // A clean step: the gradients are divided by the (new) scale of 512, without clipping.
      for (int64_t i = 0; i < n; ++i) g[size_t(i)] = g0[size_t(i)] * 512.0f;
      grads.copy_from_host(g.data(), g.size() * 4);
      run_step();
      const std::vector<float> moved = params.to_host();
      size_t off = 0;
      for (int64_t i = 0; i < n; ++i) {
        // SGD: p - 0.5 * g0 (the first momentum step is d itself). Adam: its first update, at
        // t = 2 (the skipped step still counted), with PyTorch's defaults.
        const double gi = g0[size_t(i)], b1 = 0.9, b2 = 0.999, t = 2.0;
        const double adam_step = 1e-3 / (1.0 - std::pow(b1, t)) * ((1.0 - b1) * gi) /
                                 (std::sqrt((1.0 - b2) * gi * gi) / std::sqrt(1.0 - std::pow(b2, t)) +
                                  1e-8);
        const double want = double(p0[size_t(i)]) - (adam ? adam_step : 0.5 * gi);
        if (std::fabs(double(moved[size_t(i)]) - want) > 2e-6 * (1.0 + std::fabs(want))) ++off;
      }
      CHECK(off == 0);
      CHECK(state.to_host() == std::vector<float>{512.0f, 1.0f});
      run_step();  // the second clean step of the interval: the scale doubles
      CHECK(state.to_host() == std::vector<float>{1024.0f, 0.0f});
    }
  }
}

TEST_CASE("cuda half: fp16 training with a huge loss scale skips every overflowed step",
          "[cuda][half][training]") {
  const DatasetSplits data = trident::testing::small_splits(128, 32);
  for (Device* d : cuda_devices()) {
    INFO(d->info().id());
    TrainOptions o;
    o.batch = 32;  // 4 steps an epoch
    o.precision = Precision::fp16;
    o.initial_loss_scale = std::ldexp(1.0f, 100);  // the scaled gradient overflows fp16
    Trainer trainer({d}, find_model("cnn").factory(), data, o);
    const std::vector<float> before = trainer.network().parameters().to_host();
    trainer.train_epoch();
    CHECK(trainer.network().parameters().to_host() == before);
    CHECK(trainer.loss_scale() == std::ldexp(1.0f, 96));  // halved once per step
  }
}

// Captured training steps in precision p (the MLP and the ResNet, 2 epochs of 8 steps) replay bit
// for bit like eager ones. One test case per precision, so that each runs in its own process
// under compute-sanitizer's racecheck (minutes per case).
namespace {
void check_captured_training(Precision p) {
  const DatasetSplits data = trident::testing::small_splits(256, 32);
  for (Device* d : cuda_devices())
    for (const std::string model : {"mlp", "resnet"}) {
      INFO(d->info().id() << " " << precision_name(p) << " " << model);
      auto run = [&](bool capture) {
        TrainOptions o;
        const ModelRecipe& recipe = find_model(model);
        o.batch = 32;  // 8 steps an epoch
        o.optimizer = recipe.optimizer;
        o.schedule = recipe.schedule;
        o.loss = recipe.loss;
        o.epochs = 2;
        o.precision = p;
        o.capture = capture;
        Trainer trainer({d}, recipe.factory(), data, o);
        std::vector<float> losses;
        for (int e = 0; e < 2; ++e) losses.push_back(float(trainer.train_epoch().train_loss));
        return std::make_pair(losses, trainer.network().parameters().to_host());
      };
      const auto eager = run(false), captured = run(true);
      CHECK(eager.first == captured.first);
      CHECK(eager.second == captured.second);
      CHECK(std::isfinite(eager.first.back()));
      CHECK(eager.first.back() < eager.first.front() * 1.5f);  // trained, not diverged
    }
}
}  // namespace

TEST_CASE("cuda half: captured bf16 training steps replay bit for bit like eager steps",
          "[cuda][half][capture]") {
  check_captured_training(Precision::bf16);
}

TEST_CASE("cuda half: captured fp16 training steps replay bit for bit like eager steps",
          "[cuda][half][capture]") {
  check_captured_training(Precision::fp16);
}

TEST_CASE("cuda half: allow_tf32 takes effect per GEMM call", "[cuda][half][gemm][tf32]") {
  if (std::getenv("TRIDENT_CUDA_TF32")) return;  // every float32 GEMM is TF32 then
  const int64_t n = 512;
  const std::vector<float> a = random_values(size_t(n * n), 51), b = random_values(size_t(n * n), 52);
  // Host reference in double and, per element, sum |a_ik b_kj| (what rounding errors scale with).
  std::vector<double> want(size_t(n * n), 0.0), magnitude(size_t(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < n; ++k) {
      const double aik = a[size_t(i * n + k)];
      for (int64_t j = 0; j < n; ++j) {
        const double p = aik * double(b[size_t(k * n + j)]);
        want[size_t(i * n + j)] += p;
        magnitude[size_t(i * n + j)] += std::fabs(p);
      }
    }
  for (Device* d : cuda_devices()) {
    INFO(d->info().id());
    auto worst = [&](bool tf32) {  // the largest |error| / sum |a b| over C
      GemmArgs g;
      g.m = g.n = g.k = n;
      g.a = Tensor::from_host(*d, {n * n}, a), g.b = Tensor::from_host(*d, {n * n}, b);
      g.c = Tensor::empty(*d, {n * n});
      g.allow_tf32 = tf32;
      d->gemm(g);
      const std::vector<float> c = g.c.to_host();
      double out = 0.0;
      for (size_t i = 0; i < c.size(); ++i)
        out = std::max(out, std::fabs(double(c[i]) - want[i]) / magnitude[i]);
      return out;
    };
    const double exact = worst(false), tf32 = worst(true);
    WARN(d->info().id() << " 512^3 GEMM, max |error| / sum|ab|: float32 " << exact << ", TF32 "
                        << tf32);
    // float32: a few float32 roundings; TF32: operands rounded to 10-bit mantissas (2^-11 each),
    // visibly coarser than float32 but within two such roundings per product.
    CHECK(exact < std::ldexp(1.0, -17));
    CHECK(tf32 > std::ldexp(1.0, -17));
    CHECK(tf32 < std::ldexp(1.0, -9));
  }
}

namespace {

// allow_tf32 on a float32 convolution s: forward and both gradients within two TF32 roundings
// of cpu:0's float32 and visibly coarser than float32 (so TF32 really ran), and float32 itself
// within float32 roundings.
void check_tf32_takes_effect(const Conv2dShape& s) {
  const std::vector<float> x = random_values(size_t(s.input_numel()), 61),
                           w = random_values(size_t(s.weight_numel()), 62),
                           dy = random_values(size_t(s.output_numel()), 63);
  // cpu:0's float32 results and, from the absolute values, what rounding errors scale with.
  auto run = [&](Device& d, const std::vector<float>& xs, const std::vector<float>& ws,
                 const std::vector<float>& dys, bool tf32) {
    Conv2dShape t = s;
    t.allow_tf32 = tf32;
    Tensor workspace = Tensor::empty(d, {int64_t(std::max<size_t>(d.conv2d_workspace_bytes(t), 1))},
                                     DType::u8);
    Tensor tx = Tensor::from_host(d, {s.input_numel()}, xs);
    Tensor tw = Tensor::from_host(d, {s.weight_numel()}, ws);
    Tensor tdy = Tensor::from_host(d, {s.output_numel()}, dys);
    Tensor y = Tensor::empty(d, {s.output_numel()}), dx = Tensor::empty(d, {s.input_numel()});
    Tensor dw = Tensor::empty(d, {s.weight_numel()});
    d.conv2d_forward(t, tx, tw, Tensor(), y, workspace);
    d.conv2d_backward(t, tx, tw, tdy, dx, dw, Tensor(), workspace);
    return Outputs{y.to_host(), dx.to_host(), dw.to_host()};
  };
  auto absolute = [](std::vector<float> v) {
    for (float& e : v) e = std::fabs(e);
    return v;
  };
  const Outputs want = run(cpu(), x, w, dy, false);
  const Outputs magnitude = run(cpu(), absolute(x), absolute(w), absolute(dy), false);
  for (Device* d : cuda_devices()) {
    INFO(d->info().id());
    for (size_t o = 0; o < 3; ++o) {
      INFO("output " << o << " (y, dx, dw)");
      auto worst = [&](bool tf32) {
        const Outputs got = run(*d, x, w, dy, tf32);
        double out = 0.0;
        for (size_t i = 0; i < want[o].size(); ++i)
          out = std::max(out, std::fabs(double(got[o][i]) - double(want[o][i])) /
                                  (double(magnitude[o][i]) + 1e-30));
        return out;
      };
      const double exact = worst(false), tf32 = worst(true);
      WARN(d->info().id() << " conv output " << o << ": max |error| / sum|xw|: float32 " << exact
                          << ", TF32 " << tf32);
      CHECK(exact < std::ldexp(1.0, -17));  // float32 on both sides, in different orders
      CHECK(tf32 > std::ldexp(1.0, -17));   // operands really rounded to TF32 ...
      CHECK(tf32 < std::ldexp(1.0, -9));    // ... and nothing worse than that
    }
  }
}

}  // namespace

TEST_CASE("cuda half: allow_tf32 takes effect per convolution",
          "[cuda][half][conv2d][tf32]") {
  if (std::getenv("TRIDENT_CUDA_TF32")) return;
  // 3x3, stride 1 and stride 2: every product of forward and backward on TF32 tensor cores (the
  // implicit kernels at stride 1, cuBLAS's GEMMs over im2col columns at stride 2). On an H100 or
  // H200 the stride-1 products take the warpgroup-multiply kernel, whose operands the layout
  // passes round: 32 -> 64 (the data gradient into 32 channels with positions as the rows), and
  // 64 -> 96 (the forward's 96 output channels a partial block of 128).
  for (const int64_t stride : {1, 2, 0}) {
    Conv2dShape s;
    const bool wide = stride == 0;
    s.stride_h = s.stride_w = wide ? 1 : stride;
    s.batch = 4, s.in_channels = wide ? 64 : 32;
    s.height = 17 * s.stride_h, s.width = 15 * s.stride_w;
    s.out_channels = wide ? 96 : 64, s.kernel_h = s.kernel_w = 3, s.pad_h = s.pad_w = 1;
    INFO("stride " << s.stride_h << ", " << s.in_channels << " -> " << s.out_channels);
    check_tf32_takes_effect(s);
  }
}

TEST_CASE("cuda half: a bf16 MLP trains as the float32 one does", "[cuda][half][training]") {
  const DatasetSplits data = trident::testing::small_splits(256, 64);
  for (Device* d : cuda_devices()) {
    INFO(d->info().id());
    auto run = [&](Precision p) {
      TrainOptions o;
      o.batch = 32;  // 8 SGD steps
      o.precision = p;
      o.seed = 7;
      Trainer trainer({d}, find_model("mlp").factory(), data, o);
      const std::vector<float> before = trainer.network().parameters().to_host();
      const double loss = trainer.train_epoch().train_loss;
      std::vector<float> delta = trainer.network().parameters().to_host();
      for (size_t i = 0; i < delta.size(); ++i) delta[i] -= before[i];
      return std::make_tuple(loss, before, delta);
    };
    const auto [loss32, init32, delta32] = run(Precision::fp32);
    const auto [loss16, init16, delta16] = run(Precision::bf16);
    REQUIRE(init16 == init32);  // the same start: float32 master weights from the same seed
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < delta32.size(); ++i) {
      diff += std::pow(double(delta16[i]) - double(delta32[i]), 2);
      norm += std::pow(double(delta32[i]), 2);
    }
    const double relative = std::sqrt(diff / norm), u = unit_roundoff(DType::bf16);
    WARN(d->info().id() << " mlp, 8 steps: bf16 loss " << loss16 << " vs float32 " << loss32
                        << "; |update difference| / |update| " << relative << " (u = " << u
                        << ")");
    // Activations and GEMM operands rounded once each per layer (relative u), sums in float32:
    // a few u in every step's update, growing slowly over 8 steps. A wrong kernel is off by O(1).
    CHECK(norm > 0.0);
    CHECK(relative < 16 * u);
    CHECK(std::fabs(loss16 - loss32) < 16 * u * loss32);
  }
}
