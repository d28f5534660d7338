// End-to-end conformance: the seed MLP and CNN and the ResNet trained for K steps from the same
// initial weights on the same batches give the same losses and weights on every device as on the
// CPU reference device; and N replicas (data parallelism) give the model one device gives with
// the same batch.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>

#include "trident/core/registry.h"
#include "trident/models/trainer.h"
#include "trident/models/zoo.h"
#include "tests/conformance.h"
#include "tests/test_data.h"

using namespace trident;

namespace trident {
std::unique_ptr<Backend> make_cpu_backend();
}

namespace {

struct RunResult {
  std::vector<double> losses;  // per epoch (each epoch = a few steps)
  std::vector<float> weights;
};

RunResult train_steps(const std::vector<Device*>& devices, const std::string& model,
                      TrainOptions o, int epochs, const DatasetSplits& data) {
  Trainer t(devices, find_model(model).factory(), data, o);
  RunResult r;
  for (int e = 0; e < epochs; ++e) r.losses.push_back(t.train_epoch().train_loss);
  r.weights = t.network().parameters().to_host();
  return r;
}

// max |a-b| / max(|b|) over the whole flat buffer.
double relative_max_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

// Bound on weights after K steps: float32 rounding amplified by training, larger with TF32.
double weight_bound(const Device& d) {
  const bool tf32 = trident::testing::lowercase(d.info().detail).find("tf32") != std::string::npos;
  return tf32 ? 5e-2 : 2e-3;
}

}  // namespace

TEST_CASE("conformance: K training steps agree with the CPU on every device", "[conformance][training]") {
  const DatasetSplits data = trident::testing::small_splits(800, 100);
  Device& reference = DeviceRegistry::global().device("cpu:0");
  TrainOptions o;
  o.batch = 100;  // 8 steps per epoch, 2 epochs = 16 steps
  for (const std::string model : {"mlp", "cnn"}) {
    const RunResult ref = train_steps({&reference}, model, o, 2, data);
    for (Device* d : trident::testing::devices_under_test()) {
      if (d == &reference) continue;
      DYNAMIC_SECTION(model << " on " << d->info().id()) {
        const RunResult got = train_steps({d}, model, o, 2, data);
        for (size_t e = 0; e < ref.losses.size(); ++e)
          CHECK(got.losses[e] == Approx(ref.losses[e]).epsilon(1e-3));
        const double err = relative_max_error(got.weights, ref.weights);
        INFO("max weight difference relative to the largest weight: " << err);
        CHECK(err < weight_bound(*d));
      }
    }
  }
}

TEST_CASE("conformance: K ResNet training steps (batch norm, residual blocks, augmentation, "
          "OneCycle, cross-entropy) agree with the CPU on every device",
          "[conformance][training][resnet]") {
  const DatasetSplits data = trident::testing::small_splits(80, 40);
  Device& reference = DeviceRegistry::global().device("cpu:0");
  TrainOptions o = [] {
    const ModelRecipe& r = find_model("resnet");
    TrainOptions t;
    t.optimizer = r.optimizer;
    t.schedule = r.schedule;
    t.loss = r.loss;
    return t;
  }();
  o.batch = 20;  // 4 steps per epoch, 2 epochs
  o.epochs = 2;
  o.augment.crop_padding = 2;
  o.augment.horizontal_flip = true;
  o.label_smoothing = 0.1f;
  const RunResult ref = train_steps({&reference}, "resnet", o, 2, data);
  for (Device* d : trident::testing::devices_under_test()) {
    if (d == &reference) continue;
    DYNAMIC_SECTION("resnet on " << d->info().id()) {
      const RunResult got = train_steps({d}, "resnet", o, 2, data);
      for (size_t e = 0; e < ref.losses.size(); ++e)
        CHECK(got.losses[e] == Approx(ref.losses[e]).epsilon(2e-3));
      const double err = relative_max_error(got.weights, ref.weights);
      INFO("max weight difference relative to the largest weight: " << err);
      CHECK(err < weight_bound(*d));
    }
  }
}

TEST_CASE("conformance: 2 replicas with all-reduce equal 1 device at the same global batch",
          "[conformance][data-parallel]") {
  setenv("TRIDENT_CPU_DEVICES", "2", 1);
  DeviceRegistry two;
  two.add_backend(make_cpu_backend());
  unsetenv("TRIDENT_CPU_DEVICES");
  REQUIRE(two.all_devices().size() == 2);
  std::vector<Device*> pair = two.all_devices();
  const DatasetSplits data = trident::testing::small_splits(800, 100);
  for (const std::string model : {"mlp", "cnn"}) {
    DYNAMIC_SECTION(model) {
      TrainOptions o;
      o.batch = 100;
      const RunResult one = train_steps({pair[0]}, model, o, 1, data);
      const RunResult both = train_steps(pair, model, o, 1, data);
      const double err = relative_max_error(both.weights, one.weights);
      INFO("max weight difference relative to the largest weight: " << err);
      CHECK(err < 1e-4);
      CHECK(both.losses[0] == Approx(one.losses[0]).epsilon(1e-4));
    }
  }
}

TEST_CASE("conformance: model averaging every step with plain SGD equals gradient all-reduce",
          "[conformance][data-parallel]") {
  setenv("TRIDENT_CPU_DEVICES", "2", 1);
  DeviceRegistry two;
  two.add_backend(make_cpu_backend());
  unsetenv("TRIDENT_CPU_DEVICES");
  std::vector<Device*> pair = two.all_devices();
  REQUIRE(pair.size() == 2);
  const DatasetSplits data = trident::testing::small_splits(800, 100);
  TrainOptions o;
  o.batch = 100;
  o.optimizer.momentum = 0.0f;
  const RunResult reduce = train_steps(pair, "mlp", o, 1, data);
  o.average_every = 1;
  const RunResult average = train_steps(pair, "mlp", o, 1, data);
  CHECK(relative_max_error(average.weights, reduce.weights) < 1e-4);
  // Averaging every 4 steps is a different algorithm: it must still train, and differ.
  o.average_every = 4;
  const RunResult sparse = train_steps(pair, "mlp", o, 1, data);
  CHECK(relative_max_error(sparse.weights, reduce.weights) > 1e-6);
  CHECK(sparse.losses[0] < 2.3);
}
