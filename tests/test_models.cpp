// Model-level tests: gradients through whole networks (every layer kind, batch norm, residual
// blocks, every loss) against finite differences on every device, shape inference and its
// errors, evaluation mode, the fused head, training that learns, a backend of only the required
// slots training the seed models, and checkpoints that resume exactly and reject bad files.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>

#include "trident/core/error.h"
#include "trident/core/registry.h"
#include "trident/core/safetensors.h"
#include "trident/models/layers.h"
#include "trident/models/state_dict.h"
#include "trident/models/trainer.h"
#include "trident/models/zoo.h"
#include "tests/conformance.h"
#include "tests/reference_device.h"
#include "tests/test_data.h"

using namespace trident;
using trident::testing::Tolerance;

namespace {

Device& cpu() { return DeviceRegistry::global().device("cpu"); }

std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / "trident_model_tests";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// The seed models' layer kinds: conv, pool (+ fused relu), dropout2d, flatten, linear (+ fused
// relu), dropout, log_softmax.
Network small_cnn() {
  Network net("small");
  net.add("conv1", Conv2d(3, 3));
  net.add("pool1", MaxPool2d(2));
  net.add("relu1", ReLU());
  net.add("drop2d", Dropout2d(0.3f));
  net.add("flatten", Flatten());
  net.add("fc1", Linear(6));
  net.add("relu2", ReLU());
  net.add("drop", Dropout(0.25f));
  net.add("fc2", Linear(4));
  net.add("log_softmax", LogSoftmax());
  return net;
}

// Everything the model issue added: batch norm (2d and 1d), residual blocks (identity and
// projection shortcuts), convolutions without bias, rectangular kernels, strides and padding,
// average and global pooling, every activation, linear without bias; a ReLU after batch norm
// (fused into it).
Network modern_net() {
  Network net("modern");
  net.add("conv1", Conv2d(4, 3).padding(1).bias(false));
  net.add("bn1", BatchNorm2d());
  net.add("act1", ReLU());
  Sequential body;
  body.add("conv1", Conv2d(4, 3).padding(1).bias(false));
  body.add("bn1", BatchNorm2d());
  body.add("gelu", GELU());
  body.add("conv2", Conv2d(4, 3).padding(1));
  body.add("bn2", BatchNorm2d());
  net.add("layer1", Residual(std::move(body)));
  Sequential body2;
  body2.add("conv1", Conv2d(8, 3).stride(2).padding(1).bias(false));
  body2.add("bn1", BatchNorm2d());
  body2.add("tanh", Tanh());
  body2.add("conv2", Conv2d(8, 1).kernel(1, 3).padding(0, 1).bias(false));
  body2.add("bn2", BatchNorm2d());
  Sequential shortcut;
  shortcut.add("0", Conv2d(8, 1).stride(2).bias(false));
  shortcut.add("1", BatchNorm2d());
  net.add("layer2", Residual(std::move(body2), std::move(shortcut)));
  net.add("avg", AvgPool2d(2).stride(1, 1));
  net.add("leaky", LeakyReLU(0.1f));
  net.add("gap", GlobalAvgPool2d());
  net.add("flatten", Flatten());
  net.add("fc1", Linear(6).bias(false));
  net.add("bn3", BatchNorm1d());
  net.add("sigmoid", Sigmoid());
  net.add("drop", Dropout(0.2f));
  net.add("fc2", Linear(4));
  return net;
}

Tensor random_input(Device& d, const Shape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(shape_numel(shape)));
  for (float& v : x) v = u(rng);
  return Tensor::from_host(d, shape, x);
}

// The analytic gradient of the mean loss against central differences over a spread of the
// parameters (every tensor). A few parameters sit next to a ReLU or max-pool kink where central
// differences straddle it; a wrong gradient formula is off almost everywhere, so the median error
// must be tight and only a few parameters may miss the per-element bound.
void check_network_gradients(Device& d, Network net, const Shape& sample, int64_t batch,
                             const std::vector<int32_t>& label_values, const LossSpec& spec) {
  net.build(d, sample, 5);
  Shape shape{batch};
  shape.insert(shape.end(), sample.begin(), sample.end());
  Tensor input = random_input(d, shape, 11);
  Tensor labels = Tensor::from_host(d, {batch}, label_values);
  Tensor loss = Tensor::zeros(d, {1});
  Tensor step_state = Tensor::zeros(d, {kStepStateCount}, DType::i32);
  StepContext ctx;
  ctx.device = &d;
  ctx.step_state = step_state;
  ctx.seed = 3;
  auto loss_at = [&](const std::vector<float>& params) {
    net.parameters().copy_from_host(params.data(), params.size() * sizeof(float));
    net.forward_loss(ctx, input, labels, spec, loss, false);
    return static_cast<double>(loss.to_host()[0]);
  };
  const std::vector<float> p0 = net.parameters().to_host();
  loss_at(p0);
  net.backward(ctx);
  const std::vector<float> analytic = net.gradients().to_host();
  const float eps = 2e-3f;
  std::vector<double> errors;
  size_t misses = 0;
  const size_t stride = std::max<size_t>(1, p0.size() / 150);
  for (size_t i = 0; i < p0.size(); i += stride) {
    std::vector<float> p = p0;
    p[i] = p0[i] + eps;
    const double up = loss_at(p);
    p[i] = p0[i] - eps;
    const double down = loss_at(p);
    const double numeric = (up - down) / (2.0 * eps);
    errors.push_back(std::abs(numeric - analytic[i]) / std::max(1e-2, std::abs(numeric)));
    if (std::abs(numeric - analytic[i]) > 2e-3 + 3e-2 * std::abs(numeric)) {
      ++misses;
      UNSCOPED_INFO("parameter " << i << " numeric " << numeric << " analytic " << analytic[i]);
    }
  }
  std::sort(errors.begin(), errors.end());
  const double median = errors[errors.size() / 2];
  INFO("checked " << errors.size() << " parameters; median relative error " << median
                  << ", worst " << errors.back() << ", " << misses << " outside the bound");
  CHECK(median < 1e-2);
  CHECK(misses <= errors.size() / 20);
}

// One test case per network and loss, so that each runs in its own process (and within the
// per-case limit) under compute-sanitizer's racecheck.
void check_gradients_on_every_device(const std::function<void(Device&)>& check) {
  for (Device* device : trident::testing::devices_under_test()) {
    DYNAMIC_SECTION(device->info().id()) {
      Device& d = *device;
      if (trident::testing::uses_tf32(d)) {
        // TF32's 10-bit mantissa makes central differences of a float loss meaningless.
        WARN("SKIPPED on " << d.info().id() << ": finite differences need full FP32 GEMMs (TF32 on)");
        continue;
      }
      check(d);
    }
  }
}

}  // namespace

TEST_CASE("models: network gradients match finite differences on every device: seed layers, "
          "NLL through the fused head", "[models][gradients]") {
  check_gradients_on_every_device([](Device& d) {
    check_network_gradients(d, small_cnn(), {2, 8, 8}, 3, {1, 3, 0}, {LossKind::nll, 0.0f});
  });
}

TEST_CASE("models: network gradients match finite differences on every device: batch norm, "
          "residual blocks, every activation, cross-entropy with smoothing", "[models][gradients]") {
  check_gradients_on_every_device([](Device& d) {
    check_network_gradients(d, modern_net(), {2, 6, 6}, 4, {1, 3, 0, 2},
                            {LossKind::cross_entropy, 0.1f});
  });
}

TEST_CASE("models: network gradients match finite differences on every device: the modern "
          "network under MSE", "[models][gradients]") {
  check_gradients_on_every_device([](Device& d) {
    check_network_gradients(d, modern_net(), {2, 6, 6}, 4, {0, 3, 3, 2}, {LossKind::mse, 0.0f});
  });
}

TEST_CASE("models: network gradients match finite differences on every device: activations "
          "one after another (each needing its own output)", "[models][gradients]") {
  check_gradients_on_every_device([](Device& d) {
    Network net("chain");
    net.add("conv", Conv2d(3, 3).padding(1).bias(false));
    net.add("bn", BatchNorm2d());
    net.add("relu", ReLU());
    net.add("sigmoid", Sigmoid());
    Sequential body;
    body.add("conv", Conv2d(3, 3).padding(1));
    body.add("bn", BatchNorm2d());
    net.add("block", Residual(std::move(body)));  // y = relu(body(x) + x)
    net.add("sigmoid_after_block", Sigmoid());
    net.add("flatten", Flatten());
    net.add("fc1", Linear(6));
    net.add("relu2", ReLU());
    net.add("tanh", Tanh());
    net.add("fc2", Linear(4));
    check_network_gradients(d, std::move(net), {2, 5, 5}, 4, {1, 3, 0, 2},
                            {LossKind::cross_entropy, 0.0f});
  });
}

// Residual blocks one after the other: each block's input gradient goes back through the
// activation of the block before as it sums its branches (Device::unary_backward_sum), with
// identity and projection shortcuts and each activation a block may end with.
TEST_CASE("models: network gradients match finite differences on every device: residual "
          "blocks one after another", "[models][gradients]") {
  check_gradients_on_every_device([](Device& d) {
    auto body = [](int64_t channels, int64_t stride) {
      Sequential b;
      b.add("conv1", Conv2d(channels, 3).stride(stride).padding(1).bias(false));
      b.add("bn1", BatchNorm2d());
      b.add("relu", ReLU());
      b.add("conv2", Conv2d(channels, 3).padding(1));
      return b;
    };
    Network net("blocks");
    net.add("stem", Conv2d(3, 3).padding(1));
    net.add("block1", Residual(body(3, 1)));  // ReLU after the sum
    net.add("block2", Residual(body(3, 1), Sequential(), UnaryOp::leaky_relu, 0.1f));
    Sequential shortcut;
    shortcut.add("0", Conv2d(4, 1).stride(2).bias(false));
    net.add("block3", Residual(body(4, 2), std::move(shortcut), UnaryOp::tanh));
    net.add("block4", Residual(body(4, 1), Sequential(), UnaryOp::sigmoid));
    net.add("block5", Residual(body(4, 1), Sequential(), UnaryOp::identity));
    net.add("block6", Residual(body(4, 1)));
    net.add("gap", GlobalAvgPool2d());
    net.add("flatten", Flatten());
    net.add("fc", Linear(4));
    check_network_gradients(d, std::move(net), {2, 6, 6}, 4, {1, 3, 0, 2},
                            {LossKind::cross_entropy, 0.0f});
  });
}

TEST_CASE("models: shapes are inferred from the samples, and bad ones are named",
          "[models][shapes]") {
  Network net = modern_net();
  net.build(cpu(), {2, 6, 6}, 1);
  std::set<std::string> names;
  for (const NamedParameter& p : net.named_parameters()) names.insert(p.name);
  CHECK(names.count("conv1.weight"));
  CHECK_FALSE(names.count("conv1.bias"));            // bias(false)
  CHECK(names.count("layer1.conv2.bias"));          // the body's layers in the block's namespace
  CHECK(names.count("layer2.shortcut.0.weight"));   // the shortcut's under "shortcut"
  CHECK(names.count("bn3.weight"));
  CHECK(net.named_parameters().front().shape == Shape{4, 2, 3, 3});  // input channels inferred
  std::set<std::string> buffers;
  for (const NamedParameter& b : net.named_buffers()) buffers.insert(b.name);
  CHECK(buffers.count("layer2.shortcut.1.running_var"));
  CHECK(net.output_sample_shape() == Shape{4});
  for (const NamedParameter& p : net.named_parameters())
    if (p.name == "fc1.weight") CHECK(p.shape == Shape{6, 8});  // in_features inferred
  // The summary shows each layer's output per sample (the build's batch of 1 is not a sample's).
  const std::string summary = net.summary();
  CHECK_THAT(summary, Catch::Contains("conv1 (Conv2d) -> [4, 6, 6]") &&
                          !Catch::Contains("-> [1, "));

  Network wrong("wrong");
  wrong.add("flatten", Flatten());
  wrong.add("fc1", Linear(10).in_features(100));
  CHECK_THROWS_WITH(wrong.build(cpu(), {1, 28, 28}, 1),
                    Catch::Contains("fc1") && Catch::Contains("100 input features"));
  Network no_flatten("no_flatten");
  no_flatten.add("fc", Linear(10));
  CHECK_THROWS_WITH(no_flatten.build(cpu(), {1, 28, 28}, 1), Catch::Contains("Flatten"));
  Network bad_block("bad_block");
  Sequential body;
  body.add("conv", Conv2d(8, 3).stride(2).padding(1));
  bad_block.add("block", Residual(std::move(body)));
  CHECK_THROWS_WITH(bad_block.build(cpu(), {4, 8, 8}, 1),
                    Catch::Contains("block") && Catch::Contains("shortcut"));
  Network duplicate("duplicate");
  duplicate.add("fc", Linear(3));
  CHECK_THROWS_WITH(duplicate.add("fc", Linear(3)), Catch::Contains("two layers are named 'fc'"));
}

TEST_CASE("models: evaluation mode uses batch-norm running statistics and no dropout",
          "[models][eval]") {
  Device& d = cpu();
  Network net = modern_net();
  net.build(d, {2, 6, 6}, 9);
  Tensor state = Tensor::zeros(d, {kStepStateCount}, DType::i32);
  StepContext train_ctx{&d, state, true, 3, 0};
  StepContext eval_ctx{&d, state, false, 3, 0};
  Tensor a = random_input(d, {4, 2, 6, 6}, 1);
  Tensor b = random_input(d, {4, 2, 6, 6}, 2);
  const std::vector<float> running_before = net.buffers().to_host();
  const std::vector<float> eval_a = net.forward(eval_ctx, a).to_host();
  CHECK(net.buffers().to_host() == running_before);  // evaluation changes no statistic
  // Evaluation output of a sample does not depend on the rest of the batch.
  Tensor a_then_b = Tensor::empty(d, {8, 2, 6, 6});
  a_then_b.view(0, {4, 2, 6, 6}).copy_from(a);
  a_then_b.view(4 * 72, {4, 2, 6, 6}).copy_from(b);
  const std::vector<float> eval_ab = net.forward(eval_ctx, a_then_b).to_host();
  TRIDENT_CHECK_CLOSE(std::vector<float>(eval_ab.begin(), eval_ab.begin() + 16), eval_a,
                      (Tolerance{1e-6, 1e-5}));
  // Training updates the running statistics, and its output depends on the batch.
  net.forward(train_ctx, a);
  CHECK(net.buffers().to_host() != running_before);
  const std::vector<float> train_a = net.forward(train_ctx, a).to_host();
  CHECK(train_a != eval_a);
}

TEST_CASE("models: the fused head equals the separate loss ops", "[models][log_softmax_nll]") {
  for (Device* device : trident::testing::devices_under_test()) {
    DYNAMIC_SECTION(device->info().id()) {
      Device& d = *device;
      const int64_t batch = 5;
      Tensor input = random_input(d, {batch, 2, 8, 8}, 21);
      Tensor labels = Tensor::from_host(d, {batch}, std::vector<int32_t>{1, 3, 0, 2, 3});
      Tensor state = Tensor::zeros(d, {kStepStateCount}, DType::i32);
      StepContext ctx{&d, state, true, 3, 0};
      // The seed network with NLL (the LogSoftmax fused into the head) and the same network
      // without its LogSoftmax under cross-entropy: the same loss and gradients.
      Network fused = small_cnn();
      fused.build(d, {2, 8, 8}, 5);
      Network plain("small");
      plain.add("conv1", Conv2d(3, 3));
      plain.add("pool1", MaxPool2d(2));
      plain.add("relu1", ReLU());
      plain.add("drop2d", Dropout2d(0.3f));
      plain.add("flatten", Flatten());
      plain.add("fc1", Linear(6));
      plain.add("relu2", ReLU());
      plain.add("drop", Dropout(0.25f));
      plain.add("fc2", Linear(4));
      plain.build(d, {2, 8, 8}, 5);
      Tensor fused_loss = Tensor::from_host(d, {1}, std::vector<float>{1.5f});
      Tensor plain_loss = Tensor::from_host(d, {1}, std::vector<float>{1.5f});
      fused.forward_loss(ctx, input, labels, {LossKind::nll, 0.0f}, fused_loss, true, 0.5f);
      fused.backward(ctx);
      plain.forward_loss(ctx, input, labels, {LossKind::cross_entropy, 0.0f}, plain_loss, true,
                         0.5f);
      plain.backward(ctx);
      TRIDENT_CHECK_CLOSE(fused_loss.to_host(), plain_loss.to_host(), (Tolerance{1e-6, 1e-6}));
      TRIDENT_CHECK_CLOSE(fused.gradients().to_host(), plain.gradients().to_host(),
                          (Tolerance{1e-6, 1e-4}));
      // Labels of the wrong shape are refused before anything runs; NLL needs a LogSoftmax.
      Tensor short_labels = Tensor::from_host(d, {2}, std::vector<int32_t>{0, 1});
      CHECK_THROWS_WITH(fused.forward_loss(ctx, input, short_labels, {}, fused_loss, true),
                        Catch::Contains("int32 labels [5]"));
      CHECK_THROWS_WITH(plain.forward_loss(ctx, input, labels, {LossKind::nll, 0.0f},
                                           plain_loss, true),
                        Catch::Contains("LogSoftmax"));
    }
  }
}

TEST_CASE("models: a ReLU fused into the batch norm before it equals the separate ops",
          "[models][batchnorm]") {
  for (Device* device : trident::testing::devices_under_test()) {
    DYNAMIC_SECTION(device->info().id()) {
      Device& d = *device;
      const int64_t batch = 6;
      Tensor input = random_input(d, {batch, 2, 7, 7}, 23);
      Tensor labels = Tensor::from_host(d, {batch}, std::vector<int32_t>{1, 3, 0, 2, 3, 1});
      Tensor state = Tensor::zeros(d, {kStepStateCount}, DType::i32);
      StepContext ctx{&d, state, true, 3, 0};
      StepContext eval_ctx{&d, state, false, 3, 0};
      // BatchNorm then ReLU (fused), and the same with an identity (dropout 0) between them,
      // which keeps them apart: 2d and 1d.
      auto make = [](bool fused) {
        Network net("bn_relu");
        net.add("conv", Conv2d(5, 3).padding(1).bias(false));
        net.add("bn1", BatchNorm2d());
        if (!fused) net.add("apart1", Dropout(0.0f));
        net.add("relu1", ReLU());
        net.add("flatten", Flatten());
        net.add("fc1", Linear(8));
        net.add("bn2", BatchNorm1d());
        if (!fused) net.add("apart2", Dropout(0.0f));
        net.add("relu2", ReLU());
        net.add("fc2", Linear(4));
        return net;
      };
      Network fused = make(true), plain = make(false);
      fused.build(d, {2, 7, 7}, 5);
      plain.build(d, {2, 7, 7}, 5);
      REQUIRE(fused.parameters().to_host() == plain.parameters().to_host());
      Tensor fused_loss = Tensor::zeros(d, {1}), plain_loss = Tensor::zeros(d, {1});
      fused.forward_loss(ctx, input, labels, {LossKind::cross_entropy, 0.0f}, fused_loss, false);
      fused.backward(ctx);
      plain.forward_loss(ctx, input, labels, {LossKind::cross_entropy, 0.0f}, plain_loss, false);
      plain.backward(ctx);
      TRIDENT_CHECK_CLOSE(fused_loss.to_host(), plain_loss.to_host(), (Tolerance{1e-6, 1e-6}));
      TRIDENT_CHECK_CLOSE(fused.gradients().to_host(), plain.gradients().to_host(),
                          (Tolerance{1e-6, 1e-5}));
      TRIDENT_CHECK_CLOSE(fused.buffers().to_host(), plain.buffers().to_host(),
                          (Tolerance{1e-6, 1e-6}));
      // The gradient is not trivially zero, and evaluation (running statistics) agrees too.
      const std::vector<float> grads = fused.gradients().to_host();
      CHECK(std::count(grads.begin(), grads.end(), 0.0f) < std::ptrdiff_t(grads.size() / 2));
      const std::vector<float> eval_fused = fused.forward(eval_ctx, input).to_host();
      TRIDENT_CHECK_CLOSE(eval_fused, plain.forward(eval_ctx, input).to_host(),
                          (Tolerance{1e-6, 1e-5}));
    }
  }
}

TEST_CASE("models: a residual block's sum and ReLU fused into its last batch norm equal the "
          "separate ops", "[models][batchnorm][residual]") {
  for (Device* device : trident::testing::devices_under_test()) {
    DYNAMIC_SECTION(device->info().id()) {
      Device& d = *device;
      const int64_t batch = 6;
      Tensor input = random_input(d, {batch, 2, 8, 8}, 29);
      Tensor labels = Tensor::from_host(d, {batch}, std::vector<int32_t>{1, 3, 0, 2, 3, 1});
      Tensor state = Tensor::zeros(d, {kStepStateCount}, DType::i32);
      StepContext ctx{&d, state, true, 3, 0};
      StepContext eval_ctx{&d, state, false, 3, 0};
      // Two blocks (identity and projection shortcuts) whose bodies end with a BatchNorm (fused:
      // Device::batchnorm_add_forward), and the same with an identity (dropout 0) after it,
      // which keeps the block's own sum pass.
      auto make = [](bool fused, UnaryOp post) {
        Network net("blocks");
        net.add("conv", Conv2d(4, 3).padding(1).bias(false));
        net.add("bn", BatchNorm2d());
        net.add("relu", ReLU());
        for (const int64_t out : {4, 6}) {
          Sequential body, shortcut;
          const int64_t stride = out == 4 ? 1 : 2;
          body.add("conv1", Conv2d(out, 3).stride(stride).padding(1).bias(false));
          body.add("bn1", BatchNorm2d());
          body.add("relu", ReLU());
          body.add("conv2", Conv2d(out, 3).padding(1).bias(false));
          body.add("bn2", BatchNorm2d());
          if (!fused) body.add("apart", Dropout(0.0f));
          if (out != 4) {
            shortcut.add("0", Conv2d(out, 1).stride(stride).bias(false));
            shortcut.add("1", BatchNorm2d());
          }
          net.add("block" + std::to_string(out),
                  Residual(std::move(body), std::move(shortcut), post));
        }
        net.add("pool", GlobalAvgPool2d());
        net.add("flatten", Flatten());
        net.add("fc", Linear(4));
        return net;
      };
      for (const UnaryOp post : {UnaryOp::relu, UnaryOp::identity}) {
        INFO("activation after the sum: " << unary_module_name(post));
        Network fused = make(true, post), plain = make(false, post);
        fused.build(d, {2, 8, 8}, 5);
        plain.build(d, {2, 8, 8}, 5);
        REQUIRE(fused.parameters().to_host() == plain.parameters().to_host());
        Tensor fused_loss = Tensor::zeros(d, {1}), plain_loss = Tensor::zeros(d, {1});
        for (int step = 0; step < 2; ++step) {  // the second reads the first's running statistics
          fused.forward_loss(ctx, input, labels, {LossKind::cross_entropy, 0.0f}, fused_loss,
                             false);
          fused.backward(ctx);
          plain.forward_loss(ctx, input, labels, {LossKind::cross_entropy, 0.0f}, plain_loss,
                             false);
          plain.backward(ctx);
        }
        TRIDENT_CHECK_CLOSE(fused_loss.to_host(), plain_loss.to_host(), (Tolerance{1e-6, 1e-6}));
        TRIDENT_CHECK_CLOSE(fused.gradients().to_host(), plain.gradients().to_host(),
                            (Tolerance{1e-6, 1e-5}));
        TRIDENT_CHECK_CLOSE(fused.buffers().to_host(), plain.buffers().to_host(),
                            (Tolerance{1e-6, 1e-6}));
        const std::vector<float> grads = fused.gradients().to_host();
        CHECK(std::count(grads.begin(), grads.end(), 0.0f) < std::ptrdiff_t(grads.size() / 2));
        TRIDENT_CHECK_CLOSE(fused.forward(eval_ctx, input).to_host(),
                            plain.forward(eval_ctx, input).to_host(), (Tolerance{1e-6, 1e-5}));
      }
    }
  }
}

TEST_CASE("models: the seed MLP learns Fashion-MNIST (loss falls by half in 200 steps)",
          "[models][training]") {
  const DatasetSplits data = trident::testing::small_splits(10000, 2000);
  TrainOptions o;
  o.batch = 100;  // 100 steps per epoch, 2 epochs
  Trainer trainer({&cpu()}, [] { return make_seed_mlp(); }, data, o);
  const EvalStats before = trainer.evaluate();
  const EpochStats e1 = trainer.train_epoch();
  const EpochStats e2 = trainer.train_epoch();
  const EvalStats after = trainer.evaluate();
  INFO("data " << data.train.source() << ": test loss " << before.loss << " -> " << after.loss
               << ", accuracy " << before.accuracy << " -> " << after.accuracy
               << ", train loss " << e1.train_loss << " -> " << e2.train_loss);
  CHECK(before.loss > 2.0);               // an untrained 10-way classifier: ~ln(10) = 2.30
  CHECK(after.loss < 0.5 * before.loss);  // the stated margin: at least halved
  CHECK(e2.train_loss < e1.train_loss);
  CHECK(after.accuracy > 0.70);
  CHECK(trainer.global_step() == 200);
}

TEST_CASE("models: a backend with only the required slots trains the seed MLP and CNN through "
          "core's defaults, as the CPU backend does", "[models][defaults]") {
  const DatasetSplits data = trident::testing::small_splits(200, 100);
  trident::testing::ReferenceDevice reference;
  for (const char* model : {"mlp", "cnn"}) {
    INFO(model);
    TrainOptions o;
    o.batch = 20;
    o.optimizer.momentum = 0.9f;
    const ModelRecipe& recipe = find_model(model);
    Trainer on_reference({&reference}, recipe.factory(), data, o);
    Trainer on_cpu({&cpu()}, recipe.factory(), data, o);
    const EpochStats a = on_reference.train_epoch();  // 10 steps
    const EpochStats b = on_cpu.train_epoch();
    CHECK(a.train_loss == Approx(b.train_loss).epsilon(1e-4));
    TRIDENT_CHECK_CLOSE(on_reference.network().parameters().to_host(),
                        on_cpu.network().parameters().to_host(), (Tolerance{2e-5, 1e-4}));
    const EvalStats ea = on_reference.evaluate(), eb = on_cpu.evaluate();
    CHECK(ea.loss == Approx(eb.loss).epsilon(1e-4));
  }
}

TEST_CASE("models: a resumed run equals an uninterrupted one (dropout, Adam, batch norm, "
          "augmentation, a schedule)", "[models][checkpoint]") {
  const DatasetSplits data = trident::testing::small_splits(1200, 200);
  struct Case {
    const char* name;
    ModelFactory model;
    TrainOptions options;
  };
  TrainOptions adam;
  adam.batch = 100;
  adam.optimizer.kind = "adam";
  adam.optimizer.lr = 1e-3f;
  TrainOptions modern = adam;
  modern.optimizer.kind = "adamw";
  modern.optimizer.weight_decay = 0.01f;
  modern.optimizer.clip_grad_norm = 1.0f;
  modern.epochs = 2;
  modern.schedule.kind = "onecycle";
  modern.schedule.max_lr = 3e-3f;
  modern.augment.crop_padding = 2;
  modern.augment.horizontal_flip = true;
  modern.label_smoothing = 0.1f;
  auto small_resnet = [] {
    Network net("small_resnet");
    net.add("conv1", Conv2d(4, 3).padding(1).bias(false));
    net.add("bn1", BatchNorm2d());
    net.add("relu", ReLU());
    net.add("layer1", basic_block(4, 8, 2));
    net.add("pool", GlobalAvgPool2d());
    net.add("flatten", Flatten());
    net.add("fc", Linear(10));
    return net;
  };
  for (const Case& c : {Case{"cnn", [] { return make_seed_cnn(); }, adam},
                        Case{"resnet", small_resnet, modern}}) {
    INFO(c.name);
    const std::string path = temp_path(std::string("resume_") + c.name + ".safetensors");
    Trainer straight({&cpu()}, c.model, data, c.options);
    straight.train_epoch();
    straight.train_epoch();
    Trainer first({&cpu()}, c.model, data, c.options);
    first.train_epoch();
    first.save_checkpoint(path);
    Trainer resumed({&cpu()}, c.model, data, c.options);
    resumed.load_checkpoint(path);
    CHECK(resumed.epochs_done() == 1);
    CHECK(resumed.global_step() == 12);
    resumed.train_epoch();
    CHECK(straight.network().parameters().to_host() == resumed.network().parameters().to_host());
    if (straight.network().buffers().defined())
      CHECK(straight.network().buffers().to_host() == resumed.network().buffers().to_host());
    // The file is a plain safetensors file with PyTorch's state-dict names.
    const TensorFile file = load_safetensors(path);
    std::set<std::string> names;
    for (const auto& t : file.tensors) names.insert(t.name);
    CHECK(names.count(std::string(c.name) == "cnn" ? "conv1.weight" : "layer1.shortcut.1.running_mean"));
    CHECK(names.count("optimizer.exp_avg"));
    if (std::string(c.name) == "resnet") CHECK(names.count("bn1.num_batches_tracked"));
  }
}

TEST_CASE("models: the ResNet's state dict has PyTorch's names, shapes and order",
          "[models][resnet]") {
  Network net = make_resnet();
  net.build(cpu(), {1, 28, 28}, 1);
  const std::vector<HostTensor> state = network_state_dict(net);
  std::vector<std::string> names;
  for (const HostTensor& t : state) names.push_back(t.name);
  // The head of torch's state_dict() for the module in tests/torch_models.py.
  const std::vector<std::string> head = {
      "conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
      "bn1.num_batches_tracked", "layer1.conv1.weight", "layer1.bn1.weight", "layer1.bn1.bias",
      "layer1.bn1.running_mean", "layer1.bn1.running_var", "layer1.bn1.num_batches_tracked",
      "layer1.conv2.weight"};
  REQUIRE(names.size() > head.size());
  CHECK(std::vector<std::string>(names.begin(), names.begin() + long(head.size())) == head);
  CHECK(names.back() == "fc.bias");
  CHECK(std::count(names.begin(), names.end(), "layer3.shortcut.0.weight") == 1);
  CHECK(net.parameter_count() == 32 * 9 + 2 * 32 + (32 * 32 * 9 * 2 + 4 * 32) +
                                     (64 * 32 * 9 + 64 * 64 * 9 + 4 * 64 + 64 * 32 + 2 * 64) +
                                     (128 * 64 * 9 + 128 * 128 * 9 + 4 * 128 + 128 * 64 + 2 * 128) +
                                     128 * 10 + 10);
  for (const HostTensor& t : state)
    if (t.name == "bn1.num_batches_tracked") CHECK(t.dtype == DType::i64);
}

TEST_CASE("models: bad checkpoints are rejected with the reason and change nothing",
          "[models][checkpoint]") {
  const DatasetSplits data = trident::testing::small_splits(400, 100);
  TrainOptions o;
  o.batch = 100;
  Trainer trainer({&cpu()}, [] { return make_seed_mlp(); }, data, o);
  const std::string good = temp_path("good.safetensors");
  trainer.save_checkpoint(good);
  const std::vector<float> before = trainer.network().parameters().to_host();
  auto rewrite = [&](const std::string& name, auto&& edit) {
    TensorFile f = load_safetensors(good);
    edit(f);
    const std::string path = temp_path(name);
    save_safetensors(path, f);
    return path;
  };
  const std::string missing = rewrite("missing.safetensors", [](TensorFile& f) {
    f.tensors.erase(f.tensors.begin());
  });
  const std::string extra = rewrite("extra.safetensors", [](TensorFile& f) {
    HostTensor t = f.tensors.front();
    t.name = "fc9.weight";
    f.tensors.push_back(t);
  });
  const std::string reshaped = rewrite("reshaped.safetensors", [](TensorFile& f) {
    for (auto& t : f.tensors)
      if (t.name == "fc1.bias") t.shape = {2, 256};
  });
  const std::string other_model = rewrite("cnn.safetensors", [](TensorFile& f) {
    f.metadata["model"] = "cnn";
  });
  const std::string nan = rewrite("nan.safetensors", [](TensorFile& f) {
    for (auto& t : f.tensors)
      if (t.name == "fc1.weight") {
        const float v = std::nanf("");
        std::memcpy(t.bytes.data() + 4 * 785, &v, 4);  // row 1, column 1
      }
  });
  CHECK_THROWS_WITH(trainer.load_checkpoint(missing),
                    Catch::Contains("missing keys") && Catch::Contains("fc1.weight"));
  CHECK_THROWS_WITH(trainer.load_checkpoint(extra), Catch::Contains("fc9.weight"));
  CHECK_THROWS_WITH(trainer.load_checkpoint(reshaped), Catch::Contains("fc1.bias"));
  CHECK_THROWS_WITH(trainer.load_checkpoint(other_model), Catch::Contains("'cnn'"));
  CHECK_THROWS_WITH(trainer.load_checkpoint(nan),
                    Catch::Contains("fc1.weight") && Catch::Contains("NaN") &&
                        Catch::Contains("[1, 1]"));
  CHECK_THROWS_AS(trainer.load_checkpoint(temp_path("does-not-exist")), Error);
  CHECK(trainer.network().parameters().to_host() == before);
}
