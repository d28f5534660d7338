// Optimizer updates queued beside backward (Device::queue_beside, Trainer::backward_and_update):
// the update of each bucket of finished gradients runs on the device's side queue while the
// layers below are differentiated. On CPU devices that claim a side queue and either run side
// work at once (the earliest a queue may run it) or hold it until the join (the latest), the
// weights after several steps must equal those of plain backward-then-update bit for bit: the
// first schedule catches an update queued before its gradients are final or before the input
// gradient has read the weights; the second, main work that reads what side work writes before
// the join. The CUDA side stream runs between the two; the K-step agreement tests of
// conformance_training.cpp run it on GPUs.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "trident/backends/cpu/cpu_device.h"
#include "trident/core/error.h"
#include "trident/models/layers.h"
#include "trident/models/optimizer.h"
#include "trident/models/trainer.h"
#include "tests/conformance.h"
#include "tests/fake_collective.h"
#include "tests/test_data.h"

using namespace trident;

namespace {

// A CPU device with a side queue. deferred: side work (optimizer updates) is held until the
// join; otherwise it runs at once. Counts what the front asked of the queue. It also "captures"
// as ReplayingCpuDevice (tests/fake_collective.h) does: replay runs the recorded step again.
class SideQueueCpuDevice : public trident::testing::ReplayingCpuDevice {
 public:
  explicit SideQueueCpuDevice(bool deferred) : ReplayingCpuDevice(0), deferred_(deferred) {}
  int begins = 0, joins = 0, updates_beside = 0;

 protected:
  bool do_has_side_queue() const override { return true; }
  void do_begin_beside() override {
    ++begins;
    beside_ = true;
  }
  void do_end_beside() override { beside_ = false; }
  void do_join_beside() override {
    ++joins;
    for (auto& work : held_) work();
    held_.clear();
  }
  void do_sgd_update(const Tensor& params, const Tensor& grads, const Tensor& momentum,
                     const SgdParams& hp, const UpdateControl& control,
                     const Tensor& step_state) override {
    run_or_hold([=, this] {
      CpuDevice::do_sgd_update(params, grads, momentum, hp, control, step_state);
    });
  }
  void do_convert(const Tensor& src, const Tensor& dst) override {  // the compute copy's
    run_or_hold([=, this] { CpuDevice::do_convert(src, dst); }, false);
  }
  void do_adam_update(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                      const AdamParams& hp, const UpdateControl& control,
                      const Tensor& step_state) override {
    run_or_hold([=, this] {
      CpuDevice::do_adam_update(params, grads, m, v, hp, control, step_state);
    });
  }

 private:
  void run_or_hold(const std::function<void()>& work, bool update = true) {
    if (beside_ && update) ++updates_beside;
    if (beside_ && deferred_)
      held_.push_back(work);
    else
      work();
  }
  bool deferred_;
  bool beside_ = false;
  std::vector<std::function<void()>> held_;
};

// Four layers with parameters (784x64, 64x64, 64x64, 64x10: 59,210 floats): with 16 KiB
// buckets every layer closes one, so three updates run beside the backward of lower layers.
Network four_layer_mlp() {
  Network net("overlap_mlp");
  net.add("flatten", Flatten());
  net.add("fc1", Linear(64));
  net.add("relu1", ReLU());
  net.add("fc2", Linear(64));
  net.add("tanh2", Tanh());
  net.add("fc3", Linear(64));
  net.add("relu3", ReLU());
  net.add("fc4", Linear(10));
  return net;
}

struct Run {
  std::vector<float> weights, state;
};

Run train(Device& device, TrainOptions options, int64_t epochs) {
  const DatasetSplits data = trident::testing::small_splits(400, 100);
  Trainer trainer({&device}, four_layer_mlp, data, options);
  for (int64_t e = 0; e < epochs; ++e) trainer.train_epoch();
  Run run;
  run.weights = trainer.network().parameters().to_host();
  return run;
}

TrainOptions options_with(const std::string& optimizer) {
  TrainOptions o;
  o.batch = 50;  // 8 steps an epoch
  o.bucket_bytes = 16 << 10;
  o.optimizer.kind = optimizer;
  if (optimizer == "sgd") {
    o.optimizer.lr = 0.05f;
    o.optimizer.momentum = 0.9f;
    o.optimizer.nesterov = true;
    o.optimizer.weight_decay = 5e-4f;
    o.schedule.kind = "onecycle";
    o.schedule.max_lr = 0.1f;
  } else {
    o.optimizer.lr = 1e-3f;
    o.optimizer.weight_decay = 0.01f;
  }
  return o;
}

}  // namespace

TEST_CASE("overlap: updates queued beside backward equal one update after it, bit for bit",
          "[overlap][trainer]") {
  for (const std::string optimizer : {"sgd", "adamw"}) {
    for (const bool deferred : {false, true}) {
      for (const bool capture : {false, true}) {
        // bf16: the updates beside also write the compute copy the next forward multiplies with.
        const Precision precision = capture ? Precision::bf16 : Precision::fp32;
        DYNAMIC_SECTION(optimizer << (deferred ? ", held until the join" : ", run at once")
                                  << (capture ? ", captured, bf16" : ", fp32")) {
          TrainOptions o = options_with(optimizer);
          o.capture = capture;
          o.precision = precision;
          CpuDevice plain(0, 1, "CPU (test)");
          const Run want = train(plain, o, 2);
          SideQueueCpuDevice side(deferred);
          const Run got = train(side, o, 2);
          REQUIRE(got.weights.size() == want.weights.size());
          CHECK(got.weights == want.weights);
          // 16 steps, three buckets beside each (fc4+fc3, fc2, fc1: the last has nothing left
          // to run beside but is queued the same way), one join each.
          CHECK(side.begins == 16 * 3);
          CHECK(side.updates_beside == 16 * 3);
          CHECK(side.joins >= 16);
          CHECK(side.captures == (capture ? 1 : 0));
        }
      }
    }
  }
}

TEST_CASE("overlap: updates stay after backward where they need every gradient, or when off",
          "[overlap][trainer]") {
  SECTION("gradient clipping (the global norm comes first)") {
    TrainOptions o = options_with("sgd");
    o.optimizer.clip_grad_norm = 1.0f;
    CpuDevice plain(0, 1, "CPU (test)");
    const Run want = train(plain, o, 1);
    SideQueueCpuDevice side(true);
    CHECK(train(side, o, 1).weights == want.weights);
    CHECK(side.begins == 0);
  }
  SECTION("overlap = false") {
    TrainOptions o = options_with("sgd");
    o.overlap = false;
    SideQueueCpuDevice side(true);
    train(side, o, 1);
    CHECK(side.begins == 0);
  }
  SECTION("a model of one bucket") {
    TrainOptions o = options_with("sgd");
    o.bucket_bytes = 1 << 20;  // more than the model's 237 KB of gradients
    SideQueueCpuDevice side(true);
    train(side, o, 1);
    CHECK(side.begins == 0);
  }
}

TEST_CASE("overlap: update_range over pieces equals step(), and refuses what it cannot do",
          "[overlap][optimizer]") {
  CpuDevice device(0, 1, "CPU (test)");
  for (const std::string kind : {"sgd", "adam", "adamw"}) {
    DYNAMIC_SECTION(kind) {
      auto build = [&] {
        Network net = four_layer_mlp();
        net.build(device, {1, 28, 28}, 7);
        return net;
      };
      Network whole = build(), pieces = build();
      OptimizerConfig config;
      config.kind = kind;
      config.lr = 0.1f;
      config.momentum = 0.9f;
      config.weight_decay = 0.01f;
      Optimizer a(config), b(config);
      a.attach(whole);
      b.attach(pieces);
      const int64_t n = whole.parameter_count();
      std::vector<float> grads(static_cast<size_t>(n));
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = float(int(i % 17) - 8) * 0.01f;
      const Tensor state_a = Tensor::zeros(device, {2}, DType::i32);
      const Tensor state_b = Tensor::zeros(device, {2}, DType::i32);
      StepContext ca, cb;
      ca.device = cb.device = &device;
      ca.step_state = state_a;
      cb.step_state = state_b;
      const std::vector<float> before = whole.parameters().to_host();
      for (int step = 0; step < 3; ++step) {
        whole.gradients().copy_from_host(grads.data(), grads.size() * sizeof(float));
        pieces.gradients().copy_from_host(grads.data(), grads.size() * sizeof(float));
        a.step(ca);
        // Uneven pieces, out of order, one of them empty.
        b.update_range(cb, n / 3, n - n / 3);
        b.update_range(cb, 0, 0);
        b.update_range(cb, 0, n / 3);
        b.finish_step(cb);
      }
      const std::vector<float> wa = whole.parameters().to_host();
      const std::vector<float> wb = pieces.parameters().to_host();
      std::vector<float> da(wa.size()), db(wb.size());
      for (size_t i = 0; i < wa.size(); ++i) {
        da[i] = wa[i] - before[i];
        db[i] = wb[i] - before[i];
      }
      CHECK(da == db);  // the updates, not only the weights
      CHECK(state_a.to_host_i32() == state_b.to_host_i32());  // counters advanced
      CHECK_THROWS_WITH(b.update_range(cb, n - 1, 2), Catch::Contains("outside the"));
    }
  }
  SECTION("clipping needs every gradient first") {
    Network net = four_layer_mlp();
    net.build(device, {1, 28, 28}, 7);
    OptimizerConfig config;
    config.clip_grad_norm = 1.0f;
    Optimizer opt(config);
    opt.attach(net);
    CHECK_FALSE(opt.updates_by_range());
    StepContext ctx;
    ctx.device = &device;
    ctx.step_state = Tensor::zeros(device, {2}, DType::i32);
    CHECK_THROWS_WITH(opt.update_range(ctx, 0, 1), Catch::Contains("clipping"));
  }
}

TEST_CASE("overlap: queue_beside takes elementwise ops only, does not nest, and recovers",
          "[overlap][device]") {
  SideQueueCpuDevice device(false);
  const Tensor a = Tensor::zeros(device, {4, 4}), b = Tensor::zeros(device, {4, 4});
  const Tensor c = Tensor::zeros(device, {4, 4});
  GemmArgs g;
  g.m = g.n = g.k = 4;
  g.a = a;
  g.b = b;
  g.c = c;
  CHECK_THROWS_WITH(device.queue_beside([&] { device.gemm(g); }),
                    Catch::Contains("gemm cannot be queued beside"));
  CHECK_FALSE(device.queuing_beside());
  CHECK_THROWS_WITH(device.queue_beside([&] { device.queue_beside([] {}); }),
                    Catch::Contains("does not nest"));
  CHECK_THROWS_WITH(device.queue_beside([&] { device.join_beside(); }),
                    Catch::Contains("inside queue_beside"));
  CHECK_THROWS_WITH(device.queue_beside([&] { device.scratch(DType::f32, {4}); }),
                    Catch::Contains("scratch"));
  // Allowed ops run; the device works normally afterwards.
  device.queue_beside([&] { device.fill(a, 2.0f); });
  device.gemm(g);
  device.synchronize();
  CHECK(a.to_host() == std::vector<float>(16, 2.0f));
}

TEST_CASE("conformance: on every device, updates beside backward equal updates after it",
          "[conformance][overlap][trainer]") {
  const DatasetSplits data = trident::testing::small_splits(400, 100);
  for (Device* d : trident::testing::devices_under_test()) {
    for (const std::string optimizer : {"sgd", "adamw"}) {
      for (const Precision precision : {Precision::fp32, Precision::bf16}) {
        if (!d->supports(compute_dtype(precision))) continue;
        DYNAMIC_SECTION(d->info().id() << ", " << optimizer << ", " << precision_name(precision)
                                       << (d->has_side_queue() ? "" : " (no side queue)")) {
          TrainOptions o = options_with(optimizer);
          o.precision = precision;
          auto weights_after = [&](bool overlap) {
            o.overlap = overlap;
            Trainer trainer({d}, four_layer_mlp, data, o);
            for (int e = 0; e < 2; ++e) trainer.train_epoch();  // 16 steps, captured after one
            return trainer.network().parameters().to_host();
          };
          const std::vector<float> after = weights_after(false);
          CHECK(weights_after(true) == after);
        }
      }
    }
  }
}

TEST_CASE("conformance: the optimizers' compute copy is the updated params rounded as convert() "
          "rounds them", "[conformance][overlap][sgd][adam]") {
  for (Device* d : trident::testing::devices_under_test()) {
    for (const DType type : {DType::bf16, DType::f16}) {
      if (!d->supports(type)) continue;
      for (const bool same_offset : {false, true}) {
        DYNAMIC_SECTION(d->info().id() << ", " << dtype_name(type)
                                       << (same_offset ? ", one offset" : ", mixed offsets")) {
          const int64_t n = 100003;
          // Views at float offsets 3 (or 1, 2) and a copy at 3 (or 0) 16-bit elements.
          auto view = [&](const std::vector<float>& values, int64_t offset) {
            std::vector<float> all(values.size() + 8, 0.0f);
            std::copy(values.begin(), values.end(), all.begin() + offset);
            return Tensor::from_host(*d, {int64_t(all.size())}, all).view(offset, {n});
          };
          const Tensor params = view(trident::testing::random_floats(n, 5, -3.0f, 3.0f),
                                     same_offset ? 3 : 1);
          const Tensor grads = view(trident::testing::random_floats(n, 6), 3);
          const Tensor m = view(std::vector<float>(n, 0.0f), same_offset ? 3 : 2);
          const Tensor v = view(std::vector<float>(n, 0.0f), 3);
          const Tensor copy_all = Tensor::zeros(*d, {n + 8}, type);
          const Tensor copy = copy_all.view(same_offset ? 3 : 0, {n});
          const Tensor want = Tensor::zeros(*d, {n}, type);
          const Tensor state = Tensor::zeros(*d, {2}, DType::i32);
          SgdParams sgd;
          sgd.lr = 0.1f;
          sgd.momentum = 0.9f;
          d->sgd_update(params, grads, m, sgd, {}, state, copy);
          d->convert(params, want);
          CHECK(copy.to_host() == want.to_host());
          AdamParams adam;
          adam.lr = 0.01f;
          d->adam_update(params, grads, m, v, adam, {}, state, copy);
          d->convert(params, want);
          CHECK(copy.to_host() == want.to_host());
          CHECK_THROWS_WITH(d->sgd_update(params, grads, m, sgd, {}, state, params),
                            Catch::Contains("compute_copy is F32"));
        }
      }
    }
  }
}

TEST_CASE("overlap: weights written between steps reach the next step's compute copy, replayed "
          "steps included", "[overlap][trainer]") {
  // One step an epoch: epoch 2's step is captured where the device captures, epoch 3's replayed.
  // Zero weights make every logit 0, so that epoch 3's loss is exactly ln 10 unless a stale
  // 16-bit copy of the old weights is multiplied. A CUDA graph freezes the step's forward without
  // its conversion, so there the Trainer must convert before the replay; the replaying CPU device
  // runs the step's host code again and checks only the rest.
  const DatasetSplits data = trident::testing::small_splits(400, 100);
  SideQueueCpuDevice replaying(false);  // captures and replays on any machine
  std::vector<Device*> devices = trident::testing::devices_under_test();
  devices.push_back(&replaying);
  for (Device* d : devices) {
    if (!d->supports(DType::bf16)) continue;
    DYNAMIC_SECTION(d->info().id() << " (" << d->info().name << ")") {
      TrainOptions o = options_with("sgd");
      o.batch = 400;
      o.precision = Precision::bf16;
      Trainer trainer({d}, four_layer_mlp, data, o);
      trainer.train_epoch();
      const double trained = trainer.train_epoch().train_loss;
      d->fill(trainer.network().parameters(), 0.0f);
      const double zeroed = trainer.train_epoch().train_loss;
      CHECK(std::abs(trained - std::log(10.0)) > 1e-3);  // a stale copy would show
      CHECK(zeroed == Approx(std::log(10.0)).epsilon(1e-6));
      if (d == &replaying) CHECK(replaying.captures == 1);
    }
  }
}
