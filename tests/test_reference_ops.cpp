// Tests of the reference ops themselves (the yardstick every backend is judged by): small cases
// worked out by hand, Philox known-answer vectors, finite-difference checks of the backward ops.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "trident/core/philox.h"
#include "trident/kernels/reference/reference_ops.h"

using namespace trident;
namespace ref = trident::reference;

namespace {

using Floats = std::vector<float>;

std::vector<float> run_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Floats& a,
                            int64_t lda, const Floats& b, int64_t ldb, Floats c, int64_t ldc,
                            float alpha = 1.0f, float beta = 0.0f, const Floats* bias = nullptr,
                            BiasKind kind = BiasKind::none, bool relu = false) {
  ref::HostGemmArgs g;
  g.trans_a = ta; g.trans_b = tb; g.m = m; g.n = n; g.k = k; g.alpha = alpha; g.beta = beta;
  g.a = a.data(); g.b = b.data(); g.c = c.data(); g.lda = lda; g.ldb = ldb; g.ldc = ldc;
  g.bias = bias ? bias->data() : nullptr; g.bias_kind = kind;
  g.activation = relu ? UnaryOp::relu : UnaryOp::identity;
  ref::gemm(g);
  return c;
}

Floats random_floats(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Floats out(count);
  for (float& v : out) v = dist(rng);
  return out;
}

// Sum of out * weights in double: the scalar loss whose gradient the backward ops compute.
double weighted_sum(const Floats& out, const Floats& weights) {
  double s = 0.0;
  for (size_t i = 0; i < out.size(); ++i) s += double(out[i]) * weights[i];
  return s;
}

// Checks analytic[i] against the central difference of loss() in inputs[i], for every i.
void check_finite_differences(Floats& inputs, const Floats& analytic,
                              const std::function<double()>& loss, float h, double tolerance) {
  REQUIRE(analytic.size() == inputs.size());
  double worst = 0.0;
  size_t worst_at = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const float saved = inputs[i];
    inputs[i] = saved + h;
    const double up = loss();
    const double step_up = double(inputs[i]) - saved;  // the step float arithmetic really took
    inputs[i] = saved - h;
    const double down = loss();
    const double step_down = saved - double(inputs[i]);
    inputs[i] = saved;
    const double numeric = (up - down) / (step_up + step_down);
    const double err = std::abs(numeric - analytic[i]) / std::max(1.0, std::abs(numeric));
    if (err > worst) { worst = err; worst_at = i; }
  }
  INFO("worst relative difference " << worst << " at input " << worst_at << ": analytic "
                                    << analytic[worst_at]);
  CHECK(worst < tolerance);
}

}  // namespace

TEST_CASE("reference: gemm by hand, every transpose case", "[reference][gemm]") {
  const Floats a = {1, 2, 3, 4}, b = {5, 6, 7, 8};  // [[1,2],[3,4]] and [[5,6],[7,8]]
  CHECK(run_gemm(false, false, 2, 2, 2, a, 2, b, 2, Floats(4), 2) == Floats{19, 22, 43, 50});
  CHECK(run_gemm(true, false, 2, 2, 2, a, 2, b, 2, Floats(4), 2) == Floats{26, 30, 38, 44});
  CHECK(run_gemm(false, true, 2, 2, 2, a, 2, b, 2, Floats(4), 2) == Floats{17, 23, 39, 53});
  CHECK(run_gemm(true, true, 2, 2, 2, a, 2, b, 2, Floats(4), 2) == Floats{23, 31, 34, 46});
  // Strided: lda = ldb = 3 with junk in the padding column; ldc = 3 keeps C's padding untouched.
  const Floats a3 = {1, 2, -99, 3, 4, -99}, b3 = {5, 6, -99, 7, 8, -99};
  CHECK(run_gemm(false, false, 2, 2, 2, a3, 3, b3, 3, Floats(6, 7.0f), 3) ==
        Floats{19, 22, 7, 43, 50, 7});
}

TEST_CASE("reference: gemm epilogue by hand: alpha, beta, bias, relu", "[reference][gemm]") {
  const Floats a = {1, 2, 3, 4}, b = {5, 6, 7, 8}, c0 = {1, -100, 0, 1}, row_bias = {1, -1};
  // 0.5 * [[19,22],[43,50]] + 2 * c0 + per-row bias, then ReLU.
  CHECK(run_gemm(false, false, 2, 2, 2, a, 2, b, 2, c0, 2, 0.5f, 2.0f, &row_bias,
                 BiasKind::per_row, false) == Floats{12.5f, -188.0f, 20.5f, 26.0f});
  CHECK(run_gemm(false, false, 2, 2, 2, a, 2, b, 2, c0, 2, 0.5f, 2.0f, &row_bias,
                 BiasKind::per_row, true) == Floats{12.5f, 0.0f, 20.5f, 26.0f});
  // [1,-1] x [[1,2,3],[4,5,6]] = [-3,-3,-3], plus a per-column bias [1,2,3].
  const Floats col_bias = {1, 2, 3};
  CHECK(run_gemm(false, false, 1, 3, 2, {1, -1}, 2, {1, 2, 3, 4, 5, 6}, 3, Floats(3), 3, 1.0f,
                 0.0f, &col_bias, BiasKind::per_column) == Floats{-2, -1, 0});
  // beta == 0: C is not read, so NaN there does not reach the result.
  CHECK(run_gemm(false, false, 1, 1, 1, {2}, 1, {3}, 1, {NAN}, 1) == Floats{6});
}

TEST_CASE("reference: sum_rows, axpby, relu, fill, advance_step by hand", "[reference]") {
  Floats db = {NAN, NAN};
  ref::sum_rows(Floats{1, 2, 3, 4, 5, 6}.data(), 3, 2, db.data(), 0.0f);
  CHECK(db == Floats{9, 12});
  db = {2, 4};
  ref::sum_rows(Floats{1, 2, 3, 4, 5, 6}.data(), 3, 2, db.data(), 0.5f);
  CHECK(db == Floats{10, 14});

  Floats y = {3, 4};
  ref::axpby(Floats{1, 2}.data(), y.data(), 2, 2.0f, -1.0f);
  CHECK(y == Floats{-1, 0});

  Floats r(3), dr(3);
  ref::unary_forward(UnaryOp::relu, Floats{-1, 0, 2}.data(), r.data(), 3, 0.0f);
  CHECK(r == Floats{0, 0, 2});
  ref::unary_backward(UnaryOp::relu, nullptr, r.data(), Floats{5, 6, 7}.data(), dr.data(), 3,
                      0.0f);
  CHECK(dr == Floats{0, 0, 7});  // y == 0 passes no gradient
  ref::unary_forward(UnaryOp::leaky_relu, Floats{-1, 0, 2}.data(), r.data(), 3, 0.5f);
  CHECK(r == Floats{-0.5f, 0, 2});
  ref::unary_forward(UnaryOp::tanh, Floats{0, 1}.data(), r.data(), 2, 0.0f);
  CHECK(r[1] == Approx(0.7615941559557649));
  ref::unary_forward(UnaryOp::sigmoid, Floats{0, 2}.data(), r.data(), 2, 0.0f);
  CHECK(r[0] == 0.5f);
  CHECK(r[1] == Approx(0.8807970779778823));
  ref::unary_forward(UnaryOp::gelu, Floats{1, -1}.data(), r.data(), 2, 0.0f);
  CHECK(r[0] == Approx(0.8413447460685429));  // torch.nn.functional.gelu(torch.tensor(1.))
  CHECK(r[1] == Approx(-0.15865525393145707));
  ref::unary_backward(UnaryOp::gelu, Floats{1}.data(), nullptr, Floats{1}.data(), dr.data(), 1,
                      0.0f);
  CHECK(dr[0] == Approx(1.0833154705876864));  // d/dx x Phi(x) at 1 = Phi(1) + phi(1)

  Floats f(3, 1.0f);
  ref::fill(f.data(), 2, -2.5f);
  CHECK(f == Floats{-2.5f, -2.5f, 1.0f});

  uint32_t state[2] = {4, 9};
  ref::advance_step(state);
  CHECK(state[0] == 5);
  CHECK(state[1] == 10);
}

TEST_CASE("reference: Philox4x32-10 matches the Random123 known-answer vectors",
          "[reference][dropout]") {
  // Random123 tests/kat_vectors: counter[4] key[2] -> output[4].
  const Philox4 zeros = philox4x32_10(0, 0, 0, 0, 0, 0);
  CHECK(std::vector<uint32_t>(zeros.v, zeros.v + 4) ==
        std::vector<uint32_t>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  const uint32_t ones = 0xffffffffu;
  const Philox4 all_ones = philox4x32_10(ones, ones, ones, ones, ones, ones);
  CHECK(std::vector<uint32_t>(all_ones.v, all_ones.v + 4) ==
        std::vector<uint32_t>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  const Philox4 pi = philox4x32_10(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822,
                                   0x299f31d0);
  CHECK(std::vector<uint32_t>(pi.v, pi.v + 4) ==
        std::vector<uint32_t>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
  // philox_uniform: word g % 4 of block g / 4, top 24 bits.
  CHECK(philox_uniform(0, 0, 0, 1) == float(0xe169c58du >> 8) / 16777216.0f);
  CHECK(philox_uniform(0, 0, 0, 3) == float(0x9b00dbd8u >> 8) / 16777216.0f);
}

TEST_CASE("reference: dropout keeps 1-p, scales by 1/(1-p), groups channels, moves with the step",
          "[reference][dropout]") {
  const int64_t n = 200000;
  const uint32_t step0[2] = {0, 0}, step1[2] = {0, 1};
  int64_t kept = 0, changed = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool k0 = ref::dropout_keeps(i, 1, 0, 0.3f, 99, 2, step0);
    kept += k0;
    changed += k0 != ref::dropout_keeps(i, 1, 0, 0.3f, 99, 2, step1);
  }
  CHECK(double(kept) / n == Approx(0.7).margin(0.005));
  CHECK(double(changed) / n == Approx(2 * 0.3 * 0.7).margin(0.01));  // independent draws
  // Dropout2d: one draw per group of 9; group_offset shifts whole groups.
  for (int64_t i = 0; i < 900; ++i) {
    CHECK(ref::dropout_keeps(i, 9, 0, 0.5f, 7, 1, step1) ==
          ref::dropout_keeps(i - i % 9, 9, 0, 0.5f, 7, 1, step1));
    CHECK(ref::dropout_keeps(i, 9, 4, 0.5f, 7, 1, step1) ==
          ref::dropout_keeps(i + 36, 9, 0, 0.5f, 7, 1, step1));
  }
  Floats x = {1, -2, 3, 4}, y(4);
  ref::dropout(x.data(), y.data(), 4, 1, 0, 0.75f, 5, 0, step0);
  for (int i = 0; i < 4; ++i)
    CHECK(y[size_t(i)] ==
          (ref::dropout_keeps(i, 1, 0, 0.75f, 5, 0, step0) ? x[size_t(i)] * 4.0f : 0.0f));
}

TEST_CASE("reference: conv2d by hand, with and without padding and stride", "[reference][conv2d]") {
  const Floats x = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // one 3x3 plane
  const Floats w = {1, 0, 0, -1}, b = {0.5f};    // y = x[i][j] - x[i+1][j+1] + 0.5
  Conv2dShape s{1, 1, 3, 3, 1, 2, 2, 1, 1, 0, 0};
  Floats y(4);
  ref::conv2d_forward(s, x.data(), w.data(), b.data(), y.data());
  CHECK(y == Floats{-3.5f, -3.5f, -3.5f, -3.5f});
  Floats dx(9), dw(4), db(1);
  ref::conv2d_backward(s, x.data(), w.data(), Floats(4, 1.0f).data(), dx.data(), dw.data(),
                       db.data());
  CHECK(db == Floats{4});
  CHECK(dw == Floats{12, 16, 24, 28});  // sums of the four 2x2 corners' taps
  CHECK(dx == Floats{1, 1, 0, 1, 0, -1, 0, -1, -1});
  Floats dw_only(4), db_only(1);
  ref::conv2d_backward(s, x.data(), w.data(), Floats(4, 1.0f).data(), nullptr, dw_only.data(),
                       db_only.data());
  CHECK(dw_only == dw);
  // Stride 2, padding 1: windows start at (-1,-1), (-1,1), (1,-1), (1,1).
  Conv2dShape padded{1, 1, 3, 3, 1, 2, 2, 2, 2, 1, 1};
  REQUIRE(padded.out_height() == 2);
  ref::conv2d_forward(padded, x.data(), w.data(), b.data(), y.data());
  CHECK(y == Floats{-0.5f, -2.5f, -6.5f, -3.5f});
}

TEST_CASE("reference: maxpool2d, log_softmax, nll, count_correct by hand", "[reference]") {
  // 1x1x3x5 plane pooled 2x2 stride 2 -> 1x2 (the last row and column are dropped); ties pick the
  // first maximum in row-major order.
  const Floats x = {1, 3, 0, 2, 99, 3, 0, 2, 2, 99, 99, 99, 99, 99, 99};
  Pool2dShape s{1, 1, 3, 5, 2, 2, 2, 2};
  Floats y(2);
  std::vector<int32_t> argmax(2);
  ref::maxpool2d_forward(s, x.data(), y.data(), argmax.data());
  CHECK(y == Floats{3, 2});
  CHECK(argmax == std::vector<int32_t>{1, 3});
  Floats dx(15);
  ref::maxpool2d_backward(s, Floats{10, 20}.data(), argmax.data(), dx.data());
  CHECK(dx == Floats{0, 10, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});

  Floats logp(4);
  ref::log_softmax_forward(Floats{1, 1, 0, std::log(3.0f)}.data(), logp.data(), 2, 2);
  CHECK(logp[0] == Approx(-std::log(2.0)));
  CHECK(logp[1] == Approx(-std::log(2.0)));
  CHECK(logp[2] == Approx(std::log(0.25)));
  CHECK(logp[3] == Approx(std::log(0.75)));

  const std::vector<int32_t> labels = {1, 0};
  Floats loss = {NAN};
  ref::nll_loss_forward(Floats{-1, -2, -3, -4}.data(), labels.data(), 2, 2, loss.data(), false);
  CHECK(loss[0] == 2.5f);
  loss = {1.0f};
  ref::nll_loss_forward(Floats{-1, -2, -3, -4}.data(), labels.data(), 2, 2, loss.data(), true);
  CHECK(loss[0] == 3.5f);
  Floats dlogp(4);
  ref::nll_loss_backward(labels.data(), 2, 2, 0.5f, dlogp.data());
  CHECK(dlogp == Floats{0, -0.5f, -0.5f, 0});

  Floats correct = {1.0f};  // rows: first max at 1 (label 2: wrong), at 0 (right), tie at 0 (right)
  ref::count_correct(Floats{1, 3, 3, 2, 1, 0, 0, 0, 0}.data(),
                     std::vector<int32_t>{2, 0, 0}.data(), 3, 3, correct.data());
  CHECK(correct[0] == 3.0f);
}

TEST_CASE("reference: gather_rows and the optimizers by hand", "[reference]") {
  const std::vector<uint8_t> src = {10, 11, 12, 20, 21, 22, 30, 31, 32};  // three 3-byte rows
  const std::vector<int32_t> table = {0, 1, 2, 0};  // batch 0 = rows 0,1; batch 1 = rows 2,0
  const uint32_t state[2] = {1, 0};
  std::vector<uint8_t> dst(6);
  ref::gather_rows(src.data(), 3, table.data(), 2, state, dst.data());
  CHECK(dst == std::vector<uint8_t>{30, 31, 32, 10, 11, 12});

  SgdParams sgd;
  sgd.lr = 0.1f; sgd.momentum = 0.9f;
  Floats p = {1.0f}, m = {0.0f};
  ref::sgd_update(p.data(), Floats{0.5f}.data(), m.data(), 1, sgd);
  CHECK(p[0] == Approx(0.95));
  CHECK(m[0] == Approx(0.5));
  ref::sgd_update(p.data(), Floats{0.5f}.data(), m.data(), 1, sgd);  // buf = 0.9*0.5 + 0.5
  CHECK(m[0] == Approx(0.95));
  CHECK(p[0] == Approx(0.855));
  sgd.nesterov = true;
  p = {1.0f}; m = {0.0f};
  ref::sgd_update(p.data(), Floats{0.5f}.data(), m.data(), 1, sgd);  // d = 0.5 + 0.9 * 0.5
  CHECK(p[0] == Approx(0.905));
  SgdParams decay;
  decay.lr = 0.1f; decay.weight_decay = 0.1f; decay.grad_scale = 2.0f;
  p = {1.0f};
  ref::sgd_update(p.data(), Floats{0.5f}.data(), nullptr, 1, decay);  // d = 2*0.5 + 0.1*1
  CHECK(p[0] == Approx(0.89));

  // Adam's first step moves each parameter by lr * sign(g) (bias-corrected m/sqrt(v) = g/|g|).
  AdamParams adam;
  adam.lr = 0.01f;
  Floats ap = {1.0f, 1.0f}, am = {0, 0}, av = {0, 0};
  const uint32_t first[2] = {0, 0};
  ref::adam_update(ap.data(), Floats{0.5f, -3.0f}.data(), am.data(), av.data(), 2, adam, first);
  CHECK(ap[0] == Approx(0.99));
  CHECK(ap[1] == Approx(1.01));
  CHECK(am[0] == Approx(0.05));
  CHECK(av[1] == Approx(0.009).epsilon(1e-4));  // (1 - 0.999f) * 9: beta2 is a float
  // The second step (t = 2) with the same gradient moves by lr again.
  const uint32_t second[2] = {1, 1};
  ref::adam_update(ap.data(), Floats{0.5f, -3.0f}.data(), am.data(), av.data(), 2, adam, second);
  CHECK(ap[0] == Approx(0.98));
  CHECK(ap[1] == Approx(1.02));
}

TEST_CASE("reference: conv2d backward matches finite differences", "[reference][conv2d]") {
  for (const Conv2dShape& s : {Conv2dShape{2, 2, 5, 5, 3, 3, 3, 2, 2, 1, 1},
                               Conv2dShape{1, 3, 6, 5, 2, 2, 3, 1, 1, 0, 0},
                               Conv2dShape{2, 2, 6, 5, 3, 3, 2, 2, 1, 1, 2}}) {
    const size_t xn = size_t(s.batch * s.in_channels * s.height * s.width);
    const size_t wn = size_t(s.out_channels * s.in_channels * s.kernel_h * s.kernel_w);
    const size_t yn = size_t(s.batch * s.out_channels * s.out_height() * s.out_width());
    Floats x = random_floats(xn, 1), w = random_floats(wn, 2);
    Floats b = random_floats(size_t(s.out_channels), 3);
    const Floats r = random_floats(yn, 4);
    Floats dx(xn), dw(wn), db(size_t(s.out_channels)), y(yn);
    ref::conv2d_backward(s, x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data());
    auto loss = [&] {
      ref::conv2d_forward(s, x.data(), w.data(), b.data(), y.data());
      return weighted_sum(y, r);
    };
    check_finite_differences(x, dx, loss, 1e-2f, 1e-3);
    check_finite_differences(w, dw, loss, 1e-2f, 1e-3);
    check_finite_differences(b, db, loss, 1e-2f, 1e-3);
  }
}

TEST_CASE("reference: maxpool2d backward matches finite differences", "[reference][maxpool]") {
  // Distinct values 0.01 apart (a shuffled ramp), so that a step of 1e-3 never changes a maximum.
  for (const Pool2dShape& s : {Pool2dShape{2, 2, 7, 7, 3, 3, 2, 2}, Pool2dShape{1, 3, 5, 6, 2, 2, 2, 2},
                               Pool2dShape{1, 1, 5, 5, 2, 2, 1, 1},
                               Pool2dShape{1, 2, 6, 5, 3, 2, 2, 1, 1, 1}}) {
    const size_t xn = size_t(s.batch * s.channels * s.height * s.width);
    const size_t yn = size_t(s.batch * s.channels * s.out_height() * s.out_width());
    Floats x(xn);
    for (size_t i = 0; i < xn; ++i) x[i] = 0.01f * float(i);
    std::shuffle(x.begin(), x.end(), std::mt19937(5));
    const Floats r = random_floats(yn, 6);
    Floats y(yn), dx(xn);
    std::vector<int32_t> argmax(yn);
    ref::maxpool2d_forward(s, x.data(), y.data(), argmax.data());
    ref::maxpool2d_backward(s, r.data(), argmax.data(), dx.data());
    auto loss = [&] {
      ref::maxpool2d_forward(s, x.data(), y.data(), argmax.data());
      return weighted_sum(y, r);
    };
    check_finite_differences(x, dx, loss, 1e-3f, 1e-3);
  }
}

TEST_CASE("reference: log_softmax and nll backward match finite differences",
          "[reference][log_softmax][nll]") {
  const int64_t rows = 5, cols = 7;
  Floats x = random_floats(size_t(rows * cols), 7);
  for (float& v : x) v *= 3.0f;
  const Floats r = random_floats(x.size(), 8);
  Floats y(x.size()), dx(x.size());
  ref::log_softmax_forward(x.data(), y.data(), rows, cols);
  ref::log_softmax_backward(y.data(), r.data(), dx.data(), rows, cols);
  check_finite_differences(x, dx, [&] {
    ref::log_softmax_forward(x.data(), y.data(), rows, cols);
    return weighted_sum(y, r);
  }, 1e-2f, 1e-3);

  const std::vector<int32_t> labels = {0, 6, 3, 3, 1};
  Floats logp = random_floats(x.size(), 9), dlogp(x.size());
  ref::nll_loss_backward(labels.data(), rows, cols, 1.0f / float(rows), dlogp.data());
  check_finite_differences(logp, dlogp, [&] {
    float loss = 0.0f;
    ref::nll_loss_forward(logp.data(), labels.data(), rows, cols, &loss, false);
    return double(loss);
  }, 1e-2f, 1e-3);
}

TEST_CASE("reference: every unary op's derivative matches finite differences",
          "[reference][unary]") {
  Floats x = random_floats(64, 30);
  for (float& v : x) v *= 3.0f;
  for (float& v : x)
    if (std::abs(v) < 0.05f) v = 0.5f;  // keep ReLU-like kinks out of the difference's reach
  const Floats r = random_floats(x.size(), 31);
  const int64_t n = int64_t(x.size());
  // Every op of the list: a new activation is checked against its finite differences here.
  const std::vector<UnaryOp> ops = {
#define TRIDENT_TEST_UNARY(name, module) UnaryOp::name,
      TRIDENT_UNARY_OPS(TRIDENT_TEST_UNARY)
#undef TRIDENT_TEST_UNARY
  };
  for (const UnaryOp op : ops)
    for (const float alpha : {0.1f, -0.2f}) {
      if (op != UnaryOp::leaky_relu && alpha != 0.1f) continue;
      INFO(unary_op_name(op) << " alpha " << alpha);
      Floats y(x.size()), dx(x.size());
      ref::unary_forward(op, x.data(), y.data(), n, alpha);
      const bool from_x = unary_backward_needs_input(op, alpha);
      ref::unary_backward(op, from_x ? x.data() : nullptr, from_x ? nullptr : y.data(), r.data(),
                          dx.data(), n, alpha);
      auto loss = [&] {
        ref::unary_forward(op, x.data(), y.data(), n, alpha);
        return weighted_sum(y, r);
      };
      check_finite_differences(x, dx, loss, 1e-3f, 1e-3);
    }
}

TEST_CASE("reference: avgpool2d backward matches finite differences", "[reference][avgpool]") {
  for (const Pool2dShape& s : {Pool2dShape{2, 2, 7, 7, 3, 3, 2, 2, 1, 1},
                               Pool2dShape{1, 3, 5, 6, 2, 3, 1, 2}, Pool2dShape{2, 2, 4, 4, 4, 4, 1, 1}}) {
    Floats x = random_floats(size_t(s.input_numel()), 40);
    const Floats r = random_floats(size_t(s.output_numel()), 41);
    Floats y(size_t(s.output_numel())), dx(x.size());
    ref::avgpool2d_backward(s, r.data(), dx.data());
    auto loss = [&] {
      ref::avgpool2d_forward(s, x.data(), y.data());
      return weighted_sum(y, r);
    };
    check_finite_differences(x, dx, loss, 1e-2f, 1e-4);
  }
}

TEST_CASE("reference: batchnorm backward (batch statistics) matches finite differences",
          "[reference][batchnorm]") {
  for (const BatchNormShape& s : {BatchNormShape{4, 3, 5}, BatchNormShape{6, 2, 1},
                                  BatchNormShape{2, 4, 9}}) {
    const size_t n = size_t(s.numel()), c = size_t(s.channels);
    Floats x = random_floats(n, 50), gamma = random_floats(c, 51), beta = random_floats(c, 52);
    const Floats r = random_floats(n, 53);
    Floats y(n), mean(c), invstd(c), rm(c, 0.0f), rv(c, 1.0f), dx(n), dgamma(c), dbeta(c);
    ref::batchnorm_forward(s, true, x.data(), gamma.data(), beta.data(), rm.data(), rv.data(),
                           y.data(), mean.data(), invstd.data());
    ref::batchnorm_backward(s, x.data(), r.data(), gamma.data(), mean.data(), invstd.data(),
                            dx.data(), dgamma.data(), dbeta.data());
    auto loss = [&] {
      Floats m(c), is(c), rm2(c, 0.0f), rv2(c, 1.0f);
      ref::batchnorm_forward(s, true, x.data(), gamma.data(), beta.data(), rm2.data(),
                             rv2.data(), y.data(), m.data(), is.data());
      return weighted_sum(y, r);
    };
    check_finite_differences(x, dx, loss, 1e-2f, 2e-3);
    check_finite_differences(gamma, dgamma, loss, 1e-2f, 1e-3);
    check_finite_differences(beta, dbeta, loss, 1e-2f, 1e-3);
    // Evaluation: y is affine in x with slope gamma / sqrt(running_var + eps).
    Floats ye(n);
    ref::batchnorm_forward(s, false, x.data(), gamma.data(), beta.data(), rm.data(), rv.data(),
                           ye.data(), nullptr, nullptr);
    for (size_t i = 0; i < n; ++i) {
      const size_t ch = (i / size_t(s.inner)) % c;
      CHECK(ye[i] == Approx((x[i] - rm[ch]) / std::sqrt(rv[ch] + 1e-5) * gamma[ch] + beta[ch]));
    }
  }
}

TEST_CASE("reference: label-smoothed NLL, the fused head and MSE backward match finite "
          "differences", "[reference][nll][mse]") {
  const int64_t rows = 4, cols = 5;
  const std::vector<int32_t> labels = {0, 3, 4, 1};
  for (const float smoothing : {0.0f, 0.2f}) {
    Floats x = random_floats(size_t(rows * cols), 60);
    Floats y(x.size()), dx(x.size());
    Floats loss = {0.0f};
    ref::log_softmax_nll(x.data(), labels.data(), rows, cols, 1.0f / float(rows), smoothing,
                         y.data(), loss.data(), false, dx.data());
    auto ce = [&] {
      ref::log_softmax_forward(x.data(), y.data(), rows, cols);
      Floats l = {0.0f};
      ref::nll_loss_forward(y.data(), labels.data(), rows, cols, l.data(), false, smoothing);
      return double(l[0]);
    };
    check_finite_differences(x, dx, ce, 1e-2f, 1e-3);
  }
  Floats x = random_floats(size_t(rows * cols), 61), dx(size_t(rows * cols));
  Floats loss = {0.0f};
  ref::mse_loss(x.data(), labels.data(), rows, cols, 1.0f / float(rows), loss.data(), false,
                dx.data());
  auto mse = [&] {
    Floats l = {0.0f};
    ref::mse_loss(x.data(), labels.data(), rows, cols, 1.0f, l.data(), false, nullptr);
    return double(l[0]);
  };
  check_finite_differences(x, dx, mse, 1e-2f, 1e-3);
}

TEST_CASE("reference: col2im is the adjoint of im2col", "[reference][im2col]") {
  // <im2col(x), c> = <x, col2im(c)> for any x, c.
  for (const Conv2dShape& s : {Conv2dShape{1, 2, 5, 5, 3, 3, 3, 2, 2, 1, 1},
                               Conv2dShape{1, 3, 6, 5, 2, 2, 3, 1, 2, 0, 1}}) {
    const size_t xn = size_t(s.in_channels * s.height * s.width);
    const size_t cn = size_t(s.patch_size() * s.out_height() * s.out_width());
    const Floats x = random_floats(xn, 70), c = random_floats(cn, 71);
    Floats col(cn), back(xn);
    ref::im2col(s, x.data(), col.data());
    ref::col2im(s, c.data(), back.data());
    CHECK(weighted_sum(col, c) == Approx(weighted_sum(x, back)).epsilon(1e-6));
  }
}
