// 16-bit conformance, network ops: conv2d forward and backward (the backend's and core's
// default), im2col / col2im, max and average pooling, batch norm (training, evaluation,
// backward), log_softmax, nll_loss, log_softmax_nll, mse_loss, count_correct, gather_samples
// and gather_rows into 16-bit buffers, in float16 and bfloat16 on every device that holds the
// type, against the float64 reference within the bounds of tests/dtype_check.h.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "trident/kernels/reference/reference_ops.h"
#include "tests/dtype_check.h"

using namespace trident;
using namespace trident::testing;

namespace {

Conv2dShape conv(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh, int64_t kw,
                 int64_t sh, int64_t sw, int64_t ph, int64_t pw, DType t) {
  Conv2dShape s;
  s.batch = n; s.in_channels = c; s.height = h; s.width = w; s.out_channels = oc;
  s.kernel_h = kh; s.kernel_w = kw; s.stride_h = sh; s.stride_w = sw; s.pad_h = ph; s.pad_w = pw;
  s.dtype = t;
  return s;
}

std::vector<Conv2dShape> conv_shapes(DType t) {
  return {conv(2, 1, 28, 28, 10, 5, 5, 1, 1, 0, 0, t),   // seed CNN, first layer
          conv(3, 10, 12, 12, 20, 5, 5, 1, 1, 0, 0, t),  // seed CNN, second layer
          conv(2, 3, 7, 9, 4, 3, 3, 1, 1, 0, 0, t),      // odd sizes
          conv(3, 2, 8, 8, 5, 3, 3, 2, 2, 1, 1, t),      // stride 2, padding 1
          conv(1, 2, 7, 6, 3, 3, 2, 2, 2, 2, 2, t),      // padding past the kernel
          conv(2, 4, 9, 9, 7, 1, 1, 2, 2, 0, 0, t),      // 1x1 stride 2 (ResNet shortcut)
          conv(2, 3, 11, 8, 5, 2, 4, 3, 1, 1, 2, t),     // every dimension different
          conv(3, 16, 9, 7, 5, 3, 3, 1, 1, 1, 1, t),     // CUDA's folded layout (CKK >= 128)
          conv(8, 16, 7, 7, 24, 3, 3, 1, 1, 1, 1, t),    // ... packs across samples
          conv(13, 8, 7, 7, 6, 3, 3, 1, 1, 1, 1, t),     // the CPU's groups of 6 samples
          conv(3, 40, 13, 11, 70, 3, 3, 1, 1, 1, 1, t),  // past one GEMM tile
          // Channels in 32s, stride 1, 100 positions or more: CUDA's implicit GEMM. Position
          // tiles across samples, a rectangular kernel whose padding leaves none on one side for
          // dx; 3600 positions (the weight gradient split over slices of them).
          conv(3, 32, 10, 11, 96, 3, 5, 1, 1, 2, 1, t),
          conv(4, 32, 30, 30, 32, 3, 3, 1, 1, 1, 1, t),
          // The same with 64 input channels, 96 output channels (a partial tile of 128), no
          // padding above and below but one left and right.
          conv(2, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1, t),
          conv(2, 64, 9, 20, 96, 3, 3, 1, 1, 0, 1, t),
          // 128 channels both ways: on an H100 or H200, the warpgroup-multiply kernel
          // (kernels/cuda/sm90a/wgmma_conv.cu) for the forward and the data gradient.
          conv(2, 128, 10, 11, 128, 3, 3, 1, 1, 1, 1, t),
          // An odd number of positions per image (CUDA's halo-window kernel then stores its
          // results one by one, not in pairs).
          conv(2, 32, 11, 11, 32, 3, 3, 1, 1, 1, 1, t)};
}

Pool2dShape pool(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh,
                 int64_t sw, int64_t ph = 0, int64_t pw = 0) {
  Pool2dShape s;
  s.batch = n; s.channels = c; s.height = h; s.width = w;
  s.kernel_h = kh; s.kernel_w = kw; s.stride_h = sh; s.stride_w = sw; s.pad_h = ph; s.pad_w = pw;
  return s;
}

std::vector<Pool2dShape> pool_shapes() {
  return {pool(2, 3, 7, 9, 2, 2, 2, 2), pool(2, 10, 24, 24, 2, 2, 2, 2), pool(1, 2, 5, 5, 3, 3, 2, 2),
          pool(1, 2, 6, 7, 3, 3, 1, 1), pool(2, 3, 9, 8, 3, 3, 2, 2, 1, 1),
          pool(2, 2, 7, 10, 2, 4, 1, 3, 1, 2), pool(4, 16, 7, 7, 7, 7, 1, 1),
          pool(3, 100, 7, 7, 7, 7, 1, 1), pool(2, 8, 3, 3, 3, 3, 1, 1),  // global, several blocks
          pool(2, 3, 12, 12, 12, 12, 1, 1), pool(2, 3, 9, 6, 3, 3, 3, 3), pool(2, 4, 6, 10, 2, 2, 2, 2)};  // windows tiling the plane
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Per-element bound of a float32 result from a rule (tests/dtype_check.h) and its S.
std::vector<double> f32_bounds(DType t, const ErrorRule& rule, const std::vector<float>& want,
                               const std::vector<double>& s) {
  return error_bounds(t, DType::f32, rule, want, s);
}

}  // namespace

TEST_CASE("conformance 16-bit: conv2d forward and backward (dx 16-bit, dw and db float32), the "
          "backend's and core's default, with and without bias and dx",
          "[conformance][dtypes][conv2d]") {
  FOR_EACH_HALF_DEVICE(t, device) {
    uint32_t seed = 4100;
    for (const Conv2dShape& s : conv_shapes(t))
      for (const bool bias : {true, false})
        for (const bool core_default : {false, true}) {
          INFO("conv2d N=" << s.batch << " C=" << s.in_channels << " H=" << s.height << " W="
                           << s.width << " OC=" << s.out_channels << " K=" << s.kernel_h << "x"
                           << s.kernel_w << " stride=" << s.stride_h << " pad=" << s.pad_h
                           << " bias=" << bias << " core_default=" << core_default);
          const std::vector<float> x = random_rounded(t, size_t(s.input_numel()), ++seed);
          const std::vector<float> w = random_rounded(t, size_t(s.weight_numel()), ++seed);
          const std::vector<float> b = random_floats(size_t(s.out_channels), ++seed);
          const std::vector<float> dy = random_rounded(t, size_t(s.output_numel()), ++seed);
          std::vector<float> y(size_t(s.output_numel())), dx(x.size()), dw(w.size()), db(b.size());
          reference::conv2d_forward(s, x.data(), w.data(), bias ? b.data() : nullptr, y.data());
          reference::conv2d_backward(s, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
          // S: the same op on absolute values.
          const std::vector<float> ax = absolute(x), aw = absolute(w), ab = absolute(b), ady = absolute(dy);
          std::vector<float> sy(y.size()), sdx(dx.size()), sdw(dw.size()), sdb(db.size());
          reference::conv2d_forward(s, ax.data(), aw.data(), bias ? ab.data() : nullptr, sy.data());
          reference::conv2d_backward(s, ax.data(), aw.data(), ady.data(), sdx.data(), sdw.data(), sdb.data());
          const int64_t positions = s.batch * s.out_height() * s.out_width();
          const int64_t kernel = s.kernel_h * s.kernel_w;

          const size_t bytes = core_default ? defaults::conv2d_workspace_bytes(s)
                                            : device->conv2d_workspace_bytes(s);
          Tensor workspace = Tensor::empty(*device, {int64_t(std::max<size_t>(bytes, 1))}, DType::u8);
          FencedBuffer dxin(*device, t, x, 1), dwin(*device, t, w, 2), dyout(*device, t, nans(y.size()), 3);
          Tensor dbias = upload(*device, b);
          if (core_default)
            defaults::conv2d_forward(*device, s, dxin.tensor(), dwin.tensor(), bias ? dbias : Tensor(),
                                     dyout.tensor(), workspace);
          else
            device->conv2d_forward(s, dxin.tensor(), dwin.tensor(), bias ? dbias : Tensor(),
                                   dyout.tensor(), workspace);
          TRIDENT_CHECK_BOUNDED(dyout.values(), y,
                                error_bounds(t, t, {int(bias), 2.0, s.patch_size() + 2}, y, to_double(sy)));
          CHECK(dyout.guard_damage() == 0);

          for (const bool with_dx : {true, false}) {
            INFO("with dx " << with_dx);
            FencedBuffer dgrad(*device, t, dy, 2), dgrad_x(*device, t, nans(x.size()), 1);
            Tensor dweights = upload(*device, nans(w.size())), dbiases = upload(*device, nans(b.size()));
            const Tensor dx_t = with_dx ? dgrad_x.tensor() : Tensor();
            if (core_default)
              defaults::conv2d_backward(*device, s, dxin.tensor(), dwin.tensor(), dgrad.tensor(), dx_t,
                                        dweights, bias ? dbiases : Tensor(), workspace);
            else
              device->conv2d_backward(s, dxin.tensor(), dwin.tensor(), dgrad.tensor(), dx_t, dweights,
                                      bias ? dbiases : Tensor(), workspace);
            if (with_dx)
              TRIDENT_CHECK_BOUNDED(dgrad_x.values(), dx,
                                    error_bounds(t, t, {1, 2.0, s.out_channels * kernel + kernel}, dx,
                                                 to_double(sdx)));
            else  // untouched
              CHECK(compare_bounded(dgrad_x.values(), nans(x.size()), std::vector<double>(x.size(), 0.0)).ok);
            TRIDENT_CHECK_BOUNDED(dweights.to_host(), dw, f32_bounds(t, {0, 2.0, positions + 1}, dw, to_double(sdw)));
            if (bias)
              TRIDENT_CHECK_BOUNDED(dbiases.to_host(), db, f32_bounds(t, {0, 2.0, positions + 1}, db, to_double(sdb)));
            CHECK(dgrad_x.guard_damage() + dgrad.guard_damage() == 0);
          }
          CHECK(dxin.guard_damage() + dwin.guard_damage() == 0);
        }
  }
}

TEST_CASE("conformance 16-bit: im2col copies exactly, col2im sums once",
          "[conformance][dtypes][im2col]") {
  FOR_EACH_HALF_DEVICE(t, device) {
    uint32_t seed = 4200;
    for (Conv2dShape s : conv_shapes(t)) {
      s.batch = 1;
      INFO("C=" << s.in_channels << " H=" << s.height << " W=" << s.width << " K=" << s.kernel_h
                << "x" << s.kernel_w << " stride=" << s.stride_h << " pad=" << s.pad_h);
      const size_t cols = size_t(s.patch_size() * s.out_height() * s.out_width());
      const std::vector<float> x = random_rounded(t, size_t(s.in_channels * s.height * s.width), ++seed);
      std::vector<float> col_want(cols);
      reference::im2col(s, x.data(), col_want.data());
      FencedBuffer dx(*device, t, x, 1), dcol(*device, t, nans(cols), 2);
      device->im2col(s, dx.tensor(), dcol.tensor());
      TRIDENT_CHECK_EXACT(dcol.values(), col_want);
      CHECK(dcol.guard_damage() == 0);

      const std::vector<float> col = random_rounded(t, cols, ++seed);
      std::vector<float> dx_want(x.size()), s_dx(x.size());
      reference::col2im(s, col.data(), dx_want.data());
      const std::vector<float> abs_col = absolute(col);
      reference::col2im(s, abs_col.data(), s_dx.data());
      FencedBuffer dcol_in(*device, t, col, 3), dgrad(*device, t, nans(x.size()), 0);
      device->col2im(s, dcol_in.tensor(), dgrad.tensor());
      TRIDENT_CHECK_BOUNDED(dgrad.values(), dx_want,
                            error_bounds(t, t, {0, 1.0, s.kernel_h * s.kernel_w}, dx_want, to_double(s_dx)));
      CHECK(dgrad.guard_damage() == 0);
    }
  }
}

TEST_CASE("conformance 16-bit: max pooling (exact values and first-maximum argmax, fused ReLU) "
          "and average pooling, forward and backward", "[conformance][dtypes][pool]") {
  FOR_EACH_HALF_DEVICE(t, device) {
    uint32_t seed = 4300;
    for (const bool relu : {false, true})
      for (Pool2dShape s : pool_shapes())
      for (const size_t shift : {size_t(1), size_t(0)}) {  // 0: x and dx pair-aligned
        s.relu = relu;
        INFO("x and dx at offset " << shift);
        INFO("pool N=" << s.batch << " C=" << s.channels << " H=" << s.height << " W=" << s.width
                       << " kernel=" << s.kernel_h << "x" << s.kernel_w << " stride=" << s.stride_h
                       << "x" << s.stride_w << " pad=" << s.pad_h << " relu=" << relu);
        const size_t in = size_t(s.input_numel()), out = size_t(s.output_numel());
        // Rounding to 16 bits makes ties: the first maximum must win.
        const std::vector<float> x = random_rounded(t, in, ++seed);
        std::vector<float> y_want(out);
        std::vector<int32_t> argmax_want(out);
        reference::maxpool2d_forward(s, x.data(), y_want.data(), argmax_want.data());
        FencedBuffer dx(*device, t, x, shift), dy(*device, t, nans(out), 2);
        Tensor argmax = Tensor::empty(*device, {int64_t(out)}, DType::i32);
        device->maxpool2d_forward(s, dx.tensor(), dy.tensor(), argmax);
        TRIDENT_CHECK_EXACT(dy.values(), y_want);
        TRIDENT_CHECK_EXACT(argmax.to_host_i32(), argmax_want);
        CHECK(dy.guard_damage() == 0);

        const std::vector<float> grad = random_rounded(t, out, ++seed);
        std::vector<float> dx_want(in), s_dx(in);
        reference::maxpool2d_backward(s, grad.data(), argmax_want.data(), dx_want.data());
        const std::vector<float> abs_grad = absolute(grad);
        reference::maxpool2d_backward(s, abs_grad.data(), argmax_want.data(), s_dx.data());
        const int64_t overlap = ceil_div(s.kernel_h, s.stride_h) * ceil_div(s.kernel_w, s.stride_w);
        FencedBuffer dgrad(*device, t, grad, 3), dgrad_x(*device, t, nans(in), shift);
        device->maxpool2d_backward(s, dgrad.tensor(), upload(*device, argmax_want), dgrad_x.tensor());
        TRIDENT_CHECK_BOUNDED(dgrad_x.values(), dx_want, error_bounds(t, t, {0, 1.0, overlap}, dx_want, to_double(s_dx)));
        CHECK(dgrad_x.guard_damage() == 0);
        if (relu) continue;

        std::vector<float> avg_want(out), s_avg(out);
        reference::avgpool2d_forward(s, x.data(), avg_want.data());
        const std::vector<float> abs_x = absolute(x);
        reference::avgpool2d_forward(s, abs_x.data(), s_avg.data());
        FencedBuffer davg(*device, t, nans(out), 0);
        device->avgpool2d_forward(s, dx.tensor(), davg.tensor());
        TRIDENT_CHECK_BOUNDED(davg.values(), avg_want,
                              error_bounds(t, t, {0, 1.0, s.kernel_h * s.kernel_w + 1}, avg_want, to_double(s_avg)));
        std::vector<float> avg_dx(in), s_avg_dx(in);
        reference::avgpool2d_backward(s, grad.data(), avg_dx.data());
        reference::avgpool2d_backward(s, abs_grad.data(), s_avg_dx.data());
        FencedBuffer davg_dx(*device, t, nans(in), 2);
        device->avgpool2d_backward(s, dgrad.tensor(), davg_dx.tensor());
        TRIDENT_CHECK_BOUNDED(davg_dx.values(), avg_dx,
                              error_bounds(t, t, {0, 1.0, overlap + 1}, avg_dx, to_double(s_avg_dx)));
        CHECK(davg.guard_damage() + davg_dx.guard_damage() == 0);
      }
  }
}

// Batch norm's bounds (the table's "batchnorm" row), from the statistics of each channel over
// its K = outer*inner values: the mean errs by <= K u32 M1 (M1 = mean |x|); a two-pass (or
// Welford) variance by <= 2 (K + 3) u32 var (the suite's float32 test already demands a stable
// variance; CUDA's sums shifted by the mean of a channel's first values stay within it while
// that shift lies within a standard deviation of the mean: their bound grows as
// 1 + ((shift - mean) / sd)^2); invstd then by <= (K + 5) u32 invstd. So y errs by <= K u32 |gamma| invstd
// (|x - mean| + M1) plus a few roundings of |y| + |beta|: S = |gamma| invstd (|x - mean| + M1)
// + |beta| with c = 2, K + 4.
TEST_CASE("conformance 16-bit: batchnorm forward (training and evaluation, statistics float32) "
          "and backward (dgamma, dbeta float32)", "[conformance][dtypes][batchnorm]") {
  struct Case {
    int64_t outer, channels, inner;
  };
  const std::vector<Case> cases = {{7, 3, 5},  {16, 8, 49}, {200, 10, 1}, {3, 16, 49},
                                   {1, 4, 9},  {20, 32, 784}, {3, 5, 6}, {4, 6, 196}};
  FOR_EACH_HALF_DEVICE(t, device) {
    uint32_t seed = 4400;
    for (const Case& c : cases)
      for (const bool affine : {true, false})
        for (const bool training : {true, false})
        for (const bool relu : {false, true}) {  // a fused ReLU: 1-Lipschitz, the same bounds
          BatchNormShape s;
          s.outer = c.outer; s.channels = c.channels; s.inner = c.inner;
          s.relu = relu;
          INFO("batchnorm outer=" << c.outer << " channels=" << c.channels << " inner=" << c.inner
                                  << " affine=" << affine << " training=" << training
                                  << " relu=" << relu);
          const size_t n = size_t(s.numel()), ch = size_t(c.channels);
          const int64_t k = c.outer * c.inner;
          auto channel_of = [&](size_t i) { return (i / size_t(c.inner)) % ch; };
          std::vector<float> x = random_floats(n, ++seed);
          for (size_t i = 0; i < n; ++i) x[i] = 2.0f * x[i] + 3.0f + float(channel_of(i) % 3);
          x = rounded(t, x);
          const std::vector<float> gamma = random_floats(ch, ++seed, 0.5f, 1.5f), beta = random_floats(ch, ++seed);
          if (relu && training)
            keep_off_relu_kink(s, x, affine ? gamma.data() : nullptr, affine ? beta.data() : nullptr,
                               s.eps, [&](float v) { return rounded(t, std::vector<float>{v})[0]; });
          const std::vector<float> rmean = random_floats(ch, ++seed, 2.0f, 6.0f), rvar = random_floats(ch, ++seed, 0.5f, 2.0f);
          std::vector<float> y_want(n), mean_want(ch), invstd_want(ch), rmean_want = rmean, rvar_want = rvar;
          reference::batchnorm_forward(s, training, x.data(), affine ? gamma.data() : nullptr,
                                       affine ? beta.data() : nullptr, rmean_want.data(),
                                       rvar_want.data(), y_want.data(), mean_want.data(), invstd_want.data());
          // The channel statistics in double for the bounds.
          std::vector<double> m1(ch, 0.0), mean(ch, 0.0), var(ch, 0.0);
          for (size_t i = 0; i < n; ++i) {
            m1[channel_of(i)] += std::abs(double(x[i])) / double(k);
            mean[channel_of(i)] += double(x[i]) / double(k);
          }
          for (size_t i = 0; i < n; ++i) var[channel_of(i)] += std::pow(x[i] - mean[channel_of(i)], 2) / double(k);
          auto g = [&](size_t j) { return affine ? std::abs(double(gamma[j])) : 1.0; };
          auto bt = [&](size_t j) { return affine ? std::abs(double(beta[j])) : 0.0; };
          std::vector<double> sy(n);
          for (size_t i = 0; i < n; ++i) {
            const size_t j = channel_of(i);
            sy[i] = training ? g(j) / std::sqrt(var[j] + s.eps) * (std::abs(x[i] - mean[j]) + m1[j]) + bt(j)
                             : g(j) / std::sqrt(double(rvar[j]) + s.eps) * (std::abs(double(x[i])) + rmean[j]) + bt(j);
          }
          FencedBuffer dx(*device, t, x, 1), dy(*device, t, nans(n), 2);
          Tensor dgamma = upload(*device, gamma), dbeta = upload(*device, beta);
          Tensor drmean = upload(*device, rmean), drvar = upload(*device, rvar);
          Tensor dmean = upload(*device, nans(ch)), dinvstd = upload(*device, nans(ch));
          device->batchnorm_forward(s, training, dx.tensor(), affine ? dgamma : Tensor(),
                                    affine ? dbeta : Tensor(), drmean, drvar, dy.tensor(), dmean, dinvstd);
          const ErrorRule y_rule = training ? ErrorRule{0, 2.0, k + 4} : ErrorRule{0, 1.0, 6};
          TRIDENT_CHECK_BOUNDED(dy.values(), y_want, error_bounds(t, t, y_rule, y_want, sy));
          CHECK(dy.guard_damage() == 0);
          if (!training) {  // nothing but y written
            CHECK(drmean.to_host() == rmean);
            CHECK(drvar.to_host() == rvar);
            continue;
          }
          std::vector<double> s_rmean(ch), s_rvar(ch), s_mean(ch), s_invstd(ch);
          for (size_t j = 0; j < ch; ++j) {
            s_rmean[j] = s.momentum * m1[j] + (1.0 - s.momentum) * rmean[j];
            s_rvar[j] = s.momentum * var[j] * double(k) / double(k - 1) + (1.0 - s.momentum) * rvar[j];
            s_mean[j] = m1[j];
            s_invstd[j] = invstd_want[j];
          }
          TRIDENT_CHECK_BOUNDED(drmean.to_host(), rmean_want, f32_bounds(t, {0, 1.0, k + 3}, rmean_want, s_rmean));
          TRIDENT_CHECK_BOUNDED(drvar.to_host(), rvar_want, f32_bounds(t, {0, 2.0, k + 4}, rvar_want, s_rvar));
          TRIDENT_CHECK_BOUNDED(dmean.to_host(), mean_want, f32_bounds(t, {0, 1.0, k}, mean_want, s_mean));
          TRIDENT_CHECK_BOUNDED(dinvstd.to_host(), invstd_want, f32_bounds(t, {0, 1.0, k + 5}, invstd_want, s_invstd));

          // Backward from the reference's statistics, judged on its own: x-hat errs by
          // <= 2 u32 X (X = (|x| + |mean|) invstd), the two channel means by K u32 times their
          // absolute sums, so dx's S = |gamma| invstd (|dy| + mean|dy| + X mean(|dy| X)).
          // With the fused ReLU each recomputes the mask from x (keep_off_relu_kink keeps it
          // unambiguous; the bounds, from the unmasked |dy|, only grow).
          const std::vector<float> grad = random_rounded(t, n, ++seed);
          std::vector<float> dx_want(n), dgamma_want(ch), dbeta_want(ch);
          reference::batchnorm_backward(s, x.data(), grad.data(), affine ? gamma.data() : nullptr,
                                        mean_want.data(), invstd_want.data(), dx_want.data(),
                                        affine ? dgamma_want.data() : nullptr,
                                        affine ? dbeta_want.data() : nullptr,
                                        relu && affine ? beta.data() : nullptr);
          std::vector<double> big_x(n), mean_dy(ch, 0.0), mean_dy_x(ch, 0.0);
          for (size_t i = 0; i < n; ++i) {
            const size_t j = channel_of(i);
            big_x[i] = (std::abs(double(x[i])) + std::abs(double(mean_want[j]))) * invstd_want[j];
            mean_dy[j] += std::abs(double(grad[i])) / double(k);
            mean_dy_x[j] += std::abs(double(grad[i])) * big_x[i] / double(k);
          }
          std::vector<double> sdx(n), s_dgamma(ch), s_dbeta(ch);
          for (size_t i = 0; i < n; ++i) {
            const size_t j = channel_of(i);
            sdx[i] = g(j) * invstd_want[j] * (std::abs(double(grad[i])) + mean_dy[j] + big_x[i] * mean_dy_x[j]);
          }
          for (size_t j = 0; j < ch; ++j) {
            s_dgamma[j] = mean_dy_x[j] * double(k);
            s_dbeta[j] = mean_dy[j] * double(k);
          }
          FencedBuffer dgrad(*device, t, grad, 3), dgrad_x(*device, t, nans(n), 1);
          Tensor ddgamma = upload(*device, nans(ch)), ddbeta = upload(*device, nans(ch));
          device->batchnorm_backward(s, dx.tensor(), dgrad.tensor(), affine ? dgamma : Tensor(),
                                     upload(*device, mean_want), upload(*device, invstd_want),
                                     dgrad_x.tensor(), affine ? ddgamma : Tensor(),
                                     affine ? ddbeta : Tensor(), relu && affine ? dbeta : Tensor());
          TRIDENT_CHECK_BOUNDED(dgrad_x.values(), dx_want, error_bounds(t, t, {0, 1.0, k + 6}, dx_want, sdx));
          if (affine) {
            TRIDENT_CHECK_BOUNDED(ddgamma.to_host(), dgamma_want, f32_bounds(t, {0, 1.0, k + 3}, dgamma_want, s_dgamma));
            TRIDENT_CHECK_BOUNDED(ddbeta.to_host(), dbeta_want, f32_bounds(t, {0, 1.0, k}, dbeta_want, s_dbeta));
          }
          CHECK(dgrad_x.guard_damage() == 0);
        }
  }
}

namespace {

// Per-row max and log-sum-exp of x [rows, cols] in double.
void row_stats(const std::vector<float>& x, int64_t rows, int64_t cols, std::vector<double>& max,
               std::vector<double>& lse) {
  max.assign(size_t(rows), -INFINITY);
  lse.assign(size_t(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) max[size_t(r)] = std::max(max[size_t(r)], double(x[size_t(r * cols + c)]));
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(double(x[size_t(r * cols + c)]) - max[size_t(r)]);
    lse[size_t(r)] = std::log(sum);
  }
}

// The target distribution t[c] of a row with label l (label smoothing e).
double target(int32_t label, int64_t c, int64_t cols, float e) {
  return (1.0 - e) * (c == label ? 1.0 : 0.0) + double(e) / double(cols);
}

}  // namespace

TEST_CASE("conformance 16-bit: log_softmax forward and backward, nll_loss (label smoothing), "
          "16-bit and float32 outputs", "[conformance][dtypes][log_softmax][nll]") {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {7, 10}, {33, 257}, {200, 10}, {3, 1000}};
  FOR_EACH_HALF_DEVICE(t, device) {
    uint32_t seed = 4500;
    for (const auto& [rows, cols] : shapes)
      for (const DType out : {t, DType::f32}) {
        INFO("rows=" << rows << " cols=" << cols << " output " << dtype_name(out));
        const size_t n = size_t(rows * cols);
        std::vector<float> x = random_floats(n, ++seed, -20.0f, 20.0f);
        for (int64_t c = 0; c < cols; ++c) x[size_t(c)] += 1e4f;  // a naive exp overflows
        x = rounded(t, x);
        std::vector<float> y_want(n);
        reference::log_softmax_forward(x.data(), y_want.data(), rows, cols);
        std::vector<double> max, lse, sy(n);
        row_stats(x, rows, cols, max, lse);
        for (size_t i = 0; i < n; ++i) sy[i] = std::abs(x[i] - max[i / size_t(cols)]) + lse[i / size_t(cols)] + 1.0;
        FencedBuffer dx(*device, t, x, 1), dy(*device, out, nans(n), 2);
        device->log_softmax_forward(dx.tensor({rows, cols}), dy.tensor());
        TRIDENT_CHECK_BOUNDED(dy.values(), y_want, error_bounds(t, out, {0, 2.0, cols + 4}, y_want, sy));
        CHECK(dy.guard_damage() == 0);

        // Backward from y as the 16-bit type holds it.
        const std::vector<float> y = rounded(t, y_want), grad = random_rounded(t, n, ++seed);
        std::vector<float> dx_want(n);
        reference::log_softmax_backward(y.data(), grad.data(), dx_want.data(), rows, cols);
        std::vector<double> sum_abs(size_t(rows), 0.0), sdx(n);
        for (size_t i = 0; i < n; ++i) sum_abs[i / size_t(cols)] += std::abs(double(grad[i]));
        for (size_t i = 0; i < n; ++i) sdx[i] = std::abs(double(grad[i])) + std::exp(double(y[i])) * sum_abs[i / size_t(cols)];
        FencedBuffer dyin(*device, t, y, 3), dgrad(*device, out == t ? t : DType::f32, grad, 0),
            dgrad_x(*device, out, nans(n), 1);
        device->log_softmax_backward(dyin.tensor({rows, cols}), dgrad.tensor(), dgrad_x.tensor());
        TRIDENT_CHECK_BOUNDED(dgrad_x.values(), dx_want, error_bounds(t, out, {0, 1.0, cols + 6}, dx_want, sdx));
        CHECK(dgrad_x.guard_damage() == 0);
      }
    for (const float smoothing : {0.0f, 0.1f})
      for (const auto& [rows, cols] : shapes) {
        INFO("nll rows=" << rows << " cols=" << cols << " smoothing=" << smoothing);
        const std::vector<float> logp = random_rounded(t, size_t(rows * cols), ++seed, -8.0f, 0.0f);
        const std::vector<int32_t> labels = random_labels(size_t(rows), int32_t(cols), ++seed);
        Tensor dlogp = Tensor::from_host(*device, {rows, cols}, logp, t), dlabels = upload(*device, labels);
        for (const bool accumulate : {false, true}) {
          std::vector<float> want = {accumulate ? 2.5f : NAN};
          reference::nll_loss_forward(logp.data(), labels.data(), rows, cols, want.data(), accumulate, smoothing);
          double s = accumulate ? 2.5 : 0.0;
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
              s += target(labels[size_t(r)], c, cols, smoothing) * std::abs(double(logp[size_t(r * cols + c)])) / double(rows);
          Tensor loss = upload(*device, std::vector<float>{accumulate ? 2.5f : NAN});
          device->nll_loss_forward(dlogp, dlabels, loss, accumulate, smoothing);
          TRIDENT_CHECK_BOUNDED(loss.to_host(), want, f32_bounds(t, {0, 1.0, rows + cols + 3}, want, {s}));
        }
        std::vector<float> grad_want(size_t(rows * cols));
        reference::nll_loss_backward(labels.data(), rows, cols, 1.0f / float(rows), grad_want.data(), smoothing);
        FencedBuffer grad(*device, t, nans(grad_want.size()), 1);
        device->nll_loss_backward(dlabels, grad.tensor({rows, cols}), 1.0f / float(rows), smoothing);
        TRIDENT_CHECK_BOUNDED(grad.values(), grad_want, error_bounds(t, t, {0, 1.0, 4}, grad_want, magnitudes(grad_want)));
        CHECK(grad.guard_damage() == 0);
      }
  }
}

TEST_CASE("conformance 16-bit: log_softmax_nll (the fused head: 16-bit y, dx 16-bit or float32 "
          "as under loss scaling, label smoothing, accumulation), its core default, mse_loss, "
          "count_correct", "[conformance][dtypes][log_softmax_nll][mse][count_correct]") {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {7, 10}, {200, 10}, {33, 257}, {3, 1000}};
  FOR_EACH_HALF_DEVICE(t, device) {
    uint32_t seed = 4600;
    for (const bool core_default : {false, true})
      for (const float smoothing : {0.0f, 0.1f})
        for (const auto& [rows, cols] : shapes)
          for (const DType dx_type : {t, DType::f32}) {
            const bool accumulate = rows % 2 == 1;
            INFO("log_softmax_nll rows=" << rows << " cols=" << cols << " smoothing=" << smoothing
                                         << " dx " << dtype_name(dx_type) << " core_default=" << core_default);
            const size_t n = size_t(rows * cols);
            std::vector<float> x = random_floats(n, ++seed, -20.0f, 20.0f);
            for (int64_t c = 0; c < cols; ++c) x[size_t(c)] += 1e4f;
            x = rounded(t, x);
            const std::vector<int32_t> labels = random_labels(size_t(rows), int32_t(cols), ++seed);
            const float grad_scale = 0.75f / float(rows);
            std::vector<float> y_want(n), dx_want(n), loss_want{2.5f};
            reference::log_softmax_nll(x.data(), labels.data(), rows, cols, grad_scale, smoothing,
                                       y_want.data(), loss_want.data(), accumulate, dx_want.data());
            std::vector<double> max, lse, sy(n), sdx(n);
            row_stats(x, rows, cols, max, lse);
            double s_loss = accumulate ? 2.5 : 0.0;
            for (size_t i = 0; i < n; ++i) {
              const size_t r = i / size_t(cols);
              const double y_error_scale = std::abs(x[i] - max[r]) + lse[r] + 1.0;
              const double tc = target(labels[r], int64_t(i % size_t(cols)), cols, smoothing);
              sy[i] = y_error_scale;
              sdx[i] = grad_scale * (std::exp(double(y_want[i])) * (std::abs(double(y_want[i])) + y_error_scale) + tc);
              s_loss += tc * (std::abs(double(y_want[i])) + y_error_scale) / double(rows);
            }
            FencedBuffer dxin(*device, t, x, 1), dy(*device, t, nans(n), 2), ddx(*device, dx_type, nans(n), 3);
            Tensor loss = upload(*device, std::vector<float>{accumulate ? 2.5f : NAN});
            Tensor dlabels = upload(*device, labels);
            if (core_default)
              defaults::log_softmax_nll(*device, dxin.tensor({rows, cols}), dlabels, grad_scale, smoothing,
                                        dy.tensor({rows, cols}), loss, accumulate, ddx.tensor({rows, cols}));
            else
              device->log_softmax_nll(dxin.tensor({rows, cols}), dlabels, grad_scale, smoothing,
                                      dy.tensor(), loss, accumulate, ddx.tensor());
            // y may be rounded before the loss and the gradient read it; dlogp may be rounded in a
            // 16-bit dx before the softmax backward (the table's rows).
            TRIDENT_CHECK_BOUNDED(dy.values(), y_want, error_bounds(t, t, {0, 2.0, cols + 4}, y_want, sy));
            TRIDENT_CHECK_BOUNDED(loss.to_host(), loss_want,
                                  f32_bounds(t, {1, 2.0, rows + 2 * cols + 8}, loss_want, {s_loss}));
            TRIDENT_CHECK_BOUNDED(ddx.values(), dx_want,
                                  error_bounds(t, dx_type, {1 + int(is_half(dx_type)), 2.0, cols + 6}, dx_want, sdx));
            CHECK(dy.guard_damage() + ddx.guard_damage() + dxin.guard_damage() == 0);
          }
    for (const int64_t rows : {1, 7, 257})
      for (const int64_t cols : {1, 10, 33})
        for (const DType dx_type : {t, DType::f32}) {
          INFO("mse rows=" << rows << " cols=" << cols << " dx " << dtype_name(dx_type));
          const std::vector<float> x = random_rounded(t, size_t(rows * cols), ++seed, -2.0f, 2.0f);
          const std::vector<int32_t> labels = random_labels(size_t(rows), int32_t(cols), ++seed);
          const float grad_scale = 1.0f / float(rows);
          std::vector<float> loss_want{1.5f}, dx_want(x.size());
          reference::mse_loss(x.data(), labels.data(), rows, cols, grad_scale, loss_want.data(), true, dx_want.data());
          double s_loss = 1.5;
          std::vector<double> sdx(x.size());
          for (size_t i = 0; i < x.size(); ++i) {
            const double hot = int64_t(i % size_t(cols)) == labels[i / size_t(cols)] ? 1.0 : 0.0;
            s_loss += std::pow(std::abs(double(x[i])) + hot, 2) / double(rows * cols);
            sdx[i] = grad_scale * 2.0 * (std::abs(double(x[i])) + hot) / double(cols);
          }
          Tensor loss = upload(*device, std::vector<float>{1.5f});
          FencedBuffer dx(*device, dx_type, nans(x.size()), 1);
          device->mse_loss(Tensor::from_host(*device, {rows, cols}, x, t), upload(*device, labels),
                           grad_scale, loss, true, dx.tensor());
          TRIDENT_CHECK_BOUNDED(loss.to_host(), loss_want, f32_bounds(t, {0, 1.0, rows * cols + 3}, loss_want, {s_loss}));
          TRIDENT_CHECK_BOUNDED(dx.values(), dx_want, error_bounds(t, dx_type, {0, 1.0, 4}, dx_want, sdx));
          CHECK(dx.guard_damage() == 0);
        }
    for (const int64_t rows : {1, 7, 257, 2000})
      for (const int64_t cols : {2, 10, 33}) {
        INFO("count_correct rows=" << rows << " cols=" << cols);
        // Rounding to 16 bits makes ties; labels at the first maximum, the last, or anywhere.
        const std::vector<float> scores = random_rounded(t, size_t(rows * cols), ++seed, 0.0f, 0.05f);
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
        Tensor correct = upload(*device, std::vector<float>{3.0f});
        device->count_correct(Tensor::from_host(*device, {rows, cols}, scores, t), upload(*device, labels), correct);
        CHECK(correct.to_host() == want);
      }
  }
}

TEST_CASE("conformance 16-bit: gather_samples into a 16-bit batch (u8 and float32 samples, "
          "normalisation, crop and flip) and gather_rows of 16-bit rows",
          "[conformance][dtypes][gather_samples][gather_rows]") {
  struct Case {
    int64_t channels, height, width, count, rows;
    bool u8;
    int64_t padding;
    bool flip;
  };
  const std::vector<Case> cases = {{1, 28, 28, 30, 8, true, 0, false}, {1, 28, 28, 30, 8, true, 4, true},
                                   {3, 5, 7, 11, 5, false, 2, true}, {2, 9, 4, 6, 6, true, 3, false}};
  FOR_EACH_HALF_DEVICE(t, device) {
    uint32_t seed = 4700;
    for (const Case& c : cases)
      for (const bool normalise : {false, true}) {
        INFO("gather_samples C=" << c.channels << " H=" << c.height << " W=" << c.width << " u8=" << c.u8
                                 << " padding=" << c.padding << " flip=" << c.flip << " normalise=" << normalise);
        const int64_t sample = c.channels * c.height * c.width;
        std::vector<uint8_t> bytes(size_t(c.count * sample));
        for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t((i * 2654435761u) >> 13);
        const std::vector<float> floats = random_floats(size_t(c.count * sample), ++seed, -3.0f, 3.0f);
        const std::vector<int32_t> table = random_labels(size_t(c.rows * 3), int32_t(c.count), ++seed);
        const std::vector<uint32_t> state = {2, 12345};
        const std::vector<float> mean = random_floats(size_t(c.channels), ++seed, 0.0f, 0.5f);
        const std::vector<float> inv_std = random_floats(size_t(c.channels), ++seed, 1.0f, 4.0f);
        reference::HostSampleTransform host;
        host.scale = c.u8 ? 1.0f / 255.0f : 1.0f;
        host.mean = normalise ? mean.data() : nullptr;
        host.inv_std = normalise ? inv_std.data() : nullptr;
        host.crop_padding = c.padding;
        host.horizontal_flip = c.flip;
        host.seed = 0xABCDEF0123ull;
        host.stream = 0x40000001u;
        host.sample_offset = 3;
        std::vector<float> want(size_t(c.rows * sample));
        reference::gather_samples(c.u8 ? static_cast<const void*>(bytes.data()) : floats.data(), c.u8,
                                  c.channels, c.height, c.width, table.data(), c.rows, state.data(),
                                  host, want.data());
        // S: the largest |x scale| of the data set plus |mean|, times inv_std, per channel.
        double largest = 0.0;
        for (size_t i = 0; i < floats.size(); ++i)
          largest = std::max(largest, c.u8 ? bytes[i] / 255.0 : std::abs(double(floats[i])));
        std::vector<double> s(want.size());
        for (size_t i = 0; i < want.size(); ++i) {
          const size_t ch = (i / size_t(c.height * c.width)) % size_t(c.channels);
          s[i] = normalise ? (largest + mean[ch]) * inv_std[ch] : largest;
        }
        const Shape src_shape{c.count, c.channels, c.height, c.width};
        Tensor src = c.u8 ? upload(*device, bytes).reshape(src_shape) : Tensor::from_host(*device, src_shape, floats);
        SampleTransform tr;
        tr.scale = host.scale;
        if (normalise) {
          tr.mean = upload(*device, mean);
          tr.inv_std = upload(*device, inv_std);
        }
        tr.crop_padding = c.padding;
        tr.horizontal_flip = c.flip;
        tr.seed = host.seed;
        tr.stream = host.stream;
        tr.sample_offset = host.sample_offset;
        FencedBuffer dst(*device, t, nans(want.size()), 3);
        device->gather_samples(src, upload(*device, table), upload(*device, state), tr,
                               dst.tensor({c.rows, c.channels, c.height, c.width}));
        TRIDENT_CHECK_BOUNDED(dst.values(), want, error_bounds(t, t, {0, 1.0, 4}, want, s));
        CHECK(dst.guard_damage() == 0);
      }
    // gather_rows moves 16-bit rows untouched.
    const std::vector<float> rows16 = random_rounded(t, 33 * 7, ++seed);
    const std::vector<int32_t> table = random_labels(12, 33, ++seed);
    Tensor src = Tensor::from_host(*device, {33, 7}, rows16, t);
    FencedBuffer dst(*device, t, nans(4 * 7), 1);
    device->gather_rows(src, upload(*device, table), upload(*device, std::vector<uint32_t>{2, 0}), dst.tensor({4, 7}));
    std::vector<float> want;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t k = 0; k < 7; ++k) want.push_back(rows16[size_t(table[size_t(8 + i)] * 7 + k)]);
    TRIDENT_CHECK_EXACT(dst.values(), want);
    CHECK(dst.guard_damage() == 0);
  }
}
