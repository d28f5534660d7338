// Op conformance, pooling, normalisation and the classification head: maxpool2d, avgpool2d,
// batchnorm, log_softmax, nll_loss (label smoothing), log_softmax_nll (and its core default),
// mse_loss and count_correct on every device against trident::reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "trident/kernels/reference/reference_ops.h"
#include "tests/conformance.h"

using namespace trident;
using namespace trident::testing;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Pool2dShape pool(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh,
                 int64_t sw, int64_t ph = 0, int64_t pw = 0) {
  Pool2dShape s;
  s.batch = n; s.channels = c; s.height = h; s.width = w;
  s.kernel_h = kh; s.kernel_w = kw; s.stride_h = sh; s.stride_w = sw; s.pad_h = ph; s.pad_w = pw;
  return s;
}

std::string describe(const Pool2dShape& s) {
  std::ostringstream o;
  o << "pool N=" << s.batch << " C=" << s.channels << " H=" << s.height << " W=" << s.width
    << " kernel=" << s.kernel_h << "x" << s.kernel_w << " stride=" << s.stride_h << "x"
    << s.stride_w << " pad=" << s.pad_h << "x" << s.pad_w << " relu=" << s.relu;
  return o.str();
}

std::vector<Pool2dShape> pool_shapes() {
  return {
      pool(1, 1, 2, 2, 2, 2, 2, 2), pool(2, 3, 7, 9, 2, 2, 2, 2),  // odd: last row/col dropped
      pool(2, 10, 24, 24, 2, 2, 2, 2), pool(1, 1, 5, 5, 3, 3, 2, 2),  // seed CNN; overlapping
      pool(1, 2, 6, 7, 3, 3, 1, 1), pool(3, 1, 3, 3, 2, 2, 2, 2),  // stride 1; 3x3 -> 1x1
      pool(64, 20, 8, 8, 2, 2, 2, 2),                              // many planes
      pool(2, 3, 9, 8, 3, 3, 2, 2, 1, 1),                          // padding (ResNet stem pool)
      pool(2, 2, 7, 10, 2, 4, 1, 3, 1, 2),                         // rectangular everything
      pool(4, 16, 7, 7, 7, 7, 1, 1),                               // global pooling
      pool(3, 100, 7, 7, 7, 7, 1, 1),                              // ... over several blocks
      pool(2, 8, 3, 3, 3, 3, 1, 1),                                // ... packs across planes
      pool(2, 3, 12, 12, 12, 12, 1, 1),                            // ... a warp a plane (CUDA)
      pool(3, 5, 1, 1, 1, 1, 1, 1),                                // 1x1 planes
      pool(2, 3, 9, 6, 3, 3, 3, 3), pool(2, 4, 6, 10, 2, 2, 2, 2),  // windows tiling the plane
      pool(5, 6, 4, 4, 4, 4, 4, 4), pool(3, 4, 8, 9, 4, 3, 4, 3),  // ... one a plane (ResNet-9's
                                                                   // last); 4x3 windows
  };
}

// Values from a handful of levels, so that pooling windows hold ties and the first maximum counts.
std::vector<float> values_with_ties(size_t count, uint32_t seed) {
  std::vector<float> v = random_floats(count, seed, 0.0f, 4.0f);
  for (float& x : v) x = std::floor(x) - 1.5f;
  return v;
}

}  // namespace

TEST_CASE("conformance: maxpool2d forward and backward, ties, odd sizes, overlapping windows, "
          "padding, rectangular windows", "[conformance][maxpool]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 700;
    for (const bool relu : {false, true})
    for (Pool2dShape s : pool_shapes())
    for (const size_t shift : {size_t(1), size_t(0)}) {  // 0: x and dx pair-aligned
      s.relu = relu;  // with the fused ReLU, windows of negatives give 0 and argmax -1
      INFO(describe(s) << ", x and dx at offset " << shift);
      const int64_t in = s.batch * s.channels * s.height * s.width;
      const int64_t out = s.batch * s.channels * s.out_height() * s.out_width();
      const std::vector<float> x = values_with_ties(size_t(in), ++seed);
      std::vector<float> y_want(static_cast<size_t>(out));
      std::vector<int32_t> argmax_want(static_cast<size_t>(out));
      reference::maxpool2d_forward(s, x.data(), y_want.data(), argmax_want.data());
      if (relu && out >= 64 && s.kernel_h * s.kernel_w <= 4)
        CHECK(std::count(argmax_want.begin(), argmax_want.end(), -1) > 0);

      OffsetBuffer dx(*device, x, shift), dy(*device, std::vector<float>(size_t(out), kNaN), 2);
      Tensor argmax = Tensor::empty(*device, {out}, DType::i32);
      device->maxpool2d_forward(s, dx.tensor(), dy.tensor(), argmax);
      TRIDENT_CHECK_EXACT(dy.values(), y_want);
      TRIDENT_CHECK_EXACT(argmax.to_host_i32(), argmax_want);
      CHECK(dy.guard_damage() == 0);

      // Backward from the reference argmax, so that it is judged on its own.
      const std::vector<float> grad = random_floats(size_t(out), ++seed);
      std::vector<float> dx_want(static_cast<size_t>(in));
      reference::maxpool2d_backward(s, grad.data(), argmax_want.data(), dx_want.data());
      OffsetBuffer dgrad(*device, grad, 3),
          dgrad_x(*device, std::vector<float>(size_t(in), kNaN), shift);
      Tensor argmax_in = upload(*device, argmax_want);
      device->maxpool2d_backward(s, dgrad.tensor(), argmax_in, dgrad_x.tensor());
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
      device->log_softmax_forward(dx.tensor({rows, cols}), dy_out.tensor());
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
      device->log_softmax_backward(y_in.tensor({rows, cols}), grad_in.tensor(), grad_out.tensor());
      TRIDENT_CHECK_CLOSE(grad_out.values(), dx_want,
                          (Tolerance{1e-6 * std::sqrt(double(cols)) + 1e-6, 1e-5}));
      CHECK(grad_out.guard_damage() == 0);
    }
  }
}

TEST_CASE("conformance: nll_loss forward (overwrite and accumulate) and backward, with label "
          "smoothing", "[conformance][nll]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 900;
    for (const float smoothing : {0.0f, 0.1f})
      for (int64_t rows : {1, 7, 257, 5000})
        for (int64_t cols : {1, 10, 33}) {
          INFO("nll rows=" << rows << " cols=" << cols << " smoothing=" << smoothing);
          const std::vector<float> logp = random_floats(size_t(rows * cols), ++seed, -8.0f, 0.0f);
          const std::vector<int32_t> labels = random_labels(size_t(rows), int32_t(cols), ++seed);
          Tensor dlogp = Tensor::from_host(*device, {rows, cols}, logp);
          Tensor dlabels = upload(*device, labels);
          for (bool accumulate : {false, true}) {
            std::vector<float> want = {accumulate ? 2.5f : kNaN};
            reference::nll_loss_forward(logp.data(), labels.data(), rows, cols, want.data(),
                                        accumulate, smoothing);
            OffsetBuffer loss(*device, {accumulate ? 2.5f : kNaN}, 3);
            device->nll_loss_forward(dlogp, dlabels, loss.tensor(), accumulate, smoothing);
            INFO("accumulate=" << accumulate);
            TRIDENT_CHECK_CLOSE(loss.values(), want, (Tolerance{1e-6, 1e-5}));
            CHECK(loss.guard_damage() == 0);
          }
          const float scale = 1.0f / float(rows);
          std::vector<float> grad_want(size_t(rows * cols));
          reference::nll_loss_backward(labels.data(), rows, cols, scale, grad_want.data(),
                                       smoothing);
          OffsetBuffer grad(*device, std::vector<float>(grad_want.size(), kNaN), 2);
          device->nll_loss_backward(dlabels, grad.tensor({rows, cols}), scale, smoothing);
          TRIDENT_CHECK_CLOSE(grad.values(), grad_want, kElementwise);
          CHECK(grad.guard_damage() == 0);
        }
  }
}

TEST_CASE("conformance: log_softmax_nll, the fused training head (one launch and large heads), "
          "label smoothing, and its core default", "[conformance][log_softmax_nll]") {
  // 2048 rows is the one-work-group limit of the GPU backends; 2049 and 5000 take their
  // spread-out path (separate loss launch).
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {7, 10}, {200, 10}, {33, 257}, {3, 1000}, {2048, 10}, {2049, 3}, {5000, 10}};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 1800;
    for (const bool core_default : {false, true})
      for (const float smoothing : {0.0f, 0.1f})
        for (const auto& [rows, cols] : shapes)
          for (bool accumulate : {false, true}) {
            INFO("log_softmax_nll rows=" << rows << " cols=" << cols << " accumulate="
                                         << accumulate << " smoothing=" << smoothing
                                         << " core_default=" << core_default);
            std::vector<float> x = random_floats(size_t(rows * cols), ++seed, -20.0f, 20.0f);
            for (int64_t c = 0; c < cols; ++c) x[size_t(c)] += 1e4f;  // a naive exp overflows
            const std::vector<int32_t> labels = random_labels(size_t(rows), int32_t(cols), ++seed);
            const float grad_scale = 0.75f / float(rows);
            std::vector<float> y_want(x.size()), dx_want(x.size()), loss_want{2.5f};
            reference::log_softmax_nll(x.data(), labels.data(), rows, cols, grad_scale,
                                       smoothing, y_want.data(), loss_want.data(), accumulate,
                                       dx_want.data());

            OffsetBuffer dx_in(*device, x, 1), y(*device, std::vector<float>(x.size(), kNaN), 2),
                dx(*device, std::vector<float>(x.size(), kNaN), 3),
                loss(*device, {accumulate ? 2.5f : kNaN}, 1);
            Tensor dlabels = upload(*device, labels);
            if (core_default)
              defaults::log_softmax_nll(*device, dx_in.tensor({rows, cols}), dlabels, grad_scale,
                                        smoothing, y.tensor({rows, cols}), loss.tensor(),
                                        accumulate, dx.tensor({rows, cols}));
            else
              device->log_softmax_nll(dx_in.tensor({rows, cols}), dlabels, grad_scale, smoothing,
                                      y.tensor(), loss.tensor(), accumulate, dx.tensor());
            TRIDENT_CHECK_CLOSE(y.values(), y_want, (Tolerance{2e-5, 1e-5}));
            TRIDENT_CHECK_CLOSE(loss.values(), loss_want, (Tolerance{1e-5, 1e-5}));
            TRIDENT_CHECK_CLOSE(dx.values(), dx_want, (Tolerance{3e-5 * grad_scale, 3e-5}));
            CHECK(y.guard_damage() + dx.guard_damage() + loss.guard_damage() +
                      dx_in.guard_damage() == 0);
          }
  }
}

TEST_CASE("conformance: mse_loss against one-hot labels, loss and gradient",
          "[conformance][mse]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 1900;
    for (int64_t rows : {1, 7, 257, 3000})
      for (int64_t cols : {1, 10, 33})
        for (const bool accumulate : {false, true})
          for (const bool with_grad : {true, false}) {
            INFO("mse rows=" << rows << " cols=" << cols << " accumulate=" << accumulate
                             << " with_grad=" << with_grad);
            const std::vector<float> x = random_floats(size_t(rows * cols), ++seed, -2.0f, 2.0f);
            const std::vector<int32_t> labels = random_labels(size_t(rows), int32_t(cols), ++seed);
            const float grad_scale = 1.0f / float(rows);
            std::vector<float> loss_want{accumulate ? 1.5f : kNaN}, dx_want(x.size());
            reference::mse_loss(x.data(), labels.data(), rows, cols, grad_scale, loss_want.data(),
                                accumulate, dx_want.data());
            OffsetBuffer dxin(*device, x, 2), loss(*device, {accumulate ? 1.5f : kNaN}, 1),
                dx(*device, std::vector<float>(x.size(), kNaN), 3);
            device->mse_loss(dxin.tensor({rows, cols}), upload(*device, labels), grad_scale,
                             loss.tensor(), accumulate, with_grad ? dx.tensor() : Tensor());
            TRIDENT_CHECK_CLOSE(loss.values(), loss_want, (Tolerance{1e-6, 1e-5}));
            if (with_grad) TRIDENT_CHECK_CLOSE(dx.values(), dx_want, kElementwise);
            CHECK(loss.guard_damage() + dx.guard_damage() == 0);
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
        Tensor dscores = Tensor::from_host(*device, {rows, cols}, scores);
        Tensor dlabels = upload(*device, labels);
        OffsetBuffer correct(*device, {3.0f}, 1);  // count_correct adds to what is there
        device->count_correct(dscores, dlabels, correct.tensor());
        TRIDENT_CHECK_EXACT(correct.values(), want);
        CHECK(correct.guard_damage() == 0);
      }
  }
}

TEST_CASE("conformance: the front rejects empty planes and windows larger than the padded input",
          "[conformance][pool][front]") {
  FOR_EACH_DEVICE(device) {
    Pool2dShape empty = pool(1, 1, 0, 4, 2, 2, 2, 2, 1, 1);  // padding would make windows of nothing
    Tensor x = Tensor::zeros(*device, {4}), y = Tensor::zeros(*device, {4});
    Tensor argmax = Tensor::zeros(*device, {4}, DType::i32);
    CHECK_THROWS_AS(device->maxpool2d_forward(empty, x.view(0, {0}), y.view(0, {0}),
                                              argmax.view(0, {0})),
                    ShapeError);
    CHECK_THROWS_AS(device->avgpool2d_forward(empty, x.view(0, {0}), y.view(0, {0})), ShapeError);
    Pool2dShape big = pool(1, 1, 2, 2, 5, 5, 1, 1);
    CHECK_THROWS_WITH(device->maxpool2d_forward(big, x, y.view(0, {1}), argmax.view(0, {1})),
                      Catch::Contains("larger than the padded"));
  }
}

TEST_CASE("conformance: avgpool2d forward and backward, padding counted, global pooling",
          "[conformance][avgpool]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 1950;
    for (const Pool2dShape& s : pool_shapes()) {
      INFO(describe(s));
      const std::vector<float> x = random_floats(size_t(s.input_numel()), ++seed);
      std::vector<float> y_want(size_t(s.output_numel()));
      reference::avgpool2d_forward(s, x.data(), y_want.data());
      OffsetBuffer dx(*device, x, 1), dy(*device, std::vector<float>(y_want.size(), kNaN), 2);
      device->avgpool2d_forward(s, dx.tensor(), dy.tensor());
      const double window = double(s.kernel_h * s.kernel_w);
      TRIDENT_CHECK_CLOSE(dy.values(), y_want, (Tolerance{1e-6 * std::sqrt(window) + 1e-7, 1e-6}));
      CHECK(dy.guard_damage() == 0);

      const std::vector<float> grad = random_floats(y_want.size(), ++seed);
      std::vector<float> dx_want(x.size());
      reference::avgpool2d_backward(s, grad.data(), dx_want.data());
      OffsetBuffer dgrad(*device, grad, 3), dgrad_x(*device, std::vector<float>(x.size(), kNaN), 0);
      device->avgpool2d_backward(s, dgrad.tensor(), dgrad_x.tensor());
      TRIDENT_CHECK_CLOSE(dgrad_x.values(), dx_want, (Tolerance{1e-6, 1e-6}));
      CHECK(dgrad_x.guard_damage() == 0);
    }
  }
}

TEST_CASE("conformance: batchnorm forward (training and evaluation) and backward, with and "
          "without affine parameters, BatchNorm1d and 2d shapes", "[conformance][batchnorm]") {
  struct Case {
    int64_t outer, channels, inner;
  };
  const std::vector<Case> cases = {{2, 1, 1},    {7, 3, 5},     {256, 32, 49}, {16, 64, 196},
                                   {200, 50, 1}, {3, 128, 49},  {1, 4, 9},     {5000, 2, 1},
                                   // runs of 8 and 2: CUDA's packed loads of 16 and 8 bytes
                                   {20, 32, 784}, {3, 5, 6},
                                   // one channel in many parts (CUDA merges them block-wide)
                                   {64, 1, 2048}};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 2000;
    for (const Case& c : cases)
      for (const bool affine : {true, false})
        for (const bool training : {true, false})
        for (const bool relu : {false, true}) {
          BatchNormShape s;
          s.outer = c.outer; s.channels = c.channels; s.inner = c.inner;
          s.momentum = 0.1f; s.eps = 1e-5f;
          s.relu = relu;
          INFO("batchnorm outer=" << c.outer << " channels=" << c.channels << " inner="
                                  << c.inner << " affine=" << affine << " training=" << training
                                  << " relu=" << relu);
          const size_t n = size_t(s.numel()), ch = size_t(c.channels);
          // Inputs with a large common offset: E[x^2] - E[x]^2 in float would lose the variance.
          std::vector<float> x = random_floats(n, ++seed, -1.0f, 1.0f);
          for (size_t i = 0; i < n; ++i) x[i] = 3.0f * x[i] + 40.0f + float((i / size_t(c.inner)) % ch);
          const std::vector<float> gamma = random_floats(ch, ++seed, 0.5f, 1.5f);
          const std::vector<float> beta = random_floats(ch, ++seed);
          if (relu && training)
            keep_off_relu_kink(s, x, affine ? gamma.data() : nullptr,
                               affine ? beta.data() : nullptr, s.eps, [](float v) { return v; });
          std::vector<float> rmean = random_floats(ch, ++seed, 35.0f, 45.0f);
          std::vector<float> rvar = random_floats(ch, ++seed, 5.0f, 15.0f);
          std::vector<float> y_want(n), mean_want(ch, kNaN), invstd_want(ch, kNaN);
          std::vector<float> rmean_want = rmean, rvar_want = rvar;
          reference::batchnorm_forward(s, training, x.data(), affine ? gamma.data() : nullptr,
                                       affine ? beta.data() : nullptr, rmean_want.data(),
                                       rvar_want.data(), y_want.data(), mean_want.data(),
                                       invstd_want.data());
          OffsetBuffer dx(*device, x, 1), dgamma(*device, gamma, 2), dbeta(*device, beta, 0),
              drmean(*device, rmean, 3), drvar(*device, rvar, 1),
              dy(*device, std::vector<float>(n, kNaN), 2),
              dmean(*device, std::vector<float>(ch, kNaN), 1),
              dinvstd(*device, std::vector<float>(ch, kNaN), 0);
          device->batchnorm_forward(s, training, dx.tensor(), affine ? dgamma.tensor() : Tensor(),
                                    affine ? dbeta.tensor() : Tensor(), drmean.tensor(),
                                    drvar.tensor(), dy.tensor(), dmean.tensor(), dinvstd.tensor());
          const double terms = double(c.outer * c.inner);
          TRIDENT_CHECK_CLOSE(dy.values(), y_want, (Tolerance{2e-5, 1e-5}));
          TRIDENT_CHECK_CLOSE(drmean.values(), rmean_want, (Tolerance{1e-5, 1e-6}));
          TRIDENT_CHECK_CLOSE(drvar.values(), rvar_want, (Tolerance{1e-5, 1e-5}));
          CHECK(dy.guard_damage() + drmean.guard_damage() + drvar.guard_damage() == 0);
          if (!training) continue;
          TRIDENT_CHECK_CLOSE(dmean.values(), mean_want, (Tolerance{2e-6, 1e-6}));
          TRIDENT_CHECK_CLOSE(dinvstd.values(), invstd_want, (Tolerance{1e-7, 2e-5}));

          if (relu && n >= 64) {  // the fused ReLU zeroed some outputs and kept others
            const auto zeros = std::count(y_want.begin(), y_want.end(), 0.0f);
            CHECK((zeros > 0 && size_t(zeros) < n));
          }
          // Backward from the reference's saved statistics, so that it is judged on its own
          // (with the fused ReLU each recomputes the mask from x: see keep_off_relu_kink).
          const std::vector<float> grad = random_floats(n, ++seed);
          std::vector<float> dx_want(n), dgamma_want(ch), dbeta_want(ch);
          reference::batchnorm_backward(s, x.data(), grad.data(), affine ? gamma.data() : nullptr,
                                        mean_want.data(), invstd_want.data(), dx_want.data(),
                                        affine ? dgamma_want.data() : nullptr,
                                        affine ? dbeta_want.data() : nullptr,
                                        relu && affine ? beta.data() : nullptr);
          const Tensor mask_beta = relu && affine ? dbeta.tensor() : Tensor();
          OffsetBuffer dgrad(*device, grad, 3), dgrad_x(*device, std::vector<float>(n, kNaN), 1),
              ddgamma(*device, std::vector<float>(ch, kNaN), 2),
              ddbeta(*device, std::vector<float>(ch, kNaN), 0);
          device->batchnorm_backward(s, dx.tensor(), dgrad.tensor(),
                                     affine ? dgamma.tensor() : Tensor(),
                                     upload(*device, mean_want), upload(*device, invstd_want),
                                     dgrad_x.tensor(), affine ? ddgamma.tensor() : Tensor(),
                                     affine ? ddbeta.tensor() : Tensor(), mask_beta);
          TRIDENT_CHECK_CLOSE(dgrad_x.values(), dx_want, (Tolerance{1e-5, 1e-4}));
          if (affine) {
            TRIDENT_CHECK_CLOSE(ddgamma.values(), dgamma_want,
                                (Tolerance{2e-6 * terms + 1e-6, 1e-5}));
            TRIDENT_CHECK_CLOSE(ddbeta.values(), dbeta_want, (Tolerance{2e-7 * terms + 1e-6, 1e-5}));
          }
          CHECK(dgrad_x.guard_damage() + ddgamma.guard_damage() + ddbeta.guard_damage() == 0);
          // In place: dx over dy.
          device->batchnorm_backward(s, dx.tensor(), dgrad.tensor(),
                                     affine ? dgamma.tensor() : Tensor(),
                                     upload(*device, mean_want), upload(*device, invstd_want),
                                     dgrad.tensor(), Tensor(), Tensor(), mask_beta);
          TRIDENT_CHECK_CLOSE(dgrad.values(), dx_want, (Tolerance{1e-5, 1e-4}));
          // beta is read only for the fused ReLU's mask.
          if (!relu)
            CHECK_THROWS_WITH(device->batchnorm_backward(s, dx.tensor(), dgrad.tensor(), Tensor(),
                                                         upload(*device, mean_want),
                                                         upload(*device, invstd_want),
                                                         dgrad_x.tensor(), Tensor(), Tensor(),
                                                         dbeta.tensor()),
                              Catch::Contains("is read only"));
        }
  }
}

TEST_CASE("conformance: batchnorm_add_forward normalises, adds a residual and applies the ReLU "
          "after the sum, training and evaluation", "[conformance][batchnorm]") {
  struct Case {
    int64_t outer, channels, inner;
  };
  // CUDA: one block a channel, the cooperative launch (parts of 49- and 784-value planes), the
  // packed loads (runs of 8), and a matrix (inner 1).
  const std::vector<Case> cases = {
      {7, 3, 5}, {256, 32, 49}, {20, 32, 784}, {64, 1, 2048}, {200, 50, 1}, {3, 5, 6}};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 2500;
    for (const Case& c : cases)
      for (const bool training : {true, false})
        for (const bool relu : {false, true}) {
          BatchNormShape s;
          s.outer = c.outer, s.channels = c.channels, s.inner = c.inner, s.relu = relu;
          INFO("batchnorm_add outer=" << c.outer << " channels=" << c.channels << " inner="
                                      << c.inner << " training=" << training << " relu=" << relu);
          const size_t n = size_t(s.numel()), ch = size_t(c.channels);
          std::vector<float> x = random_floats(n, ++seed, -1.0f, 1.0f);
          for (size_t i = 0; i < n; ++i) x[i] = 3.0f * x[i] + 10.0f;
          const std::vector<float> residual = random_floats(n, ++seed, -2.0f, 2.0f);
          const std::vector<float> gamma = random_floats(ch, ++seed, 0.5f, 1.5f);
          const std::vector<float> beta = random_floats(ch, ++seed);
          const std::vector<float> rmean = random_floats(ch, ++seed, 8.0f, 12.0f);
          const std::vector<float> rvar = random_floats(ch, ++seed, 5.0f, 15.0f);
          // The reference: the plain normalisation, then the sum and the ReLU.
          BatchNormShape plain = s;
          plain.relu = false;
          std::vector<float> y_want(n), mean_want(ch), invstd_want(ch);
          std::vector<float> rmean_want = rmean, rvar_want = rvar;
          reference::batchnorm_forward(plain, training, x.data(), gamma.data(), beta.data(),
                                       rmean_want.data(), rvar_want.data(), y_want.data(),
                                       mean_want.data(), invstd_want.data());
          for (size_t i = 0; i < n; ++i) {
            y_want[i] += residual[i];
            if (relu) y_want[i] = std::max(y_want[i], 0.0f);
          }
          OffsetBuffer dx(*device, x, 1), dres(*device, residual, 3), dgamma(*device, gamma, 2),
              dbeta(*device, beta, 0), drmean(*device, rmean, 3), drvar(*device, rvar, 1),
              dy(*device, std::vector<float>(n, kNaN), 2),
              dmean(*device, std::vector<float>(ch, kNaN), 1),
              dinvstd(*device, std::vector<float>(ch, kNaN), 0);
          device->batchnorm_add_forward(s, training, dx.tensor(), dres.tensor(), dgamma.tensor(),
                                        dbeta.tensor(), drmean.tensor(), drvar.tensor(),
                                        dy.tensor(), dmean.tensor(), dinvstd.tensor());
          TRIDENT_CHECK_CLOSE(dy.values(), y_want, (Tolerance{2e-5, 1e-5}));
          TRIDENT_CHECK_CLOSE(drmean.values(), rmean_want, (Tolerance{1e-5, 1e-6}));
          TRIDENT_CHECK_CLOSE(drvar.values(), rvar_want, (Tolerance{1e-5, 1e-5}));
          CHECK(dy.guard_damage() + drmean.guard_damage() + drvar.guard_damage() +
                    dres.guard_damage() ==
                0);
          if (relu && n >= 64) {  // the ReLU after the sum zeroed some outputs and kept others
            const auto zeros = std::count(y_want.begin(), y_want.end(), 0.0f);
            CHECK((zeros > 0 && size_t(zeros) < n));
          }
          if (training) {
            TRIDENT_CHECK_CLOSE(dmean.values(), mean_want, (Tolerance{2e-6, 1e-6}));
            TRIDENT_CHECK_CLOSE(dinvstd.values(), invstd_want, (Tolerance{1e-7, 2e-5}));
          }
        }
    // The residual may be x itself (y = normalise(x) + x), not y.
    BatchNormShape s;
    s.outer = 4, s.channels = 3, s.inner = 10, s.relu = true;
    const std::vector<float> x = random_floats(size_t(s.numel()), 2599);
    const std::vector<float> gamma = random_floats(3, 2598, 0.5f, 1.5f), beta(3, 0.25f);
    std::vector<float> rmean(3, 0.0f), rvar(3, 1.0f), y_want(x.size()), mean(3), invstd(3);
    BatchNormShape plain = s;
    plain.relu = false;
    reference::batchnorm_forward(plain, false, x.data(), gamma.data(), beta.data(), rmean.data(),
                                 rvar.data(), y_want.data(), mean.data(), invstd.data());
    for (size_t i = 0; i < x.size(); ++i) y_want[i] = std::max(y_want[i] + x[i], 0.0f);
    const Tensor dx = upload(*device, x), dg = upload(*device, gamma), db = upload(*device, beta);
    const Tensor rm = upload(*device, rmean), rv = upload(*device, rvar);
    const Tensor y = upload(*device, std::vector<float>(x.size(), kNaN));
    device->batchnorm_add_forward(s, false, dx, dx, dg, db, rm, rv, y, Tensor(), Tensor());
    TRIDENT_CHECK_CLOSE(y.to_host(), y_want, (Tolerance{2e-5, 1e-5}));
    CHECK_THROWS_WITH(
        device->batchnorm_add_forward(s, false, dx, y, dg, db, rm, rv, y, Tensor(), Tensor()),
        Catch::Contains("y and residual overlap"));
    CHECK_THROWS_WITH(device->batchnorm_add_forward(s, false, dx, dx.view(0, {10}), dg, db, rm,
                                                    rv, y, Tensor(), Tensor()),
                      Catch::Contains("residual has 10 elements"));
    CHECK_THROWS_WITH(
        device->batchnorm_add_forward(s, false, dx, Tensor(), dg, db, rm, rv, y, Tensor(), Tensor()),
        Catch::Contains("residual is undefined"));
  }
}

TEST_CASE("conformance: batchnorm with a fused ReLU keeps a NaN (a diverged input is not "
          "hidden as zeros)", "[conformance][batchnorm]") {
  FOR_EACH_DEVICE(device) {
    BatchNormShape s;
    s.outer = 4, s.channels = 2, s.inner = 3, s.relu = true;
    std::vector<float> x = random_floats(size_t(s.numel()), 77);
    x[4] = std::numeric_limits<float>::quiet_NaN();  // sample 0, channel 1
    const Tensor dx = upload(*device, x), y = upload(*device, std::vector<float>(x.size(), 0.f));
    const Tensor rm = upload(*device, std::vector<float>{0.f, 0.f});
    const Tensor rv = upload(*device, std::vector<float>{1.f, 1.f});
    const Tensor mean = upload(*device, std::vector<float>(2));
    const Tensor invstd = upload(*device, std::vector<float>(2));
    for (const bool training : {false, true}) {  // evaluation first: training's NaN statistics
      INFO("training " << training);              // would reach the running ones
      device->batchnorm_forward(s, training, dx, Tensor(), Tensor(), rm, rv, y, mean, invstd);
      const std::vector<float> out = y.to_host();
      for (size_t i = 0; i < out.size(); ++i) {
        const bool channel1 = (i / 3) % 2 == 1;
        // Training: channel 1's statistics are NaN, so all of it is; evaluation: that value.
        const bool nan_expected = training ? channel1 : i == 4;
        INFO("value " << i);
        CHECK(std::isnan(out[i]) == nan_expected);
        if (!nan_expected) CHECK(out[i] >= 0.0f);
      }
    }
  }
}
