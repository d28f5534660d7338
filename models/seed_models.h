// The seed networks: the MNIST notebook's CNN, the R blog's MLP, and a compute-bound MLP.
#pragma once
#include <string>
#include <vector>

#include "trident/models/network.h"

namespace trident {

// 784-512-10 with ReLU, ending in LogSoftmax (trained with NLL).
Network make_seed_mlp();
// conv(1->10,k5) -> maxpool2 -> relu -> conv(10->20,k5) -> dropout2d -> maxpool2 -> relu ->
// flatten -> fc 320->50 -> relu -> dropout -> fc 50->10 -> log_softmax (PyTorch's MNIST example).
Network make_seed_cnn();
// 784-4096-4096-4096-10 with ReLU: the compute-bound benchmark model.
Network make_big_mlp();
// "mlp", "cnn" or "mlp-big"; UsageError listing the names otherwise.
Network make_model(const std::string& name);
const std::vector<std::string>& model_names();
// The per-sample input shape: [1, 28, 28] for every seed model (MNIST images).
Shape model_sample_shape(const std::string& name);

}  // namespace trident
