// Trainer checkpoints as safetensors: every weight under its PyTorch state-dict name, the
// optimizer state as "optimizer.<state>" flat tensors, and the counters and settings as metadata.
#include <cmath>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "core/safetensors.h"
#include "models/replica.h"

namespace trident {
namespace {

constexpr const char* kFormat = "trident-checkpoint-1";
// Largest epoch or step count read from a file: far beyond any real run, and small enough that
// the trainer's increments cannot overflow int64 (a step of 9223372036854775807 used to wrap).
constexpr int64_t kMaxCounter = int64_t{1} << 53;

// A name or value from the file, quoted and escaped for a message (a NUL would end it).
std::string shown(const std::string& text) { return "'" + json::escape_for_message(text) + "'"; }

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

// The first NaN or infinity in a float32 tensor, named with its index, as an error: training
// from such weights only produces NaN (and evaluation a meaningless accuracy).
void check_finite(const std::string& path, const HostTensor& t) {
  if (t.dtype != DType::f32) return;
  const size_t count = t.bytes.size() / sizeof(float);
  for (size_t i = 0; i < count; ++i) {
    float v;
    std::memcpy(&v, t.bytes.data() + i * sizeof(float), sizeof v);
    if (std::isfinite(v)) continue;
    std::string index;  // row-major coordinates of element i
    size_t rest = i;
    for (size_t d = t.shape.size(); d-- > 0;) {
      const size_t extent = static_cast<size_t>(t.shape[d]);
      index = std::to_string(rest % extent) + (index.empty() ? "" : ", ") + index;
      rest /= extent;
    }
    throw FormatError(path + ": tensor " + shown(t.name) + " holds " + (std::isnan(v) ? "NaN" : "an infinity") +
                      " at index [" + index + "] (element " + std::to_string(i) + " of " +
                      std::to_string(count) + "); a checkpoint with non-finite values cannot be "
                      "trained from or evaluated (was it saved from a diverged run?)");
  }
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
    throw FormatError(path + ": unsupported checkpoint format " + shown(file.metadata.at("format")));
  const std::string& model = require(file, path, "model");
  if (model != options_.model)
    throw FormatError(path + ": checkpoint holds model " + shown(model) + ", this run builds '" +
                      options_.model + "'");
  const std::string& optimizer = require(file, path, "optimizer");
  if (optimizer != replicas_.front()->optimizer->name())
    throw FormatError(path + ": checkpoint was trained with optimizer " + shown(optimizer) +
                      ", this run uses '" + replicas_.front()->optimizer->name() + "'");
  const int64_t epoch = parse_count(path, "epoch", require(file, path, "epoch"));
  const int64_t step = parse_count(path, "global_step", require(file, path, "global_step"));
  const uint64_t seed =
      static_cast<uint64_t>(parse_count(path, "seed", require(file, path, "seed"), INT64_MAX));

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
      throw FormatError(path + ": tensor " + shown(name) + " does not belong to model '" +
                        options_.model + "' with optimizer '" + optimizer + "'");
  for (const auto& [name, target] : targets) {
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw FormatError(path + ": tensor " + shown(name) + " is missing");
    if (it->second->shape != target.shape() || it->second->dtype != target.dtype())
      throw FormatError(path + ": tensor " + shown(name) + " has shape " +
                        shape_string(it->second->shape) + " " + dtype_name(it->second->dtype) +
                        ", the model expects " + shape_string(target.shape()) + " " +
                        dtype_name(target.dtype()));
    check_finite(path, *it->second);
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
