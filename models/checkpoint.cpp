// Training checkpoints as safetensors. Layout (README, "Weights, checkpoints and PyTorch"):
// - the network's state dict under PyTorch's names (parameters, batch-norm buffers and
//   counters): `model.load_state_dict(safetensors.torch.load_file(path), strict=False)` loads
//   exactly the weights;
// - the optimizer state as "optimizer.<state>" flat tensors over the parameter buffer (PyTorch
//   reports them as unexpected keys and, with strict=False, ignores them);
// - the settings and counters as metadata ("format", "model", "optimizer", "seed", "epoch",
//   "global_step", "batch", "sample_shape", "devices", "loss", "precision");
// - fp16 runs: the loss scaler as "optimizer.grad_scaler" (f32 [2]: scale, clean steps).
#include <cmath>
#include <cstring>
#include <map>

#include "trident/core/error.h"
#include "trident/core/json.h"
#include "trident/core/safetensors.h"
#include "trident/models/replica.h"
#include "trident/models/state_dict.h"

namespace trident {
namespace {

constexpr const char* kFormat = "trident-checkpoint-2";
constexpr const char* kOptimizerPrefix = "optimizer.";
// fp16 runs: GradScaler's state, f32 [2] = {scale, clean steps}. A run in another precision
// ignores it; an fp16 run resumed from a checkpoint without it starts from the initial scale.
constexpr const char* kGradScaler = "optimizer.grad_scaler";
// Largest epoch or step count read from a file: far beyond any real run, and small enough
// that the trainer's increments cannot overflow int64.
constexpr int64_t kMaxCounter = int64_t{1} << 53;

// A name or value from the file, quoted and escaped for a message (a NUL would end it).
std::string shown(const std::string& text) { return "'" + json::escape_for_message(text) + "'"; }

const std::string& require(const TensorFile& file, const std::string& path, const char* key) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end())
    throw FormatError(path + ": not a Trident training checkpoint (metadata '" + key +
                      "' missing); a weights-only file loads with load_weights(), or `trident eval` / "
                      "`trident predict` with --model NAME");
  return it->second;
}

// A counter from the metadata: plain decimal digits, at most max_value.
int64_t parse_count(const std::string& path, const char* key, const std::string& text,
                    int64_t max_value = kMaxCounter) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos)
    throw FormatError(path + ": metadata '" + key + "' = " + shown(text) +
                      " is not a count (decimal digits, at most " + std::to_string(max_value) + ")");
  uint64_t v = 0;  // 19 digits fit in uint64
  for (const char c : text) v = v * 10 + static_cast<uint64_t>(c - '0');
  if (v > static_cast<uint64_t>(max_value))
    throw FormatError(path + ": metadata '" + key + "' = " + shown(text) + " is larger than " +
                      std::to_string(max_value) + "; the checkpoint is corrupt");
  return static_cast<int64_t>(v);
}

HostTensor host_copy(const std::string& name, const Tensor& t) {
  HostTensor h;
  h.name = name;
  h.dtype = t.dtype();
  h.shape = t.shape();
  h.bytes.resize(t.bytes());
  t.to_host(h.bytes.data(), h.bytes.size());
  return h;
}

}  // namespace

void Trainer::save_checkpoint(const std::string& path) const {
  const Replica& r = *replicas_.front();
  TensorFile file;
  file.metadata = std::map<std::string, std::string>{{"format", kFormat},
                   {"model", model_name_},
                   {"optimizer", r.optimizer->name()},
                   {"loss", loss_name(loss_.kind)},
                   {"seed", std::to_string(options_.seed)},
                   {"epoch", std::to_string(epochs_done_)},
                   {"global_step", std::to_string(global_step_)},
                   {"batch", std::to_string(options_.batch)},
                   {"sample_shape", shape_string(r.net.sample_shape())},
                   {"precision", precision_name(precision_)},
                   {"devices", device_names()}};
  file.tensors = network_state_dict(r.net);  // float32 master weights, whatever the precision
  for (const auto& [name, state] : r.optimizer->state())
    file.tensors.push_back(host_copy(kOptimizerPrefix + name, state));
  if (r.optimizer->loss_scale_state().defined())
    file.tensors.push_back(host_copy(kGradScaler, r.optimizer->loss_scale_state()));
  save_safetensors(path, file);
}

void Trainer::load_checkpoint(const std::string& path) {
  const TensorFile file = load_safetensors(path);
  const std::string& format = require(file, path, "format");
  if (format != kFormat)
    throw FormatError(path + ": unsupported checkpoint format " + shown(format) + " (this "
                      "Trident reads " + kFormat + ")");
  const std::string& model = require(file, path, "model");
  if (model != model_name_)
    throw FormatError(path + ": checkpoint holds model " + shown(model) + ", this run builds '" +
                      model_name_ + "'");
  const std::string& sample = require(file, path, "sample_shape");
  const std::string built = shape_string(replicas_.front()->net.sample_shape());
  if (sample != built)
    throw FormatError(path + ": the checkpoint was trained on samples of " + shown(sample) +
                      ", the data set of this run has samples of " + built + " (" +
                      data_source_ + ")");
  const std::string& optimizer = require(file, path, "optimizer");
  if (optimizer != replicas_.front()->optimizer->name())
    throw FormatError(path + ": checkpoint was trained with optimizer " + shown(optimizer) +
                      ", this run uses '" + replicas_.front()->optimizer->name() + "'");
  const int64_t epoch = parse_count(path, "epoch", require(file, path, "epoch"));
  const int64_t step = parse_count(path, "global_step", require(file, path, "global_step"));
  const uint64_t seed =
      static_cast<uint64_t>(parse_count(path, "seed", require(file, path, "seed"), INT64_MAX));

  // The optimizer tensors must all be there with the right shapes; checked before any write.
  std::map<std::string, const HostTensor*> optimizer_state;
  const HostTensor* grad_scaler = nullptr;
  for (const HostTensor& t : file.tensors) {
    if (t.name == kGradScaler)
      grad_scaler = &t;
    else if (t.name.rfind(kOptimizerPrefix, 0) == 0)
      optimizer_state[t.name] = &t;
  }
  if (grad_scaler) {
    float state[2] = {0.0f, 0.0f};
    if (grad_scaler->dtype != DType::f32 || grad_scaler->shape != Shape{2})
      throw FormatError(path + ": tensor '" + kGradScaler + "' must be F32 [2], got " +
                        dtype_name(grad_scaler->dtype) + " " + shape_string(grad_scaler->shape));
    std::memcpy(state, grad_scaler->bytes.data(), sizeof state);
    if (!(state[0] > 0.0f) || !std::isfinite(state[0]) || !(state[1] >= 0.0f) ||
        !std::isfinite(state[1]))
      throw FormatError(path + ": tensor '" + kGradScaler + "' holds scale " +
                        std::to_string(state[0]) + " and count " + std::to_string(state[1]) +
                        "; a loss scale is positive and finite");
  }
  for (const auto& [name, state] : replicas_.front()->optimizer->state()) {
    auto it = optimizer_state.find(kOptimizerPrefix + name);
    if (it == optimizer_state.end())
      throw FormatError(path + ": tensor '" + kOptimizerPrefix + name + "' is missing");
    if (it->second->shape != state.shape() || it->second->dtype != state.dtype())
      throw FormatError(path + ": tensor " + shown(it->first) + " has shape " +
                        shape_string(it->second->shape) + " " + dtype_name(it->second->dtype) +
                        ", the optimizer expects " + shape_string(state.shape()) + " " +
                        dtype_name(state.dtype()));
    optimizer_state.erase(it);
  }
  if (!optimizer_state.empty())
    throw FormatError(path + ": tensor " + shown(optimizer_state.begin()->first) +
                      " does not belong to optimizer '" + optimizer + "'");
  // Load into every replica (a checkpoint from N devices loads on any number of devices); the
  // first load checks every tensor before anything is written.
  for (auto& r : replicas_) {
    load_network_state_dict(r->net, file.tensors, path, true, kOptimizerPrefix);
    for (const auto& [name, state] : r->optimizer->state())
      for (const HostTensor& t : file.tensors)
        if (t.name == kOptimizerPrefix + name) state.copy_from_host(t.bytes.data(), t.bytes.size());
    if (grad_scaler && r->optimizer->loss_scale_state().defined())
      r->optimizer->loss_scale_state().copy_from_host(grad_scaler->bytes.data(),
                                                      grad_scaler->bytes.size());
    r->captured.reset();  // buffers are the same, but replay after a load is re-recorded anyway
    r->capture_tried = false;
    r->compute_current = false;
  }
  options_.seed = seed;
  epochs_done_ = epoch;
  global_step_ = step;
  for (auto& r : replicas_) r->net.set_batches_tracked(step);
}

bool is_training_checkpoint(const TensorFile& file) {
  auto format = file.metadata.find("format");
  return format != file.metadata.end() && format->second.rfind("trident-checkpoint", 0) == 0;
}

std::string checkpoint_model_name(const std::string& path) {
  const TensorFile file = load_safetensors(path);
  return require(file, path, "model");
}

}  // namespace trident
