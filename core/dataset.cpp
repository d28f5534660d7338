// The Dataset value: validated construction from memory, shared immutable storage, normalization.
#include "trident/core/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "trident/core/error.h"
#include "trident/core/finite.h"

namespace trident {
namespace {

int64_t checked_numel(const std::vector<int64_t>& shape) {
  if (shape.empty()) throw ShapeError("Dataset: a sample shape needs at least one dimension");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) throw ShapeError("Dataset: sample dimensions must be positive");
    if (n > (int64_t{1} << 40) / d) throw ShapeError("Dataset: a sample of more than 2^40 values");
    n *= d;
  }
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

const std::array<const char*, 10> kFashionMnistClassNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

void Dataset::init(std::vector<int64_t> sample_shape, std::vector<int32_t> labels, int64_t classes,
                   size_t value_count) {
  sample_numel_ = checked_numel(sample_shape);
  sample_shape_ = std::move(sample_shape);
  if (labels.size() > static_cast<size_t>(INT32_MAX))
    throw UsageError("Dataset: " + std::to_string(labels.size()) + " samples; at most 2^31 - 1 are supported");
  if (value_count != labels.size() * static_cast<size_t>(sample_numel_))
    throw ShapeError("Dataset: " + std::to_string(value_count) + " values for " + std::to_string(labels.size()) +
                     " samples of shape " + shape_text(sample_shape_) + " (" +
                     std::to_string(labels.size() * static_cast<size_t>(sample_numel_)) + " expected)");
  if (classes < 0) throw UsageError("Dataset: a class count cannot be negative");
  int32_t largest = -1;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0)
      throw UsageError("Dataset: label " + std::to_string(labels[i]) + " of sample " + std::to_string(i) +
                       " is negative");
    if (classes > 0 && labels[i] >= classes)
      throw UsageError("Dataset: label " + std::to_string(labels[i]) + " of sample " + std::to_string(i) +
                       " is outside 0.." + std::to_string(classes - 1));
    largest = std::max(largest, labels[i]);
  }
  classes_ = classes > 0 ? classes : int64_t{largest} + 1;
  labels_ = std::move(labels);
  normalization_ = Normalization{dtype_ == DType::u8, {}, {}};
}

Dataset::Dataset(std::vector<uint8_t> values, std::vector<int64_t> sample_shape, std::vector<int32_t> labels,
                 int64_t classes) {
  dtype_ = DType::u8;
  init(std::move(sample_shape), std::move(labels), classes, values.size());
  auto storage = std::make_shared<Storage>();
  storage->u8 = std::move(values);
  storage_ = std::move(storage);
}

Dataset::Dataset(std::vector<float> values, std::vector<int64_t> sample_shape, std::vector<int32_t> labels,
                 int64_t classes) {
  dtype_ = DType::f32;
  init(std::move(sample_shape), std::move(labels), classes, values.size());
  const int64_t bad = first_non_finite(values.data(), static_cast<int64_t>(values.size()));
  if (bad >= 0) {
    const size_t i = static_cast<size_t>(bad);
    throw UsageError("Dataset: value " + std::to_string(i % static_cast<size_t>(sample_numel_)) + " of sample " +
                     std::to_string(i / static_cast<size_t>(sample_numel_)) + " is not finite (" +
                     std::to_string(values[i]) + ")");
  }
  auto storage = std::make_shared<Storage>();
  storage->f32 = std::move(values);
  storage_ = std::move(storage);
}

Dataset Dataset::from_memory(const uint8_t* values, int64_t count, std::vector<int64_t> sample_shape,
                             const int32_t* labels, int64_t classes) {
  if (count < 0 || (count > 0 && (values == nullptr || labels == nullptr)))
    throw UsageError("Dataset::from_memory: a negative count or a null pointer");
  const size_t n = static_cast<size_t>(count) * static_cast<size_t>(checked_numel(sample_shape));
  return Dataset(std::vector<uint8_t>(values, values + n), std::move(sample_shape),
                 std::vector<int32_t>(labels, labels + count), classes);
}

Dataset Dataset::from_memory(const float* values, int64_t count, std::vector<int64_t> sample_shape,
                             const int32_t* labels, int64_t classes) {
  if (count < 0 || (count > 0 && (values == nullptr || labels == nullptr)))
    throw UsageError("Dataset::from_memory: a negative count or a null pointer");
  const size_t n = static_cast<size_t>(count) * static_cast<size_t>(checked_numel(sample_shape));
  return Dataset(std::vector<float>(values, values + n), std::move(sample_shape),
                 std::vector<int32_t>(labels, labels + count), classes);
}

int64_t Dataset::channels() const { return sample_shape_.size() >= 3 ? sample_shape_[0] : 1; }

const void* Dataset::data() const {
  if (!storage_) return nullptr;
  return dtype_ == DType::u8 ? static_cast<const void*>(storage_->u8.data())
                             : static_cast<const void*>(storage_->f32.data());
}

const uint8_t* Dataset::uint8_data() const {
  return storage_ && dtype_ == DType::u8 ? storage_->u8.data() : nullptr;
}

const float* Dataset::float_data() const {
  return storage_ && dtype_ == DType::f32 ? storage_->f32.data() : nullptr;
}

void Dataset::set_normalization(Normalization n) {
  const size_t c = static_cast<size_t>(channels());
  for (const auto* values : {&n.mean, &n.std}) {
    const char* what = values == &n.mean ? "mean" : "std";
    if (!values->empty() && values->size() != 1 && values->size() != c)
      throw UsageError(std::string("Dataset normalization: ") + std::to_string(values->size()) + " " + what +
                       " values for " + std::to_string(c) + " channels (give 1 or " + std::to_string(c) + ")");
    for (float v : *values)
      if (!std::isfinite(v) || (values == &n.std && !(v > 0.0f)))
        throw UsageError(std::string("Dataset normalization: ") + what + " " + std::to_string(v) +
                         (values == &n.std ? " must be finite and > 0" : " must be finite"));
  }
  normalization_ = std::move(n);
}

Dataset Dataset::head(int64_t n) const {
  Dataset d = *this;
  if (n >= 0 && n < size()) d.labels_.resize(static_cast<size_t>(n));
  return d;
}

std::vector<float> Dataset::normalized(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first > size() || count > size() - first)
    throw UsageError("Dataset::normalized: samples [" + std::to_string(first) + ", " +
                     std::to_string(first + count) + ") of " + std::to_string(size()));
  const size_t numel = static_cast<size_t>(sample_numel_);
  const size_t c = static_cast<size_t>(channels()), per_channel = numel / c;
  const auto at = [](const std::vector<float>& v, size_t k, float fallback) {
    return v.empty() ? fallback : v[v.size() == 1 ? 0 : k];
  };
  std::vector<float> out(static_cast<size_t>(count) * numel);
  for (size_t k = 0; k < c; ++k) {
    const float mean = at(normalization_.mean, k, 0.0f), std = at(normalization_.std, k, 1.0f);
    // The same float operations as a device's: (x / 255 - mean) / std, in that order.
    const auto convert = [&](float x) { return ((normalization_.divide_by_255 ? x / 255.0f : x) - mean) / std; };
    float table[256];
    if (dtype_ == DType::u8)
      for (int v = 0; v < 256; ++v) table[v] = convert(static_cast<float>(v));
    for (size_t s = 0; s < static_cast<size_t>(count); ++s) {
      const size_t from = (static_cast<size_t>(first) + s) * numel + k * per_channel, to = s * numel + k * per_channel;
      if (dtype_ == DType::u8) {
        const uint8_t* src = storage_->u8.data() + from;
        for (size_t i = 0; i < per_channel; ++i) out[to + i] = table[src[i]];
      } else {
        const float* src = storage_->f32.data() + from;
        for (size_t i = 0; i < per_channel; ++i) out[to + i] = convert(src[i]);
      }
    }
  }
  return out;
}

}  // namespace trident
