// Weights in and out: save_weights / load_weights round trips for the built-in models, float16
// and bfloat16 conversion (bit patterns), training checkpoints read as weights, and every kind
// of malformed or mismatched weights file refused with the tensor and the problem named and
// nothing changed.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "trident/core/error.h"
#include "trident/core/registry.h"
#include "trident/core/safetensors.h"
#include "trident/models/state_dict.h"
#include "trident/models/trainer.h"
#include "trident/models/zoo.h"
#include "tests/test_data.h"
#include "tests/test_files.h"

using namespace trident;
using trident::testing::ScratchDir;

namespace {

Device& cpu() { return DeviceRegistry::global().device("cpu"); }

Network built(Network net, bool training = false) {
  net.build(cpu(), {1, 28, 28}, 3, training);
  return net;
}

HostTensor f32_tensor(const std::string& name, const Shape& shape, const std::vector<float>& v) {
  HostTensor t;
  t.name = name;
  t.shape = shape;
  t.bytes.resize(v.size() * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

// Every state tensor of the network set to random values (variances positive), through the
// loader itself, so that a round trip has something to lose.
void randomise(Network& net, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<HostTensor> state = network_state_dict(net);
  for (HostTensor& t : state) {
    if (t.dtype != DType::f32) {
      const int64_t count = 1234;
      std::memcpy(t.bytes.data(), &count, 8);
      continue;
    }
    const bool variance = t.name.find("running_var") != std::string::npos;
    for (size_t i = 0; i < t.bytes.size() / 4; ++i) {
      const float v = variance ? 0.5f + std::fabs(u(rng)) : u(rng);
      std::memcpy(t.bytes.data() + 4 * i, &v, 4);
    }
  }
  load_network_state_dict(net, state, "random", true);
}

std::vector<float> all_values(const Network& net) {
  std::vector<float> v = net.parameters().to_host();
  if (net.buffers().defined()) {
    const std::vector<float> b = net.buffers().to_host();
    v.insert(v.end(), b.begin(), b.end());
  }
  return v;
}

uint16_t half_bits(float value, DType dtype) {
  const std::vector<HostTensor> out = convert_floats({f32_tensor("x", {1}, {value})}, dtype);
  uint16_t h;
  std::memcpy(&h, out[0].bytes.data(), 2);
  return h;
}

}  // namespace

TEST_CASE("weights: save_weights and load_weights round trip every built-in model exactly",
          "[weights]") {
  ScratchDir dir("weights");
  for (const ModelRecipe& recipe : model_zoo()) {
    if (recipe.name == "mlp-big") continue;  // 30 M parameters: nothing the others do not cover
    INFO(recipe.name);
    Network source = built(recipe.make(10));
    randomise(source, 11);
    const std::string path = dir.file(recipe.name + ".safetensors");
    save_weights(source, path);
    const TensorFile file = load_safetensors(path);
    // The file is the state dict, in its order, with the metadata a weights file carries.
    const std::vector<HostTensor> expected = network_state_dict(source);
    REQUIRE(file.tensors.size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      CHECK(file.tensors[i].name == expected[i].name);
      CHECK(file.tensors[i].shape == expected[i].shape);
      CHECK(file.tensors[i].dtype == expected[i].dtype);
      CHECK(file.tensors[i].bytes == expected[i].bytes);
    }
    CHECK(file.metadata.at("format") == "pt");
    CHECK(file.metadata.at("model") == recipe.name);
    CHECK(file.metadata.at("sample_shape") == "[1, 28, 28]");
    CHECK_FALSE(is_training_checkpoint(file));

    Network target = built(recipe.make(10), /*training=*/true);  // loads into either kind
    const StateDictReport report = load_weights(target, path);
    CHECK(report.clean());
    CHECK(all_values(target) == all_values(source));
    CHECK(target.batches_tracked() == (source.batchnorm_names().empty() ? 0 : 1234));
  }
}

TEST_CASE("weights: F16 and BF16 files are rounded to nearest even and converted back on load",
          "[weights]") {
  // Bit patterns of IEEE half and bfloat16, ties to even, subnormals.
  CHECK(half_bits(1.0f, DType::f16) == 0x3c00);
  CHECK(half_bits(-2.5f, DType::f16) == 0xc100);
  CHECK(half_bits(65504.0f, DType::f16) == 0x7bff);
  CHECK(half_bits(std::ldexp(1.0f, -24), DType::f16) == 0x0001);  // the smallest subnormal
  CHECK(half_bits(std::ldexp(1.0f, -25), DType::f16) == 0x0000);  // a tie: to even (zero)
  CHECK(half_bits(std::ldexp(3.0f, -25), DType::f16) == 0x0002);  // a tie: to even (2)
  CHECK(half_bits(std::ldexp(1.0f, -14), DType::f16) == 0x0400);  // the smallest normal
  CHECK(half_bits(1.0f + std::ldexp(1.0f, -11), DType::f16) == 0x3c00);      // tie, even below
  CHECK(half_bits(1.0f + std::ldexp(3.0f, -11), DType::f16) == 0x3c02);      // tie, even above
  CHECK(half_bits(2047.0f / 1024.0f + std::ldexp(1.0f, -11), DType::f16) == 0x4000);  // carry
  CHECK(half_bits(1.0f, DType::bf16) == 0x3f80);
  CHECK(half_bits(1.0f + std::ldexp(1.0f, -8), DType::bf16) == 0x3f80);
  CHECK(half_bits(1.0f + std::ldexp(3.0f, -8), DType::bf16) == 0x3f82);
  CHECK(half_bits(-0.0f, DType::bf16) == 0x8000);
  // float16 cannot hold 65520 (it rounds to infinity): refused with the tensor named.
  CHECK_THROWS_WITH(convert_floats({f32_tensor("fc.weight", {2}, {1.0f, 70000.0f})}, DType::f16),
                    Catch::Contains("'fc.weight'") && Catch::Contains("[1]") &&
                        Catch::Contains("bf16"));

  ScratchDir dir("weights16");
  Network source = built(make_resnet());
  randomise(source, 5);
  for (DType dtype : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    const std::string path = dir.file(std::string(dtype_name(dtype)) + ".safetensors");
    save_weights(source, path, dtype);
    const TensorFile file = load_safetensors(path);
    for (const HostTensor& t : file.tensors)
      CHECK(t.dtype == (t.name.find("num_batches_tracked") != std::string::npos ? DType::i64 : dtype));
    Network target = built(make_resnet());
    load_weights(target, path);
    const std::vector<float> a = all_values(source), b = all_values(target);
    REQUIRE(a.size() == b.size());
    const float step = dtype == DType::f16 ? std::ldexp(1.0f, -11) : std::ldexp(1.0f, -8);
    size_t changed = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(std::fabs(a[i] - b[i]) <= step * std::max(std::fabs(a[i]), std::ldexp(1.0f, -14)));
      changed += a[i] != b[i];
    }
    CHECK(changed > a.size() / 2);  // the values really went through 16 bits
    // Saving the loaded weights in the same 16-bit type gives the same bytes (exact round trip).
    save_weights(target, path + ".again", dtype);
    const TensorFile again = load_safetensors(path + ".again");
    for (size_t i = 0; i < file.tensors.size(); ++i) CHECK(again.tensors[i].bytes == file.tensors[i].bytes);
  }
}

TEST_CASE("weights: a training checkpoint loads as weights; strict=false reports what differs",
          "[weights]") {
  ScratchDir dir("ckpt");
  const DatasetSplits data = trident::testing::small_splits(400, 100);
  TrainOptions options;
  options.batch = 100;
  options.optimizer.kind = "adam";
  options.optimizer.lr = 0.001f;
  Trainer trainer({&cpu()}, [] { return make_seed_cnn(); }, data, options);
  trainer.train_epoch();
  const std::string checkpoint = dir.file("run.safetensors");
  trainer.save_checkpoint(checkpoint);
  const TensorFile file = load_safetensors(checkpoint);
  CHECK(is_training_checkpoint(file));
  // The weights come out exactly as trained; the optimizer state is skipped, not unexpected.
  Network net = built(make_seed_cnn());
  const StateDictReport report = load_weights(net, checkpoint);
  CHECK(report.clean());
  CHECK(net.parameters().to_host() == trainer.network().parameters().to_host());
  // A weights file with the optimizer tensors (no checkpoint metadata): unexpected keys, as in
  // PyTorch; strict=false loads the weights and reports them.
  TensorFile stripped = file;
  stripped.metadata.clear();
  const std::string bare = dir.file("bare.safetensors");
  save_safetensors(bare, stripped);
  Network other = built(make_seed_cnn());
  CHECK_THROWS_WITH(load_weights(other, bare),
                    Catch::Contains("unexpected keys (2)") &&
                        Catch::Contains("'optimizer.exp_avg'"));
  const StateDictReport loose = load_weights(other, bare, /*strict=*/false);
  CHECK(loose.unexpected == std::vector<std::string>{"optimizer.exp_avg", "optimizer.exp_avg_sq"});
  CHECK(loose.missing.empty());
  CHECK(other.parameters().to_host() == trainer.network().parameters().to_host());
}

TEST_CASE("weights: malformed and mismatched files are errors naming the tensor, and change nothing",
          "[weights]") {
  ScratchDir dir("badweights");
  Network source = built(make_resnet());
  randomise(source, 21);
  const std::string good = dir.file("good.safetensors");
  save_weights(source, good);
  Network net = built(make_resnet());
  randomise(net, 22);
  const std::vector<float> before = all_values(net);
  auto variant = [&](const std::string& name, auto&& edit) {
    TensorFile f = load_safetensors(good);
    edit(f);
    const std::string path = dir.file(name);
    save_safetensors(path, f);
    return path;
  };
  auto find = [](TensorFile& f, const std::string& name) -> HostTensor& {
    for (HostTensor& t : f.tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no " + name);
  };
  struct Case {
    std::string file, strict_message, loose_message;  // loose "": loads under strict=false
  };
  const std::vector<Case> cases = {
      {variant("missing.safetensors",
               [&](TensorFile& f) {
                 f.tensors.erase(f.tensors.begin() + 1);  // bn1.weight
               }),
       "missing keys (1): 'bn1.weight'", ""},
      {variant("extra.safetensors",
               [&](TensorFile& f) {
                 HostTensor t = find(f, "fc.bias");
                 t.name = "fc2.bias";
                 f.tensors.push_back(t);
               }),
       "unexpected keys (1): 'fc2.bias'", ""},
      {variant("shape.safetensors",
               [&](TensorFile& f) {
                 HostTensor& t = find(f, "fc.weight");
                 t.shape = {128, 10};
               }),
       "fc.weight: file [128, 10] F32, model [10, 128] F32",
       "fc.weight: file [128, 10] F32, model [10, 128] F32"},
      {variant("dtype.safetensors",
               [&](TensorFile& f) {
                 HostTensor& t = find(f, "fc.bias");
                 t.dtype = DType::i32;
               }),
       "fc.bias: file [10] I32, model [10] F32 (Trident reads F32, F16 and BF16 weights)",
       "fc.bias: file [10] I32"},
      {variant("counter.safetensors",
               [&](TensorFile& f) {
                 HostTensor& t = find(f, "layer2.bn1.num_batches_tracked");
                 t = f32_tensor(t.name, {2}, {1.0f, 2.0f});
               }),
       "layer2.bn1.num_batches_tracked: file [2] F32, model a scalar integer",
       "layer2.bn1.num_batches_tracked: file [2] F32"},
      {variant("nan.safetensors",
               [&](TensorFile& f) {
                 HostTensor& t = find(f, "layer1.conv2.weight");  // [32, 32, 3, 3]
                 const float nan = std::nanf("");
                 std::memcpy(t.bytes.data() + 4 * (9 * 32 + 4), &nan, 4);
               }),
       "'layer1.conv2.weight' holds NaN at index [1, 0, 1, 1]",
       "'layer1.conv2.weight' holds NaN at index [1, 0, 1, 1]"},
      {variant("negative_var.safetensors",
               [&](TensorFile& f) {
                 HostTensor& t = find(f, "layer3.shortcut.1.running_var");
                 const float v = -0.25f;
                 std::memcpy(t.bytes.data() + 4 * 7, &v, 4);
               }),
       "'layer3.shortcut.1.running_var' holds the negative variance -0.25 at index [7]",
       "negative variance"},
      {variant("ddp.safetensors",
               [&](TensorFile& f) {
                 for (HostTensor& t : f.tensors) t.name = "module." + t.name;
               }),
       "the prefix 'module.'", ""},
  };
  for (const Case& c : cases) {
    INFO(c.file);
    CHECK_THROWS_WITH(load_weights(net, c.file),
                      Catch::Contains(c.file) && Catch::Contains(c.strict_message));
    Network fresh = built(make_resnet());
    if (c.loose_message.empty())
      CHECK_NOTHROW(load_weights(fresh, c.file, false));
    else
      CHECK_THROWS_WITH(load_weights(net, c.file, false), Catch::Contains(c.loose_message));
    CHECK(all_values(net) == before);
  }
  // strict=false: the loadable part loads, the report lists the rest.
  {
    Network partial = built(make_resnet());
    const StateDictReport r = load_weights(partial, cases[0].file, /*strict=*/false);
    CHECK(r.missing == std::vector<std::string>{"bn1.weight"});
    CHECK(r.unexpected.empty());
  }
  // Long lists are cut: 20 names and a count.
  Network wrapped = built(make_resnet());
  const StateDictReport ddp = load_weights(wrapped, cases.back().file, false);
  CHECK(ddp.unexpected.size() == network_state_dict(source).size());
  CHECK_THAT(ddp.describe(), Catch::Contains("and " + std::to_string(ddp.unexpected.size() - 20) +
                                             " more"));
  // PyTorch accepts a state dict without num_batches_tracked (no version metadata): so does this.
  const std::string no_counters = variant("no_counters.safetensors", [](TensorFile& f) {
    std::vector<HostTensor> kept;
    for (HostTensor& t : f.tensors)
      if (t.name.find("num_batches_tracked") == std::string::npos) kept.push_back(t);
    f.tensors = kept;
  });
  Network counted = built(make_resnet());
  CHECK(load_weights(counted, no_counters).clean());
  CHECK(all_values(counted) == all_values(source));
  // Files that are not safetensors at all, or cut short.
  const std::string truncated = dir.file("truncated.safetensors");
  trident::testing::Bytes bytes = trident::testing::read_bytes(good);
  bytes.resize(bytes.size() / 2);
  trident::testing::write_bytes(truncated, bytes);
  CHECK_THROWS_AS(load_weights(net, truncated), FormatError);
  CHECK_THROWS_AS(load_weights(net, dir.file("absent.safetensors")), FormatError);
  // A file saved for another model says so.
  Network mlp = built(make_seed_mlp());
  const std::string mlp_path = dir.file("mlp.safetensors");
  save_weights(mlp, mlp_path);
  CHECK_THROWS_WITH(load_weights(net, mlp_path),
                    Catch::Contains("metadata says it holds model 'mlp'") &&
                        Catch::Contains("missing keys"));
  CHECK(all_values(net) == before);
  // Weights that are not finite are neither loaded nor saved (nothing is written).
  Network diverged = built(make_seed_mlp());
  std::vector<HostTensor> state = network_state_dict(diverged);
  const float inf = INFINITY;
  std::memcpy(state[2].bytes.data() + 4 * 3, &inf, 4);  // fc2.weight [0, 3]
  CHECK_THROWS_WITH(load_network_state_dict(diverged, state, "x", true),
                    Catch::Contains("'fc2.weight' holds an infinity at index [0, 3]"));
  const NamedParameter& fc2 = diverged.named_parameters()[2];
  diverged.parameters().view(fc2.offset + 3, {1}).copy_from_host(&inf, sizeof inf);
  const std::string never = dir.file("diverged.safetensors");
  CHECK_THROWS_WITH(save_weights(diverged, never),
                    Catch::Contains("'fc2.weight' holds an infinity at index [0, 3]") &&
                        Catch::Contains("nothing was written"));
  CHECK_FALSE(std::filesystem::exists(never));
}
