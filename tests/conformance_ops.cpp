// Op conformance, linear algebra, elementwise and per-channel ops: gemm (and its core default),
// channel_sums / sum_rows, channel_affine, axpby, the unary family, dropout on every device
// against trident::reference, at awkward sizes, strides and buffer offsets.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "trident/kernels/reference/reference_ops.h"
#include "tests/conformance.h"
#include "tests/gemm_check.h"

using namespace trident;
using namespace trident::testing;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<UnaryOp> all_unary_ops() {
  return {
#define TRIDENT_TEST_UNARY(name, module) UnaryOp::name,
      TRIDENT_UNARY_OPS(TRIDENT_TEST_UNARY)
#undef TRIDENT_TEST_UNARY
  };
}

}  // namespace

TEST_CASE("conformance: gemm, every transpose case, alpha/beta, bias, relu, strides, offsets",
          "[conformance][gemm]") {
  const std::vector<std::array<int64_t, 3>> shapes = {
      {1, 1, 1}, {7, 33, 257}, {257, 7, 33}, {33, 257, 7}, {33, 33, 33}, {1, 257, 7},
      {257, 1, 33}, {7, 7, 1}, {129, 257, 65}};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 100;
    for (const auto& shape : shapes) {
      const int64_t m = shape[0], n = shape[1], k = shape[2];
      std::vector<GemmCase> cases = {
          {m, n, k},                                                          // plain
          {m, n, k, 0.5f, 0.0f, BiasKind::per_column, true, 0, 3},            // fused epilogue
          {m, n, k, -1.5f, 0.75f, BiasKind::per_row, false, 3, 1},            // beta, lda > cols
          {m, n, k, 2.0f, 1.0f, BiasKind::none, true, 5, 7},                  // accumulate + relu
      };
      for (const GemmCase& c : cases)
        for (bool ta : {false, true})
          for (bool tb : {false, true}) check_gemm(*device, c, ta, tb, seed += 10);
    }
    // Past the CPU kernel's cache blocks (K 256, M 144, N 1536): partial sums across K blocks
    // and edge tiles in every dimension.
    const std::vector<GemmCase> large = {
        {150, 1543, 260}, {145, 1537, 513, -1.0f, 0.5f, BiasKind::per_column, true, 3, 1}};
    for (const GemmCase& c : large)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) check_gemm(*device, c, ta, tb, seed += 10);
  }
}

TEST_CASE("conformance: gemm with every activation epilogue, packed strides given as 0, and "
          "the core default of the fused slot", "[conformance][gemm]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 150;
    for (const UnaryOp op : all_unary_ops()) {
      GemmCase c{37, 65, 19, 1.0f, 0.0f, BiasKind::per_column, false, 0, 1, op};
      c.packed_as_zero = true;
      check_gemm(*device, c, false, true, seed += 10);
      GemmCase strided{19, 23, 41, 0.5f, 0.25f, BiasKind::per_row, false, 2, 0, op};
      check_gemm(*device, strided, true, false, seed += 10);
      // The default composition (gemm + channel_affine + unary_forward) on this device.
      check_gemm(*device, c, false, true, seed += 10, true);
      check_gemm(*device, strided, true, false, seed += 10, true);
    }
  }
}

TEST_CASE("conformance: the front rejects bad gemm arguments with a message",
          "[conformance][gemm][front]") {
  FOR_EACH_DEVICE(device) {
    Tensor a = Tensor::zeros(*device, {4, 5}), b = Tensor::zeros(*device, {5, 6}),
           c = Tensor::zeros(*device, {4, 6});
    GemmArgs g;
    g.m = 4; g.n = 6; g.k = 5;
    g.a = a; g.b = b; g.c = c;
    device->gemm(g);  // well-formed
    GemmArgs short_c = g;
    short_c.c = c.view(0, {23});
    CHECK_THROWS_WITH(device->gemm(short_c), Catch::Contains("c has 23 elements"));
    GemmArgs small_ld = g;
    small_ld.lda = 4;
    CHECK_THROWS_WITH(device->gemm(small_ld), Catch::Contains("row stride of a"));
    GemmArgs aliased = g;
    aliased.c = a.view(0, {4, 5});
    aliased.n = 5;
    aliased.b = Tensor::zeros(*device, {5, 5});
    CHECK_THROWS_WITH(device->gemm(aliased), Catch::Contains("overlap"));
    GemmArgs bias_without_kind = g;
    bias_without_kind.bias = Tensor::zeros(*device, {6});
    CHECK_THROWS_WITH(device->gemm(bias_without_kind), Catch::Contains("BiasKind::none"));
    GemmArgs wrong_dtype = g;
    wrong_dtype.a = Tensor::zeros(*device, {20}, DType::i32);
    CHECK_THROWS_WITH(device->gemm(wrong_dtype), Catch::Contains("I32"));
    GemmArgs undefined = g;
    undefined.b = Tensor();
    CHECK_THROWS_WITH(device->gemm(undefined), Catch::Contains("b is undefined"));
  }
}

TEST_CASE("conformance: sum_rows with and without beta", "[conformance][sum_rows]") {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {7, 33}, {257, 7}, {33, 257}, {1000, 10}, {1, 513}, {4097, 3}, {20011, 33},
      // CUDA: ten tiles of 32 columns in 32 parts each, each tile finished by its last block;
      // and parts enough (586) that the finishing block merges one column at a time.
      {4096, 300}, {300000, 33}};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 200;
    for (const auto& [rows, cols] : shapes)
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        INFO("sum_rows rows=" << rows << " cols=" << cols << " beta=" << beta);
        const std::vector<float> dy = random_floats(size_t(rows * cols), ++seed);
        std::vector<float> db0 = beta == 0.0f ? std::vector<float>(size_t(cols), kNaN)
                                              : random_floats(size_t(cols), ++seed);
        std::vector<float> want = db0;
        reference::sum_rows(dy.data(), rows, cols, want.data(), beta);
        OffsetBuffer ddy(*device, dy, 1), ddb(*device, db0, 2);
        device->sum_rows(ddy.tensor(), rows, cols, ddb.tensor(), beta);
        TRIDENT_CHECK_CLOSE(ddb.values(), want, (Tolerance{2e-6 * double(rows) + 1e-6, 1e-5}));
        CHECK(ddb.guard_damage() == 0);
      }
  }
}

TEST_CASE("conformance: channel_sums over [outer, channels, inner], with products, one long "
          "channel (a gradient norm)", "[conformance][channel]") {
  struct Case {
    int64_t outer, channels, inner;
  };
  const std::vector<Case> cases = {{1, 1, 1},     {3, 5, 7},      {256, 32, 49}, {2, 3, 785},
                                   {64, 128, 1},  {1, 1, 407050}, {5, 1, 3001},  {1, 7, 1000},
                                   {1000, 2, 3},  {9, 64, 196}};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 250;
    for (const Case& c : cases)
      for (const bool product : {false, true})
        for (float beta : {0.0f, 0.5f}) {
          INFO("channel_sums outer=" << c.outer << " channels=" << c.channels
                                     << " inner=" << c.inner << " product=" << product
                                     << " beta=" << beta);
          const size_t n = size_t(c.outer * c.channels * c.inner);
          const std::vector<float> x = random_floats(n, ++seed);
          const std::vector<float> y = random_floats(n, ++seed);
          std::vector<float> out0 = beta == 0.0f ? std::vector<float>(size_t(c.channels), kNaN)
                                                 : random_floats(size_t(c.channels), ++seed);
          std::vector<float> want = out0;
          reference::channel_sums(x.data(), product ? y.data() : nullptr, want.data(), c.outer,
                                  c.channels, c.inner, beta);
          OffsetBuffer dx(*device, x, 1), dy(*device, y, 2), dout(*device, out0, 3);
          device->channel_sums(dx.tensor(), product ? dy.tensor() : Tensor(), dout.tensor(),
                               c.outer, c.channels, c.inner, beta);
          const double terms = double(c.outer * c.inner);
          TRIDENT_CHECK_CLOSE(dout.values(), want, (Tolerance{2e-7 * terms + 1e-6, 1e-5}));
          CHECK(dout.guard_damage() == 0);
        }
  }
}

TEST_CASE("conformance: channel_affine, bias and scale per channel, in place",
          "[conformance][channel]") {
  struct Case {
    int64_t outer, channels, inner;
  };
  const std::vector<Case> cases = {{1, 1, 1}, {3, 5, 7}, {256, 32, 49}, {200, 512, 1}, {2, 3, 785}};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 270;
    for (const Case& c : cases)
      for (int mode = 0; mode < 3; ++mode) {  // shift only, scale only, both
        INFO("channel_affine outer=" << c.outer << " channels=" << c.channels << " inner="
                                     << c.inner << " mode=" << mode);
        const size_t n = size_t(c.outer * c.channels * c.inner);
        const std::vector<float> x = random_floats(n, ++seed);
        const std::vector<float> scale = random_floats(size_t(c.channels), ++seed);
        const std::vector<float> shift = random_floats(size_t(c.channels), ++seed);
        const bool use_scale = mode != 0, use_shift = mode != 1;
        std::vector<float> want(n);
        reference::channel_affine(x.data(), use_scale ? scale.data() : nullptr,
                                  use_shift ? shift.data() : nullptr, want.data(), c.outer,
                                  c.channels, c.inner);
        OffsetBuffer dx(*device, x, 1), dscale(*device, scale, 0), dshift(*device, shift, 2),
            dy(*device, std::vector<float>(n, kNaN), 3);
        device->channel_affine(dx.tensor(), use_scale ? dscale.tensor() : Tensor(),
                               use_shift ? dshift.tensor() : Tensor(), dy.tensor(), c.outer,
                               c.channels, c.inner);
        TRIDENT_CHECK_CLOSE(dy.values(), want, kElementwise);
        CHECK(dy.guard_damage() == 0);
        device->channel_affine(dx.tensor(), use_scale ? dscale.tensor() : Tensor(),
                               use_shift ? dshift.tensor() : Tensor(), dx.tensor(), c.outer,
                               c.channels, c.inner);  // in place
        TRIDENT_CHECK_CLOSE(dx.values(), want, kElementwise);
        CHECK(dx.guard_damage() == 0);
      }
  }
}

TEST_CASE("conformance: axpby", "[conformance][axpby]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 300;
    for (int64_t n : {1, 7, 33, 257, 1000, 100003})
      for (auto [a, b] : {std::pair<float, float>{1.0f, 1.0f}, {0.25f, -0.5f}, {-2.0f, 0.0f}}) {
        INFO("axpby n=" << n << " a=" << a << " b=" << b);
        const std::vector<float> x = random_floats(size_t(n), ++seed);
        // b == 0: y is not read, so NaN there must not survive.
        const std::vector<float> y0 = b == 0.0f ? std::vector<float>(size_t(n), kNaN)
                                                : random_floats(size_t(n), ++seed);
        std::vector<float> want = y0;
        reference::axpby(x.data(), want.data(), n, a, b);
        OffsetBuffer dx(*device, x, 3), dy(*device, y0, 1);
        device->axpby(dx.tensor(), dy.tensor(), a, b);
        TRIDENT_CHECK_CLOSE(dy.values(), want, kElementwise);
        CHECK(dy.guard_damage() == 0);
      }
  }
}

// A residual block's sum and activation in one op: y = act(a x + b y) against the reference's
// axpby followed by its unary_forward (the CPU, CUDA and OpenCL fuse it; the reference devices
// compose the two).
TEST_CASE("conformance: axpby with an activation", "[conformance][axpby]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 350;
    for (const UnaryOp op : all_unary_ops())
      for (int64_t n : {1, 33, 4099, 100003})
        for (auto [a, b] : {std::pair<float, float>{1.0f, 1.0f}, {0.5f, -2.0f}, {-1.5f, 0.0f}}) {
          if (op == UnaryOp::identity) continue;  // the case above
          const float alpha = op == UnaryOp::leaky_relu ? 0.2f : 0.01f;
          INFO(unary_op_name(op) << " n=" << n << " a=" << a << " b=" << b);
          const std::vector<float> x = random_floats(size_t(n), ++seed, -2.0f, 2.0f);
          const std::vector<float> y0 = b == 0.0f ? std::vector<float>(size_t(n), kNaN)
                                                  : random_floats(size_t(n), ++seed, -2.0f, 2.0f);
          std::vector<float> want = y0;
          reference::axpby(x.data(), want.data(), n, a, b);
          reference::unary_forward(op, want.data(), want.data(), n, alpha);
          OffsetBuffer dx(*device, x, 3), dy(*device, y0, 1);
          device->axpby(dx.tensor(), dy.tensor(), a, b, op, alpha);
          // The sum rounds once or twice in float; the activations are 1-Lipschitz here (GELU's
          // slope stays under 1.13), and the transcendental ones add a few float ulps.
          TRIDENT_CHECK_CLOSE(dy.values(), want, (Tolerance{4e-6, 4e-6}));
          CHECK(dy.guard_damage() == 0);
        }
  }
}

TEST_CASE("conformance: every unary op forward and backward, out of place and in place",
          "[conformance][unary]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 400;
    for (const UnaryOp op : all_unary_ops())
      for (const float alpha : {0.01f, 0.2f})
        for (int64_t n : {1, 7, 33, 257, 4099, 100003}) {
          if (op != UnaryOp::leaky_relu && alpha != 0.01f) continue;
          INFO(unary_op_name(op) << " alpha=" << alpha << " n=" << n);
          std::vector<float> x = random_floats(size_t(n), ++seed, -4.0f, 4.0f);
          for (size_t i = 0; i < x.size(); i += 5) x[i] = 0.0f;  // exact zeros: y > 0 is strict
          std::vector<float> y_want(static_cast<size_t>(n)), dx_want(static_cast<size_t>(n));
          reference::unary_forward(op, x.data(), y_want.data(), n, alpha);
          const std::vector<float> dy = random_floats(size_t(n), ++seed);
          reference::unary_backward(op, x.data(), y_want.data(), dy.data(), dx_want.data(), n,
                                    alpha);
          // Transcendental ops round differently per library: a few float ulps.
          const Tolerance tol = op == UnaryOp::identity || op == UnaryOp::relu ||
                                        op == UnaryOp::leaky_relu
                                    ? kExact
                                    : Tolerance{2e-6, 2e-6};
          // LeakyReLU's alpha * x rounds once in float.
          const Tolerance forward_tol = op == UnaryOp::leaky_relu ? kElementwise : tol;

          OffsetBuffer dxin(*device, x, 2), dyout(*device, std::vector<float>(size_t(n), kNaN), 5);
          device->unary_forward(op, dxin.tensor(), dyout.tensor(), alpha);
          TRIDENT_CHECK_CLOSE(dyout.values(), y_want, forward_tol);
          CHECK(dyout.guard_damage() == 0);

          OffsetBuffer in_place(*device, x, 1);  // y aliases x
          device->unary_forward(op, in_place.tensor(), in_place.tensor(), alpha);
          TRIDENT_CHECK_CLOSE(in_place.values(), y_want, forward_tol);

          // Backward from what the op needs: x (gelu) or y, the other one left undefined.
          const bool from_x = unary_backward_needs_input(op, alpha);
          OffsetBuffer dgrad_in(*device, dy, 3),
              dgrad_out(*device, std::vector<float>(size_t(n), kNaN), 0);
          device->unary_backward(op, from_x ? dxin.tensor() : Tensor(),
                                 from_x ? Tensor() : dyout.tensor(), dgrad_in.tensor(),
                                 dgrad_out.tensor(), alpha);
          TRIDENT_CHECK_CLOSE(dgrad_out.values(), dx_want,
                              (op == UnaryOp::identity || op == UnaryOp::relu ? kExact
                                                                              : Tolerance{1e-5, 1e-5}));
          CHECK(dgrad_out.guard_damage() == 0);

          // dx aliases dy.
          device->unary_backward(op, from_x ? dxin.tensor() : Tensor(),
                                 from_x ? Tensor() : dyout.tensor(), dgrad_in.tensor(),
                                 dgrad_in.tensor(), alpha);
          TRIDENT_CHECK_CLOSE(dgrad_in.values(), dx_want,
                              (op == UnaryOp::identity || op == UnaryOp::relu ? kExact
                                                                              : Tolerance{1e-5, 1e-5}));
          CHECK(dgrad_in.guard_damage() == 0);
        }
    // The op that needs x refuses a backward without it.
    Tensor t = Tensor::zeros(*device, {4});
    CHECK_THROWS_WITH(device->unary_backward(UnaryOp::gelu, Tensor(), t, t, t),
                      Catch::Contains("x (the forward input) is undefined"));
  }
}

TEST_CASE("conformance: unary_backward_sum takes a gradient in two parts through every op",
          "[conformance][unary]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 900;
    for (const UnaryOp op : all_unary_ops())
      for (int64_t n : {1, 7, 33, 4099, 100003}) {
        const float alpha = 0.05f;
        INFO(unary_op_name(op) << " n=" << n);
        std::vector<float> x = random_floats(size_t(n), ++seed, -4.0f, 4.0f);
        for (size_t i = 0; i < x.size(); i += 5) x[i] = 0.0f;
        std::vector<float> y(static_cast<size_t>(n)), want(static_cast<size_t>(n));
        reference::unary_forward(op, x.data(), y.data(), n, alpha);
        const std::vector<float> dy = random_floats(size_t(n), ++seed);
        const std::vector<float> more = random_floats(size_t(n), ++seed);
        std::vector<float> sum(static_cast<size_t>(n));
        for (size_t i = 0; i < sum.size(); ++i) sum[i] = dy[i] + more[i];  // one float rounding
        reference::unary_backward(op, x.data(), y.data(), sum.data(), want.data(), n, alpha);
        const Tolerance tol =
            op == UnaryOp::identity || op == UnaryOp::relu ? kExact : Tolerance{1e-5, 1e-5};
        const bool from_x = unary_backward_needs_input(op, alpha);
        OffsetBuffer xs(*device, x, 2), ys(*device, y, 1), more_in(*device, more, 3);
        const Tensor x_arg = from_x ? xs.tensor() : Tensor();
        const Tensor y_arg = from_x ? Tensor() : ys.tensor();
        // Out of place, then dx aliasing dy (how a residual block calls it).
        OffsetBuffer dy_in(*device, dy, 4), out(*device, std::vector<float>(size_t(n), kNaN), 0);
        device->unary_backward_sum(op, x_arg, y_arg, dy_in.tensor(), more_in.tensor(),
                                   out.tensor(), alpha);
        TRIDENT_CHECK_CLOSE(out.values(), want, tol);
        CHECK(out.guard_damage() == 0);
        device->unary_backward_sum(op, x_arg, y_arg, dy_in.tensor(), more_in.tensor(),
                                   dy_in.tensor(), alpha);
        TRIDENT_CHECK_CLOSE(dy_in.values(), want, tol);
        CHECK(dy_in.guard_damage() == 0);
        TRIDENT_CHECK_CLOSE(more_in.values(), more, kExact);  // read only
      }
    // dx may not be the second part (it is read after dx is written in the default).
    Tensor t = Tensor::zeros(*device, {4}), u = Tensor::zeros(*device, {4}),
           v = Tensor::zeros(*device, {4});
    CHECK_THROWS_WITH(device->unary_backward_sum(UnaryOp::relu, Tensor(), v, u, t, t),
                      Catch::Contains("dx and dy_more overlap"));
  }
}

namespace {

struct DropoutCase {
  int64_t n, group, group_offset;
  float p;
  uint64_t seed;
  uint32_t stream;
  std::vector<uint32_t> step_state;
};

}  // namespace

TEST_CASE("conformance: dropout masks equal the Philox reference bit for bit",
          "[conformance][dropout]") {
  const std::vector<DropoutCase> cases = {
      {1, 1, 0, 0.5f, 1, 0, {0, 0}},
      {257, 1, 0, 0.3f, 0x123456789ABCDEF0ull, 3, {4, 17}},        // Dropout
      {4099, 1, 11, 0.5f, 42, 1, {0, 123456}},                      // odd group_offset
      {2 * 20 * 4 * 4, 16, 0, 0.5f, 7, 2, {9, 2}},                  // Dropout2d, H*W = 16
      {3 * 7 * 5 * 5, 25, 13, 0.25f, 0xFFFFFFFF00000001ull, 9, {1, 4294967295u}},  // odd plane
      {1000, 1, 0, 0.0f, 5, 0, {0, 1}},                             // p = 0 keeps everything
      {100003, 1, 3, 0.5f, 11, 4, {2, 31}},                         // several parallel chunks
      {64 * 20 * 4 * 4, 16, 7, 0.5f, 11, 5, {2, 31}},               // seed CNN's Dropout2d
  };
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 500;
    for (const DropoutCase& c : cases) {
      INFO("dropout n=" << c.n << " group=" << c.group << " group_offset=" << c.group_offset
                        << " p=" << c.p << " seed=" << c.seed << " stream=" << c.stream
                        << " step=" << c.step_state[1]);
      // Inputs bounded away from zero, so that y == 0 exactly when the element was dropped.
      std::vector<float> x = random_floats(size_t(c.n), ++seed, 0.5f, 1.0f);
      for (size_t i = 0; i < x.size(); i += 2) x[i] = -x[i];
      std::vector<float> want(size_t(c.n));
      reference::dropout(x.data(), want.data(), c.n, c.group, c.group_offset, c.p, c.seed,
                         c.stream, c.step_state.data());
      std::vector<uint8_t> keep_want(size_t(c.n));
      for (int64_t i = 0; i < c.n; ++i)
        keep_want[size_t(i)] = reference::dropout_keeps(i, c.group, c.group_offset, c.p, c.seed,
                                                        c.stream, c.step_state.data());
      Tensor state = upload(*device, c.step_state);
      OffsetBuffer dx(*device, x, 1), dy(*device, std::vector<float>(size_t(c.n), kNaN), 2);
      device->dropout(dx.tensor(), dy.tensor(), c.group, c.group_offset, c.p, c.seed, c.stream,
                      state);
      const std::vector<float> got = dy.values();
      std::vector<uint8_t> keep_got(size_t(c.n));
      for (size_t i = 0; i < got.size(); ++i) keep_got[i] = got[i] != 0.0f;
      TRIDENT_CHECK_EXACT(keep_got, keep_want);
      TRIDENT_CHECK_CLOSE(got, want, kElementwise);
      CHECK(dy.guard_damage() == 0);

      device->dropout(dx.tensor(), dx.tensor(), c.group, c.group_offset, c.p, c.seed, c.stream,
                      state);  // y aliases x
      TRIDENT_CHECK_CLOSE(dx.values(), want, kElementwise);
      CHECK(download<uint32_t>(*device, state.memory(), 2) == c.step_state);  // read, not written
    }
  }
}
