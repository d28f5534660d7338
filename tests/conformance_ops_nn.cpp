// Op conformance, convolution, pooling and the classification head: conv2d, maxpool2d,
// log_softmax, nll_loss and count_correct on every device against trident::reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "trident/kernels/reference/reference_ops.h"
#include "tests/conformance.h"

using namespace trident;
using namespace trident::testing;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

int64_t x_count(const Conv2dShape& s) { return s.batch * s.in_channels * s.height * s.width; }
int64_t w_count(const Conv2dShape& s) {
  return s.out_channels * s.in_channels * s.kernel_h * s.kernel_w;
}
int64_t y_count(const Conv2dShape& s) {
  return s.batch * s.out_channels * s.out_height() * s.out_width();
}

// Values from a handful of levels, so that pooling windows hold ties and the first maximum counts.
std::vector<float> values_with_ties(size_t count, uint32_t seed) {
  std::vector<float> v = random_floats(count, seed, 0.0f, 4.0f);
  for (float& x : v) x = std::floor(x) - 1.5f;
  return v;
}

}  // namespace

TEST_CASE("conformance: conv2d forward and backward, stride, padding, null dx",
          "[conformance][conv2d]") {
  std::vector<Conv2dShape> shapes;
  auto add = [&](int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh, int64_t kw,
                 int64_t stride, int64_t pad) {
    shapes.push_back({n, c, h, w, oc, kh, kw, stride, pad});
  };
  add(1, 1, 1, 1, 1, 1, 1, 1, 0);      // the smallest
  add(2, 1, 28, 28, 10, 5, 5, 1, 0);   // seed CNN, first layer
  add(3, 10, 12, 12, 20, 5, 5, 1, 0);  // seed CNN, second layer
  add(2, 3, 7, 9, 4, 3, 3, 1, 0);      // odd sizes
  add(3, 2, 8, 8, 5, 3, 3, 2, 1);      // stride 2, padding 1
  add(1, 2, 7, 6, 3, 3, 2, 2, 2);      // non-square kernel, padding 2, stride past the edge
  add(2, 4, 9, 9, 7, 1, 1, 1, 0);      // 1x1
  add(9, 3, 10, 10, 4, 3, 3, 1, 1);    // a batch split over several threads
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 600;
    for (const Conv2dShape& s : shapes) {
      INFO("conv2d N=" << s.batch << " C=" << s.in_channels << " H=" << s.height << " W="
                       << s.width << " OC=" << s.out_channels << " K=" << s.kernel_h << "x"
                       << s.kernel_w << " stride=" << s.stride << " pad=" << s.padding);
      const std::vector<float> x = random_floats(size_t(x_count(s)), ++seed);
      const std::vector<float> w = random_floats(size_t(w_count(s)), ++seed);
      const std::vector<float> b = random_floats(size_t(s.out_channels), ++seed);
      const std::vector<float> dy = random_floats(size_t(y_count(s)), ++seed);
      std::vector<float> y_want(size_t(y_count(s))), dx_want(x.size()), dw_want(w.size()),
          db_want(b.size());
      reference::conv2d_forward(s, x.data(), w.data(), b.data(), y_want.data());
      reference::conv2d_backward(s, x.data(), w.data(), dy.data(), dx_want.data(),
                                 dw_want.data(), db_want.data());

      const size_t ws_bytes = device->conv2d_workspace_bytes(s);
      Tensor workspace =
          Tensor::empty(*device, {int64_t(std::max<size_t>(ws_bytes, 1))}, DType::u8);
      const size_t off = size_t(seed % 4);  // vary the buffer offsets between shapes
      OffsetBuffer dx_in(*device, x, off), dw_in(*device, w, off + 1), db_in(*device, b, 2),
          dy_out(*device, std::vector<float>(y_want.size(), kNaN), off + 3);
      device->conv2d_forward(s, dx_in.memory(), dw_in.memory(), db_in.memory(), dy_out.memory(),
                             workspace.memory());
      const int64_t taps = s.in_channels * s.kernel_h * s.kernel_w;
      TRIDENT_CHECK_CLOSE(dy_out.values(), y_want, dot_tolerance(*device, taps));
      CHECK(dy_out.guard_damage() == 0);

      // Gradients start as NaN: backward overwrites them, never accumulates.
      OffsetBuffer dgrad_y(*device, dy, off + 1),
          dgrad_x(*device, std::vector<float>(x.size(), kNaN), off),
          dgrad_w(*device, std::vector<float>(w.size(), kNaN), 3),
          dgrad_b(*device, std::vector<float>(b.size(), kNaN), off + 2);
      // Right after the forward: the backend may reuse what it left in the workspace.
      device->conv2d_backward(s, dx_in.memory(), dw_in.memory(), dgrad_y.memory(),
                              dgrad_x.memory(), dgrad_w.memory(), dgrad_b.memory(),
                              workspace.memory(), true);
      const int64_t positions = s.batch * s.out_height() * s.out_width();
      TRIDENT_CHECK_CLOSE(dgrad_x.values(), dx_want,
                          dot_tolerance(*device, s.out_channels * s.kernel_h * s.kernel_w));
      TRIDENT_CHECK_CLOSE(dgrad_w.values(), dw_want, dot_tolerance(*device, positions));
      TRIDENT_CHECK_CLOSE(dgrad_b.values(), db_want, dot_tolerance(*device, positions));
      CHECK(dgrad_x.guard_damage() + dgrad_w.guard_damage() + dgrad_b.guard_damage() == 0);

      // after_forward = false over a workspace full of NaN: everything is recomputed.
      device->fill(workspace.memory(), int64_t(ws_bytes / sizeof(float)), kNaN);
      OffsetBuffer dgrad_x2(*device, std::vector<float>(x.size(), kNaN), off + 1);
      device->conv2d_backward(s, dx_in.memory(), dw_in.memory(), dgrad_y.memory(),
                              dgrad_x2.memory(), dgrad_w.memory(), dgrad_b.memory(),
                              workspace.memory(), false);
      TRIDENT_CHECK_CLOSE(dgrad_x2.values(), dx_want,
                          dot_tolerance(*device, s.out_channels * s.kernel_h * s.kernel_w));
      TRIDENT_CHECK_CLOSE(dgrad_w.values(), dw_want, dot_tolerance(*device, positions));
      TRIDENT_CHECK_CLOSE(dgrad_b.values(), db_want, dot_tolerance(*device, positions));

      // The first layer passes a null dx: dw and db must still be right, with the forward's
      // workspace reused and without it.
      for (const bool after_forward : {true, false}) {
        INFO("after_forward " << after_forward);
        if (after_forward)
          device->conv2d_forward(s, dx_in.memory(), dw_in.memory(), db_in.memory(),
                                 dy_out.memory(), workspace.memory());
        OffsetBuffer dw_only(*device, std::vector<float>(w.size(), kNaN), 1),
            db_only(*device, std::vector<float>(b.size(), kNaN), 0);
        device->conv2d_backward(s, dx_in.memory(), dw_in.memory(), dgrad_y.memory(),
                                DeviceMemory{}, dw_only.memory(), db_only.memory(),
                                workspace.memory(), after_forward);
        TRIDENT_CHECK_CLOSE(dw_only.values(), dw_want, dot_tolerance(*device, positions));
        TRIDENT_CHECK_CLOSE(db_only.values(), db_want, dot_tolerance(*device, positions));
      }
      CHECK(dx_in.guard_damage() + dw_in.guard_damage() + dgrad_y.guard_damage() == 0);
    }
  }
}

TEST_CASE("conformance: maxpool2d forward and backward, ties, odd sizes, overlapping windows",
          "[conformance][maxpool]") {
  const std::vector<Pool2dShape> shapes = {
      {1, 1, 2, 2, 2, 2},   {2, 3, 7, 9, 2, 2},  // odd sizes: the last row and column are dropped
      {2, 10, 24, 24, 2, 2}, {1, 1, 5, 5, 3, 2},  // seed CNN; 3x3 windows overlapping at stride 2
      {1, 2, 6, 7, 3, 1},   {3, 1, 3, 3, 2, 2},   // stride 1 (overlaps add in backward); 3x3 -> 1x1
      {64, 20, 8, 8, 2, 2},                       // many planes: parallel pieces
  };
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 700;
    for (const bool relu : {false, true})
    for (Pool2dShape s : shapes) {
      s.relu = relu;  // with the fused ReLU, windows of negatives give 0 and argmax -1
      INFO("maxpool N=" << s.batch << " C=" << s.channels << " H=" << s.height << " W=" << s.width
                        << " kernel=" << s.kernel << " stride=" << s.stride << " relu=" << relu);
      const int64_t in = s.batch * s.channels * s.height * s.width;
      const int64_t out = s.batch * s.channels * s.out_height() * s.out_width();
      const std::vector<float> x = values_with_ties(size_t(in), ++seed);
      std::vector<float> y_want(static_cast<size_t>(out));
      std::vector<int32_t> argmax_want(static_cast<size_t>(out));
      reference::maxpool2d_forward(s, x.data(), y_want.data(), argmax_want.data());
      if (relu && out >= 64) CHECK(std::count(argmax_want.begin(), argmax_want.end(), -1) > 0);

      OffsetBuffer dx(*device, x, 1), dy(*device, std::vector<float>(size_t(out), kNaN), 2);
      Tensor argmax = Tensor::empty(*device, {out}, DType::i32);
      device->maxpool2d_forward(s, dx.memory(), dy.memory(), argmax.memory());
      TRIDENT_CHECK_EXACT(dy.values(), y_want);
      TRIDENT_CHECK_EXACT(argmax.to_host_i32(), argmax_want);
      CHECK(dy.guard_damage() == 0);

      // Backward from the reference argmax, so that it is judged on its own.
      const std::vector<float> grad = random_floats(size_t(out), ++seed);
      std::vector<float> dx_want(static_cast<size_t>(in));
      reference::maxpool2d_backward(s, grad.data(), argmax_want.data(), dx_want.data());
      OffsetBuffer dgrad(*device, grad, 3),
          dgrad_x(*device, std::vector<float>(size_t(in), kNaN), 1);
      Tensor argmax_in = upload(*device, argmax_want);
      device->maxpool2d_backward(s, dgrad.memory(), argmax_in.memory(), dgrad_x.memory());
      TRIDENT_CHECK_CLOSE(dgrad_x.values(), dx_want, (Tolerance{1e-6, 1e-6}));
      CHECK(dgrad_x.guard_damage() == 0);
    }
  }
}

TEST_CASE("conformance: log_softmax forward and backward", "[conformance][log_softmax]") {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {7, 10}, {33, 257}, {257, 33}, {3, 1000}, {200, 10}, {5000, 10}};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 800;
    for (const auto& [rows, cols] : shapes) {
      INFO("log_softmax rows=" << rows << " cols=" << cols);
      std::vector<float> x = random_floats(size_t(rows * cols), ++seed, -20.0f, 20.0f);
      for (int64_t c = 0; c < cols; ++c) x[size_t(c)] += 1e4f;  // row 0 would overflow a naive exp
      std::vector<float> y_want(x.size()), dx_want(x.size());
      reference::log_softmax_forward(x.data(), y_want.data(), rows, cols);
      const std::vector<float> dy = random_floats(x.size(), ++seed);
      reference::log_softmax_backward(y_want.data(), dy.data(), dx_want.data(), rows, cols);

      OffsetBuffer dx(*device, x, 1), dy_out(*device, std::vector<float>(x.size(), kNaN), 2);
      device->log_softmax_forward(dx.memory(), dy_out.memory(), rows, cols);
      const std::vector<float> y_got = dy_out.values();
      TRIDENT_CHECK_CLOSE(std::vector<float>(y_got.begin() + cols, y_got.end()),
                          std::vector<float>(y_want.begin() + cols, y_want.end()),
                          (Tolerance{2e-5, 1e-5}));
      // Row 0 sits near 1e4: y = (x - max) - log(sum) keeps full precision, while
      // x - (max + log(sum)) rounds the normaliser to the ulp of 1e4 (~1e-3).
      INFO("row 0, shifted by 1e4");
      TRIDENT_CHECK_CLOSE(std::vector<float>(y_got.begin(), y_got.begin() + cols),
                          std::vector<float>(y_want.begin(), y_want.begin() + cols),
                          (Tolerance{2e-5, 1e-5}));
      CHECK(dy_out.guard_damage() == 0);

      OffsetBuffer y_in(*device, y_want, 3), grad_in(*device, dy, 0),
          grad_out(*device, std::vector<float>(x.size(), kNaN), 1);
      device->log_softmax_backward(y_in.memory(), grad_in.memory(), grad_out.memory(), rows, cols);
      TRIDENT_CHECK_CLOSE(grad_out.values(), dx_want,
                          (Tolerance{1e-6 * std::sqrt(double(cols)) + 1e-6, 1e-5}));
      CHECK(grad_out.guard_damage() == 0);
    }
  }
}

TEST_CASE("conformance: nll_loss forward (overwrite and accumulate) and backward",
          "[conformance][nll]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 900;
    for (int64_t rows : {1, 7, 257, 5000})
      for (int64_t cols : {1, 10, 33}) {
        INFO("nll rows=" << rows << " cols=" << cols);
        const std::vector<float> logp = random_floats(size_t(rows * cols), ++seed, -8.0f, 0.0f);
        const std::vector<int32_t> labels = random_labels(size_t(rows), int32_t(cols), ++seed);
        Tensor dlogp = Tensor::from_host(*device, {rows * cols}, logp);
        Tensor dlabels = upload(*device, labels);
        for (bool accumulate : {false, true}) {
          std::vector<float> want = {accumulate ? 2.5f : kNaN};
          reference::nll_loss_forward(logp.data(), labels.data(), rows, cols, want.data(),
                                      accumulate);
          OffsetBuffer loss(*device, {accumulate ? 2.5f : kNaN}, 3);
          device->nll_loss_forward(dlogp.memory(), dlabels.memory(), rows, cols, loss.memory(),
                                   accumulate);
          INFO("accumulate=" << accumulate);
          TRIDENT_CHECK_CLOSE(loss.values(), want, (Tolerance{1e-6, 1e-5}));
          CHECK(loss.guard_damage() == 0);
        }
        const float scale = 1.0f / float(rows);
        std::vector<float> grad_want(size_t(rows * cols));
        reference::nll_loss_backward(labels.data(), rows, cols, scale, grad_want.data());
        OffsetBuffer grad(*device, std::vector<float>(grad_want.size(), kNaN), 2);
        device->nll_loss_backward(dlabels.memory(), rows, cols, scale, grad.memory());
        TRIDENT_CHECK_EXACT(grad.values(), grad_want);
        CHECK(grad.guard_damage() == 0);
      }
  }
}

TEST_CASE("conformance: log_softmax_nll, the fused training head (one launch and large heads)",
          "[conformance][log_softmax_nll]") {
  // 2048 rows is the one-work-group limit of the GPU backends; 2049 and 5000 take their
  // spread-out path (separate loss launch).
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {7, 10}, {200, 10}, {33, 257}, {3, 1000}, {2048, 10}, {2049, 3}, {5000, 10}};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 1800;
    for (const auto& [rows, cols] : shapes)
      for (bool accumulate : {false, true}) {
        INFO("log_softmax_nll rows=" << rows << " cols=" << cols << " accumulate=" << accumulate);
        std::vector<float> x = random_floats(size_t(rows * cols), ++seed, -20.0f, 20.0f);
        for (int64_t c = 0; c < cols; ++c) x[size_t(c)] += 1e4f;  // a naive exp would overflow
        const std::vector<int32_t> labels = random_labels(size_t(rows), int32_t(cols), ++seed);
        const float grad_scale = 0.75f / float(rows);
        std::vector<float> y_want(x.size()), dx_want(x.size()), loss_want{2.5f};
        reference::log_softmax_nll(x.data(), labels.data(), rows, cols, grad_scale,
                                   y_want.data(), loss_want.data(), accumulate, dx_want.data());

        OffsetBuffer dx_in(*device, x, 1), y(*device, std::vector<float>(x.size(), kNaN), 2),
            dx(*device, std::vector<float>(x.size(), kNaN), 3),
            loss(*device, {accumulate ? 2.5f : kNaN}, 1);
        Tensor dlabels = upload(*device, labels);
        device->log_softmax_nll(dx_in.memory(), dlabels.memory(), rows, cols, grad_scale,
                                y.memory(), loss.memory(), accumulate, dx.memory());
        TRIDENT_CHECK_CLOSE(y.values(), y_want, (Tolerance{2e-5, 1e-5}));
        TRIDENT_CHECK_CLOSE(loss.values(), loss_want, (Tolerance{1e-5, 1e-5}));
        TRIDENT_CHECK_CLOSE(dx.values(), dx_want, (Tolerance{3e-5 * grad_scale, 3e-5}));
        CHECK(y.guard_damage() + dx.guard_damage() + loss.guard_damage() +
                  dx_in.guard_damage() == 0);
      }
  }
}

TEST_CASE("conformance: count_correct counts the first maximum, ties included",
          "[conformance][count_correct]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 1000;
    for (int64_t rows : {1, 7, 257, 5000})
      for (int64_t cols : {1, 2, 10, 33}) {
        INFO("count_correct rows=" << rows << " cols=" << cols);
        const std::vector<float> scores = values_with_ties(size_t(rows * cols), ++seed);
        // Labels at the first maximum (counted), at the last maximum (counted only without a
        // tie) and at random (mostly wrong).
        std::vector<int32_t> labels(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
          const float* row = scores.data() + r * cols;
          const int64_t first = std::max_element(row, row + cols) - row;
          int64_t last = first;
          for (int64_t c = 0; c < cols; ++c)
            if (row[c] == row[first]) last = c;
          labels[size_t(r)] = int32_t(r % 3 == 0 ? first : r % 3 == 1 ? last : (r * 7) % cols);
        }
        std::vector<float> want = {3.0f};
        reference::count_correct(scores.data(), labels.data(), rows, cols, want.data());
        Tensor dscores = Tensor::from_host(*device, {rows * cols}, scores);
        Tensor dlabels = upload(*device, labels);
        OffsetBuffer correct(*device, {3.0f}, 1);  // count_correct adds to what is there
        device->count_correct(dscores.memory(), dlabels.memory(), rows, cols, correct.memory());
        TRIDENT_CHECK_EXACT(correct.values(), want);
        CHECK(correct.guard_damage() == 0);
      }
  }
}
