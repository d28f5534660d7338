// State dicts: the network's tensors by PyTorch name, out to host tensors and back in with
// PyTorch's checks (missing / unexpected keys, shapes) and conversions from 16-bit floats.
#include "trident/models/state_dict.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "trident/core/error.h"
#include "trident/core/json.h"

namespace trident {
namespace {

HostTensor host_copy(const std::string& name, const Tensor& t) {
  HostTensor h;
  h.name = name;
  h.dtype = t.dtype();
  h.shape = t.shape();
  h.bytes.resize(t.bytes());
  t.to_host(h.bytes.data(), h.bytes.size());
  return h;
}

std::string quoted(const std::string& text) { return "'" + json::escape_for_message(text) + "'"; }

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = mantissa;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (m & 0x3ff) << 13;
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// float32 -> IEEE half, rounded to nearest even (overflow gives an infinity, which the caller
// refuses; subnormals kept).
uint16_t float_to_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u)  // infinity or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u));
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (magnitude < 0x38800000u) {  // below the smallest normal half: a subnormal (or zero)
    if (magnitude < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(magnitude >> 23);  // 14 .. 24
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u), midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((magnitude >> 13) - (112u << 10));  // rebias the exponent 127 -> 15
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent
  return static_cast<uint16_t>(sign | half);
}

// float32 -> bfloat16, rounded to nearest even (finite inputs).
uint16_t float_to_bfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// The tensor's values as float32 (from F32, F16 or BF16).
std::vector<float> as_floats(const HostTensor& t) {
  const size_t count = t.bytes.size() / dtype_size(t.dtype);
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    if (t.dtype == DType::f32) {
      std::memcpy(&out[i], t.bytes.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, t.bytes.data() + 2 * i, 2);
      if (t.dtype == DType::f16) {
        out[i] = half_to_float(h);
      } else {
        const uint32_t bits = uint32_t(h) << 16;
        std::memcpy(&out[i], &bits, 4);
      }
    }
  }
  return out;
}

int64_t as_count(const HostTensor& t) {
  if (t.dtype == DType::i64) {
    int64_t v;
    std::memcpy(&v, t.bytes.data(), 8);
    return v;
  }
  int32_t v;
  std::memcpy(&v, t.bytes.data(), 4);
  return v;
}

std::string index_of(size_t element, const Shape& shape) {
  std::string index;
  size_t rest = element;
  for (size_t d = shape.size(); d-- > 0;) {
    const size_t extent = static_cast<size_t>(shape[d]);
    index = std::to_string(rest % extent) + (index.empty() ? "" : ", ") + index;
    rest /= extent;
  }
  return "[" + index + "]";
}

}  // namespace

std::vector<HostTensor> network_state_dict(const Network& network) {
  std::vector<HostTensor> out;
  for (const StateEntry& e : network.state_entries()) {
    if (e.kind == StateEntry::Kind::parameter) {
      const NamedParameter& p = network.named_parameters()[e.index];
      out.push_back(host_copy(p.name, network.parameters().view(p.offset, p.shape)));
    } else if (e.kind == StateEntry::Kind::buffer) {
      const NamedParameter& b = network.named_buffers()[e.index];
      out.push_back(host_copy(b.name, network.buffers().view(b.offset, b.shape)));
    } else {  // PyTorch keeps num_batches_tracked as an int64 scalar
      HostTensor count;
      count.name = e.name;
      count.dtype = DType::i64;
      const int64_t tracked = network.batches_tracked();
      count.bytes.resize(sizeof tracked);
      std::memcpy(count.bytes.data(), &tracked, sizeof tracked);
      out.push_back(std::move(count));
    }
  }
  return out;
}

namespace {

// The prefix P such that every unexpected key is P + one of the model's keys ("module." from a
// DistributedDataParallel or DataParallel state dict, "model." from a wrapper), or "" if none.
std::string common_extra_prefix(const std::vector<std::string>& unexpected,
                                const std::set<std::string>& wanted) {
  if (unexpected.empty() || wanted.empty()) return "";
  std::string prefix;
  for (const std::string& key : unexpected) {
    const size_t dot = key.find('.');
    if (dot == std::string::npos) return "";
    std::string candidate;
    for (size_t at = dot; at != std::string::npos; at = key.find('.', at + 1))
      if (wanted.count(key.substr(at + 1))) {
        candidate = key.substr(0, at + 1);
        break;
      }
    if (candidate.empty() || (!prefix.empty() && candidate != prefix)) return "";
    prefix = candidate;
  }
  return prefix;
}

}  // namespace

std::string StateDictReport::describe() const {
  constexpr size_t kShown = 20;  // names listed per kind; the count says how many there are
  std::ostringstream s;
  auto list = [&](const char* what, const std::vector<std::string>& names) {
    if (names.empty()) return;
    if (s.tellp() > 0) s << "; ";
    s << what << " (" << names.size() << "): ";
    for (size_t i = 0; i < names.size() && i < kShown; ++i)
      s << (i ? ", " : "") << quoted(names[i]);
    if (names.size() > kShown) s << " and " << names.size() - kShown << " more";
  };
  list("missing keys", missing);
  list("unexpected keys", unexpected);
  list("size or dtype mismatches", mismatched);
  if (!hint.empty()) s << " (" << hint << ")";
  return s.str();
}

StateDictReport load_network_state_dict(Network& network, const std::vector<HostTensor>& tensors,
                                        const std::string& source, bool strict,
                                        const std::string& ignore_prefix) {
  if (!network.built())
    throw UsageError("model '" + network.model_name() + "': build() it before loading " + source);
  struct Target {
    Tensor tensor;         // parameters and buffers
    bool counter = false;  // num_batches_tracked (host)
    bool variance = false; // a running_var: must not be negative
  };
  std::map<std::string, Target> targets;
  for (const NamedParameter& p : network.named_parameters())
    targets[p.name] = {network.parameters().view(p.offset, p.shape)};
  for (const NamedParameter& b : network.named_buffers()) {
    const std::string suffix = ".running_var";
    const bool variance = b.name.size() >= suffix.size() &&
                          b.name.compare(b.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    targets[b.name] = {network.buffers().view(b.offset, b.shape), false, variance};
  }
  for (const std::string& bn : network.batchnorm_names())
    targets[bn + ".num_batches_tracked"] = {Tensor(), true};

  StateDictReport report;
  std::map<std::string, const HostTensor*> found;
  std::set<std::string> mismatched;
  for (const HostTensor& t : tensors) {
    if (!ignore_prefix.empty() && t.name.rfind(ignore_prefix, 0) == 0) continue;
    auto it = targets.find(t.name);
    if (it == targets.end()) {
      report.unexpected.push_back(t.name);
      continue;
    }
    if (found.count(t.name) || mismatched.count(t.name)) {
      report.mismatched.push_back(t.name + ": given twice");
      continue;
    }
    const Target& target = it->second;
    if (target.counter) {
      const bool integer = t.dtype == DType::i64 || t.dtype == DType::i32;
      if (!integer || !(t.shape.empty() || t.shape == Shape{1})) {
        report.mismatched.push_back(t.name + ": file " + shape_string(t.shape) + " " +
                                    dtype_name(t.dtype) + ", model a scalar integer (I64 [])");
        mismatched.insert(t.name);
        continue;
      }
    } else {
      const bool floating = t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16;
      if (!floating || t.shape != target.tensor.shape()) {
        report.mismatched.push_back(
            t.name + ": file " + shape_string(t.shape) + " " + dtype_name(t.dtype) + ", model " +
            shape_string(target.tensor.shape()) + " F32" +
            (floating ? "" : " (Trident reads F32, F16 and BF16 weights)"));
        mismatched.insert(t.name);
        continue;
      }
    }
    found[t.name] = &t;
  }
  // Missing keys in the state dict's order; counters never (PyTorch fills them in as well).
  for (const StateEntry& e : network.state_entries())
    if (e.kind != StateEntry::Kind::counter && !found.count(e.name) && !mismatched.count(e.name))
      report.missing.push_back(e.name);
  if (!report.missing.empty()) {
    std::set<std::string> names;
    for (const auto& [name, target] : targets) names.insert(name);
    const std::string prefix = common_extra_prefix(report.unexpected, names);
    if (!prefix.empty())
      report.hint = "the file's names are the model's with the prefix " + quoted(prefix) +
                    ": the state dict of a wrapper such as DistributedDataParallel? Save the "
                    "inner module's state_dict(), or strip the prefix from the names";
  }
  if (strict && !report.clean())
    throw FormatError(source + ": the state dict does not match model '" + network.model_name() +
                      "': " + report.describe());
  if (!report.mismatched.empty())
    throw FormatError(source + ": " + report.describe());

  // Convert and check everything before the first write.
  std::map<std::string, std::vector<float>> values;
  int64_t tracked = -1;
  for (const auto& [name, t] : found) {
    const Target& target = targets[name];
    if (target.counter) {
      const int64_t v = as_count(*t);
      if (v < 0 || v > (int64_t{1} << 53))
        throw FormatError(source + ": " + quoted(name) + " = " + std::to_string(v) +
                          " is not a plausible count");
      tracked = std::max(tracked, v);
      continue;
    }
    std::vector<float> v = as_floats(*t);
    for (size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i]))
        throw FormatError(source + ": tensor " + quoted(name) + " holds " +
                          (std::isnan(v[i]) ? "NaN" : "an infinity") + " at index " +
                          index_of(i, t->shape) + " (element " + std::to_string(i) + " of " +
                          std::to_string(v.size()) + "); weights with non-finite values cannot "
                          "be trained from or evaluated (were they saved from a diverged run?)");
      if (target.variance && v[i] < 0.0f)
        throw FormatError(source + ": tensor " + quoted(name) + " holds the negative variance " +
                          json::number(v[i]) + " at index " + index_of(i, t->shape) +
                          "; a batch norm's running_var is never negative (a corrupt file, or "
                          "tensors saved under the wrong names?)");
    }
    values[name] = std::move(v);
  }
  for (auto& [name, v] : values) targets[name].tensor.copy_from_host(v.data(), v.size() * 4);
  if (tracked >= 0) network.set_batches_tracked(tracked);
  return report;
}

std::vector<HostTensor> convert_floats(std::vector<HostTensor> tensors, DType dtype) {
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
    throw UsageError(std::string("weights can be saved as F32, F16 or BF16, not ") +
                     dtype_name(dtype));
  for (HostTensor& t : tensors) {
    if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::bf16) continue;
    const std::vector<float> v = as_floats(t);
    for (size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i]))
        throw ShapeError("tensor " + quoted(t.name) + " holds " +
                         (std::isnan(v[i]) ? "NaN" : "an infinity") + " at index " +
                         index_of(i, t.shape) + ": weights with non-finite values are not saved "
                         "(they would not load anywhere)");
      if (dtype == DType::f16 && std::fabs(v[i]) >= 65520.0f)
        throw ShapeError("tensor " + quoted(t.name) + " holds " + json::number(v[i]) +
                         " at index " + index_of(i, t.shape) + ", beyond float16's range "
                         "(65504); save these weights as bf16 or f32");
    }
    if (t.dtype == dtype) continue;
    t.dtype = dtype;
    t.bytes.resize(v.size() * dtype_size(dtype));
    for (size_t i = 0; i < v.size(); ++i) {
      if (dtype == DType::f32) {
        std::memcpy(t.bytes.data() + 4 * i, &v[i], 4);
      } else {
        const uint16_t h = dtype == DType::f16 ? float_to_half(v[i]) : float_to_bfloat16(v[i]);
        std::memcpy(t.bytes.data() + 2 * i, &h, 2);
      }
    }
  }
  return tensors;
}

void save_weights(const Network& network, const std::string& path, DType dtype) {
  if (!network.built())
    throw UsageError("model '" + network.model_name() + "': build() it before save_weights");
  TensorFile file;
  file.metadata = {{"format", "pt"},  // what safetensors.torch.save_file writes
                   {"model", network.model_name()},
                   {"sample_shape", shape_string(network.sample_shape())}};
  try {
    file.tensors = convert_floats(network_state_dict(network), dtype);
  } catch (const ShapeError& e) {
    throw ShapeError("save_weights " + path + ": model '" + network.model_name() + "': " +
                     e.what() + "; nothing was written");
  }
  save_safetensors(path, file);
}

StateDictReport load_weights(Network& network, const std::string& path, bool strict) {
  return load_weights(network, load_safetensors(path), path, strict);
}

StateDictReport load_weights(Network& network, const TensorFile& file, const std::string& path,
                             bool strict) {
  const std::string ignore = is_training_checkpoint(file) ? "optimizer." : "";
  try {
    return load_network_state_dict(network, file.tensors, path, strict, ignore);
  } catch (const FormatError& e) {
    auto model = file.metadata.find("model");
    if (model == file.metadata.end() || model->second == network.model_name()) throw;
    throw FormatError(std::string(e.what()) + " (the file's metadata says it holds model " +
                      quoted(model->second) + ")");
  }
}

std::optional<Shape> file_sample_shape(const TensorFile& file, const std::string& path) {
  const auto found = file.metadata.find("sample_shape");
  if (found == file.metadata.end()) return std::nullopt;
  const std::string& text = found->second;
  Shape shape;
  const auto bad = [&]() -> FormatError {
    return FormatError(path + ": metadata 'sample_shape' = " + json::quote_for_message(text) +
                       " is not a shape such as [1, 28, 28]");
  };
  if (text.size() < 3 || text.front() != '[' || text.back() != ']') throw bad();
  std::stringstream items(text.substr(1, text.size() - 2));
  for (std::string item; std::getline(items, item, ',');) {
    const size_t first = item.find_first_not_of(' '), last = item.find_last_not_of(' ');
    if (first == std::string::npos) throw bad();
    item = item.substr(first, last - first + 1);
    if (item.empty() || item.size() > 9 || item.find_first_not_of("0123456789") != std::string::npos)
      throw bad();
    shape.push_back(std::stoll(item));
    if (shape.back() < 1) throw bad();
  }
  if (shape.empty() || shape.size() > 3) throw bad();
  return shape;
}

}  // namespace trident
