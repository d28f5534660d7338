// The OpenCL backend in bfloat16 and float16, on every OpenCL device found (PoCL on CI): dtype
// conversion bit for bit against core/half.h, each op family on 16-bit storage against the same
// op in float32 on the same (rounded) inputs, the own tiled GEMM on 16-bit operands, dynamic
// loss scaling on the device (skip, back off, grow), and a few training steps of the seed MLP
// and CNN in bf16 / fp16 against float32 and against the CPU in the same precision.
//
// A 16-bit output differs from the float32 one by one rounding (unit_roundoff of the type,
// relative) plus float32 accumulation in another order over the reduction's terms (absolute).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/device.h"
#include "trident/core/half.h"
#include "trident/core/registry.h"
#include "trident/models/trainer.h"
#include "trident/models/zoo.h"
#include "tests/conformance.h"
#include "tests/dtype_check.h"
#include "tests/test_data.h"

using namespace trident;
using trident::testing::Tolerance;

#ifdef TRIDENT_HAVE_OPENCL
namespace trident {
std::unique_ptr<Backend> make_opencl_backend();  // backends/opencl/opencl_backend.cpp
}
#endif

namespace {

std::vector<Device*> opencl_devices() {
  std::vector<Device*> out;
  for (Device* d : testing::devices_under_test())
    if (d->info().backend == "opencl") out.push_back(d);
  return out;
}

constexpr DType kHalfTypes[] = {DType::bf16, DType::f16};

// Sets (or with nullptr unsets) an environment variable for one scope, then restores it.
struct ScopedEnv {
  std::string name, saved;
  bool was_set;
  ScopedEnv(const char* variable, const char* value) : name(variable) {
    const char* old = std::getenv(variable);
    was_set = old != nullptr;
    if (was_set) saved = old;
    if (value) setenv(variable, value, 1);
    else unsetenv(variable);
  }
  ~ScopedEnv() {
    if (was_set) setenv(name.c_str(), saved.c_str(), 1);
    else unsetenv(name.c_str());
  }
};

float round_to(DType t, float v) { return half_bits_to_float(t, float_to_half_bits(t, v)); }

std::vector<float> rounded(DType t, std::vector<float> v) {
  for (float& x : v) x = round_to(t, x);
  return v;
}

// The same values (rounded to t, so that both runs read identical inputs) in float32 and in t.
struct Pair {
  Tensor f32, half;
};
Pair upload_pair(Device& d, const Shape& shape, DType t, const std::vector<float>& values) {
  const std::vector<float> r = rounded(t, values);
  return {Tensor::from_host(d, shape, r), Tensor::from_host(d, shape, r, t)};
}
Pair random_pair(Device& d, const Shape& shape, DType t, uint32_t seed, float lo = -1.0f,
                 float hi = 1.0f) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return upload_pair(d, shape, t, testing::random_floats(size_t(n), seed, lo, hi));
}
Pair empty_pair(Device& d, const Shape& shape, DType t) {
  return {Tensor::zeros(d, shape), Tensor::zeros(d, shape, t)};
}

// A 16-bit output against float32: one rounding (relative), float32 sums of `terms` terms of
// size up to `magnitude` in another order, and half of float16's subnormal spacing.
Tolerance half_tolerance(DType t, int64_t terms = 1, double magnitude = 1.0) {
  const double reorder = 2.0 * unit_roundoff(DType::f32) * double(terms) * magnitude;
  return {reorder + (t == DType::f16 ? std::ldexp(1.0, -25) : 0.0), unit_roundoff(t)};
}
// A float32 output computed from the same 16-bit inputs: only the summation order differs.
Tolerance float_tolerance(int64_t terms, double magnitude = 1.0) {
  return {2.0 * unit_roundoff(DType::f32) * double(terms) * magnitude + 1e-7, 1e-6};
}

// C = A B (+ per-row bias, ReLU) in t against float32, C in t and in float32, all transposes.
void check_gemm(Device& d, DType t, uint32_t seed) {
  const int64_t m = 37, n = 29, k = 53;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool c_half : {true, false}) {
        INFO("trans_a " << ta << " trans_b " << tb << " C " << (c_half ? "16-bit" : "float32"));
        const Pair a = random_pair(d, ta ? Shape{k, m} : Shape{m, k}, t, seed++);
        const Pair b = random_pair(d, tb ? Shape{n, k} : Shape{k, n}, t, seed++);
        const Tensor bias = testing::upload(d, testing::random_floats(size_t(m), seed++));
        const Pair c = empty_pair(d, {m, n}, c_half ? t : DType::f32);
        GemmArgs g;
        g.trans_a = ta;
        g.trans_b = tb;
        g.m = m, g.n = n, g.k = k;
        g.bias = bias;
        g.bias_kind = BiasKind::per_row;
        g.activation = UnaryOp::relu;
        g.a = a.f32, g.b = b.f32, g.c = c.f32;
        d.gemm(g);
        g.a = a.half, g.b = b.half, g.c = c.half;
        d.gemm(g);
        const Tolerance tol = c_half ? half_tolerance(t, k) : float_tolerance(k);
        TRIDENT_CHECK_CLOSE(c.half.to_host(), c.f32.to_host(), tol);
      }
}

void check_elementwise(Device& d, DType t) {
  const Shape shape{3, 41};
  const Pair x = random_pair(d, shape, t, 11, -3.0f, 3.0f);
  for (UnaryOp op : {UnaryOp::relu, UnaryOp::tanh, UnaryOp::sigmoid, UnaryOp::gelu,
                     UnaryOp::leaky_relu}) {
    INFO("unary op " << int(op));
    const Pair y = empty_pair(d, shape, t);
    d.unary_forward(op, x.f32, y.f32, 0.1f);
    d.unary_forward(op, x.half, y.half, 0.1f);
    TRIDENT_CHECK_CLOSE(y.half.to_host(), y.f32.to_host(), half_tolerance(t));
    // The backward from the rounded forward output, so that both read the same y.
    const Pair yr = upload_pair(d, shape, t, y.f32.to_host());
    const Pair dy = random_pair(d, shape, t, 12);
    const Pair dx = empty_pair(d, shape, t);
    d.unary_backward(op, x.f32, yr.f32, dy.f32, dx.f32, 0.1f);
    d.unary_backward(op, x.half, yr.half, dy.half, dx.half, 0.1f);
    TRIDENT_CHECK_CLOSE(dx.half.to_host(), dx.f32.to_host(), half_tolerance(t, 1, 3.0));
  }
  const Pair y = random_pair(d, shape, t, 13);
  d.axpby(x.f32, y.f32, 0.5f, -1.5f);
  d.axpby(x.half, y.half, 0.5f, -1.5f);
  TRIDENT_CHECK_CLOSE(y.half.to_host(), y.f32.to_host(), half_tolerance(t, 2, 3.0));
  // Dropout: the same mask, the kept values scaled and rounded once.
  const Tensor step = Tensor::zeros(d, {kStepStateCount}, DType::i32);
  const Pair dropped = empty_pair(d, shape, t);
  d.dropout(x.f32, dropped.f32, 1, 0, 0.3f, 7, 1, step);
  d.dropout(x.half, dropped.half, 1, 0, 0.3f, 7, 1, step);
  TRIDENT_CHECK_CLOSE(dropped.half.to_host(), dropped.f32.to_host(), half_tolerance(t));
}

// [outer, channels, inner]: short runs, the columns of a matrix (inner 1), and a channel long
// enough to be cut into pieces (ChannelSplit).
struct ChannelShape {
  int64_t outer, channels, inner;
};
constexpr ChannelShape kChannelShapes[] = {{4, 3, 10}, {50, 6, 1}, {8, 2, 3000}};

void check_channel(Device& d, DType t, ChannelShape cs) {
  const int64_t outer = cs.outer, channels = cs.channels, inner = cs.inner;
  INFO("channel shape [" << outer << ", " << channels << ", " << inner << "]");
  const Shape shape{outer, channels, inner};
  const Pair x = random_pair(d, shape, t, 21), y = random_pair(d, shape, t, 22);
  const Tensor scale = testing::upload(d, testing::random_floats(size_t(channels), 23));
  const Tensor shift = testing::upload(d, testing::random_floats(size_t(channels), 24));
  const Pair out = empty_pair(d, shape, t);
  d.channel_affine(x.f32, scale, shift, out.f32, outer, channels, inner);
  d.channel_affine(x.half, scale, shift, out.half, outer, channels, inner);
  TRIDENT_CHECK_CLOSE(out.half.to_host(), out.f32.to_host(), half_tolerance(t, 2));
  const Tensor sums32 = Tensor::zeros(d, {channels}), sums16 = Tensor::zeros(d, {channels});
  d.channel_sums(x.f32, y.f32, sums32, outer, channels, inner, 0.0f);
  d.channel_sums(x.half, y.half, sums16, outer, channels, inner, 0.0f);
  TRIDENT_CHECK_CLOSE(sums16.to_host(), sums32.to_host(), float_tolerance(outer * inner));
}

// 2 x 3 x 7 x 6 -> 4 channels, 3x3, padding 1.
Conv2dShape small_conv() {
  Conv2dShape s;
  s.batch = 2, s.in_channels = 3, s.height = 7, s.width = 6, s.out_channels = 4;
  s.kernel_h = 3, s.kernel_w = 3, s.pad_h = 1, s.pad_w = 1;
  return s;
}

// A 16-bit convolution against the same device's float32 one from the same rounded inputs. y is
// rounded once, dw and db are float sums of the same products. Where the GEMM engine takes 16-bit
// products (the tensor-core kernel on NVIDIA GPUs, or the own kernel by policy;
// backends/opencl/ops_conv2d.cpp) the columns are 16-bit too: dx's columns are then rounded to t
// before col2im adds them, so a dx value may be off by u times the sum of |w| |dy| over what
// reaches it (that float32 convolution's dx on absolute values), plus its own rounding.
// act_columns: the caller forced such a policy, and the 16-bit layout must have been chosen.
void check_conv(Device& d, DType t, const Conv2dShape& shape, bool act_columns) {
  Conv2dShape s = shape, s16 = shape;
  s.dtype = DType::f32, s16.dtype = t;
  const int64_t oh = s.out_height(), ow = s.out_width();
  const Shape xs{s.batch, s.in_channels, s.height, s.width}, ys{s.batch, s.out_channels, oh, ow};
  const Shape ws{s.out_channels, s.patch_size()};
  const Pair x = random_pair(d, xs, t, 51), w = random_pair(d, ws, t, 52);
  const Pair dy = random_pair(d, ys, t, 53);
  const Tensor b = testing::upload(d, testing::random_floats(size_t(s.out_channels), 54));
  const auto workspace = [&](const Conv2dShape& c) {
    return Tensor::zeros(d, {int64_t(d.conv2d_workspace_bytes(c) / 4 + 1)});
  };
  // 16-bit columns and no float32 copy of w: less workspace than float32 itself takes.
  if (act_columns) REQUIRE(d.conv2d_workspace_bytes(s16) < d.conv2d_workspace_bytes(s));
  const Tensor ws32 = workspace(s), ws16 = workspace(s16);
  const Pair y = empty_pair(d, ys, t), dx = empty_pair(d, xs, t);
  const Tensor dw32 = Tensor::zeros(d, {s.weight_numel()});
  const Tensor dw16 = Tensor::zeros(d, {s.weight_numel()});
  const Tensor db32 = Tensor::zeros(d, {s.out_channels}), db16 = Tensor::zeros(d, {s.out_channels});
  d.conv2d_forward(s, x.f32, w.f32, b, y.f32, ws32);
  d.conv2d_forward(s16, x.half, w.half, b, y.half, ws16);
  d.conv2d_backward(s, x.f32, w.f32, dy.f32, dx.f32, dw32, db32, ws32);
  d.conv2d_backward(s16, x.half, w.half, dy.half, dx.half, dw16, db16, ws16);
  const int64_t positions = s.batch * oh * ow;
  TRIDENT_CHECK_CLOSE(y.half.to_host(), y.f32.to_host(), half_tolerance(t, s.patch_size() + 1));
  TRIDENT_CHECK_CLOSE(dw16.to_host(), dw32.to_host(), float_tolerance(positions));
  TRIDENT_CHECK_CLOSE(db16.to_host(), db32.to_host(), float_tolerance(positions));
  // sum |w| |dy| per dx value: the float32 data gradient of the absolute values.
  const Tensor aw = Tensor::from_host(d, ws, testing::absolute(w.f32.to_host()));
  const Tensor ady = Tensor::from_host(d, ys, testing::absolute(dy.f32.to_host()));
  const Tensor adx = Tensor::zeros(d, xs), scratch_dw = Tensor::zeros(d, {s.weight_numel()});
  d.conv2d_backward(s, x.f32, aw, ady, adx, scratch_dw, Tensor(), ws32);
  const std::vector<float> got = dx.half.to_host(), want = dx.f32.to_host(), mag = adx.to_host();
  const double u = unit_roundoff(t);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = u * (double(mag[i]) + std::fabs(double(want[i]))) +
                         4.0 * unit_roundoff(DType::f32) * double(mag[i]) + 1e-6;
    if (!(std::fabs(double(got[i]) - double(want[i])) <= bound) && bad++ == 0) first = i;
  }
  INFO("dx: " << bad << " of " << got.size() << " off; first at " << first << ": got "
              << got[first] << ", want " << want[first] << ", sum |w| |dy| " << mag[first]);
  CHECK(bad == 0);
}

void check_pool(Device& d, DType t) {
  Pool2dShape s;
  s.batch = 2, s.channels = 3, s.height = 9, s.width = 8;
  s.kernel_h = 3, s.kernel_w = 2, s.stride_h = 2, s.stride_w = 2, s.pad_h = 1;
  const Shape in{s.batch, s.channels, s.height, s.width};
  const Shape out{s.batch, s.channels, s.out_height(), s.out_width()};
  const Pair x = random_pair(d, in, t, 41), dy = random_pair(d, out, t, 42);
  // Max pooling picks one of the (identical) inputs: exact, the same argmax.
  const Pair y = empty_pair(d, out, t), dx = empty_pair(d, in, t);
  const Tensor arg32 = Tensor::zeros(d, out, DType::i32), arg16 = Tensor::zeros(d, out, DType::i32);
  d.maxpool2d_forward(s, x.f32, y.f32, arg32);
  d.maxpool2d_forward(s, x.half, y.half, arg16);
  TRIDENT_CHECK_EXACT(y.half.to_host(), y.f32.to_host());
  CHECK(arg16.to_host_i32() == arg32.to_host_i32());
  d.maxpool2d_backward(s, dy.f32, arg32, dx.f32);
  d.maxpool2d_backward(s, dy.half, arg16, dx.half);
  TRIDENT_CHECK_CLOSE(dx.half.to_host(), dx.f32.to_host(), half_tolerance(t, 4));
  const Pair ya = empty_pair(d, out, t), dxa = empty_pair(d, in, t);
  d.avgpool2d_forward(s, x.f32, ya.f32);
  d.avgpool2d_forward(s, x.half, ya.half);
  TRIDENT_CHECK_CLOSE(ya.half.to_host(), ya.f32.to_host(), half_tolerance(t, 6));
  d.avgpool2d_backward(s, dy.f32, dxa.f32);
  d.avgpool2d_backward(s, dy.half, dxa.half);
  TRIDENT_CHECK_CLOSE(dxa.half.to_host(), dxa.f32.to_host(), half_tolerance(t, 6));
  // Global average pooling takes its own kernel (a work-group per plane).
  Pool2dShape g = s;
  g.kernel_h = g.height, g.kernel_w = g.width, g.pad_h = 0, g.pad_w = 0;
  const Pair yg = empty_pair(d, {s.batch, s.channels, 1, 1}, t);
  d.avgpool2d_forward(g, x.f32, yg.f32);
  d.avgpool2d_forward(g, x.half, yg.half);
  TRIDENT_CHECK_CLOSE(yg.half.to_host(), yg.f32.to_host(), half_tolerance(t, s.height * s.width));
}

void check_batchnorm(Device& d, DType t, ChannelShape cs) {
  BatchNormShape s;
  s.outer = cs.outer, s.channels = cs.channels, s.inner = cs.inner;
  INFO("batch-norm shape [" << s.outer << ", " << s.channels << ", " << s.inner << "]");
  const int64_t c = s.channels;
  const Shape shape{s.outer, s.channels, s.inner};
  const int64_t per_channel = s.outer * s.inner;
  const Pair x = random_pair(d, shape, t, 51, -2.0f, 3.0f), dy = random_pair(d, shape, t, 52);
  const Tensor gamma = testing::upload(d, testing::random_floats(size_t(c), 53, 0.5f, 1.5f));
  const Tensor beta = testing::upload(d, testing::random_floats(size_t(c), 54));
  struct Side {
    Tensor rm, rv, mean, invstd, dgamma, dbeta;
  };
  const auto side = [&] {
    return Side{Tensor::zeros(d, {c}), testing::upload(d, std::vector<float>(size_t(c), 1.0f)),
                Tensor::zeros(d, {c}), Tensor::zeros(d, {c}), Tensor::zeros(d, {c}),
                Tensor::zeros(d, {c})};
  };
  Side s32 = side(), s16 = side();
  const Pair y = empty_pair(d, shape, t), dx = empty_pair(d, shape, t);
  d.batchnorm_forward(s, true, x.f32, gamma, beta, s32.rm, s32.rv, y.f32, s32.mean, s32.invstd);
  d.batchnorm_forward(s, true, x.half, gamma, beta, s16.rm, s16.rv, y.half, s16.mean, s16.invstd);
  TRIDENT_CHECK_CLOSE(y.half.to_host(), y.f32.to_host(), half_tolerance(t, per_channel, 4.0));
  TRIDENT_CHECK_CLOSE(s16.mean.to_host(), s32.mean.to_host(), float_tolerance(per_channel, 3.0));
  TRIDENT_CHECK_CLOSE(s16.invstd.to_host(), s32.invstd.to_host(), float_tolerance(per_channel, 3.0));
  TRIDENT_CHECK_CLOSE(s16.rv.to_host(), s32.rv.to_host(), float_tolerance(per_channel, 3.0));
  d.batchnorm_backward(s, x.f32, dy.f32, gamma, s32.mean, s32.invstd, dx.f32, s32.dgamma, s32.dbeta);
  d.batchnorm_backward(s, x.half, dy.half, gamma, s16.mean, s16.invstd, dx.half, s16.dgamma,
                       s16.dbeta);
  TRIDENT_CHECK_CLOSE(dx.half.to_host(), dx.f32.to_host(), half_tolerance(t, per_channel, 4.0));
  TRIDENT_CHECK_CLOSE(s16.dgamma.to_host(), s32.dgamma.to_host(), float_tolerance(per_channel, 3.0));
  TRIDENT_CHECK_CLOSE(s16.dbeta.to_host(), s32.dbeta.to_host(), float_tolerance(per_channel));
}

void check_head(Device& d, DType t) {
  const int64_t rows = 9, cols = 7;
  const Shape shape{rows, cols};
  const Pair x = random_pair(d, shape, t, 61, -4.0f, 4.0f);
  const Tensor labels = testing::upload(d, testing::random_labels(size_t(rows), int32_t(cols), 62));
  // log_softmax into the same type, and into float32 beside a 16-bit x.
  const Pair y = empty_pair(d, shape, t);
  const Tensor y_float = Tensor::zeros(d, shape);
  d.log_softmax_forward(x.f32, y.f32);
  d.log_softmax_forward(x.half, y.half);
  d.log_softmax_forward(x.half, y_float);
  TRIDENT_CHECK_CLOSE(y.half.to_host(), y.f32.to_host(), half_tolerance(t, cols, 8.0));
  TRIDENT_CHECK_CLOSE(y_float.to_host(), y.f32.to_host(), float_tolerance(cols, 8.0));
  const Pair yr = upload_pair(d, shape, t, y.f32.to_host()), dy = random_pair(d, shape, t, 63);
  const Pair dx = empty_pair(d, shape, t);
  d.log_softmax_backward(yr.f32, dy.f32, dx.f32);
  d.log_softmax_backward(yr.half, dy.half, dx.half);
  TRIDENT_CHECK_CLOSE(dx.half.to_host(), dx.f32.to_host(), half_tolerance(t, cols));
  // Losses are float32 from 16-bit log-probabilities / scores.
  const Tensor loss32 = Tensor::zeros(d, {1}), loss16 = Tensor::zeros(d, {1});
  d.nll_loss_forward(yr.f32, labels, loss32, false, 0.1f);
  d.nll_loss_forward(yr.half, labels, loss16, false, 0.1f);
  TRIDENT_CHECK_CLOSE(loss16.to_host(), loss32.to_host(), float_tolerance(rows * cols, 8.0));
  const Pair dlogp = empty_pair(d, shape, t);
  d.nll_loss_backward(labels, dlogp.f32, 1.0f / float(rows), 0.1f);
  d.nll_loss_backward(labels, dlogp.half, 1.0f / float(rows), 0.1f);
  TRIDENT_CHECK_CLOSE(dlogp.half.to_host(), dlogp.f32.to_host(), half_tolerance(t));
  // The fused head: y in float32 (as a network keeps it) and dx in t, then both in t.
  for (bool y_half : {false, true}) {
    INFO("fused head, y " << (y_half ? "16-bit" : "float32"));
    const Pair fy = empty_pair(d, shape, y_half ? t : DType::f32), fdx = empty_pair(d, shape, t);
    const Tensor l32 = Tensor::zeros(d, {1}), l16 = Tensor::zeros(d, {1});
    d.log_softmax_nll(x.f32, labels, 1.0f / float(rows), 0.1f, fy.f32, l32, false, fdx.f32);
    d.log_softmax_nll(x.half, labels, 1.0f / float(rows), 0.1f, fy.half, l16, false, fdx.half);
    TRIDENT_CHECK_CLOSE(fy.half.to_host(), fy.f32.to_host(),
                        y_half ? half_tolerance(t, cols, 8.0) : float_tolerance(cols, 8.0));
    TRIDENT_CHECK_CLOSE(fdx.half.to_host(), fdx.f32.to_host(), half_tolerance(t, cols));
    TRIDENT_CHECK_CLOSE(l16.to_host(), l32.to_host(), float_tolerance(rows * cols, 8.0));
  }
  const Tensor mse32 = Tensor::zeros(d, {1}), mse16 = Tensor::zeros(d, {1});
  const Pair mdx = empty_pair(d, shape, t);
  d.mse_loss(x.f32, labels, 1.0f / float(rows), mse32, false, mdx.f32);
  d.mse_loss(x.half, labels, 1.0f / float(rows), mse16, false, mdx.half);
  TRIDENT_CHECK_CLOSE(mse16.to_host(), mse32.to_host(), float_tolerance(rows * cols, 25.0));
  TRIDENT_CHECK_CLOSE(mdx.half.to_host(), mdx.f32.to_host(), half_tolerance(t, 2, 5.0));
  const Tensor right32 = Tensor::zeros(d, {1}), right16 = Tensor::zeros(d, {1});
  d.count_correct(x.f32, labels, right32);
  d.count_correct(x.half, labels, right16);
  CHECK(right16.to_host() == right32.to_host());
}

}  // namespace

namespace {

void check_gather(Device& d, DType t) {
  const int64_t count = 5, rows = 3;
  std::vector<uint8_t> pixels(size_t(count * 2 * 4 * 4));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t((i * 37 + 11) % 256);
  const Tensor src = Tensor::from_host(d, {count, 2, 4, 4}, pixels);
  const Tensor table = testing::upload(d, std::vector<int32_t>{4, 0, 2, 1, 3, 0});
  const Tensor step = Tensor::zeros(d, {kStepStateCount}, DType::i32);
  SampleTransform transform;
  transform.scale = 1.0f / 255.0f;
  transform.mean = testing::upload(d, std::vector<float>{0.25f, 0.5f});
  transform.inv_std = testing::upload(d, std::vector<float>{3.0f, 1.5f});
  const Pair dst = empty_pair(d, {rows, 2, 4, 4}, t);
  d.gather_samples(src, table, step, transform, dst.f32);
  d.gather_samples(src, table, step, transform, dst.half);
  TRIDENT_CHECK_CLOSE(dst.half.to_host(), dst.f32.to_host(), half_tolerance(t, 2, 3.0));
}

}  // namespace

TEST_CASE("opencl half: convert and scale round as core/half.h, bit for bit", "[opencl][half]") {
  const std::vector<Device*> devices = opencl_devices();
  if (devices.empty()) WARN("SKIPPED: no OpenCL device");
  // Ties, subnormals of both types, overflow, signed zeros, infinities, NaN.
  std::vector<float> specials = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f, 65519.99f,
                                 1e5f, -1e5f, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f,
                                 8.940697e-8f, 6.1035156e-5f, 6.0975552e-5f, 1e-40f, -1e-41f,
                                 1.00390625f, 1.01171875f, 1.0009765625f, 1.0029296875f,
                                 3.3895314e38f, INFINITY, -INFINITY, NAN};
  for (float v : testing::random_floats(500, 71, -70000.0f, 70000.0f)) specials.push_back(v);
  for (float v : testing::random_floats(500, 72, -1e-4f, 1e-4f)) specials.push_back(v);
  const int64_t n = int64_t(specials.size());
  for (Device* d : devices)
    for (DType t : kHalfTypes) {
      DYNAMIC_SECTION(d->info().id() << " " << dtype_name(t)) {
        const Tensor src = Tensor::from_host(*d, {n}, specials);
        const Tensor half = Tensor::zeros(*d, {n}, t);
        d->convert(src, half);
        std::vector<uint16_t> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
        half.to_host(got.data(), got.size() * 2);
        for (size_t i = 0; i < want.size(); ++i) want[i] = float_to_half_bits(t, specials[i]);
        CHECK(got == want);
        // Every 16-bit pattern back to float32: the exact bits (NaN payloads included).
        std::vector<uint16_t> all(65536);
        for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
        const Tensor patterns = Tensor::empty(*d, {65536}, t);
        patterns.copy_from_host(all.data(), all.size() * 2);
        const Tensor widened = Tensor::zeros(*d, {65536});
        d->convert(patterns, widened);
        std::vector<uint32_t> bits(65536);
        widened.to_host(bits.data(), bits.size() * 4);
        size_t mismatches = 0;
        for (size_t i = 0; i < all.size(); ++i)
          mismatches += bits[i] != float_bits(half_bits_to_float(t, all[i]));
        CHECK(mismatches == 0);
        // uint8 to t, and scale() in place by a factor on the device.
        const std::vector<uint8_t> bytes = {0, 1, 127, 128, 200, 255};
        const Tensor u8 = Tensor::from_host(*d, {6}, bytes);
        const Tensor from_u8 = Tensor::zeros(*d, {6}, t);
        d->convert(u8, from_u8);
        CHECK(from_u8.to_host() == rounded(t, {0, 1, 127, 128, 200, 255}));
        const Tensor factor = testing::upload(*d, std::vector<float>{0.37f});
        d->scale(half, factor, half);
        const std::vector<float> scaled = half.to_host();
        size_t wrong = 0;
        for (size_t i = 0; i < scaled.size(); ++i) {
          const float want_v = round_to(t, round_to(t, specials[i]) * 0.37f);
          wrong += !(scaled[i] == want_v || (std::isnan(scaled[i]) && std::isnan(want_v)));
        }
        CHECK(wrong == 0);
      }
    }
}

TEST_CASE("opencl half: every op family in bf16 and fp16 matches float32 within one rounding",
          "[opencl][half]") {
  const std::vector<Device*> devices = opencl_devices();
  if (devices.empty()) WARN("SKIPPED: no OpenCL device");
  for (Device* d : devices)
    for (DType t : kHalfTypes) {
      DYNAMIC_SECTION(d->info().id() << " " << dtype_name(t)) {
        for (OpFamily f : {OpFamily::convert, OpFamily::gemm, OpFamily::elementwise,
                           OpFamily::channel, OpFamily::conv2d, OpFamily::pool,
                           OpFamily::batchnorm, OpFamily::head, OpFamily::gather})
          CHECK(d->native(f, t));
        SECTION("gemm") { check_gemm(*d, t, 100); }
        SECTION("elementwise") { check_elementwise(*d, t); }
        SECTION("channel") {
          for (ChannelShape cs : kChannelShapes) check_channel(*d, t, cs);
        }
        SECTION("conv2d") { check_conv(*d, t, small_conv(), false); }
        SECTION("pool") { check_pool(*d, t); }
        SECTION("batchnorm") {
          for (ChannelShape cs : kChannelShapes) check_batchnorm(*d, t, cs);
        }
        SECTION("head") { check_head(*d, t); }
        SECTION("gather") { check_gather(*d, t); }
      }
    }
}

#ifdef TRIDENT_HAVE_OPENCL  // fresh devices made with the forced policy: the backend's own factory
// On PoCL the default policy leaves small products to CLBlast (16-bit operands are then staged
// through float32); the own kernel is forced here, whole and split along K. One tile shape: the
// 16-bit loads and stores are the same code in every shape (tests/test_opencl_backend.cpp covers
// the shapes in float32), and each shape costs PoCL four more programs to build (~20 s each).
TEST_CASE("opencl half: the own tiled GEMM on 16-bit operands accumulates in float, and "
          "convolutions on it keep 16-bit columns",
          "[opencl][half][gemm]") {
  if (opencl_devices().empty()) WARN("SKIPPED: no OpenCL device");
  // The last two: the tensor-core kernel (gemm.cl -DMMA), its instruction emulated where the
  // device has no tensor cores (on an NVIDIA GPU of compute capability 8.0+ it runs for real in
  // the "auto" rows as well), whole and split along K.
  const char* modes[][4] = {{"always", "32", nullptr, "0"},
                            {"always", "32", "3", "0"},
                            {"auto", nullptr, nullptr, "emulate"},
                            {"auto", nullptr, "3", "emulate"}};
  for (const auto& [mode, tile, split, tensor_cores] : modes) {
    ScopedEnv own("TRIDENT_OPENCL_OWN_GEMM", mode), forced("TRIDENT_OPENCL_GEMM_TILE", tile),
        slices("TRIDENT_OPENCL_SPLIT_K", split),
        cores("TRIDENT_OPENCL_TENSOR_CORES", tensor_cores);
    INFO("TRIDENT_OPENCL_GEMM_TILE=" << (tile ? tile : "") << " TRIDENT_OPENCL_SPLIT_K="
                                     << (split ? split : "") << " TRIDENT_OPENCL_TENSOR_CORES="
                                     << tensor_cores);
    std::string why;
    for (const auto& device : make_opencl_backend()->discover(why))
      for (DType t : kHalfTypes) {
        INFO(device->info().id() << " " << dtype_name(t));
        check_gemm(*device, t, 300);
        // A long K in float16: the sum of 2048 products of 1 + 2^-10 would be 2^11 + 2 in
        // float, but saturate in half (spacing 2 above 2048): float accumulation keeps it.
        const int64_t k = 2048;
        const Tensor a = Tensor::from_host(*device, {1, k}, std::vector<float>(size_t(k), 1.0f), t);
        const Tensor b = Tensor::from_host(
            *device, {k, 1}, std::vector<float>(size_t(k), 1.0f + 1.0f / 1024.0f), t);
        const Tensor c = Tensor::zeros(*device, {1, 1});
        GemmArgs g;
        g.m = 1, g.n = 1, g.k = k;
        g.a = a, g.b = b, g.c = c;
        device->gemm(g);
        const float want = t == DType::f16 ? 2050.0f : float(k) * round_to(t, 1.0f + 1.0f / 1024.0f);
        CHECK(c.to_host()[0] == Approx(want).epsilon(1e-6));
        // Convolutions then keep 16-bit columns: one GEMM for the weight gradient, and (batch
        // 8, 512 columns) its split-K slices; stride 2 for col2im.
        const Conv2dShape small = small_conv();
        Conv2dShape strided = small;
        strided.batch = 8, strided.in_channels = 8, strided.height = strided.width = 16;
        strided.out_channels = 8, strided.stride_h = strided.stride_w = 2;
        for (const Conv2dShape& shape : {small, strided}) {
          INFO("conv2d N=" << shape.batch << " C=" << shape.in_channels << " stride "
                           << shape.stride_h);
          check_conv(*device, t, shape, true);
        }
      }
  }
}
#endif  // TRIDENT_HAVE_OPENCL

TEST_CASE("opencl half: loss scaling skips an overflowed step, backs off and grows on the device",
          "[opencl][half][loss_scale]") {
  const std::vector<Device*> devices = opencl_devices();
  if (devices.empty()) WARN("SKIPPED: no OpenCL device");
  for (Device* d : devices) {
    DYNAMIC_SECTION(d->info().id()) {
      LossScaleParams params;
      params.interval = 3;
      const Tensor state = testing::upload(*d, std::vector<float>{1024.0f, 0.0f});
      const Tensor sumsq = testing::upload(*d, std::vector<float>{4.0f});
      const Tensor inf = testing::upload(*d, std::vector<float>{INFINITY});
      const Tensor nan = testing::upload(*d, std::vector<float>{NAN});
      d->update_loss_scale(state, sumsq, params);
      d->update_loss_scale(state, sumsq, params);
      CHECK(state.to_host() == std::vector<float>{1024.0f, 2.0f});
      d->update_loss_scale(state, sumsq, params);  // the third clean step: grow
      CHECK(state.to_host() == std::vector<float>{2048.0f, 0.0f});
      d->update_loss_scale(state, sumsq, params);
      d->update_loss_scale(state, inf, params);  // overflow: back off, count restarts
      CHECK(state.to_host() == std::vector<float>{1024.0f, 0.0f});
      d->update_loss_scale(state, nan, params);
      CHECK(state.to_host() == std::vector<float>{512.0f, 0.0f});

      // The optimizers divide by the scale, and skip the whole update on a non-finite sum.
      const std::vector<float> p0 = testing::random_floats(300, 81);
      const std::vector<float> g = testing::random_floats(300, 82);
      std::vector<float> g_scaled = g;
      for (float& v : g_scaled) v *= 512.0f;
      const Tensor scale = testing::upload(*d, std::vector<float>{512.0f});
      const Tensor grads = testing::upload(*d, g), grads_scaled = testing::upload(*d, g_scaled);
      const Tensor step = Tensor::zeros(*d, {kStepStateCount}, DType::i32);
      SgdParams sgd;
      sgd.lr = 0.1f;
      sgd.momentum = 0.9f;
      UpdateControl plain, scaled, overflowed;
      scaled.loss_scale = scale;
      scaled.grad_sumsq = sumsq;
      overflowed.loss_scale = scale;
      overflowed.grad_sumsq = inf;
      const Tensor pa = testing::upload(*d, p0), pb = testing::upload(*d, p0),
                   pc = testing::upload(*d, p0);
      const Tensor ma = Tensor::zeros(*d, {300}), mb = Tensor::zeros(*d, {300}),
                   mc = Tensor::zeros(*d, {300});
      d->sgd_update(pa, grads, ma, sgd, plain, step);
      d->sgd_update(pb, grads_scaled, mb, sgd, scaled, step);
      d->sgd_update(pc, grads_scaled, mc, sgd, overflowed, step);
      TRIDENT_CHECK_EXACT(pb.to_host(), pa.to_host());  // a power-of-two scale divides exactly
      TRIDENT_CHECK_EXACT(mb.to_host(), ma.to_host());
      TRIDENT_CHECK_EXACT(pc.to_host(), p0);
      TRIDENT_CHECK_EXACT(mc.to_host(), std::vector<float>(300, 0.0f));
      AdamParams adam;
      const Tensor qa = testing::upload(*d, p0), qb = testing::upload(*d, p0),
                   qc = testing::upload(*d, p0);
      const Tensor va = Tensor::zeros(*d, {300}), vb = Tensor::zeros(*d, {300}),
                   vc = Tensor::zeros(*d, {300}), m1a = Tensor::zeros(*d, {300}),
                   m1b = Tensor::zeros(*d, {300}), m1c = Tensor::zeros(*d, {300});
      d->adam_update(qa, grads, m1a, va, adam, plain, step);
      d->adam_update(qb, grads_scaled, m1b, vb, adam, scaled, step);
      d->adam_update(qc, grads_scaled, m1c, vc, adam, overflowed, step);
      TRIDENT_CHECK_EXACT(qb.to_host(), qa.to_host());
      TRIDENT_CHECK_EXACT(vb.to_host(), va.to_host());
      TRIDENT_CHECK_EXACT(qc.to_host(), p0);
      TRIDENT_CHECK_EXACT(vc.to_host(), std::vector<float>(300, 0.0f));
      // Clipping applies to the unscaled gradient: the same as without the scale.
      scaled.max_norm = overflowed.max_norm = plain.max_norm = 0.5f;
      const Tensor sumsq_plain = testing::upload(*d, std::vector<float>{4.0f});
      const Tensor sumsq_scaled = testing::upload(*d, std::vector<float>{4.0f * 512.0f * 512.0f});
      plain.grad_sumsq = sumsq_plain;
      scaled.grad_sumsq = sumsq_scaled;
      d->sgd_update(pa, grads, ma, sgd, plain, step);
      d->sgd_update(pb, grads_scaled, mb, sgd, scaled, step);
      TRIDENT_CHECK_CLOSE(pb.to_host(), pa.to_host(), testing::kElementwise);
    }
  }
}

namespace {

struct RunResult {
  std::vector<double> losses;
  std::vector<float> weights;
  float loss_scale = 0.0f;
};

RunResult train(Device& d, const std::string& model, Precision p, const DatasetSplits& data) {
  TrainOptions o;
  o.batch = 50;  // 4 steps per epoch, 2 epochs
  o.precision = p;
  Trainer trainer({&d}, find_model(model).factory(), data, o);
  RunResult r;
  for (int e = 0; e < 2; ++e) r.losses.push_back(trainer.train_epoch().train_loss);
  r.weights = trainer.network().parameters().to_host();
  r.loss_scale = trainer.loss_scale();
  return r;
}

// max |a - b| / max |b| over the flat parameter buffer.
double relative_max_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 1e-12;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return a.size() == b.size() ? diff / scale : INFINITY;
}

}  // namespace

// Weights are float32 masters: after 8 steps they differ from the float32 run by what 16-bit
// activations change in the gradients (a few unit roundoffs of the type, relative to the
// largest weight), and from the CPU in the same precision by float32 reordering and the odd
// rounding that goes the other way (far less).
TEST_CASE("opencl half: the seed MLP and CNN train in bf16 and fp16 as in float32 and on the CPU",
          "[opencl][half][training]") {
  const std::vector<Device*> devices = opencl_devices();
  if (devices.empty()) WARN("SKIPPED: no OpenCL device");
  const DatasetSplits data = testing::small_splits(200, 50);
  Device& cpu = DeviceRegistry::global().device("cpu:0");
  for (const std::string model : {"mlp", "cnn"})
    for (Precision p : {Precision::bf16, Precision::fp16}) {
      const RunResult on_cpu = train(cpu, model, p, data);
      const double u = unit_roundoff(compute_dtype(p));
      for (Device* d : devices) {
        DYNAMIC_SECTION(model << " " << precision_name(p) << " on " << d->info().id()) {
          const RunResult fp32 = train(*d, model, Precision::fp32, data);
          const RunResult got = train(*d, model, p, data);
          for (size_t e = 0; e < got.losses.size(); ++e) {
            CHECK(std::isfinite(got.losses[e]));
            CHECK(got.losses[e] == Approx(fp32.losses[e]).epsilon(8 * u));
            CHECK(got.losses[e] == Approx(on_cpu.losses[e]).epsilon(2 * u));
          }
          const double vs_fp32 = relative_max_error(got.weights, fp32.weights);
          const double vs_cpu = relative_max_error(got.weights, on_cpu.weights);
          INFO("max weight difference relative to the largest weight: " << vs_fp32
               << " against float32, " << vs_cpu << " against the CPU in " << precision_name(p));
          CHECK(vs_fp32 < 8 * u);
          CHECK(vs_cpu < 2 * u);
          CHECK(vs_fp32 > 0.0);  // the 16-bit run did compute in 16 bits
          // fp16 scales the loss; no overflow in 8 steps of these models, so it stays.
          CHECK(got.loss_scale == (p == Precision::fp16 ? 65536.0f : 0.0f));
          CHECK(got.loss_scale == on_cpu.loss_scale);
        }
      }
    }
}
