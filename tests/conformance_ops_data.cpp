// Op conformance, data movement and optimizers: gather_rows, gather_samples, advance_step,
// sgd_update, adam_update (compared as updates), fill, copies, data errors raised by kernels,
// and capture() replay, on every device against the reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "trident/kernels/reference/reference_ops.h"
#include "tests/conformance.h"

using namespace trident;
using namespace trident::testing;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<uint8_t> random_bytes(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(count);
  for (uint8_t& v : out) v = static_cast<uint8_t>(rng() >> 24);
  return out;
}

}  // namespace

TEST_CASE("conformance: gather_rows of byte and float rows at the step_state batch position",
          "[conformance][gather_rows]") {
  struct Case { size_t row_bytes; int64_t dataset_rows, rows; uint32_t position; };
  // 784-byte rows are uint8 MNIST images; 40-byte rows are float rows of 10; 3-byte rows are
  // not a multiple of any wider type.
  const std::vector<Case> cases = {{784, 50, 7, 2}, {784, 9, 1, 0}, {40, 33, 7, 3},
                                   {4, 257, 33, 1}, {3, 20, 5, 4}, {784, 1000, 700, 1}};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 1100;
    for (const Case& c : cases) {
      INFO("gather_rows row_bytes=" << c.row_bytes << " rows=" << c.rows << " position="
                                    << c.position);
      const std::vector<uint8_t> src = random_bytes(c.row_bytes * size_t(c.dataset_rows), ++seed);
      // Enough batches for `position`; every entry a valid row index.
      const std::vector<int32_t> table = random_labels(size_t(c.rows) * (c.position + 2),
                                                       int32_t(c.dataset_rows), ++seed);
      const std::vector<uint32_t> state = {c.position, 77};
      std::vector<uint8_t> want(c.row_bytes * size_t(c.rows));
      reference::gather_rows(src.data(), c.row_bytes, table.data(), c.rows, state.data(),
                             want.data());
      Tensor dsrc = upload(*device, src).reshape({c.dataset_rows, int64_t(c.row_bytes)});
      Tensor dtable = upload(*device, table), dstate = upload(*device, state);
      // dst sits 16 bytes into a buffer whose guard bytes must survive.
      std::vector<uint8_t> guarded(want.size() + 32, 0xAB);
      Tensor ddst = upload(*device, guarded);
      device->gather_rows(dsrc, dtable, dstate,
                          ddst.view(16, {c.rows, int64_t(c.row_bytes)}));
      const std::vector<uint8_t> all = download<uint8_t>(*device, ddst.memory(), guarded.size());
      TRIDENT_CHECK_EXACT(std::vector<uint8_t>(all.begin() + 16, all.end() - 16), want);
      CHECK(std::count(all.begin(), all.begin() + 16, 0xAB) == 16);
      CHECK(std::count(all.end() - 16, all.end(), 0xAB) == 16);
    }
  }
}

TEST_CASE("conformance: a gather index outside the source, or a batch past the table, is an "
          "error and never an out-of-bounds access", "[conformance][gather_rows][errors]") {
  FOR_EACH_DEVICE(device) {
    const int64_t rows = 4, width = 3, source_rows = 10;
    Tensor src = Tensor::from_host(*device, {source_rows, width},
                                   random_floats(size_t(source_rows * width), 7));
    for (const int32_t bad : {-1, -100000, int32_t(source_rows), 1 << 30}) {
      INFO("bad index " << bad);
      std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, bad, 7};
      Tensor dtable = upload(*device, table);
      Tensor state = upload(*device, std::vector<uint32_t>{1, 0});  // the second batch
      OffsetBuffer dst(*device, std::vector<float>(size_t(rows * width), kNaN), 2);
      CHECK_THROWS_WITH(
          [&] {
            device->gather_rows(src, dtable, state, dst.tensor({rows, width}));
            device->synchronize();
          }(),
          Catch::Contains(std::to_string(bad)));
      CHECK(dst.guard_damage() == 0);
      // The device is usable afterwards and reports nothing more.
      device->gather_rows(src, dtable, upload(*device, std::vector<uint32_t>{0, 0}),
                          dst.tensor({rows, width}));
      CHECK_NOTHROW(device->synchronize());
    }
    // Position 2 of a two-batch table.
    Tensor table = upload(*device, std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
    OffsetBuffer dst(*device, std::vector<float>(size_t(rows * width), kNaN), 1);
    CHECK_THROWS_WITH(
        [&] {
          device->gather_rows(src, table, upload(*device, std::vector<uint32_t>{2, 0}),
                              dst.tensor({rows, width}));
          device->synchronize();
        }(),
        Catch::Contains("2"));
    CHECK(dst.guard_damage() == 0);
    CHECK_NOTHROW(device->synchronize());
  }
}

TEST_CASE("conformance: a label outside [0, classes) is an error in every head op",
          "[conformance][labels][errors]") {
  FOR_EACH_DEVICE(device) {
    const int64_t rows = 3, cols = 4;
    Tensor x = Tensor::from_host(*device, {rows, cols}, random_floats(size_t(rows * cols), 3));
    Tensor y = Tensor::zeros(*device, {rows, cols}), dx = Tensor::zeros(*device, {rows, cols});
    Tensor loss = Tensor::zeros(*device, {1});
    for (const int32_t bad : {-1, int32_t(cols), 1000}) {
      INFO("label " << bad);
      Tensor labels = upload(*device, std::vector<int32_t>{0, bad, 2});
      auto fails = [&](const std::function<void()>& op) {
        CHECK_THROWS_WITH(
            [&] {
              op();
              device->synchronize();
            }(),
            Catch::Contains(std::to_string(bad)));
      };
      fails([&] { device->log_softmax_nll(x, labels, 1.0f, 0.0f, y, loss, false, dx); });
      fails([&] { device->nll_loss_forward(x, labels, loss, false); });
      fails([&] { device->nll_loss_backward(labels, dx, 1.0f); });
      fails([&] { device->mse_loss(x, labels, 1.0f, loss, false, dx); });
      fails([&] { device->count_correct(x, labels, loss); });
      CHECK_NOTHROW(device->synchronize());
    }
  }
}

TEST_CASE("conformance: gather_samples normalises u8 and f32 samples and draws the same crop "
          "and flip as the reference, bit for bit", "[conformance][gather_samples]") {
  struct Case {
    int64_t channels, height, width, count, rows;
    bool u8;
    int64_t padding;
    bool flip;
  };
  const std::vector<Case> cases = {{1, 28, 28, 30, 8, true, 0, false},
                                   {1, 28, 28, 30, 8, true, 4, true},
                                   {3, 5, 7, 11, 5, false, 2, true},
                                   {2, 9, 4, 6, 6, true, 3, false},
                                   {1, 1, 1, 3, 2, false, 1, true}};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 1150;
    for (const Case& c : cases)
      for (const bool normalise : {false, true}) {
        INFO("gather_samples C=" << c.channels << " H=" << c.height << " W=" << c.width
                                 << " u8=" << c.u8 << " padding=" << c.padding
                                 << " flip=" << c.flip << " normalise=" << normalise);
        const int64_t sample = c.channels * c.height * c.width;
        const std::vector<uint8_t> bytes = random_bytes(size_t(c.count * sample), ++seed);
        const std::vector<float> floats = random_floats(size_t(c.count * sample), ++seed);
        const std::vector<int32_t> table = random_labels(size_t(c.rows * 3), int32_t(c.count), ++seed);
        const std::vector<uint32_t> state = {2, 12345};
        std::vector<float> mean = random_floats(size_t(c.channels), ++seed, 0.0f, 0.5f);
        std::vector<float> inv_std = random_floats(size_t(c.channels), ++seed, 1.0f, 4.0f);
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
        reference::gather_samples(c.u8 ? static_cast<const void*>(bytes.data()) : floats.data(),
                                  c.u8, c.channels, c.height, c.width, table.data(), c.rows,
                                  state.data(), host, want.data());
        const Shape src_shape{c.count, c.channels, c.height, c.width};
        Tensor src = c.u8 ? upload(*device, bytes).reshape(src_shape)
                          : Tensor::from_host(*device, src_shape, floats);
        SampleTransform t;
        t.scale = host.scale;
        if (normalise) {
          t.mean = upload(*device, mean);
          t.inv_std = upload(*device, inv_std);
        }
        t.crop_padding = c.padding;
        t.horizontal_flip = c.flip;
        t.seed = host.seed;
        t.stream = host.stream;
        t.sample_offset = host.sample_offset;
        OffsetBuffer dst(*device, std::vector<float>(want.size(), kNaN), 3);
        device->gather_samples(src, upload(*device, table), upload(*device, state), t,
                               dst.tensor({c.rows, c.channels, c.height, c.width}));
        TRIDENT_CHECK_CLOSE(dst.values(), want, kElementwise);
        CHECK(dst.guard_damage() == 0);
      }
  }
}

TEST_CASE("conformance: advance_step increments both counters", "[conformance][advance_step]") {
  FOR_EACH_DEVICE(device) {
    std::vector<uint32_t> want = {5, 4294967290u, 1, 2};  // a second state after the first
    Tensor state = upload(*device, want);
    device->advance_step(state.view(2, {2}));
    device->advance_step(state.view(2, {2}));
    device->advance_step(state.view(0, {2}));
    reference::advance_step(want.data() + 2);
    reference::advance_step(want.data() + 2);
    reference::advance_step(want.data());
    CHECK(download<uint32_t>(*device, state.memory(), 4) == want);
  }
}

namespace {

// An optimizer's update (p_new - p_old), not p_new: a wrong step size must not hide under the
// weights. Each step starts the reference from the device's own state, so that the comparison
// is of one update at a time. Allowed: two float ulps of p (the roundings of p_old and p_new)
// plus a relative error of the update itself.
Tolerance update_tolerance(const std::vector<float>& p_old, double relative) {
  float max_abs = 0.0f;
  for (float v : p_old) max_abs = std::max(max_abs, std::abs(v));
  return {2.0 * double(max_abs) * 1.2e-7, relative};
}

std::vector<float> difference(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = float(double(a[i]) - double(b[i]));
  return d;
}

// What the optimizer tests vary beyond the hyper-parameters.
struct ControlCase {
  bool schedule = false;   // a [steps, 2] table of (lr, momentum / beta1)
  float max_norm = 0.0f;   // > 0: clip the gradient norm
};

struct DeviceControl {
  UpdateControl control;
  reference::HostUpdateControl host;
  std::vector<float> schedule, sumsq;
};

DeviceControl make_control(Device& d, const ControlCase& c, const std::vector<float>& grads,
                           float first_lr, float first_momentum, int steps) {
  DeviceControl out;
  if (c.schedule) {
    for (int t = 0; t < steps; ++t) {
      out.schedule.push_back(first_lr * (1.0f + 0.5f * float(t)));
      out.schedule.push_back(first_momentum * (1.0f - 0.05f * float(t)));
    }
    out.control.schedule = Tensor::from_host(d, {steps, 2}, out.schedule);
    out.host.schedule = out.schedule.data();
    out.host.schedule_rows = steps;
  }
  if (c.max_norm > 0.0f) {
    double s = 0.0;
    for (float g : grads) s += double(g) * g;
    out.sumsq = {float(s)};
    out.control.grad_sumsq = upload(d, out.sumsq);
    out.control.max_norm = c.max_norm;
    out.host.grad_sumsq = out.sumsq.data();
    out.host.max_norm = c.max_norm;
  }
  return out;
}

}  // namespace

// Sizes of the optimizer cases, with their buffers at different offsets from a 16-byte boundary
// or all at the same one (CUDA then updates packs of four between a ragged head and tail).
constexpr std::pair<int64_t, bool> kUpdateCases[] = {
    {1, false}, {7, false}, {257, false}, {100003, false}, {7, true}, {257, true}, {100003, true}};

TEST_CASE("conformance: sgd_update, its update (p_new - p_old) over several steps: momentum, "
          "nesterov, weight decay, schedule, clipping", "[conformance][sgd]") {
  std::vector<SgdParams> variants(4);
  variants[0].lr = 0.1f;                                                   // plain SGD
  variants[1].lr = 0.05f; variants[1].momentum = 0.9f;                     // heavy ball
  variants[2].lr = 0.1f; variants[2].momentum = 0.5f; variants[2].nesterov = true;
  variants[3].lr = 0.2f; variants[3].momentum = 0.9f; variants[3].weight_decay = 0.01f;
  variants[3].grad_scale = 0.5f;
  const std::vector<ControlCase> controls = {{}, {true, 0.0f}, {false, 0.5f}, {true, 2.0f}};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 1200;
    for (const auto& [n, same_offset] : kUpdateCases)
      for (const SgdParams& hp : variants)
        for (const ControlCase& cc : controls) {
          if (cc.schedule && hp.momentum == 0.0f) continue;  // a schedule sets momentum
          INFO("sgd n=" << n << " lr=" << hp.lr << " momentum=" << hp.momentum << " nesterov="
                        << hp.nesterov << " weight_decay=" << hp.weight_decay << " grad_scale="
                        << hp.grad_scale << " schedule=" << cc.schedule
                        << " max_norm=" << cc.max_norm << " same offset=" << same_offset);
          OffsetBuffer dparams(*device, random_floats(size_t(n), ++seed), same_offset ? 3 : 1),
              dmomentum(*device, std::vector<float>(size_t(n), 0.0f), same_offset ? 3 : 2);
          Tensor dstate = upload(*device, std::vector<uint32_t>{0, 0});
          for (uint32_t step = 0; step < 4; ++step) {
            INFO("step " << step);
            const std::vector<float> grads = random_floats(size_t(n), ++seed);
            DeviceControl control = make_control(*device, cc, grads, hp.lr, hp.momentum, 3);
            std::vector<float> params = dparams.values(), momentum = dmomentum.values();
            const std::vector<float> p_old = params;
            const std::vector<uint32_t> state = {step, step};
            reference::sgd_update(params.data(), grads.data(), momentum.data(), n, hp,
                                  control.host, state.data());
            OffsetBuffer dgrads(*device, grads, 3);
            device->sgd_update(dparams.tensor(), dgrads.tensor(), dmomentum.tensor(), hp,
                               control.control, dstate);
            device->advance_step(dstate);
            TRIDENT_CHECK_CLOSE(difference(dparams.values(), p_old), difference(params, p_old),
                                update_tolerance(p_old, 5e-6));
            if (hp.momentum != 0.0f)
              TRIDENT_CHECK_CLOSE(dmomentum.values(), momentum, (Tolerance{1e-6, 1e-5}));
          }
          CHECK(dparams.guard_damage() + dmomentum.guard_damage() == 0);
        }
  }
}

TEST_CASE("conformance: adam_update, its update (p_new - p_old) at each step t read from "
          "step_state: Adam, AdamW, schedule, clipping", "[conformance][adam]") {
  // Adam's update is about lr in size whatever the weights: small weights keep the float
  // rounding of p_new - p_old far below a relative error of the update (1e-6 here), so that a
  // bias correction off by 1e-5 (float cancellation in 1 - beta^t) shows.
  std::vector<AdamParams> variants(3);
  variants[0].lr = 1e-3f;
  variants[1].lr = 3e-4f; variants[1].beta1 = 0.8f; variants[1].beta2 = 0.99f;
  variants[1].weight_decay = 0.05f; variants[1].grad_scale = 0.25f; variants[1].eps = 1e-6f;
  variants[2].lr = 5e-4f; variants[2].weight_decay = 0.1f; variants[2].decoupled_weight_decay = true;
  const std::vector<ControlCase> controls = {{}, {true, 0.0f}, {false, 0.5f}};
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 1300;
    for (const auto& [n, same_offset] : kUpdateCases)
      for (const AdamParams& hp : variants)
        for (const ControlCase& cc : controls) {
          // Clipping shrinks the gradient towards the L2 term wd * p: their float sum would
          // cancel, and the update would amplify the cancellation (an ill-conditioned test).
          if (cc.max_norm > 0.0f && hp.weight_decay != 0.0f && !hp.decoupled_weight_decay)
            continue;
          INFO("adam n=" << n << " lr=" << hp.lr << " beta1=" << hp.beta1 << " beta2="
                         << hp.beta2 << " weight_decay=" << hp.weight_decay << " decoupled="
                         << hp.decoupled_weight_decay << " grad_scale=" << hp.grad_scale
                         << " schedule=" << cc.schedule << " max_norm=" << cc.max_norm
                         << " same offset=" << same_offset);
          OffsetBuffer dparams(*device, random_floats(size_t(n), ++seed, -2e-3f, 2e-3f),
                               same_offset ? 3 : 1),
              dm(*device, std::vector<float>(size_t(n), 0.0f), same_offset ? 3 : 2),
              dv(*device, std::vector<float>(size_t(n), 0.0f), 3);
          std::vector<uint32_t> state = {0, 0};
          Tensor dstate = upload(*device, state);
          // Up to t = 12: 1 - beta^t is far from both 0 and 1, where float cancellation shows.
          for (int step = 0; step < 12; ++step) {
            INFO("t " << step + 1);
            const std::vector<float> grads = random_floats(size_t(n), ++seed);
            DeviceControl control = make_control(*device, cc, grads, hp.lr, hp.beta1, 12);
            std::vector<float> params = dparams.values(), m = dm.values(), v = dv.values();
            const std::vector<float> p_old = params;
            reference::adam_update(params.data(), grads.data(), m.data(), v.data(), n, hp,
                                   state.data(), control.host);
            reference::advance_step(state.data());
            OffsetBuffer dgrads(*device, grads, same_offset ? 3 : 0);
            device->adam_update(dparams.tensor(), dgrads.tensor(), dm.tensor(), dv.tensor(), hp,
                                control.control, dstate);
            device->advance_step(dstate);
            TRIDENT_CHECK_CLOSE(difference(dparams.values(), p_old), difference(params, p_old),
                                update_tolerance(p_old, 5e-6));
            TRIDENT_CHECK_CLOSE(dm.values(), m, (Tolerance{1e-7, 1e-5}));
            TRIDENT_CHECK_CLOSE(dv.values(), v, (Tolerance{1e-8, 1e-5}));
          }
          CHECK(dparams.guard_damage() + dm.guard_damage() + dv.guard_damage() == 0);
        }
  }
}

TEST_CASE("conformance: fill float and int32 buffers at offsets", "[conformance][fill]") {
  FOR_EACH_DEVICE(device) {
    for (int64_t n : {1, 7, 33, 257, 4099, 100003})
      for (float value : {0.0f, 1.5f, -3.25f}) {
        INFO("fill n=" << n << " value=" << value);
        OffsetBuffer buf(*device, std::vector<float>(size_t(n), kNaN), size_t(n % 5));
        device->fill(buf.tensor(), value);
        TRIDENT_CHECK_EXACT(buf.values(), std::vector<float>(size_t(n), value));
        CHECK(buf.guard_damage() == 0);
      }
    // int32 buffers (step states, argmax) take the value as an integer; 0 zeroes any dtype.
    Tensor ints = upload(*device, std::vector<int32_t>(40, -7));
    device->fill(ints.view(4, {33}), 0.0f);
    std::vector<int32_t> want(40, -7);
    std::fill(want.begin() + 4, want.begin() + 37, 0);
    TRIDENT_CHECK_EXACT(ints.to_host_i32(), want);
    device->fill(ints.view(1, {2}), 12.0f);
    want[1] = want[2] = 12;
    TRIDENT_CHECK_EXACT(ints.to_host_i32(), want);
    Tensor bytes = upload(*device, std::vector<uint8_t>(9, 0xFF));
    device->fill(bytes.view(2, {5}), 0.0f);
    CHECK(download<uint8_t>(*device, bytes.memory(), 9) ==
          std::vector<uint8_t>{0xFF, 0xFF, 0, 0, 0, 0, 0, 0xFF, 0xFF});
  }
}

TEST_CASE("conformance: copy_on_device between offsets, any byte count",
          "[conformance][copy]") {
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 1400;
    struct Case { size_t src_offset, dst_offset, bytes; };
    for (const Case& c : std::vector<Case>{{0, 0, 4}, {12, 20, 257 * 4}, {3, 11, 37}, {1, 0, 1},
                                           {64, 128, 4096 + 3}}) {
      INFO("copy src_offset=" << c.src_offset << " dst_offset=" << c.dst_offset
                              << " bytes=" << c.bytes);
      const std::vector<uint8_t> src = random_bytes(c.src_offset + c.bytes + 9, ++seed);
      const std::vector<uint8_t> dst0 = random_bytes(c.dst_offset + c.bytes + 9, ++seed);
      std::vector<uint8_t> want = dst0;
      std::memcpy(want.data() + c.dst_offset, src.data() + c.src_offset, c.bytes);
      Tensor dsrc = upload(*device, src), ddst = upload(*device, dst0);
      device->copy_on_device(ddst.memory().at(c.dst_offset), dsrc.memory().at(c.src_offset),
                             c.bytes);
      TRIDENT_CHECK_EXACT(download<uint8_t>(*device, ddst.memory(), want.size()), want);
    }
  }
}

TEST_CASE("conformance: host copies are ordered with queued ops and free the host buffer",
          "[conformance][copy]") {
  FOR_EACH_DEVICE(device) {
    for (size_t n : {size_t(4), size_t(1) << 20}) {  // a small upload and a 4 MiB one
      INFO("floats " << n);
      const std::vector<float> first = random_floats(n, 1), second = random_floats(n, 2);
      std::vector<float> relu_first(n);
      reference::unary_forward(UnaryOp::relu, first.data(), relu_first.data(), int64_t(n), 0.0f);
      std::vector<float> host = first;
      Tensor x = Tensor::empty(*device, {int64_t(n) + 3});
      Tensor y = Tensor::empty(*device, {int64_t(n)});
      device->copy_from_host(x.memory().at(3 * sizeof(float)), host.data(), n * sizeof(float));
      std::fill(host.begin(), host.end(), kNaN);  // reusable as soon as copy_from_host returns
      device->unary_forward(UnaryOp::relu, x.view(3, {int64_t(n)}), y);
      // Queued after the relu: the relu must still see the first values.
      device->copy_from_host(x.memory().at(3 * sizeof(float)), second.data(), n * sizeof(float));
      TRIDENT_CHECK_EXACT(y.to_host(), relu_first);
      TRIDENT_CHECK_EXACT(download(*device, x.memory().at(3 * sizeof(float)), n), second);
    }
  }
}

namespace {

// The buffers of a tiny training step: gather a batch, a linear layer + ReLU, dropout, a fake
// gradient, an SGD update, advance_step. Each replay must see the new step_state.
struct TinyStep {
  static constexpr int64_t kData = 40, kBatch = 5, kIn = 6, kOut = 3;
  Tensor data, table, state, batch, weights, out, grads, momentum;

  TinyStep(Device& d) {
    data = Tensor::from_host(d, {kData, kIn}, random_floats(size_t(kData * kIn), 1));
    table = upload(d, random_labels(size_t(kBatch * 4), int32_t(kData), 2));
    state = upload(d, std::vector<uint32_t>{0, 0});
    batch = Tensor::zeros(d, {kBatch, kIn});
    weights = Tensor::from_host(d, {kIn, kOut}, random_floats(size_t(kIn * kOut), 3));
    out = Tensor::zeros(d, {kBatch, kOut});
    grads = Tensor::zeros(d, {kIn, kOut});
    momentum = Tensor::zeros(d, {kIn, kOut});
  }
  void run(Device& d) const {
    d.gather_rows(data, table, state, batch);
    GemmArgs g;
    g.m = kBatch; g.n = kOut; g.k = kIn;
    g.a = batch; g.b = weights; g.c = out;
    g.activation = UnaryOp::relu;
    d.gemm(g);
    d.dropout(out, out, 1, 0, 0.5f, 9, 1, state);
    GemmArgs gw;  // dW = batch^T out
    gw.trans_a = true; gw.m = kIn; gw.n = kOut; gw.k = kBatch;
    gw.a = batch; gw.b = out; gw.c = grads;
    d.gemm(gw);
    SgdParams hp;
    hp.lr = 0.1f; hp.momentum = 0.9f;
    d.sgd_update(weights, grads, momentum, hp, {}, state);
    d.advance_step(state);
  }
};

}  // namespace

TEST_CASE("conformance: a captured step replays like direct execution", "[conformance][capture]") {
  FOR_EACH_DEVICE(device) {
    TinyStep direct(*device), captured(*device);
    for (int i = 0; i < 3; ++i) direct.run(*device);
    std::unique_ptr<CapturedWork> work = device->capture([&] { captured.run(*device); });
    if (!work) {
      WARN("SKIPPED on " << device->info().id() << ": capture() is not supported (returns null)");
      continue;
    }
    for (int i = 0; i < 3; ++i) work->replay();
    CHECK(download<uint32_t>(*device, captured.state.memory(), 2) ==
          std::vector<uint32_t>{3, 3});
    TRIDENT_CHECK_EXACT(captured.weights.to_host(), direct.weights.to_host());
    TRIDENT_CHECK_EXACT(captured.momentum.to_host(), direct.momentum.to_host());
    TRIDENT_CHECK_EXACT(captured.out.to_host(), direct.out.to_host());
  }
}
