// The built-in models and their recipes (see models/zoo.h), with PyTorch's layer names so that
// their weights load there as state dicts.
#include "trident/models/zoo.h"

#include "trident/core/error.h"
#include "trident/models/layers.h"
#include "trident/models/sequential.h"

namespace trident {

Network make_seed_mlp(int64_t classes) {
  Network net("mlp");
  net.add("flatten", Flatten());
  net.add("fc1", Linear(512));
  net.add("relu1", ReLU());
  net.add("fc2", Linear(classes));
  net.add("log_softmax", LogSoftmax());
  return net;
}

Network make_seed_cnn(int64_t classes) {
  Network net("cnn");
  net.add("conv1", Conv2d(10, 5));
  net.add("pool1", MaxPool2d(2));
  net.add("relu1", ReLU());
  net.add("conv2", Conv2d(20, 5));
  net.add("conv2_drop", Dropout2d(0.5f));
  net.add("pool2", MaxPool2d(2));
  net.add("relu2", ReLU());
  net.add("flatten", Flatten());
  net.add("fc1", Linear(50));
  net.add("relu3", ReLU());
  net.add("dropout", Dropout(0.5f));
  net.add("fc2", Linear(classes));
  net.add("log_softmax", LogSoftmax());
  return net;
}

Network make_big_mlp(int64_t classes) {
  Network net("mlp-big");
  net.add("flatten", Flatten());
  net.add("fc1", Linear(4096));
  net.add("relu1", ReLU());
  net.add("fc2", Linear(4096));
  net.add("relu2", ReLU());
  net.add("fc3", Linear(4096));
  net.add("relu3", ReLU());
  net.add("fc4", Linear(classes));
  net.add("log_softmax", LogSoftmax());
  return net;
}

Residual basic_block(int64_t in_channels, int64_t out_channels, int64_t stride) {
  Sequential body;
  body.add("conv1", Conv2d(out_channels, 3).stride(stride).padding(1).bias(false));
  body.add("bn1", BatchNorm2d());
  body.add("relu", ReLU());
  body.add("conv2", Conv2d(out_channels, 3).padding(1).bias(false));
  body.add("bn2", BatchNorm2d());
  Sequential shortcut;  // identity unless the shape changes
  if (stride != 1 || in_channels != out_channels) {
    shortcut.add("0", Conv2d(out_channels, 1).stride(stride).bias(false));
    shortcut.add("1", BatchNorm2d());
  }
  return Residual(std::move(body), std::move(shortcut), UnaryOp::relu);
}

Network make_resnet(int64_t classes) {
  Network net("resnet");
  net.add("conv1", Conv2d(32, 3).padding(1).bias(false));
  net.add("bn1", BatchNorm2d());
  net.add("relu", ReLU());
  net.add("layer1", basic_block(32, 32, 1));
  net.add("layer2", basic_block(32, 64, 2));
  net.add("layer3", basic_block(64, 128, 2));
  net.add("pool", GlobalAvgPool2d());
  net.add("flatten", Flatten());
  net.add("fc", Linear(classes));
  return net;
}

const std::vector<ModelRecipe>& model_zoo() {
  static const std::vector<ModelRecipe> zoo = [] {
    std::vector<ModelRecipe> z;
    ModelRecipe mlp;  // the MNIST notebook's settings: batch 200, SGD lr 0.01 momentum 0.5
    mlp.name = "mlp";
    mlp.description = "784-512-10 MLP with ReLU (the R blog's)";
    mlp.make = make_seed_mlp;
    z.push_back(mlp);
    ModelRecipe cnn = mlp;
    cnn.name = "cnn";
    cnn.description = "two conv layers, dropout, two linear layers (PyTorch's MNIST example)";
    cnn.make = make_seed_cnn;
    z.push_back(cnn);
    ModelRecipe big = mlp;
    big.name = "mlp-big";
    big.description = "784-4096x3-10 MLP, compute-bound (benchmarks)";
    big.make = make_big_mlp;
    z.push_back(big);
    ModelRecipe resnet;  // what the PyTorch anchor ran (README): 93.1% after 12 epochs
    resnet.name = "resnet";
    resnet.description = "ResNet with three BasicBlocks (32-64-128), BN, global pooling";
    resnet.make = make_resnet;
    resnet.batch = 256;
    resnet.epochs = 12;
    resnet.optimizer.kind = "sgd";
    resnet.optimizer.momentum = 0.9f;
    resnet.optimizer.nesterov = true;
    resnet.optimizer.weight_decay = 5e-4f;
    resnet.schedule.kind = "onecycle";
    resnet.schedule.max_lr = 0.1f;
    resnet.optimizer.lr = resnet.schedule.max_lr / resnet.schedule.div_factor;
    resnet.loss = "cross_entropy";
    resnet.mean = 0.2860f;  // Fashion-MNIST's
    resnet.std = 0.3530f;
    z.push_back(resnet);
    return z;
  }();
  return zoo;
}

std::string model_names() {
  std::string names;
  for (const ModelRecipe& r : model_zoo()) names += (names.empty() ? "" : ", ") + r.name;
  return names;
}

const ModelRecipe& find_model(const std::string& name) {
  for (const ModelRecipe& r : model_zoo())
    if (r.name == name) return r;
  throw UsageError("unknown model '" + name + "' (built-in models: " + model_names() +
                   "; a network of your own runs through the library: Trainer, Predictor)");
}

}  // namespace trident
