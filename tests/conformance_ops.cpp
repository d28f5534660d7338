// Op conformance, linear algebra and elementwise ops: gemm, sum_rows, axpby, relu, dropout on
// every device against trident::reference, at awkward sizes, strides and buffer offsets.
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

TEST_CASE("conformance: sum_rows with and without beta", "[conformance][sum_rows]") {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {7, 33}, {257, 7}, {33, 257}, {1000, 10}, {1, 513}, {4097, 3}, {20011, 33}};
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
        device->sum_rows(ddy.memory(), rows, cols, ddb.memory(), beta);
        TRIDENT_CHECK_CLOSE(ddb.values(), want, (Tolerance{2e-6 * double(rows) + 1e-6, 1e-5}));
        CHECK(ddb.guard_damage() == 0);
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
        const std::vector<float> y0 = random_floats(size_t(n), ++seed);
        std::vector<float> want = y0;
        reference::axpby(x.data(), want.data(), n, a, b);
        OffsetBuffer dx(*device, x, 3), dy(*device, y0, 1);
        device->axpby(dx.memory(), dy.memory(), n, a, b);
        TRIDENT_CHECK_CLOSE(dy.values(), want, kElementwise);
        CHECK(dy.guard_damage() == 0);
      }
  }
}

TEST_CASE("conformance: relu forward and backward, out of place and aliased",
          "[conformance][relu]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 400;
    for (int64_t n : {1, 7, 33, 257, 4099, 100003}) {
      INFO("relu n=" << n);
      std::vector<float> x = random_floats(size_t(n), ++seed);
      for (size_t i = 0; i < x.size(); i += 5) x[i] = 0.0f;  // exact zeros: y > 0 is strict
      std::vector<float> y_want(static_cast<size_t>(n)), dx_want(static_cast<size_t>(n));
      reference::relu_forward(x.data(), y_want.data(), n);
      const std::vector<float> dy = random_floats(size_t(n), ++seed);
      reference::relu_backward(y_want.data(), dy.data(), dx_want.data(), n);

      OffsetBuffer dxin(*device, x, 2), dyout(*device, std::vector<float>(size_t(n), kNaN), 5);
      device->relu_forward(dxin.memory(), dyout.memory(), n);
      TRIDENT_CHECK_EXACT(dyout.values(), y_want);
      CHECK(dyout.guard_damage() == 0);

      OffsetBuffer in_place(*device, x, 1);  // y aliases x
      device->relu_forward(in_place.memory(), in_place.memory(), n);
      TRIDENT_CHECK_EXACT(in_place.values(), y_want);

      OffsetBuffer dgrad_in(*device, dy, 3),
          dgrad_out(*device, std::vector<float>(size_t(n), kNaN), 0);
      device->relu_backward(dyout.memory(), dgrad_in.memory(), dgrad_out.memory(), n);
      TRIDENT_CHECK_EXACT(dgrad_out.values(), dx_want);
      CHECK(dgrad_out.guard_damage() == 0);

      // dx aliases dy.
      device->relu_backward(dyout.memory(), dgrad_in.memory(), dgrad_in.memory(), n);
      TRIDENT_CHECK_EXACT(dgrad_in.values(), dx_want);
      CHECK(dgrad_in.guard_damage() == 0);
    }
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
      device->dropout(dx.memory(), dy.memory(), c.n, c.group, c.group_offset, c.p, c.seed,
                      c.stream, state.memory());
      const std::vector<float> got = dy.values();
      std::vector<uint8_t> keep_got(size_t(c.n));
      for (size_t i = 0; i < got.size(); ++i) keep_got[i] = got[i] != 0.0f;
      TRIDENT_CHECK_EXACT(keep_got, keep_want);
      TRIDENT_CHECK_CLOSE(got, want, kElementwise);
      CHECK(dy.guard_damage() == 0);

      device->dropout(dx.memory(), dx.memory(), c.n, c.group, c.group_offset, c.p, c.seed,
                      c.stream, state.memory());  // y aliases x
      TRIDENT_CHECK_CLOSE(dx.values(), want, kElementwise);
      CHECK(download<uint32_t>(*device, state.memory(), 2) == c.step_state);  // read, not written
    }
  }
}
