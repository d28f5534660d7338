// Builders of the seed models, with PyTorch's layer names so checkpoints load there as state dicts.
#include "trident/models/seed_models.h"

#include "trident/core/error.h"
#include "trident/models/layers.h"

namespace trident {

Network make_seed_mlp() {
  Network net("mlp");
  net.add<Flatten>("flatten");
  net.add<Linear>("fc1", 784, 512);
  net.add<ReLU>("relu1");
  net.add<Linear>("fc2", 512, 10);
  net.add<LogSoftmax>("log_softmax");
  return net;
}

Network make_seed_cnn() {
  Network net("cnn");
  net.add<Conv2d>("conv1", 1, 10, 5);
  net.add<MaxPool2d>("pool1", 2);
  net.add<ReLU>("relu1");
  net.add<Conv2d>("conv2", 10, 20, 5);
  net.add<Dropout>("conv2_drop", 0.5f, true);
  net.add<MaxPool2d>("pool2", 2);
  net.add<ReLU>("relu2");
  net.add<Flatten>("flatten");
  net.add<Linear>("fc1", 320, 50);
  net.add<ReLU>("relu3");
  net.add<Dropout>("dropout", 0.5f, false);
  net.add<Linear>("fc2", 50, 10);
  net.add<LogSoftmax>("log_softmax");
  return net;
}

Network make_big_mlp() {
  Network net("mlp-big");
  net.add<Flatten>("flatten");
  net.add<Linear>("fc1", 784, 4096);
  net.add<ReLU>("relu1");
  net.add<Linear>("fc2", 4096, 4096);
  net.add<ReLU>("relu2");
  net.add<Linear>("fc3", 4096, 4096);
  net.add<ReLU>("relu3");
  net.add<Linear>("fc4", 4096, 10);
  net.add<LogSoftmax>("log_softmax");
  return net;
}

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names{"mlp", "cnn", "mlp-big"};
  return names;
}

Network make_model(const std::string& name) {
  if (name == "mlp") return make_seed_mlp();
  if (name == "cnn") return make_seed_cnn();
  if (name == "mlp-big") return make_big_mlp();
  throw UsageError("unknown model '" + name + "' (use mlp, cnn or mlp-big)");
}

Shape model_sample_shape(const std::string&) { return {1, 28, 28}; }

}  // namespace trident
