// Op conformance, data movement and optimizers: gather_rows, advance_step, sgd_update,
// adam_update, fill, copy_on_device, and capture() replay, on every device against the reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
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
      Tensor dsrc = upload(*device, src), dtable = upload(*device, table),
             dstate = upload(*device, state);
      // dst sits 16 bytes into a buffer whose guard bytes must survive.
      std::vector<uint8_t> guarded(want.size() + 32, 0xAB);
      Tensor ddst = upload(*device, guarded);
      device->gather_rows(dsrc.memory(), c.row_bytes, dtable.memory(), c.rows, dstate.memory(),
                          ddst.memory().at(16));
      const std::vector<uint8_t> all = download<uint8_t>(*device, ddst.memory(), guarded.size());
      TRIDENT_CHECK_EXACT(std::vector<uint8_t>(all.begin() + 16, all.end() - 16), want);
      CHECK(std::count(all.begin(), all.begin() + 16, 0xAB) == 16);
      CHECK(std::count(all.end() - 16, all.end(), 0xAB) == 16);
    }
  }
}

TEST_CASE("conformance: advance_step increments both counters", "[conformance][advance_step]") {
  FOR_EACH_DEVICE(device) {
    std::vector<uint32_t> want = {5, 4294967290u, 1, 2};  // a second state after the first
    Tensor state = upload(*device, want);
    device->advance_step(state.memory().at(8));
    device->advance_step(state.memory().at(8));
    device->advance_step(state.memory());
    reference::advance_step(want.data() + 2);
    reference::advance_step(want.data() + 2);
    reference::advance_step(want.data());
    CHECK(download<uint32_t>(*device, state.memory(), 4) == want);
  }
}

TEST_CASE("conformance: sgd_update with momentum, nesterov and weight decay over several steps",
          "[conformance][sgd]") {
  std::vector<SgdParams> variants(4);
  variants[0].lr = 0.1f;                                                   // plain SGD
  variants[1].lr = 0.05f; variants[1].momentum = 0.9f;                     // heavy ball
  variants[2].lr = 0.01f; variants[2].momentum = 0.5f; variants[2].nesterov = true;
  variants[3].lr = 0.02f; variants[3].momentum = 0.9f; variants[3].weight_decay = 0.01f;
  variants[3].grad_scale = 0.5f;
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 1200;
    for (int64_t n : {1, 7, 257, 100003})
      for (const SgdParams& hp : variants) {
        INFO("sgd n=" << n << " lr=" << hp.lr << " momentum=" << hp.momentum << " nesterov="
                      << hp.nesterov << " weight_decay=" << hp.weight_decay
                      << " grad_scale=" << hp.grad_scale);
        std::vector<float> params = random_floats(size_t(n), ++seed);
        std::vector<float> momentum(size_t(n), 0.0f);
        OffsetBuffer dparams(*device, params, 1), dmomentum(*device, momentum, 2);
        for (int step = 0; step < 3; ++step) {
          const std::vector<float> grads = random_floats(size_t(n), ++seed);
          reference::sgd_update(params.data(), grads.data(), momentum.data(), n, hp);
          OffsetBuffer dgrads(*device, grads, 3);
          device->sgd_update(dparams.memory(), dgrads.memory(), dmomentum.memory(), n, hp);
        }
        TRIDENT_CHECK_CLOSE(dparams.values(), params, (Tolerance{1e-6, 1e-5}));
        if (hp.momentum != 0.0f)
          TRIDENT_CHECK_CLOSE(dmomentum.values(), momentum, (Tolerance{1e-6, 1e-5}));
        CHECK(dparams.guard_damage() + dmomentum.guard_damage() == 0);
      }
  }
}

TEST_CASE("conformance: adam_update over several steps reads t from step_state",
          "[conformance][adam]") {
  std::vector<AdamParams> variants(2);
  variants[0].lr = 1e-2f;
  variants[1].lr = 3e-3f; variants[1].beta1 = 0.8f; variants[1].beta2 = 0.99f;
  variants[1].weight_decay = 0.05f; variants[1].grad_scale = 0.25f; variants[1].eps = 1e-6f;
  FOR_EACH_DEVICE(device) {
    uint32_t seed = 1300;
    for (int64_t n : {1, 7, 257, 100003})
      for (const AdamParams& hp : variants) {
        INFO("adam n=" << n << " lr=" << hp.lr << " beta1=" << hp.beta1 << " beta2=" << hp.beta2
                       << " weight_decay=" << hp.weight_decay << " grad_scale=" << hp.grad_scale);
        std::vector<float> params = random_floats(size_t(n), ++seed);
        std::vector<float> m(size_t(n), 0.0f), v(size_t(n), 0.0f);
        std::vector<uint32_t> state = {0, 0};
        OffsetBuffer dparams(*device, params, 1), dm(*device, m, 2), dv(*device, v, 3);
        Tensor dstate = upload(*device, state);
        for (int step = 0; step < 4; ++step) {
          const std::vector<float> grads = random_floats(size_t(n), ++seed);
          reference::adam_update(params.data(), grads.data(), m.data(), v.data(), n, hp,
                                 state.data());
          reference::advance_step(state.data());
          OffsetBuffer dgrads(*device, grads, 0);
          device->adam_update(dparams.memory(), dgrads.memory(), dm.memory(), dv.memory(), n, hp,
                              dstate.memory());
          device->advance_step(dstate.memory());
        }
        TRIDENT_CHECK_CLOSE(dparams.values(), params, (Tolerance{2e-6, 1e-5}));
        TRIDENT_CHECK_CLOSE(dm.values(), m, (Tolerance{1e-7, 1e-5}));
        TRIDENT_CHECK_CLOSE(dv.values(), v, (Tolerance{1e-8, 1e-5}));
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
        device->fill(buf.memory(), n, value);
        TRIDENT_CHECK_EXACT(buf.values(), std::vector<float>(size_t(n), value));
        CHECK(buf.guard_damage() == 0);
      }
    // 0.0f also zeroes int32 buffers (step states, argmax).
    Tensor ints = upload(*device, std::vector<int32_t>(40, -7));
    device->fill(ints.memory().at(4 * sizeof(int32_t)), 33, 0.0f);
    std::vector<int32_t> want(40, -7);
    std::fill(want.begin() + 4, want.begin() + 37, 0);
    TRIDENT_CHECK_EXACT(ints.to_host_i32(), want);
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
      reference::relu_forward(first.data(), relu_first.data(), int64_t(n));
      std::vector<float> host = first;
      Tensor x = Tensor::empty(*device, {int64_t(n) + 3});
      Tensor y = Tensor::empty(*device, {int64_t(n)});
      device->copy_from_host(x.memory().at(3 * sizeof(float)), host.data(), n * sizeof(float));
      std::fill(host.begin(), host.end(), kNaN);  // reusable as soon as copy_from_host returns
      device->relu_forward(x.memory().at(3 * sizeof(float)), y.memory(), int64_t(n));
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
    d.gather_rows(data.memory(), kIn * sizeof(float), table.memory(), kBatch, state.memory(),
                  batch.memory());
    GemmArgs g;
    g.m = kBatch; g.n = kOut; g.k = kIn;
    g.a = batch.memory(); g.b = weights.memory(); g.c = out.memory();
    g.lda = kIn; g.ldb = kOut; g.ldc = kOut; g.relu = true;
    d.gemm(g);
    d.dropout(out.memory(), out.memory(), kBatch * kOut, 1, 0, 0.5f, 9, 1, state.memory());
    GemmArgs gw;  // dW = batch^T out
    gw.trans_a = true; gw.m = kIn; gw.n = kOut; gw.k = kBatch;
    gw.a = batch.memory(); gw.b = out.memory(); gw.c = grads.memory();
    gw.lda = kIn; gw.ldb = kOut; gw.ldc = kOut;
    d.gemm(gw);
    SgdParams hp;
    hp.lr = 0.1f; hp.momentum = 0.9f;
    d.sgd_update(weights.memory(), grads.memory(), momentum.memory(), kIn * kOut, hp);
    d.advance_step(state.memory());
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
