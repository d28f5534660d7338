// End-to-end conformance: the seed MLP and CNN and the ResNet trained for K steps from the same
// initial weights on the same batches give the same losses and weights on every device as on the
// CPU reference device, in fp32 and in bf16 and fp16 (against cpu:0 in the same precision and
// against the device's fp32 run); N replicas (data parallelism) give the model one device gives
// with the same batch; precision names and their errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>

#include "trident/core/registry.h"
#include "trident/models/trainer.h"
#include "trident/models/zoo.h"
#include "trident/core/error.h"
#include "trident/models/cli.h"
#include "tests/conformance.h"
#include "tests/dtype_check.h"
#include "tests/reference_device.h"
#include "tests/test_files.h"
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

// ---- bf16 and fp16 ---------------------------------------------------------------------------
//
// What K steps in a 16-bit precision may differ by, as updates (w_K - w_0), relative to the
// largest update of the reference run: max |dU| / max |U|.
//
// A step's gradient passes through n_r 16-bit roundings of activations and gradients (MLP: the
// hidden layer and the logits forward, the head's gradient, the hidden gradient, the compute
// copy of the weights: 5; CNN: 9; ResNet: 14 convolutions and batch norms). Against the same
// device's fp32 run each errs by up to u16 in every element, and the contract lets a path store
// as many intermediates again in 16-bit (tests/dtype_check.h, r): 2 n_r u16 per step, relative.
// Two devices in the same precision round the same float32 values except at rounding
// boundaries and in those extra intermediates: the same 2 n_r u16 bounds them.
//
// Training then grows a difference: the later gradients are taken at other weights, and a
// ReLU or max-pool choice that flips moves a whole term. That growth G over these K steps is
// the model's, not the precision's; it is measured in float32, where the same runs on cpu:0
// and on another device (opencl:0, the float64 test double) differ by n_r float32 roundings:
// max |dU| / max |U| = 4.9e-7 (MLP), 2.5e-6 (CNN), 2.3e-3 (ResNet), against n_r u32 =
// 3.0e-7, 5.4e-7, 8.3e-7: G = 1.6, 4.6, 2700. Rounded up to 2 and 5, the bound
// 2 n_r u16 G is bf16: 0.078 (MLP), 0.35 (CNN); fp16: 0.0098, 0.044. Measured on cpu:0 against
// fp32 (and the test double against cpu:0): bf16 0.0036 (0.0019), 0.035 (0.033); fp16 0.0021
// (0.00059), 0.022 (0.018). The losses of each epoch agree within the same relative bound.
//
// The ResNet's G (OneCycle reaches lr 0.1 at once, batch 20 through batch norm) turns any
// 16-bit rounding into an O(1) difference within these 8 steps: 2 n_r u16 G > 1 for both
// types (measured: 0.23 in bf16, 0.20 in fp16 against fp32). Its check is that the runs train
// alike: updates within half the largest update, losses within 5%.
//
// fp16 runs start from a loss scale that no step overflows (the scale stays where it started,
// checked): a skipped step would make the runs differ by a whole update, which
// tests/test_loss_scaling.cpp covers on its own.
struct TrainingBound {
  double update = 0.0, loss = 0.0;
};

TrainingBound training_bound(Precision p, double roundings, double growth) {
  const double b = 2.0 * roundings * unit_roundoff(compute_dtype(p)) * growth;
  if (b >= 0.5) return {0.5, 0.05};  // saturated: the runs only train alike
  return {b, b};
}

std::vector<float> update_of(const RunResult& r, const std::vector<float>& initial) {
  std::vector<float> u(r.weights.size());
  for (size_t i = 0; i < u.size(); ++i) u[i] = float(double(r.weights[i]) - double(initial[i]));
  return u;
}

std::vector<float> initial_weights(const std::string& model, const DatasetSplits& data, TrainOptions o) {
  Device& cpu = DeviceRegistry::global().device("cpu:0");
  Trainer t({&cpu}, find_model(model).factory(), data, o);
  return t.network().parameters().to_host();
}

// The scale of an fp16 run's loss scaler after the run (0 in other precisions).
float final_loss_scale(const std::vector<Device*>& devices, const std::string& model,
                       TrainOptions o, int epochs, const DatasetSplits& data, RunResult& out) {
  Trainer t(devices, find_model(model).factory(), data, o);
  for (int e = 0; e < epochs; ++e) out.losses.push_back(t.train_epoch().train_loss);
  out.weights = t.network().parameters().to_host();
  return o.precision == Precision::fp16 ? t.loss_scale() : 0.0f;
}

// Trains `model` in precision o.precision on cpu:0 and on every other device holding its type,
// and in fp32 on each, and checks the updates and losses against training_bound(). The float64
// test double is compared with cpu:0 only (its fp32 run is the float32 suite's, and slow).
void check_16bit_training(const std::string& model, TrainOptions o, int epochs,
                          const DatasetSplits& data, double roundings, double growth,
                          bool with_test_double) {
  Device& cpu = DeviceRegistry::global().device("cpu:0");
  const Precision p = *o.precision;
  const TrainingBound bound = training_bound(p, roundings, growth);
  const std::vector<float> w0 = initial_weights(model, data, o);
  RunResult ref;
  const float ref_scale = final_loss_scale({&cpu}, model, o, epochs, data, ref);
  const std::vector<float> ref_update = update_of(ref, w0);
  TrainOptions o32 = o;
  o32.precision = Precision::fp32;
  for (Device* d : trident::testing::devices_holding(compute_dtype(p))) {
    const bool test_double = d == &trident::testing::half_reference_device();
    if (test_double && !with_test_double) continue;
    INFO(precision_name(p) << " " << model << " on " << d->info().id());
    RunResult got;
    if (d == &cpu) {
      got = ref;
    } else {
      const float scale = final_loss_scale({d}, model, o, epochs, data, got);
      CHECK(scale == ref_scale);
      const double err = relative_max_error(update_of(got, w0), ref_update);
      INFO("max update difference against cpu:0 relative to the largest update: " << err
           << " (bound " << bound.update << ")");
      CHECK(err < bound.update);
      for (size_t e = 0; e < ref.losses.size(); ++e)
        CHECK(got.losses[e] == Approx(ref.losses[e]).epsilon(bound.loss));
    }
    if (p == Precision::fp16) CHECK(ref_scale == o.initial_loss_scale);  // no step skipped
    if (test_double) continue;
    const RunResult fp32 = train_steps({d}, model, o32, epochs, data);
    const double err32 = relative_max_error(update_of(got, w0), update_of(fp32, w0));
    INFO("max update difference against the fp32 run relative to its largest update: " << err32
         << " (bound " << bound.update << ")");
    CHECK(err32 < bound.update);
    for (size_t e = 0; e < fp32.losses.size(); ++e)
      CHECK(got.losses[e] == Approx(fp32.losses[e]).epsilon(bound.loss));
  }
}

TEST_CASE("conformance: K training steps in bf16 and fp16 agree with cpu:0 in the same "
          "precision on every device holding the type, and with the device's own fp32 run",
          "[conformance][training][dtypes]") {
  const DatasetSplits data = trident::testing::small_splits(800, 100);
  TrainOptions o;
  o.batch = 100;  // 8 steps per epoch, 2 epochs = 16 steps
  o.initial_loss_scale = 1024.0f;
  for (const Precision p : {Precision::bf16, Precision::fp16}) {
    o.precision = p;
    check_16bit_training("mlp", o, 2, data, 5.0, 2.0, true);
    check_16bit_training("cnn", o, 2, data, 9.0, 5.0, true);
  }
}

// K ResNet steps in precision p against cpu:0 and the device's fp32 run. One test case per
// precision, so that each runs in its own process under compute-sanitizer's racecheck.
void check_16bit_resnet(Precision p) {
  const DatasetSplits data = trident::testing::small_splits(80, 40);
  const ModelRecipe& recipe = find_model("resnet");
  TrainOptions o;
  o.optimizer = recipe.optimizer;
  o.schedule = recipe.schedule;
  o.loss = recipe.loss;
  o.batch = 20;  // 4 steps per epoch, 2 epochs
  o.epochs = 2;
  o.augment.crop_padding = 2;
  o.augment.horizontal_flip = true;
  o.label_smoothing = 0.1f;
  o.initial_loss_scale = 1024.0f;
  o.precision = p;
  // The saturated bound (see above); the float64 test double is left out: its loops take
  // minutes for a ResNet.
  check_16bit_training("resnet", o, 2, data, 14.0, 2700.0, false);
}

TEST_CASE("conformance: K ResNet steps in bf16 (batch norm, residual blocks, augmentation) agree "
          "with cpu:0 and with the device's fp32 run", "[conformance][training][resnet][dtypes]") {
  check_16bit_resnet(Precision::bf16);
}

TEST_CASE("conformance: K ResNet steps in fp16 (batch norm, residual blocks, augmentation) agree "
          "with cpu:0 and with the device's fp32 run", "[conformance][training][resnet][dtypes]") {
  check_16bit_resnet(Precision::fp16);
}

TEST_CASE("precision: names, --precision and TRIDENT_PRECISION, and refusals that name the "
          "option, the variable or the device", "[precision][cli]") {
  CHECK(parse_precision("fp32") == Precision::fp32);
  CHECK(parse_precision("float32") == Precision::fp32);
  CHECK(parse_precision("tf32") == Precision::tf32);
  CHECK(parse_precision("bf16") == Precision::bf16);
  CHECK(parse_precision("bfloat16") == Precision::bf16);
  CHECK(parse_precision("fp16") == Precision::fp16);
  CHECK(parse_precision("float16") == Precision::fp16);
  CHECK(parse_precision("half") == Precision::fp16);
  for (const Precision p : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16})
    CHECK(parse_precision(precision_name(p)) == p);
  CHECK_THROWS_WITH(parse_precision("fp8"),
                    Catch::Contains("unknown precision 'fp8' (use fp32, tf32, bf16 or fp16)"));
  CHECK_THROWS_AS(parse_precision("BF16"), UsageError);
  CHECK(compute_dtype(Precision::bf16) == DType::bf16);
  CHECK(compute_dtype(Precision::fp16) == DType::f16);
  CHECK(compute_dtype(Precision::tf32) == DType::f32);
  CHECK(uses_loss_scaling(Precision::fp16));
  CHECK_FALSE(uses_loss_scaling(Precision::bf16));

  // The network: the precision is fixed before build, and input of another type is refused.
  Device& cpu = DeviceRegistry::global().device("cpu:0");
  Network net = make_seed_mlp();
  net.set_precision(Precision::bf16);
  net.build(cpu, {1, 28, 28}, 1);
  CHECK(net.compute_dtype() == DType::bf16);
  CHECK(net.input_buffer(4).dtype() == DType::bf16);
  CHECK_THROWS_WITH(net.set_precision(Precision::fp16), Catch::Contains("set_precision() after build()"));
  StepContext ctx;  // the device alone (aggregate braces would leave members to -Wextra)
  ctx.device = &cpu;
  CHECK_THROWS_WITH(net.forward(ctx, Tensor::zeros(cpu, {4, 1, 28, 28})),
                    Catch::Contains("runs in bf16 and expects BF16 input, got F32"));

  // A device that holds no 16-bit type refuses the precision, naming itself.
  trident::testing::ReferenceDevice plain;
  const DatasetSplits data = trident::testing::small_splits(200, 100);
  for (const Precision p : {Precision::bf16, Precision::fp16}) {
    TrainOptions o;
    o.batch = 100;
    o.precision = p;
    CHECK_THROWS_WITH(Trainer({&plain}, [] { return make_seed_mlp(); }, data, o),
                      Catch::Contains(std::string("reference:0 (reference) cannot run precision ") +
                                      precision_name(p)) &&
                          Catch::Contains("use fp32 or tf32 there"));
  }
  TrainOptions bad_scale;
  bad_scale.precision = Precision::fp16;
  bad_scale.initial_loss_scale = 0.0f;
  CHECK_THROWS_WITH(Trainer({&cpu}, [] { return make_seed_mlp(); }, data, bad_scale),
                    Catch::Contains("initial loss scale must be positive and finite"));

  // TRIDENT_PRECISION when no precision is given; a bad value names the variable.
  TrainOptions o;
  o.batch = 100;
  setenv("TRIDENT_PRECISION", "bfloat16", 1);
  CHECK(Trainer({&cpu}, [] { return make_seed_mlp(); }, data, o).precision() == Precision::bf16);
  o.precision = Precision::fp32;  // an explicit choice wins
  CHECK(Trainer({&cpu}, [] { return make_seed_mlp(); }, data, o).precision() == Precision::fp32);
  o.precision.reset();
  setenv("TRIDENT_PRECISION", "fp64", 1);
  CHECK_THROWS_WITH(Trainer({&cpu}, [] { return make_seed_mlp(); }, data, o),
                    Catch::Contains("TRIDENT_PRECISION: unknown precision 'fp64'"));

  // The CLI: --precision, the variable, and their errors (exit status 2, one line naming them).
  const std::vector<std::string> train = {"train", "--model", "mlp", "--epochs", "1", "--batch", "100",
                                          "--train-limit", "200", "--test-limit", "100", "--json",
                                          "--data", trident::testing::real_data_available()
                                                        ? default_data_directory()
                                                        : std::string("/nonexistent")};
  if (trident::testing::real_data_available()) {
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> args = train;
      args.insert(args.end(), extra.begin(), extra.end());
      return trident::testing::cli(args);
    };
    const auto bad_env = with({});
    CHECK(bad_env.status == 2);
    CHECK_THAT(bad_env.err, Catch::Contains("TRIDENT_PRECISION: unknown precision 'fp64'"));
    unsetenv("TRIDENT_PRECISION");
    const auto bf16 = with({"--precision", "bf16"});
    CHECK(bf16.status == 0);
    CHECK_THAT(bf16.err, Catch::Contains(", bf16"));
    setenv("TRIDENT_PRECISION", "fp16", 1);
    const auto fp16 = with({});
    CHECK(fp16.status == 0);
    CHECK_THAT(fp16.err, Catch::Contains(", fp16"));
    const auto bad = with({"--precision", "fp8"});
    CHECK(bad.status == 2);
    CHECK_THAT(bad.err, Catch::Contains("--precision: unknown precision 'fp8'"));
  } else {
    WARN("SKIPPED the CLI part: no data set at " << default_data_directory());
  }
  unsetenv("TRIDENT_PRECISION");
}
