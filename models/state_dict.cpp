// State dicts: the network's tensors by PyTorch name, out to host tensors and back in with
// PyTorch's checks (missing / unexpected keys, shapes) and conversions from 16-bit floats.
#include "models/state_dict.h"

#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/json.h"

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

std::string StateDictReport::describe() const {
  std::ostringstream s;
  auto list = [&](const char* what, const std::vector<std::string>& names) {
    if (names.empty()) return;
    if (s.tellp() > 0) s << "; ";
    s << what << " (" << names.size() << "): ";
    for (size_t i = 0; i < names.size(); ++i) s << (i ? ", " : "") << quoted(names[i]);
  };
  list("missing keys", missing);
  list("unexpected keys", unexpected);
  list("size or dtype mismatches", mismatched);
  return s.str();
}

StateDictReport load_network_state_dict(Network& network, const std::vector<HostTensor>& tensors,
                                        const std::string& source, bool strict,
                                        const std::string& ignore_prefix) {
  struct Target {
    Tensor tensor;      // parameters and buffers
    bool counter = false;  // num_batches_tracked (host)
  };
  std::map<std::string, Target> targets;
  for (const NamedParameter& p : network.named_parameters())
    targets[p.name] = {network.parameters().view(p.offset, p.shape)};
  for (const NamedParameter& b : network.named_buffers())
    targets[b.name] = {network.buffers().view(b.offset, b.shape)};
  for (const std::string& bn : network.batchnorm_names())
    targets[bn + ".num_batches_tracked"] = {Tensor(), true};

  StateDictReport report;
  std::map<std::string, const HostTensor*> found;
  for (const HostTensor& t : tensors) {
    if (!ignore_prefix.empty() && t.name.rfind(ignore_prefix, 0) == 0) continue;
    auto it = targets.find(t.name);
    if (it == targets.end()) {
      report.unexpected.push_back(t.name);
      continue;
    }
    const Target& target = it->second;
    if (target.counter) {
      const bool integer = t.dtype == DType::i64 || t.dtype == DType::i32;
      if (!integer || !(t.shape.empty() || t.shape == Shape{1})) {
        report.mismatched.push_back(t.name + ": file " + shape_string(t.shape) + " " +
                                    dtype_name(t.dtype) + ", model a scalar integer");
        continue;
      }
    } else {
      const bool floating = t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16;
      if (!floating || t.shape != target.tensor.shape()) {
        report.mismatched.push_back(t.name + ": file " + shape_string(t.shape) + " " +
                                    dtype_name(t.dtype) + ", model " +
                                    shape_string(target.tensor.shape()) + " F32");
        continue;
      }
    }
    found[t.name] = &t;
  }
  for (const auto& [name, target] : targets)
    if (!found.count(name) && !(target.counter && !strict)) {
      bool mismatched = false;
      for (const std::string& m : report.mismatched) mismatched |= m.rfind(name + ":", 0) == 0;
      if (!mismatched) report.missing.push_back(name);
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
    if (targets[name].counter) {
      const int64_t v = as_count(*t);
      if (v < 0 || v > (int64_t{1} << 53))
        throw FormatError(source + ": " + quoted(name) + " = " + std::to_string(v) +
                          " is not a plausible count");
      tracked = std::max(tracked, v);
      continue;
    }
    std::vector<float> v = as_floats(*t);
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i]))
        throw FormatError(source + ": tensor " + quoted(name) + " holds " +
                          (std::isnan(v[i]) ? "NaN" : "an infinity") + " at index " +
                          index_of(i, t->shape) + " (element " + std::to_string(i) + " of " +
                          std::to_string(v.size()) + "); weights with non-finite values cannot "
                          "be trained from or evaluated (were they saved from a diverged run?)");
    values[name] = std::move(v);
  }
  for (auto& [name, v] : values) targets[name].tensor.copy_from_host(v.data(), v.size() * 4);
  if (tracked >= 0) network.set_batches_tracked(tracked);
  return report;
}

}  // namespace trident
