// Model-level tests: layer gradients through whole networks, training that learns, checkpoints
// that resume exactly and reject bad files, and the CLI's handling of bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "trident/core/error.h"
#include "trident/core/registry.h"
#include "trident/core/safetensors.h"
#include "trident/models/cli.h"
#include "trident/models/layers.h"
#include "trident/models/loss.h"
#include "trident/models/seed_models.h"
#include "trident/models/trainer.h"
#include "tests/conformance.h"
#include "tests/test_data.h"

#include <algorithm>
#include <set>

using namespace trident;

namespace {

Device& cpu() { return DeviceRegistry::global().device("cpu"); }

std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / "trident_model_tests";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// A small network exercising every layer kind: conv, pool, relu, dropout2d, flatten, linear
// (+ fused relu), dropout, log_softmax.
Network small_cnn() {
  Network net("small");
  net.add<Conv2d>("conv1", 2, 3, 3);
  net.add<MaxPool2d>("pool1", 2);
  net.add<ReLU>("relu1");
  net.add<Dropout>("drop2d", 0.3f, true);
  net.add<Flatten>("flatten");
  net.add<Linear>("fc1", 3 * 3 * 3, 6);
  net.add<ReLU>("relu2");
  net.add<Dropout>("drop", 0.25f, false);
  net.add<Linear>("fc2", 6, 4);
  net.add<LogSoftmax>("log_softmax");
  return net;
}

// A batch for small_cnn(): uniform(-1, 1) from mt19937(seed).
Tensor small_cnn_input(Device& d, int64_t batch, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(batch * 2 * 8 * 8));
  for (float& v : x) v = u(rng);
  return Tensor::from_host(d, {batch, 2, 8, 8}, x);
}

}  // namespace

TEST_CASE("models: network gradients match finite differences on every device", "[models]") {
  for (Device* device : trident::testing::devices_under_test()) {
    DYNAMIC_SECTION(device->info().id()) {
      Device& d = *device;
      if (trident::testing::uses_tf32(d)) {
        // TF32's 10-bit mantissa makes central differences of a float loss meaningless.
        WARN("SKIPPED on " << d.info().id() << ": finite differences need full FP32 GEMMs (TF32 on)");
        continue;
      }
      Network net = small_cnn();
      net.build(d, {2, 8, 8}, 5);
      const int64_t batch = 3;
      Tensor input = small_cnn_input(d, batch, 11);
      Tensor labels = Tensor::from_host(d, {batch}, std::vector<int32_t>{1, 3, 0});
      Tensor loss = Tensor::zeros(d, {1});
      Tensor step_state = Tensor::zeros(d, {2}, DType::i32);
      StepContext ctx;
      ctx.device = &d;
      ctx.step_state = step_state.memory();
      ctx.seed = 3;
      NLLLoss nll;
      auto loss_at = [&](const std::vector<float>& params) {
        net.parameters().copy_from_host(params.data(), params.size() * sizeof(float));
        const Tensor& out = net.forward(ctx, input);
        nll.forward(ctx, out, labels, loss, false);
        return static_cast<double>(loss.to_host()[0]);
      };
      std::vector<float> p0 = net.parameters().to_host();
      loss_at(p0);
      nll.backward(ctx, net.forward(ctx, input), labels, net.output_gradient(), 1.0f);
      net.backward(ctx);
      const std::vector<float> analytic = net.gradients().to_host();
      // Central differences on a spread of parameters from every tensor.
      const float eps = 2e-3f;
      std::vector<double> errors;
      for (size_t i = 0; i < p0.size(); i += 7) {
        std::vector<float> p = p0;
        p[i] = p0[i] + eps;
        const double up = loss_at(p);
        p[i] = p0[i] - eps;
        const double down = loss_at(p);
        const double numeric = (up - down) / (2.0 * eps);
        const double err = std::abs(numeric - analytic[i]) / std::max(1e-2, std::abs(numeric));
        errors.push_back(err);
        INFO("parameter " << i << " numeric " << numeric << " analytic " << analytic[i]);
        CHECK(std::abs(numeric - analytic[i]) <= 2e-3 + 3e-2 * std::abs(numeric));
      }
      // A few parameters sit next to a ReLU or max-pool kink where central differences straddle
      // it; a wrong gradient formula would be off almost everywhere, so the median must be tight.
      std::sort(errors.begin(), errors.end());
      const double median = errors[errors.size() / 2];
      INFO("median relative error " << median << ", worst " << errors.back());
      CHECK(median < 1e-2);
    }
  }
}

TEST_CASE("models: forward_nll (the fused head) equals forward + NLLLoss + backward",
          "[models][log_softmax_nll]") {
  for (Device* device : trident::testing::devices_under_test()) {
    DYNAMIC_SECTION(device->info().id()) {
      Device& d = *device;
      const int64_t batch = 5;
      Tensor input = small_cnn_input(d, batch, 21);
      Tensor labels = Tensor::from_host(d, {batch}, std::vector<int32_t>{1, 3, 0, 2, 3});
      Tensor step_state = Tensor::zeros(d, {2}, DType::i32);
      StepContext ctx;
      ctx.device = &d;
      ctx.step_state = step_state.memory();
      ctx.seed = 3;
      // Two identical networks: one through the separate ops, one through forward_nll. The
      // loss accumulates onto 1.5 and the gradient is scaled, as data-parallel training does.
      Network plain = small_cnn(), fused = small_cnn();
      plain.build(d, {2, 8, 8}, 5);
      fused.build(d, {2, 8, 8}, 5);
      REQUIRE(fused.ends_with_log_softmax());
      Tensor plain_loss = Tensor::from_host(d, {1}, std::vector<float>{1.5f});
      Tensor fused_loss = Tensor::from_host(d, {1}, std::vector<float>{1.5f});
      NLLLoss nll;
      const Tensor& plain_out = plain.forward(ctx, input);
      nll.forward(ctx, plain_out, labels, plain_loss, true);
      nll.backward(ctx, plain_out, labels, plain.output_gradient(), 0.5f);
      plain.backward(ctx);
      const Tensor& fused_out = fused.forward_nll(ctx, input, labels, fused_loss, true, 0.5f);
      fused.backward(ctx);
      using trident::testing::Tolerance;
      TRIDENT_CHECK_CLOSE(fused_out.to_host(), plain_out.to_host(), (Tolerance{1e-6, 1e-6}));
      TRIDENT_CHECK_CLOSE(fused_loss.to_host(), plain_loss.to_host(), (Tolerance{1e-6, 1e-6}));
      TRIDENT_CHECK_CLOSE(fused.gradients().to_host(), plain.gradients().to_host(),
                          (Tolerance{1e-6, 1e-4}));
      // Labels of the wrong shape are refused before anything runs.
      Tensor short_labels = Tensor::from_host(d, {2}, std::vector<int32_t>{0, 1});
      CHECK_THROWS_WITH(fused.forward_nll(ctx, input, short_labels, fused_loss, true),
                        Catch::Contains("int32 labels [5]"));
    }
  }
}

TEST_CASE("models: the CPU's fused head rejects a label outside the classes and writes nothing",
          "[models][log_softmax_nll]") {
  Device& d = cpu();
  Tensor x = Tensor::from_host(d, {2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor labels = Tensor::from_host(d, {2}, std::vector<int32_t>{1, 3});
  Tensor y = Tensor::from_host(d, {2, 3}, std::vector<float>(6, -7.0f));
  Tensor dx = Tensor::from_host(d, {2, 3}, std::vector<float>(6, -7.0f));
  Tensor loss = Tensor::from_host(d, {1}, std::vector<float>{1.25f});
  CHECK_THROWS_WITH(d.log_softmax_nll(x.memory(), labels.memory(), 2, 3, 0.5f, y.memory(),
                                      loss.memory(), true, dx.memory()),
                    Catch::Contains("label 3 in row 1 is outside [0, 3)"));
  CHECK(loss.to_host() == std::vector<float>{1.25f});
  CHECK(y.to_host() == std::vector<float>(6, -7.0f));
  CHECK(dx.to_host() == std::vector<float>(6, -7.0f));
}

TEST_CASE("models: the seed MLP learns Fashion-MNIST (loss falls by half in 200 steps)",
          "[models][training]") {
  const MnistSplits data = trident::testing::small_splits(10000, 2000);
  TrainOptions o;
  o.model = "mlp";
  o.batch = 100;  // 100 steps per epoch, 2 epochs
  Trainer trainer({&cpu()}, o, data);
  const EvalStats before = trainer.evaluate();
  const EpochStats e1 = trainer.train_epoch();
  const EpochStats e2 = trainer.train_epoch();
  const EvalStats after = trainer.evaluate();
  INFO("data " << data.directory << ": test loss " << before.loss << " -> " << after.loss
               << ", accuracy " << before.accuracy << " -> " << after.accuracy
               << ", train loss " << e1.train_loss << " -> " << e2.train_loss);
  CHECK(before.loss > 2.0);               // an untrained 10-way classifier: ~ln(10) = 2.30
  CHECK(after.loss < 0.5 * before.loss);  // the stated margin: at least halved
  CHECK(e2.train_loss < e1.train_loss);
  CHECK(after.accuracy > 0.70);
  CHECK(trainer.global_step() == 200);
}

TEST_CASE("models: a resumed run equals an uninterrupted one", "[models][checkpoint]") {
  const MnistSplits data = trident::testing::small_splits(1200, 200);
  TrainOptions o;
  o.model = "cnn";  // dropout: the resumed run must draw the same masks
  o.batch = 100;
  o.optimizer.kind = "adam";
  o.optimizer.lr = 1e-3f;
  const std::string path = temp_path("resume.safetensors");
  Trainer straight({&cpu()}, o, data);
  straight.train_epoch();
  straight.train_epoch();
  Trainer first({&cpu()}, o, data);
  first.train_epoch();
  first.save_checkpoint(path);
  Trainer resumed({&cpu()}, o, data);
  resumed.load_checkpoint(path);
  CHECK(resumed.epochs_done() == 1);
  CHECK(resumed.global_step() == 12);
  resumed.train_epoch();
  const std::vector<float> a = straight.network().parameters().to_host();
  const std::vector<float> b = resumed.network().parameters().to_host();
  REQUIRE(a.size() == b.size());
  double max_diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, double(std::abs(a[i] - b[i])));
  CHECK(max_diff < 1e-5);
  // The file is a plain safetensors file with PyTorch's state-dict names.
  const TensorFile file = load_safetensors(path);
  std::set<std::string> names;
  for (const auto& t : file.tensors) names.insert(t.name);
  CHECK(names.count("conv1.weight"));
  CHECK(names.count("fc2.bias"));
  CHECK(names.count("optimizer.exp_avg"));
}

TEST_CASE("models: bad checkpoints are rejected with the reason and change nothing",
          "[models][checkpoint]") {
  const MnistSplits data = trident::testing::small_splits(400, 100);
  TrainOptions o;
  o.model = "mlp";
  o.batch = 100;
  Trainer trainer({&cpu()}, o, data);
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
  CHECK_THROWS_WITH(trainer.load_checkpoint(missing), Catch::Contains("is missing"));
  CHECK_THROWS_WITH(trainer.load_checkpoint(extra), Catch::Contains("fc9.weight"));
  CHECK_THROWS_WITH(trainer.load_checkpoint(reshaped), Catch::Contains("fc1.bias"));
  CHECK_THROWS_WITH(trainer.load_checkpoint(other_model), Catch::Contains("'cnn'"));
  CHECK_THROWS_AS(trainer.load_checkpoint(temp_path("does-not-exist")), Error);
  CHECK(trainer.network().parameters().to_host() == before);
}

TEST_CASE("models: the CLI rejects bad input with a message and a usage status", "[cli]") {
  auto run = [](std::vector<std::string> args, std::string* err_text = nullptr) {
    std::ostringstream out, err;
    const int status = run_cli(args, out, err);
    if (err_text) *err_text = err.str();
    return status;
  };
  std::string err;
  CHECK(run({"train", "--model", "resnet"}, &err) == 2);
  CHECK_THAT(err, Catch::Contains("mlp, cnn or mlp-big"));
  CHECK(run({"train", "--epochs", "two"}, &err) == 2);
  CHECK_THAT(err, Catch::Contains("--epochs"));
  CHECK(run({"train", "--bogus"}, &err) == 2);
  CHECK(run({"train", "--lr"}, &err) == 2);
  CHECK_THAT(err, Catch::Contains("needs a value"));
  CHECK(run({"train", "--devices", "cpu:7"}, &err) == 1);
  CHECK_THAT(err, Catch::Contains("cpu:0"));  // lists what exists
  CHECK(run({"train", "--data", "/nonexistent"}, &err) == 1);
  CHECK_THAT(err, Catch::Contains("/nonexistent"));
  CHECK(run({"train", "--resume"}, &err) == 2);
  CHECK(run({"frobnicate"}, &err) == 2);
  CHECK(run({"help"}) == 0);
  std::ostringstream out, e2;
  CHECK(run_cli({"devices"}, out, e2) == 0);
  CHECK_THAT(out.str(), Catch::Contains("cpu:0"));
}

TEST_CASE("models: train then eval through the CLI agrees with the training run", "[cli]") {
  if (!trident::testing::real_data_available()) {
    WARN("SKIPPED: Fashion-MNIST is not installed");
    return;
  }
  const std::string path = temp_path("cli.safetensors");
  std::ostringstream out, err;
  REQUIRE(run_cli({"train", "--model", "mlp", "--epochs", "1", "--train-limit", "2000",
                   "--test-limit", "500", "--checkpoint", path, "--json", "--devices", "cpu:0"},
                  out, err) == 0);
  const std::string line = out.str();
  CHECK_THAT(line, Catch::Contains("\"epoch\": 1"));
  CHECK_THAT(line, Catch::Contains("\"test_accuracy\""));
  CHECK_THAT(line, Catch::Contains("\"samples_per_s\""));
  std::ostringstream eval_out, eval_err;
  REQUIRE(run_cli({"eval", "--checkpoint", path, "--test-limit", "500", "--json"}, eval_out,
                  eval_err) == 0);
  // The accuracy eval reports is the one the training run printed for the same test samples.
  auto field = [](const std::string& text, const std::string& key) {
    const auto at = text.find("\"" + key + "\": ");
    REQUIRE(at != std::string::npos);
    return std::stod(text.substr(at + key.size() + 4));
  };
  CHECK(field(eval_out.str(), "test_accuracy") == Approx(field(line, "test_accuracy")));
  CHECK(field(line, "test_accuracy") > 0.5);
}
