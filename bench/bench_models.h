// Models the bench trains that Trident has no built-in recipe for: what a user brings. They are
// built with the public API only, as a user's code would build them, so that the benchmark asks
// whether Trident's speed holds beyond the shapes it was tuned on (the built-in ResNet's 28x28
// planes of 32-128 channels). bench/torch_reference.py holds their PyTorch twins (same layers,
// same recipe).
#pragma once
#include <string>
#include <vector>

#include "trident/core/tensor.h"
#include "trident/models/layers.h"
#include "trident/models/network.h"
#include "trident/models/sequential.h"
#include "trident/models/zoo.h"

namespace trident_bench {

// A conv3x3 (no bias) - BN - ReLU unit, Page's building block, added to a Network or a
// Sequential as prefix + "conv", "bn", "relu".
template <class Container>
void add_conv_bn_relu(Container& to, const std::string& prefix, int64_t channels) {
  to.add(prefix + "conv", trident::Conv2d(channels, 3).padding(1).bias(false));
  to.add(prefix + "bn", trident::BatchNorm2d());
  to.add(prefix + "relu", trident::ReLU());
}

// ResNet-9 of the DAWNBench CIFAR-10 entries (Page, "How to train your ResNet", 2018), for
// 3 x 32 x 32 images: prep conv 64; conv 128 + max-pool 2 + residual of two conv 128 units;
// conv 256 + max-pool 2; conv 512 + max-pool 2 + residual of two conv 512 units; max-pool 4;
// Linear 512 -> classes without bias (Page's 0.125 output scale left out: it changes no
// speed). Planes of 32, 16, 8 and 4 pixels with 64-512 channels: 0.38 G multiply-adds a sample
// forward, ten times the built-in ResNet's.
inline trident::Network make_resnet9(int64_t classes) {
  trident::Network net("resnet9");
  auto add_residual = [&](const std::string& name, int64_t channels) {
    trident::Sequential body;
    add_conv_bn_relu(body, "0_", channels);
    add_conv_bn_relu(body, "1_", channels);
    net.add(name, trident::Residual(std::move(body), trident::Sequential(),
                                    trident::UnaryOp::identity));
  };
  add_conv_bn_relu(net, "prep_", 64);
  add_conv_bn_relu(net, "layer1_", 128);
  net.add("layer1_pool", trident::MaxPool2d(2));
  add_residual("layer1_res", 128);
  add_conv_bn_relu(net, "layer2_", 256);
  net.add("layer2_pool", trident::MaxPool2d(2));
  add_conv_bn_relu(net, "layer3_", 512);
  net.add("layer3_pool", trident::MaxPool2d(2));
  add_residual("layer3_res", 512);
  net.add("pool", trident::MaxPool2d(4));
  net.add("flatten", trident::Flatten());
  net.add("fc", trident::Linear(classes).bias(false));
  return net;
}

struct BenchModel {
  trident::ModelRecipe recipe;
  trident::Shape sample;  // C x H x W of one input
};

// The bench's own models (not in the zoo, not in the CLI).
inline const std::vector<BenchModel>& bench_models() {
  static const std::vector<BenchModel> models = [] {
    std::vector<BenchModel> m;
    BenchModel resnet9;
    resnet9.recipe.name = "resnet9";
    resnet9.recipe.description = "ResNet-9 (DAWNBench CIFAR-10), 3x32x32 inputs, 64-512 channels";
    resnet9.recipe.make = make_resnet9;
    resnet9.recipe.batch = 512;  // Page's
    resnet9.recipe.optimizer.kind = "sgd";
    resnet9.recipe.optimizer.lr = 0.05f;  // constant: a speed benchmark on random data
    resnet9.recipe.optimizer.momentum = 0.9f;
    resnet9.recipe.optimizer.nesterov = true;
    resnet9.recipe.optimizer.weight_decay = 5e-4f;
    resnet9.recipe.loss = "cross_entropy";
    resnet9.recipe.mean = 0.5f;
    resnet9.recipe.std = 0.25f;
    resnet9.sample = {3, 32, 32};
    m.push_back(resnet9);
    return m;
  }();
  return models;
}

// The bench model called `name`, else nullptr (then it is a zoo model, or unknown).
inline const BenchModel* find_bench_model(const std::string& name) {
  for (const BenchModel& m : bench_models())
    if (m.recipe.name == name) return &m;
  return nullptr;
}

}  // namespace trident_bench
