// Shared helpers of the op conformance suite: the devices under test, host <-> device transfers,
// seeded random inputs, and tolerance comparisons that report the worst element.
#pragma once
#include <cstdlib>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "trident/core/default_ops.h"
#include "trident/core/device.h"
#include "trident/core/error.h"
#include "trident/core/registry.h"
#include "trident/core/tensor.h"

namespace trident::testing {

// ---- devices ----------------------------------------------------------------------------------

// Every device the registry found. The first call in the process WARNs once for each compiled-in
// backend that found none, with its reason, so that a missing backend shows as skipped.
inline std::vector<Device*> devices_under_test() {
  static bool warned = false;
  const DeviceRegistry& registry = DeviceRegistry::global();
  if (!warned) {
    warned = true;
    for (const auto& backend : registry.backends())
      if (backend.devices.empty())
        WARN("SKIPPED backend " << backend.name << ": no devices (" << backend.why_none << ")");
  }
  // TRIDENT_TEST_BACKENDS=cuda,opencl narrows the run (e.g. compute-sanitizer on the GPU alone).
  const char* only = std::getenv("TRIDENT_TEST_BACKENDS");
  std::vector<Device*> devices;
  for (Device* d : registry.all_devices()) {
    const std::string wanted = only ? "," + std::string(only) + "," : "";
    if (!only || wanted.find("," + d->info().backend + ",") != std::string::npos)
      devices.push_back(d);
  }
  return devices;
}

inline std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// Whether the device computes GEMM (and so convolution) with TF32 tensor cores: the backend says
// so in DeviceInfo.detail.
inline bool uses_tf32(const Device& device) {
  return lowercase(device.info().detail).find("tf32") != std::string::npos;
}

// ---- transfers --------------------------------------------------------------------------------

inline Tensor upload(Device& device, const std::vector<float>& values) {
  return Tensor::from_host(device, {static_cast<int64_t>(values.size())}, values);
}

inline Tensor upload(Device& device, const std::vector<int32_t>& values) {
  return Tensor::from_host(device, {static_cast<int64_t>(values.size())}, values);
}

inline Tensor upload(Device& device, const std::vector<uint32_t>& values) {
  Tensor t = Tensor::empty(device, {static_cast<int64_t>(values.size())}, DType::i32);
  t.copy_from_host(values.data(), values.size() * sizeof(uint32_t));
  return t;
}

inline Tensor upload(Device& device, const std::vector<uint8_t>& values) {
  Tensor t = Tensor::empty(device, {static_cast<int64_t>(values.size())}, DType::u8);
  t.copy_from_host(values.data(), values.size());
  return t;
}

// count values of type T read back from raw device memory (waits for queued work).
template <typename T = float>
std::vector<T> download(Device& device, DeviceMemory src, size_t count) {
  std::vector<T> out(count);
  if (count) device.copy_to_host(out.data(), src, count * sizeof(T));
  return out;
}

inline std::vector<float> download(const Tensor& t) { return t.to_host(); }

// A float32 buffer of `count` values placed `offset_floats` floats into a larger allocation whose
// head and tail hold a sentinel, so that an op using the wrong offset or writing out of bounds
// shows up. memory() is where the data starts.
class OffsetBuffer {
 public:
  static constexpr float kSentinel = -12345.0f;
  static constexpr size_t kTail = 5;

  OffsetBuffer(Device& device, const std::vector<float>& values, size_t offset_floats)
      : offset_(offset_floats), count_(values.size()) {
    std::vector<float> all(offset_ + count_ + kTail, kSentinel);
    std::copy(values.begin(), values.end(), all.begin() + static_cast<std::ptrdiff_t>(offset_));
    whole_ = Tensor::from_host(device, {static_cast<int64_t>(all.size())}, all);
  }
  DeviceMemory memory() const { return whole_.memory().at(offset_ * sizeof(float)); }
  // The fenced values as a tensor view (1-D, or `shape` when given).
  Tensor tensor() const { return whole_.view(int64_t(offset_), {int64_t(count_)}); }
  Tensor tensor(const Shape& shape) const { return whole_.view(int64_t(offset_), shape); }
  std::vector<float> values() const {
    std::vector<float> all = whole_.to_host();
    return {all.begin() + static_cast<std::ptrdiff_t>(offset_),
            all.begin() + static_cast<std::ptrdiff_t>(offset_ + count_)};
  }
  // How many head and tail floats no longer hold the sentinel.
  size_t guard_damage() const {
    std::vector<float> all = whole_.to_host();
    size_t damaged = 0;
    for (size_t i = 0; i < all.size(); ++i)
      if ((i < offset_ || i >= offset_ + count_) && all[i] != kSentinel) ++damaged;
    return damaged;
  }

 private:
  size_t offset_, count_;
  Tensor whole_;
};

// ---- random inputs ----------------------------------------------------------------------------

inline std::vector<float> random_floats(size_t count, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(count);
  for (float& v : out) v = dist(rng);
  return out;
}

inline std::vector<int32_t> random_labels(size_t count, int32_t classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, classes - 1);
  std::vector<int32_t> out(count);
  for (int32_t& v : out) v = dist(rng);
  return out;
}

// ---- comparison -------------------------------------------------------------------------------

// An element passes when |got - want| <= abs + rel * |want|.
struct Tolerance {
  double abs = 0.0, rel = 0.0;
};

constexpr Tolerance kExact{0.0, 0.0};
// One or two float roundings of a single expression (relu, axpby, fill, elementwise optimizers).
constexpr Tolerance kElementwise{1e-6, 1e-6};

// GEMM and convolution: a K-term dot product of inputs in [-1, 1] summed in float32 (or with
// TF32 products, whose 10-bit mantissa costs ~5e-4 relative per product).
inline Tolerance dot_tolerance(const Device& device, int64_t k) {
  const double terms = static_cast<double>(std::max<int64_t>(k, 1));
  if (uses_tf32(device)) return {2e-3 * std::sqrt(terms) + 1e-3, 2e-3};
  return {2e-6 * terms + 1e-6, 1e-5};
}

struct Comparison {
  bool ok = true;
  size_t count = 0, failures = 0, worst = 0;
  double max_abs = 0.0, max_rel = 0.0;
  double worst_got = 0.0, worst_want = 0.0;
  std::string summary() const {
    std::ostringstream s;
    s << failures << " of " << count << " elements outside tolerance; max abs error " << max_abs
      << ", max rel error " << max_rel << "; worst at [" << worst << "]: got " << worst_got
      << ", want " << worst_want;
    return s.str();
  }
};

template <typename T>
Comparison compare(const std::vector<T>& got, const std::vector<T>& want, Tolerance tol) {
  Comparison c;
  c.count = want.size();
  if (got.size() != want.size()) {
    c.ok = false;
    c.failures = want.size();
    return c;
  }
  double worst_excess = -1.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const bool both_nan = std::isnan(g) && std::isnan(w);
    const double err = both_nan ? 0.0 : (g == w ? 0.0 : std::abs(g - w));  // inf == inf is fine
    const double allowed = tol.abs + tol.rel * std::abs(w);
    const bool pass = !std::isnan(err) && err <= allowed;
    if (!pass) ++c.failures;
    c.max_abs = std::max(c.max_abs, std::isnan(err) ? INFINITY : err);
    if (w != 0.0) c.max_rel = std::max(c.max_rel, err / std::abs(w));
    // The worst element: the one that exceeds its allowance the most (NaN counts as infinite).
    const double excess = std::isnan(err) ? INFINITY : err - allowed;
    if (excess > worst_excess) {
      worst_excess = excess;
      c.worst = i;
      c.worst_got = g;
      c.worst_want = w;
    }
  }
  c.ok = c.failures == 0;
  return c;
}

// A fused ReLU's batch-norm backward recomputes its mask from x (output > 0) in each backend's
// own arithmetic, so an output within a rounding of 0 may land on either side of the kink there
// and in the float64 reference. Moves each value of x whose output under the batch statistics
// (gamma, beta null: 1, 0) is within 1e-3 of 0 to an output of +-0.1 (then `round` to the
// test's type; 16-bit steps are far below 0.1 here), so that every mask is unambiguous.
template <class Round>
void keep_off_relu_kink(const BatchNormShape& s, std::vector<float>& x, const float* gamma,
                        const float* beta, float eps, const Round& round) {
  const int64_t k = s.outer * s.inner;
  for (int pass = 0; pass < 3; ++pass) {  // moving values moves the statistics a little
    for (int64_t c = 0; c < s.channels; ++c) {
      auto at = [&](int64_t j) { return size_t(((j / s.inner) * s.channels + c) * s.inner + j % s.inner); };
      double mean = 0.0, var = 0.0;
      for (int64_t j = 0; j < k; ++j) mean += double(x[at(j)]) / double(k);
      for (int64_t j = 0; j < k; ++j) var += (double(x[at(j)]) - mean) * (double(x[at(j)]) - mean) / double(k);
      const double scale = (gamma ? double(gamma[c]) : 1.0) / std::sqrt(var + double(eps));
      const double shift = beta ? double(beta[c]) : 0.0;
      if (std::abs(scale) < 1e-6) continue;
      for (int64_t j = 0; j < k; ++j) {
        const double v = (double(x[at(j)]) - mean) * scale + shift;
        if (std::abs(v) < 1e-3) x[at(j)] = round(float(mean + ((v < 0 ? -0.1 : 0.1) - shift) / scale));
      }
    }
  }
}

}  // namespace trident::testing

// CHECKs that two vectors agree within a Tolerance; on failure prints the counts, the largest
// absolute and relative errors and the worst element.
#define TRIDENT_CHECK_CLOSE(got, want, tol)                                             \
  do {                                                                                  \
    const ::trident::testing::Comparison trident_cmp_ =                                 \
        ::trident::testing::compare((got), (want), (tol));                              \
    INFO(#got " vs " #want ": " << trident_cmp_.summary());                             \
    CHECK(trident_cmp_.ok);                                                             \
  } while (false)

// The same comparison for results that must be identical bit for bit (masks, copies, indices).
#define TRIDENT_CHECK_EXACT(got, want) TRIDENT_CHECK_CLOSE(got, want, ::trident::testing::kExact)

// Runs the block once per device under test, each in its own section named by the device id.
#define FOR_EACH_DEVICE(device_var)                                                     \
  for (::trident::Device* device_var : ::trident::testing::devices_under_test())        \
  DYNAMIC_SECTION(device_var->info().id())
