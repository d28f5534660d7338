// Trainer checkpoints as safetensors: every weight under its PyTorch state-dict name, the
// optimizer state as "optimizer.<state>" flat tensors, and the counters and settings as metadata.
#include <cstring>
#include <set>

#include "trident/core/error.h"
#include "trident/core/safetensors.h"
#include "trident/models/replica.h"

namespace trident {
namespace {

constexpr const char* kFormat = "trident-checkpoint-1";

HostTensor host_tensor(const std::string& name, const Tensor& t) {
  HostTensor h;
  h.name = name;
  h.dtype = t.dtype();
  h.shape = t.shape();
  h.bytes.resize(t.bytes());
  t.to_host(h.bytes.data(), h.bytes.size());
  return h;
}

const std::string& require(const TensorFile& file, const std::string& path, const char* key) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end())
    throw FormatError(path + ": not a Trident checkpoint (metadata '" + key + "' missing)");
  return it->second;
}

int64_t parse_count(const std::string& path, const char* key, const std::string& text) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw FormatError(path + ": metadata '" + key + "' = '" + text + "' is not a count");
}

}  // namespace

void Trainer::save_checkpoint(const std::string& path) const {
  const Replica& r = *replicas_.front();
  TensorFile file;
  file.metadata = std::map<std::string, std::string>{{"format", kFormat},
                   {"model", options_.model},
                   {"optimizer", r.optimizer->name()},
                   {"seed", std::to_string(options_.seed)},
                   {"epoch", std::to_string(epochs_done_)},
                   {"global_step", std::to_string(global_step_)},
                   {"batch", std::to_string(options_.batch)},
                   {"devices", device_names()}};
  for (const NamedParameter& p : r.net.named_parameters())
    file.tensors.push_back(host_tensor(p.name, r.net.parameters().view(p.offset, p.shape)));
  for (const auto& [name, state] : r.optimizer->state())
    file.tensors.push_back(host_tensor("optimizer." + name, state));
  save_safetensors(path, file);
}

void Trainer::load_checkpoint(const std::string& path) {
  const TensorFile file = load_safetensors(path);
  if (require(file, path, "format") != kFormat)
    throw FormatError(path + ": unsupported checkpoint format '" + file.metadata.at("format") + "'");
  const std::string& model = require(file, path, "model");
  if (model != options_.model)
    throw FormatError(path + ": checkpoint holds model '" + model + "', this run builds '" +
                      options_.model + "'");
  const std::string& optimizer = require(file, path, "optimizer");
  if (optimizer != replicas_.front()->optimizer->name())
    throw FormatError(path + ": checkpoint was trained with optimizer '" + optimizer +
                      "', this run uses '" + replicas_.front()->optimizer->name() + "'");
  const int64_t epoch = parse_count(path, "epoch", require(file, path, "epoch"));
  const int64_t step = parse_count(path, "global_step", require(file, path, "global_step"));
  const uint64_t seed =
      static_cast<uint64_t>(parse_count(path, "seed", require(file, path, "seed")));

  // Every tensor must be one the model expects, with the expected shape and dtype; every
  // expected tensor must be present. Check everything before touching any device buffer.
  std::map<std::string, const HostTensor*> by_name;
  for (const HostTensor& t : file.tensors) by_name[t.name] = &t;
  std::map<std::string, Tensor> targets;
  for (const NamedParameter& p : network().named_parameters())
    targets[p.name] = network().parameters().view(p.offset, p.shape);
  for (const auto& [name, state] : replicas_.front()->optimizer->state())
    targets["optimizer." + name] = state;
  for (const auto& [name, tensor] : by_name)
    if (!targets.count(name))
      throw FormatError(path + ": tensor '" + name + "' does not belong to model '" +
                        options_.model + "' with optimizer '" + optimizer + "'");
  for (const auto& [name, target] : targets) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw FormatError(path + ": tensor '" + name + "' is missing");
    if (it->second->shape != target.shape() || it->second->dtype != target.dtype())
      throw FormatError(path + ": tensor '" + name + "' has shape " +
                        shape_string(it->second->shape) + " " + dtype_name(it->second->dtype) +
                        ", the model expects " + shape_string(target.shape()) + " " +
                        dtype_name(target.dtype()));
  }
  // Load into every replica (a checkpoint from N devices loads on any number of devices).
  for (auto& r : replicas_) {
    std::map<std::string, Tensor> mine;
    for (const NamedParameter& p : r->net.named_parameters())
      mine[p.name] = r->net.parameters().view(p.offset, p.shape);
    for (const auto& [name, state] : r->optimizer->state()) mine["optimizer." + name] = state;
    for (auto& [name, target] : mine)
      target.copy_from_host(by_name[name]->bytes.data(), by_name[name]->bytes.size());
    r->captured.reset();  // buffers are the same, but replay after a load is re-recorded anyway
    r->capture_tried = false;
  }
  options_.seed = seed;
  epochs_done_ = epoch;
  global_step_ = step;
}

std::string checkpoint_model_name(const std::string& path) {
  const TensorFile file = load_safetensors(path);
  return require(file, path, "model");
}

}  // namespace trident
