// The built-in models, written with the same public API a user's model uses, and the training
// recipe each was tuned with (the defaults `trident train --model NAME` starts from).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "trident/models/network.h"
#include "trident/models/optimizer.h"
#include "trident/models/schedule.h"
#include "trident/models/sequential.h"

namespace trident {

// Every builder takes the number of classes (the size of the last layer; 10 for Fashion-MNIST).
// 784-512-10 with ReLU, ending in LogSoftmax (trained with NLL): the R blog's MLP.
Network make_seed_mlp(int64_t classes = 10);
// conv(1->10,k5) -> maxpool2 -> relu -> conv(10->20,k5) -> dropout2d -> maxpool2 -> relu ->
// flatten -> fc 320->50 -> relu -> dropout -> fc 50->10 -> log_softmax (PyTorch's MNIST example).
Network make_seed_cnn(int64_t classes = 10);
// 784-4096-4096-4096-10 with ReLU: the compute-bound benchmark model.
Network make_big_mlp(int64_t classes = 10);
// A small ResNet for 28x28 images: stem conv3x3 (1->32, no bias) + BN + ReLU; BasicBlocks
// 32->32 (stride 1), 32->64 (stride 2, 1x1 conv + BN shortcut), 64->128 (stride 2, likewise);
// global average pooling; Linear 128->10. State-dict names as the PyTorch module in
// tests/torch_models.py (conv1, bn1, layer1.conv1, layer2.shortcut.0, fc ...).
Network make_resnet(int64_t classes = 10);
// One ResNet BasicBlock: conv3x3(stride)-BN-ReLU-conv3x3-BN + identity (or 1x1 conv + BN when
// the stride or the width changes), then ReLU.
class Residual;
Residual basic_block(int64_t in_channels, int64_t out_channels, int64_t stride);

// A built-in model and how it is trained by default.
struct ModelRecipe {
  std::string name;         // "cnn"
  std::string description;  // one line for --help
  std::function<Network(int64_t classes)> make;
  // A factory of fresh networks with `classes` outputs, as the Trainer takes.
  std::function<Network()> factory(int64_t classes = 10) const {
    auto m = make;
    return [m, classes] { return m(classes); };
  }
  int64_t batch = 200, epochs = 1;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  std::string loss = "auto";  // auto: nll after a LogSoftmax, else cross_entropy
  // Input normalisation of byte images: (x / 255 - mean) / std.
  float mean = 0.1307f, std = 0.3081f;
};
const std::vector<ModelRecipe>& model_zoo();
// The recipe called `name`; UsageError listing the names otherwise.
const ModelRecipe& find_model(const std::string& name);
std::string model_names();  // "mlp, cnn, mlp-big, resnet"

}  // namespace trident
