// The Predictor and networks built for inference: no gradient buffers, answers identical to the
// Trainer's evaluation, any batch size, captured forwards replayed with new inputs, byte images
// normalised as asked, probabilities and top-k.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "trident/backends/cpu/cpu_device.h"
#include "trident/core/allocator.h"
#include "trident/core/error.h"
#include "trident/core/registry.h"
#include "trident/models/predictor.h"
#include "trident/models/state_dict.h"
#include "trident/models/trainer.h"
#include "trident/models/zoo.h"
#include "tests/conformance.h"
#include "tests/test_data.h"
#include "tests/test_files.h"

using namespace trident;
using trident::testing::ScratchDir;

namespace {

Device& cpu() { return DeviceRegistry::global().device("cpu"); }

// A CPU device that captures as a CUDA graph does: capture() records the step without running
// it, replay() runs it again; a replay that allocates device memory is counted (a graph cannot).
class ReplayingCpuDevice : public CpuDevice {
 public:
  explicit ReplayingCpuDevice(int index) : CpuDevice(index, 1, "CPU that replays (test)") {}
  int captures = 0, replays = 0, allocating_replays = 0;

 protected:
  std::unique_ptr<CapturedWork> do_capture(const std::function<void()>& step) override {
    struct Recording : CapturedWork {
      ReplayingCpuDevice* device;
      std::function<void()> step;
      void replay() override {
        const size_t before = device->allocator().driver_allocations();
        step();
        ++device->replays;
        if (device->allocator().driver_allocations() != before) ++device->allocating_replays;
      }
    };
    auto r = std::make_unique<Recording>();
    r->device = this;
    r->step = step;
    ++captures;
    return r;
  }
};

// Random weights for a model, through a weights file (what a Predictor is made from).
std::string random_weights(const ModelRecipe& recipe, const std::string& path, uint64_t seed) {
  Network net = recipe.make(10);
  net.build(cpu(), {1, 28, 28}, seed, false);
  std::vector<HostTensor> state = network_state_dict(net);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(0.2f, 1.5f);
  for (HostTensor& t : state)  // batch-norm statistics away from 0 and 1
    if (t.name.find("running_") != std::string::npos || t.name.find("bn") != std::string::npos)
      for (size_t i = 0; t.dtype == DType::f32 && i < t.bytes.size() / 4; ++i) {
        const float v = u(rng);
        std::memcpy(t.bytes.data() + 4 * i, &v, 4);
      }
  load_network_state_dict(net, state, "random", true);
  save_weights(net, path);
  return path;
}

std::vector<uint8_t> random_images(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(static_cast<size_t>(count * 784));
  for (auto& x : v) x = static_cast<uint8_t>(rng() >> 24);
  return v;
}

PredictorOptions options_for(const ModelRecipe& recipe) {
  PredictorOptions o;
  o.normalization = {true, {recipe.mean}, {recipe.std}};
  return o;
}

int64_t argmax(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

}  // namespace

TEST_CASE("predictor: a network built for inference has no gradients and cannot train",
          "[predictor][inference]") {
  // Private devices, so that their allocators count only this network's memory.
  CpuDevice train_device(90, 1, "test CPU (training build)");
  CpuDevice infer_device(91, 1, "test CPU (inference build)");
  const int64_t batch = 8;
  std::vector<float> input(static_cast<size_t>(batch * 784), 0.5f);
  size_t used[2] = {0, 0}, forward_growth[2] = {0, 0};
  int64_t params = 0;
  for (int training = 0; training < 2; ++training) {
    Device& d = training ? static_cast<Device&>(train_device) : infer_device;
    Network net = make_resnet();
    net.build(d, {1, 28, 28}, 1, training == 1);
    params = net.parameter_count();
    CHECK(net.trainable() == (training == 1));
    CHECK(net.gradients().defined() == (training == 1));
    const size_t built = d.allocator().bytes_in_use();
    const Tensor& in = net.input_buffer(batch);
    in.copy_from_host(input.data(), input.size() * 4);
    StepContext ctx;
    ctx.device = &d;
    ctx.step_state = Tensor::zeros(d, {kStepStateCount}, DType::i32);
    ctx.training = false;
    net.forward(ctx, in);
    d.synchronize();
    used[training] = d.allocator().bytes_in_use();
    forward_growth[training] = used[training] - built;
    if (!training) {
      Tensor labels = Tensor::zeros(d, {batch}, DType::i32), loss = Tensor::zeros(d, {1});
      CHECK_THROWS_WITH(net.forward_loss(ctx, in, labels, LossSpec{}, loss, false),
                        Catch::Contains("built for inference"));
      CHECK_THROWS_WITH(net.backward(ctx), Catch::Contains("built for inference"));
      ctx.training = true;
      CHECK_THROWS_WITH(net.forward(ctx, in), Catch::Contains("built for inference"));
    }
  }
  // The training build holds the gradient buffer; its forward also allocates what only a
  // backward reads (the shortcuts' input gradients, batch statistics), the inference one not.
  const size_t shortcut_dx = size_t(batch) * 4 * (32 * 28 * 28 + 64 * 14 * 14);
  CHECK(used[1] - used[0] >= size_t(params) * 4 + shortcut_dx);
  CHECK(forward_growth[1] - forward_growth[0] >= shortcut_dx);
}

TEST_CASE("predictor: answers equal the Trainer's evaluation on the same test samples",
          "[predictor]") {
  ScratchDir dir("predict-eval");
  const DatasetSplits data = trident::testing::small_splits(600, 300);
  for (const std::string name : {"cnn", "resnet"}) {
    INFO(name);
    const ModelRecipe& recipe = find_model(name);
    TrainOptions o;
    o.batch = 100;
    o.optimizer = recipe.optimizer;
    o.optimizer.kind = "sgd";
    o.optimizer.lr = 0.02f;
    Trainer trainer({&cpu()}, recipe.factory(), data, o);
    trainer.train_epoch();  // batch norm's running statistics move away from 0 and 1
    const EvalStats eval = trainer.evaluate();
    const std::string path = dir.file(name + ".safetensors");
    save_weights(trainer.network(), path);

    PredictorOptions po;
    po.normalization = data.test.normalization();
    po.max_batch = 128;  // 300 samples: two full batches and a partial one
    Predictor predictor(recipe.factory(), cpu(), path, po);
    const int64_t n = data.test.size();
    const std::vector<float> outputs =
        data.test.dtype() == DType::u8 ? predictor.outputs(data.test.uint8_data(), n)
                                       : predictor.outputs(data.test.float_data(), n);
    int64_t correct = 0;
    for (int64_t i = 0; i < n; ++i)
      correct += argmax(&outputs[size_t(i * 10)], 10) == data.test.labels()[size_t(i)];
    CHECK(correct == std::llround(eval.accuracy * double(n)));
    // And sample by sample, the trained network's own evaluation forward gives the same outputs.
    Network& net = trainer.network();
    const Tensor& in = net.input_buffer(n);
    const std::vector<float> normalized = data.test.normalized(0, n);
    in.copy_from_host(normalized.data(), normalized.size() * 4);
    StepContext ctx;
    ctx.device = &cpu();
    ctx.step_state = Tensor::zeros(cpu(), {kStepStateCount}, DType::i32);
    ctx.training = false;
    const std::vector<float> reference = net.forward(ctx, in).to_host();
    double error = 0.0, norm = 0.0;
    for (size_t i = 0; i < reference.size(); ++i) {
      error += (double(outputs[i]) - reference[i]) * (double(outputs[i]) - reference[i]);
      norm += double(reference[i]) * reference[i];
    }
    CHECK(error / norm < 1e-10);
  }
}

TEST_CASE("predictor: any batch size gives each sample's answer as one at a time does",
          "[predictor]") {
  ScratchDir dir("predict-batches");
  const ModelRecipe& recipe = find_model("resnet");
  const std::string path = random_weights(recipe, dir.file("w.safetensors"), 3);
  PredictorOptions o = options_for(recipe);
  o.max_batch = 16;
  Predictor one(recipe.factory(), cpu(), path, o);
  const std::vector<uint8_t> images = random_images(53, 9);
  std::vector<float> singles;
  for (int64_t i = 0; i < 53; ++i) {
    const std::vector<float> out = one.outputs(images.data() + i * 784, 1);
    singles.insert(singles.end(), out.begin(), out.end());
  }
  Predictor many(recipe.factory(), cpu(), path, o);
  for (int64_t count : {53, 5, 16, 17, 1, 33}) {  // more than max_batch, partial, exact
    INFO(count);
    const std::vector<float> out = many.outputs(images.data(), count);
    REQUIRE(out.size() == size_t(count * 10));
    for (int64_t i = 0; i < count; ++i) {
      CHECK(argmax(&out[size_t(i * 10)], 10) == argmax(&singles[size_t(i * 10)], 10));
      for (int c = 0; c < 10; ++c)
        CHECK(out[size_t(i * 10 + c)] == Approx(singles[size_t(i * 10 + c)]).margin(1e-5));
    }
  }
  // Partial batches run at the next power of two up to max_batch: only sizes 16, 8 and 1 exist.
  CHECK(many.batch_sizes() == 3);
  CHECK(many.outputs(images.data(), 0).empty());
}

TEST_CASE("predictor: a captured forward is recorded once per batch size and replayed with new "
          "inputs", "[predictor][capture]") {
  ScratchDir dir("predict-capture");
  const ModelRecipe& recipe = find_model("cnn");
  const std::string path = random_weights(recipe, dir.file("w.safetensors"), 4);
  ReplayingCpuDevice device(92);
  Predictor captured(recipe.factory(), device, path, options_for(recipe));
  PredictorOptions eager_options = options_for(recipe);
  eager_options.capture = false;
  Predictor eager(recipe.factory(), cpu(), path, eager_options);
  for (int call = 0; call < 4; ++call) {
    INFO(call);
    const std::vector<uint8_t> images = random_images(7, 100 + call);  // new inputs every call
    const std::vector<float> a = captured.outputs(images.data(), 7);
    const std::vector<float> b = eager.outputs(images.data(), 7);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-6));
    // Float inputs are a second recording of the same batch size.
    std::vector<float> floats(images.size());
    for (size_t i = 0; i < images.size(); ++i)
      floats[i] = (images[i] / 255.0f - recipe.mean) / recipe.std;
    const std::vector<float> c = captured.outputs(floats.data(), 7);
    for (size_t i = 0; i < a.size(); ++i) CHECK(c[i] == Approx(b[i]).margin(1e-5));
  }
  CHECK(device.captures == 2);            // bytes and floats at batch 8, each on its 2nd call
  CHECK(device.replays == 2 * 3);         // calls 2, 3 and 4 of each
  CHECK(device.allocating_replays == 0);  // nothing allocates inside a recorded step
  CHECK(captured.captured_batch_sizes() == 1);
  CHECK(eager.captured_batch_sizes() == 0);
}

TEST_CASE("predictor: the sample shape comes from the weights file unless given",
          "[predictor]") {
  ScratchDir dir("predict-shape");
  const ModelRecipe& recipe = find_model("cnn");
  Network net = recipe.make(4);
  net.build(cpu(), {3, 20, 20}, 9, false);
  const std::string path = dir.file("w.safetensors");
  save_weights(net, path);  // metadata sample_shape "[3, 20, 20]"
  Predictor p(recipe.factory(4), cpu(), path, options_for(recipe));
  CHECK(p.sample_shape() == Shape{3, 20, 20});
  CHECK(p.classes() == 4);
  PredictorOptions wrong = options_for(recipe);
  wrong.sample_shape = {1, 28, 28};  // given: it wins, and the weights do not fit it
  CHECK_THROWS_WITH(Predictor(recipe.factory(4), cpu(), path, wrong), Catch::Contains("shape"));
}

TEST_CASE("predictor: probabilities, top-k, and inputs it refuses", "[predictor]") {
  ScratchDir dir("predict-misc");
  const ModelRecipe& recipe = find_model("mlp");  // ends in LogSoftmax
  const std::string path = random_weights(recipe, dir.file("w.safetensors"), 5);
  Predictor p(recipe.factory(), cpu(), path, options_for(recipe));
  CHECK(p.classes() == 10);
  CHECK(p.sample_shape() == Shape{1, 28, 28});
  const std::vector<uint8_t> images = random_images(4, 1);
  const std::vector<float> logp = p.outputs(images.data(), 4);
  const std::vector<float> prob = p.probabilities(images.data(), 4);
  for (int64_t r = 0; r < 4; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < 10; ++c) {
      const size_t i = size_t(r * 10 + c);
      CHECK(prob[i] == Approx(std::exp(double(logp[i]))).epsilon(1e-5));
      sum += prob[i];
    }
    CHECK(sum == Approx(1.0).epsilon(1e-6));
  }
  const std::vector<Prediction> top = p.predict(images.data(), 4, 3);
  REQUIRE(top.size() == 4);
  for (int64_t r = 0; r < 4; ++r) {
    REQUIRE(top[size_t(r)].classes.size() == 3);
    CHECK(top[size_t(r)].top() == argmax(&prob[size_t(r * 10)], 10));
    CHECK(top[size_t(r)].probabilities[0] >= top[size_t(r)].probabilities[1]);
    CHECK(top[size_t(r)].probabilities[1] >= top[size_t(r)].probabilities[2]);
  }
  // Ties go to the lower class; k is capped at the class count.
  const std::vector<Prediction> ties = Predictor::top_k({0.1f, 0.4f, 0.1f, 0.4f}, 4, 9);
  CHECK(ties[0].classes == std::vector<int64_t>{1, 3, 0, 2});
  // Byte images and the same images normalised on the host agree.
  std::vector<float> floats(images.size());
  for (size_t i = 0; i < images.size(); ++i) floats[i] = (images[i] / 255.0f - recipe.mean) / recipe.std;
  const std::vector<float> from_floats = p.outputs(floats.data(), 4);
  for (size_t i = 0; i < logp.size(); ++i) CHECK(from_floats[i] == Approx(logp[i]).margin(1e-5));
  floats[784 + 3] = NAN;
  CHECK_THROWS_WITH(p.outputs(floats.data(), 4), Catch::Contains("sample 1 holds NaN at element 3"));
  // A network that is not built, and a weights file that does not fit the model.
  CHECK_THROWS_WITH(Predictor(make_seed_mlp()), Catch::Contains("not built"));
  CHECK_THROWS_WITH(Predictor(recipe.factory(), cpu(), random_weights(find_model("cnn"),
                                                                      dir.file("cnn.safetensors"), 6)),
                    Catch::Contains("fc1.weight: file [50, 320] F32, model [512, 784] F32") &&
                        Catch::Contains("metadata says it holds model 'cnn'"));
  PredictorOptions bad = options_for(recipe);
  bad.normalization.std = {0.0f};
  CHECK_THROWS_WITH(Predictor(recipe.factory(), cpu(), path, bad), Catch::Contains("positive std"));
}

TEST_CASE("predictor: every device answers as the CPU does, capture and replays included",
          "[predictor][devices]") {
  ScratchDir dir("predict-devices");
  const ModelRecipe& recipe = find_model("resnet");
  const std::string path = random_weights(recipe, dir.file("w.safetensors"), 8);
  PredictorOptions o = options_for(recipe);
  o.max_batch = 8;
  Predictor reference(recipe.factory(), cpu(), path, o);
  FOR_EACH_DEVICE(device) {
    Predictor p(recipe.factory(), *device, path, o);
    for (int call = 0; call < 3; ++call) {  // eager, captured (where it can), replayed
      for (int64_t count : {int64_t(1), int64_t(11)}) {
        INFO("call " << call << ", " << count << " samples");
        const std::vector<uint8_t> images = random_images(count, 50 + uint32_t(call * 2 + count));
        const std::vector<float> want = reference.outputs(images.data(), count);
        const std::vector<float> got = p.outputs(images.data(), count);
        REQUIRE(got.size() == want.size());
        for (int64_t i = 0; i < count; ++i)
          CHECK(argmax(&got[size_t(i * 10)], 10) == argmax(&want[size_t(i * 10)], 10));
        for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-3));
      }
    }
  }
}

TEST_CASE("predictor: a network built in bf16 or fp16 takes float32 and byte inputs and gives "
          "float32 outputs, captured and replayed, on every device", "[predictor][capture][dtypes]") {
  ScratchDir dir("predict-16bit");
  const ModelRecipe& recipe = find_model("resnet");
  const std::string path = random_weights(recipe, dir.file("w.safetensors"), 5);
  const PredictorOptions options = options_for(recipe);
  Predictor reference(recipe.factory(), cpu(), path, options);  // float32
  // Three calls (eager, recorded, replayed) of byte and float inputs against the float32
  // reference: 16-bit activations through the ResNet's 8 convolutions move logits of size ~1
  // by a few units in the last place of bf16 (2^-8).
  const auto check = [&](Predictor& p) {
    for (int call = 0; call < 3; ++call) {
      INFO("call " << call);
      const std::vector<uint8_t> images = random_images(5, 200 + call);
      std::vector<float> floats(images.size());
      for (size_t i = 0; i < images.size(); ++i)
        floats[i] = (images[i] / 255.0f - recipe.mean) / recipe.std;
      const std::vector<float> want = reference.outputs(images.data(), 5);
      for (const std::vector<float>& got :
           {p.outputs(images.data(), 5), p.outputs(floats.data(), 5)}) {
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < want.size(); ++i)
          CHECK(got[i] == Approx(want[i]).margin(0.05 * (1.0 + std::fabs(want[i]))));
      }
    }
  };
  const auto predictor_on = [&](Device& device, Precision precision) {
    Network net = recipe.factory()();
    net.set_precision(precision);
    net.build(device, Shape{1, 28, 28}, 0, /*training=*/false);
    load_weights(net, path, /*strict=*/true);
    return std::make_unique<Predictor>(std::move(net), options);
  };
  for (const Precision precision : {Precision::bf16, Precision::fp16}) {
    INFO(precision_name(precision));
    ReplayingCpuDevice replaying(93);
    check(*predictor_on(replaying, precision));
    CHECK(replaying.captures == 2);     // bytes and floats, each on its second call
    CHECK(replaying.replays == 2 * 2);  // calls 2 and 3 of each
    CHECK(replaying.allocating_replays == 0);
    FOR_EACH_DEVICE(device) {
      if (!device->supports(compute_dtype(precision))) continue;
      check(*predictor_on(*device, precision));
    }
  }
}
